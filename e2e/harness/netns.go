package harness

import (
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
)

// Netns is a network namespace for one daemon, joined to the host through
// a second namespace that routes between them, so that a test can cut the
// network where a partition happens: between the two ends, not in either.
//
//	host        HostAddr 10.213.N.1/30  (servers the daemon reaches listen here)
//	  | veth
//	router      10.213.N.2/30, 10.213.N.5/30, forwarding on
//	  | veth
//	Name        Addr 10.213.N.6/30, default route via the router
//
// Cut adds policy rules of type blackhole in the router: a forwarded packet
// they match is dropped silently (no ICMP error, no reset), so neither end's
// kernel learns anything — a connect times out, a sent segment is
// retransmitted and TCP keepalives and AMQP heartbeats go unanswered, as
// across a real partition. A blackhole route at either end would not do:
// a locally generated packet that meets one fails at once with EINVAL
// (a connect fails in 3 ms), which no partition does; `ip link set down`
// gives unreachable errors. Only traffic between Addr and HostAddr passes
// the router, so nothing else on the machine is touched.
//
// N is chosen, under a lock file shared by every test binary of the
// machine, among the 10.213.N.0 subnets no interface of the host uses.
// t.Cleanup removes both namespaces and the host's end of the link (and
// with it the host's route to Addr), also when the test fails; run it
// before the processes of the namespace are started, so that their
// cleanups (registered later) run first. A test binary killed outright
// leaves them behind: `ip netns list` shows fft-* namespaces, which
// `ip netns del` and `ip link del fft…h` remove.
type Netns struct {
	// Name is the daemon's namespace (`ip netns exec Name ...`, Command).
	Name string
	// HostAddr is the host's address on the link: a server the daemon
	// reaches listens on it (PostgresOptions.Listen, RabbitOptions.Listen,
	// StartProxyOn), and the daemon's URLs name it (URL).
	HostAddr string
	// Addr is the daemon's own address inside Name.
	Addr string

	router   string
	hostLink string

	mu    sync.Mutex
	rules [][]string // the selectors of the blackhole rules Cut added
}

// netnsLockFile serialises the choice of a subnet between test binaries.
const netnsLockFile = "fft-netns.lock"

// NewNetns creates a daemon namespace and its router as described at
// Netns. The test is skipped, saying why, when it does not run as root,
// when the ip command (iproute2) is missing or when the kernel refuses a
// namespace (a container without CAP_NET_ADMIN); it fails (t.Fatalf) when
// a later step fails, after removing what was made.
func NewNetns(t testing.TB) *Netns {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("harness: network namespaces need root (ip netns add); skipped")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("harness: the ip command (iproute2) is not installed; network namespaces skipped")
	}
	unlock, err := lockNetns()
	if err != nil {
		t.Fatalf("harness: NewNetns: %v", err)
	}
	defer unlock()
	n, err := newNetnsNames()
	if err != nil {
		t.Fatalf("harness: NewNetns: %v", err)
	}
	if out, err := ipCmd("netns", "add", n.Name); err != nil {
		t.Skipf("harness: cannot create a network namespace (%v: %s); skipped", err, out)
	}
	t.Cleanup(n.remove)
	if err := n.build(); err != nil {
		t.Fatalf("harness: NewNetns %s: %v", n.Name, err)
	}
	t.Logf("harness: network namespace %s (%s) routed to the host's %s through %s", n.Name, n.Addr, n.HostAddr, n.router)
	return n
}

