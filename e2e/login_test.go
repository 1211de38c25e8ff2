package e2e

import (
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/flowforge/flowforge/e2e/harness"
)

// withURLUser returns rawURL with its user, password and path (the
// database or vhost) replaced; an empty user keeps the URL's.
func withURLUser(t *testing.T, rawURL, user, pass, path string) string {
	t.Helper()
	u, err := url.Parse(rawURL)
	if err != nil {
		t.Fatal(err)
	}
	if user == "" {
		user = u.User.Username()
	}
	u.User = url.UserPassword(user, pass)
	u.Path = "/" + path
	return u.String()
}

// passwordPostgres starts a private PostgreSQL that asks the role ffpw
// (password "right-password") for its password over TCP (scram-sha-256),
// everyone else trusted, and returns its URL for database postgres.
func passwordPostgres(t *testing.T) string {
	t.Helper()
	pg := harness.StartPostgres(t)
	pg.Psql(t, "postgres", "CREATE ROLE ffpw LOGIN PASSWORD 'right-password'")
	hba := filepath.Join(pg.DataDir, "pg_hba.conf")
	old, err := os.ReadFile(hba)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(hba, append([]byte("host all ffpw 127.0.0.1/32 scram-sha-256\n"), old...), 0o600); err != nil {
		t.Fatal(err)
	}
	pg.Psql(t, "postgres", "SELECT pg_reload_conf()")
	return pg.URL("postgres")
}

