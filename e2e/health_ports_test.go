package e2e

// Health ports on a host with several daemons (issue 11): the role's
// default port falls back to a free one; an address the operator gives
// stays strict.

import (
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/flowforge/flowforge/e2e/harness"
)

// defaultHealthEnv is the stack's environment without its
// FLOWFORGE_HEALTH_ADDR= (which disables the health server), so that a
// daemon takes its role's default address.
func defaultHealthEnv(t *testing.T, s *harness.Stack) []string {
	t.Helper()
	if v, ok := os.LookupEnv("FLOWFORGE_HEALTH_ADDR"); ok {
		t.Fatalf("FLOWFORGE_HEALTH_ADDR=%q is set in the test's environment; unset it to test the default", v)
	}
	var env []string
	for _, kv := range s.Env() {
		if !strings.HasPrefix(kv, "FLOWFORGE_HEALTH_ADDR=") {
			env = append(env, kv)
		}
	}
	return env
}

// TestTwoDaemonsWithDefaultHealthPortsShareAHost starts two daemons of one
// role on this host with no --health-addr: both start and serve
// /health/ready, each on its own port as its log says. Before, the second
// failed with "address already in use" (the shared default may be held by
// someone else too: then the first falls back as well, and the test holds
// either way). The role's default port is taken by the first daemon only
// when it was free, and a daemon that did not get it logs why.
func TestTwoDaemonsWithDefaultHealthPortsShareAHost(t *testing.T) {
	s := harness.NewStack(t, harness.StackOptions{})
	env := defaultHealthEnv(t, s)
	for _, c := range []struct{ role, defaultAddr string }{{"worker", "127.0.0.1:8083"}, {"all", "127.0.0.1:8080"}} {
		t.Run(c.role, func(t *testing.T) {
			var addrs []string
			for _, name := range []string{c.role + "-1", c.role + "-2"} {
				p := harness.StartProcess(t, name, s.Bin, []string{"daemon", c.role}, env)
				p.WaitForLog(t, "daemon: started", 30*time.Second)
				ls := recoveryLogs(p, "daemon: health server listening")
				if len(ls) != 1 {
					t.Fatalf("%s logged %d 'daemon: health server listening' lines, want 1", name, len(ls))
				}
				addr := ls[0].str("addr")
				fellBack := recoveryCountLogs(p, "daemon: default health port in use; listening on a free port (set --health-addr to choose one)", "default_addr", c.defaultAddr) == 1
				if (addr == c.defaultAddr) == fellBack || !strings.HasPrefix(addr, "127.0.0.1:") {
					t.Fatalf("%s listens on %s, fallback logged %v: want the default %s or a logged fallback to another loopback port", name, addr, fellBack, c.defaultAddr)
				}
				d := &harness.HealthDaemon{Process: p, Health: addr}
				recoveryWaitReadiness(t, d, 20*time.Second, "200", func(r recoveryReadiness) bool { return r.Code == http.StatusOK })
				addrs = append(addrs, addr)
			}
			if addrs[0] == addrs[1] {
				t.Fatalf("both daemons report %s", addrs[0])
			}
			// The workers list (the dashboard's Workers screen) shows where
			// each one listens.
			db := s.DB(t)
			harness.Eventually(t, 20*time.Second, "both health addresses in the workers list", func() (bool, error) {
				var n int
				err := db.QueryRow(`SELECT count(DISTINCT health_addr) FROM workers WHERE health_addr = ANY($1)`, pq(addrs)).Scan(&n)
				return n == 2, err
			})
		})
	}
}

// TestExplicitHealthAddrInUseFailsTheDaemon: an address given with
// --health-addr is used or the daemon exits 1, naming the address and the
// flag; it never moves to another port on its own.
func TestExplicitHealthAddrInUseFailsTheDaemon(t *testing.T) {
	s := harness.NewStack(t, harness.StackOptions{})
	held, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { held.Close() })
	p := s.Daemon(t, "worker", "worker", "--health-addr", held.Addr().String())
	code, err := p.Wait(30 * time.Second)
	if err != nil || code != 1 {
		t.Fatalf("exit %d (%v), want 1", code, err)
	}
	logs := p.Logs()
	for _, want := range []string{held.Addr().String(), "address already in use", "--health-addr"} {
		if !strings.Contains(logs, want) {
			t.Errorf("the daemon's output does not name %q:\n%s", want, logs)
		}
	}
}

// pq passes a []string as a PostgreSQL text[] literal.
func pq(ss []string) string {
	return "{" + strings.Join(ss, ",") + "}"
}