// lockNetns takes the machine-wide lock file (flock) and returns its
// release.
func lockNetns() (func(), error) {
	f, err := os.OpenFile(filepath.Join(os.TempDir(), netnsLockFile), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("lock file: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("lock file: %w", err)
	}
	return func() { _ = f.Close() }, nil // closing releases the lock
}

// newNetnsNames picks unique names and a 10.213.N.0 subnet no host
// interface uses. The caller holds the lock.
func newNetnsNames() (*Netns, error) {
	out, err := ipCmd("-o", "-4", "addr", "show")
	if err != nil {
		return nil, fmt.Errorf("list addresses: %w: %s", err, out)
	}
	id := randomHex(4)
	start, _ := strconv.ParseUint(id[:2], 16, 8)
	for k := range 254 {
		sub := 1 + (int(start)+k)%254
		prefix := fmt.Sprintf("10.213.%d.", sub)
		if strings.Contains(out, " "+prefix) {
			continue
		}
		return &Netns{
			Name:     "fft-" + id,
			router:   "fft-" + id + "-r",
			hostLink: "fft" + id + "h",
			HostAddr: prefix + "1",
			Addr:     prefix + "6",
		}, nil
	}
	return nil, fmt.Errorf("every 10.213.N.0 subnet is in use: %s", out)
}

// build makes the router, the two veth pairs, the addresses and routes.
// The daemon's namespace exists already.
func (n *Netns) build() error {
	prefix := strings.TrimSuffix(n.HostAddr, "1")
	r0, r1, d0 := "r0", "r1", "eth0"
	steps := [][]string{
		{"netns", "add", n.router},
		{"link", "add", n.hostLink, "type", "veth", "peer", "name", r0, "netns", n.router},
		{"link", "add", d0, "netns", n.Name, "type", "veth", "peer", "name", r1, "netns", n.router},
		{"addr", "add", n.HostAddr + "/30", "dev", n.hostLink},
		{"link", "set", n.hostLink, "up"},
		{"-n", n.router, "addr", "add", prefix + "2/30", "dev", r0},
		{"-n", n.router, "addr", "add", prefix + "5/30", "dev", r1},
		{"-n", n.router, "link", "set", r0, "up"},
		{"-n", n.router, "link", "set", r1, "up"},
		{"-n", n.router, "link", "set", "lo", "up"},
		{"netns", "exec", n.router, "sysctl", "-qw", "net.ipv4.ip_forward=1"},
		{"-n", n.Name, "addr", "add", n.Addr + "/30", "dev", d0},
		{"-n", n.Name, "link", "set", d0, "up"},
		{"-n", n.Name, "link", "set", "lo", "up"},
		{"-n", n.Name, "route", "add", "default", "via", prefix + "5"},
		{"route", "add", prefix + "4/30", "via", prefix + "2", "dev", n.hostLink},
	}
	for _, s := range steps {
		if out, err := ipCmd(s...); err != nil {
			return fmt.Errorf("ip %s: %w: %s", strings.Join(s, " "), err, out)
		}
	}
	return nil
}

// remove deletes the host's end of the link (its peer and the host's route
// go with it) and both namespaces; what does not exist is skipped.
func (n *Netns) remove() {
	_, _ = ipCmd("link", "del", n.hostLink)
	_, _ = ipCmd("netns", "del", n.router)
	_, _ = ipCmd("netns", "del", n.Name)
}

// ipCmd runs ip with args and returns its combined output.
func ipCmd(args ...string) (string, error) {
	out, err := exec.Command("ip", args...).CombinedOutput()
	return strings.TrimSpace(string(out)), err
}

// Command returns the program and arguments that run bin with args inside
// the daemon's namespace: `ip netns exec NAME bin args...`. ip execs bin in
// place, so the process started is bin itself (its pid, its signals).
func (n *Netns) Command(bin string, args ...string) (string, []string) {
	return "ip", append([]string{"netns", "exec", n.Name, bin}, args...)
}

// URL returns rawURL (a postgres:// or amqp:// URL of a server on this
// host) with its host replaced by HostAddr and its port kept: the address
// the daemon in the namespace reaches the server by. It panics on a URL
// that does not parse (a test bug).
func (n *Netns) URL(rawURL string) string {
	u, err := url.Parse(rawURL)
	if err != nil {
		panic(fmt.Sprintf("harness: Netns.URL(%q): %v", rawURL, err))
	}
	u.Host = n.HostAddr + ":" + u.Port()
	return u.String()
}

// Cut black-holes, in the router, the TCP traffic between the daemon and
// the given ports of HostAddr, both ways; with no port, every packet
// between Addr and HostAddr. Packets are dropped silently (see Netns).
// Cuts add up until Heal. The test fails (t.Fatalf) if a rule cannot be
// added.
func (n *Netns) Cut(t testing.TB, ports ...int) {
	t.Helper()
	var sels [][]string
	if len(ports) == 0 {
		sels = append(sels, []string{"from", n.Addr, "to", n.HostAddr}, []string{"from", n.HostAddr, "to", n.Addr})
	}
	for _, p := range ports {
		port := strconv.Itoa(p)
		sels = append(sels,
			[]string{"from", n.Addr, "to", n.HostAddr, "ipproto", "tcp", "dport", port},
			[]string{"from", n.HostAddr, "to", n.Addr, "ipproto", "tcp", "sport", port})
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, sel := range sels {
		args := append([]string{"-n", n.router, "rule", "add"}, sel...)
		if out, err := ipCmd(append(args, "blackhole")...); err != nil {
			t.Fatalf("harness: Netns.Cut: ip %s: %v: %s", strings.Join(args, " "), err, out)
		}
		n.rules = append(n.rules, sel)
	}
}

// Heal removes every rule Cut added: packets flow again, and a segment
// TCP retransmits from then on arrives. The test fails (t.Fatalf) if a
// rule cannot be removed.
func (n *Netns) Heal(t testing.TB) {
	t.Helper()
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, sel := range n.rules {
		args := append([]string{"-n", n.router, "rule", "del"}, sel...)
		if out, err := ipCmd(append(args, "blackhole")...); err != nil {
			t.Fatalf("harness: Netns.Heal: ip %s: %v: %s", strings.Join(args, " "), err, out)
		}
	}
	n.rules = nil
}