// TestDaemonsExitAtOnceOnARefusedLogin: mode 91. A login the server
// refuses at start (a wrong password, an unknown role or database on
// PostgreSQL; a wrong password or an unknown vhost on RabbitMQ) ends the
// daemon with exit 1 and the server's reason within a few seconds, the
// password nowhere in its output; a one-shot command reports it once.
// Before, the daemons retried for ever, as if the server were down.
func TestDaemonsExitAtOnceOnARefusedLogin(t *testing.T) {
	t.Parallel()
	s := harness.NewStack(t, harness.StackOptions{})
	pw := passwordPostgres(t)
	amqpURL := s.AMQPURLs[0]
	for _, tc := range []struct {
		name, role string
		env        string // the wrong setting
		want       string // the server's reason
	}{
		{"postgres wrong password", "scheduler", "FLOWFORGE_DATABASE_URL=" + withURLUser(t, pw, "ffpw", "wrong-password", "postgres"),
			`password authentication failed for user "ffpw" (SQLSTATE 28P01)`},
		{"postgres unknown role", "worker", "FLOWFORGE_DATABASE_URL=" + withURLUser(t, s.DatabaseURL, "ff_no_such_role", "wrong-password", "postgres"),
			`role "ff_no_such_role" does not exist (SQLSTATE 28000)`},
		{"postgres unknown database", "all", "FLOWFORGE_DATABASE_URL=" + withURLUser(t, s.DatabaseURL, "", "wrong-password", "ff_no_such_db"),
			`database "ff_no_such_db" does not exist (SQLSTATE 3D000)`},
		{"rabbitmq wrong password", "worker", "FLOWFORGE_AMQP_URL=" + withURLUser(t, amqpURL, "", "wrong-password", ""),
			`Exception (403) Reason: "username or password not allowed"`},
		{"rabbitmq unknown vhost", "publisher", "FLOWFORGE_AMQP_URL=" + withURLUser(t, amqpURL, "guest", "guest", "ff-no-such-vhost"),
			`Exception (530) Reason: "NOT_ALLOWED - vhost ff-no-such-vhost not found"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			began := time.Now()
			p := s.DaemonEnv(t, tc.role, tc.role, []string{tc.env})
			code, err := p.Wait(30 * time.Second)
			if err != nil || code != 1 {
				t.Fatalf("ffctl daemon %s with %s: exit %d (%v), want 1 at once\n%s", tc.role, tc.name, code, err, p.Logs())
			}
			if d := time.Since(began); d > 15*time.Second {
				t.Fatalf("exited %s after start, want within a few seconds", d)
			}
			logs := p.Logs()
			if !strings.Contains(logs, "ffctl: ") || !strings.Contains(logs, tc.want) || !strings.Contains(logs, "refused the login") {
				t.Fatalf("the output does not give the refusal and the server's reason %q:\n%s", tc.want, logs)
			}
			if strings.Contains(logs, "wrong-password") {
				t.Fatalf("the password is in the output:\n%s", logs)
			}
			if strings.Contains(tc.env, "DATABASE_URL") {
				url := strings.TrimPrefix(tc.env, "FLOWFORGE_DATABASE_URL=")
				_, stderr, code := s.CLI(t, "--database-url", url, "run", "list")
				if code != 1 || strings.Count(stderr, tc.want) != 1 {
					t.Fatalf("ffctl run list: exit %d, stderr %q; want 1 and the reason once", code, stderr)
				}
			}
		})
	}
}

// TestDaemonsRetryADependencyThatDoesNotAnswerUntilItDoes: mode 91, the
// other way round. A server that does not answer is an outage, not a
// refusal: the worker keeps retrying it (it never exits), and once the
// server answers it connects and runs. PostgreSQL is behind a proxy that
// resets every connection: however a reset lands, its error carries no
// SQLSTATE. The broker is behind a proxy that refuses every connection
// (nothing listens, as when RabbitMQ is down), so the start's login check
// (broker.CheckLogin, the first dial, before the worker's own; it logs
// nothing) meets a refused connect, a network error amqp091 does not wrap
// in an *amqp.Error, on every run, and the worker must go past it to
// "daemon: started". Behind a resetting proxy the check met such an error
// only in some runs: most dials have written the protocol header when the
// reset lands, and amqp091 reports the reset on its read as 501
// FRAME_ERROR, an *amqp.Error that is no refusal.
func TestDaemonsRetryADependencyThatDoesNotAnswerUntilItDoes(t *testing.T) {
	t.Parallel()
	s := harness.NewStack(t, harness.StackOptions{})
	for _, tc := range []struct {
		name, env, raw string
		mode           harness.ProxyMode
		retrying, up   string // log messages
		// For the broker: the error every dial meets, and the line that
		// shows the worker went past its login check meanwhile ("": not
		// checked).
		refusal, passed string
	}{
		{"postgres", "FLOWFORGE_DATABASE_URL", s.DatabaseURL, harness.ProxyReset,
			"daemon: database not available; retrying", "daemon: started", "", ""},
		{"rabbitmq", "FLOWFORGE_AMQP_URL", s.AMQPURLs[0], harness.ProxyRefuse,
			"broker: dial failed", "broker: connected", "connect: connection refused", "daemon: started"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			u, err := url.Parse(tc.raw)
			if err != nil {
				t.Fatal(err)
			}
			proxy := harness.StartProxy(t, u.Host)
			proxy.SetMode(tc.mode)
			p := s.DaemonEnv(t, "worker", "worker", []string{tc.env + "=" + proxy.URL(tc.raw)})
			recoveryWaitLogCount(t, p, 30*time.Second, 3, tc.retrying)
			if n := recoveryCountLogs(p, tc.up); n != 0 {
				t.Fatalf("%q logged through a proxy in mode %s\n%s", tc.up, tc.mode, p.Logs())
			}
			if tc.refusal != "" {
				if err := recoveryLogs(p, tc.retrying)[0].str("error"); !strings.Contains(err, tc.refusal) {
					t.Fatalf("the first dial failed with %q, want %q\n%s", err, tc.refusal, p.Logs())
				}
				if recoveryCountLogs(p, tc.passed) != 1 {
					t.Fatalf("%q not logged while the broker refused every connection\n%s", tc.passed, p.Logs())
				}
			}
			proxy.SetMode(harness.ProxyPass)
			recoveryWaitLogCount(t, p, 30*time.Second, 1, tc.up)
			if p.Exited() {
				t.Fatalf("the worker exited:\n%s", p.Logs())
			}
		})
	}
}
