package harness

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// RabbitScriptDefault is the RabbitMQ package's own server script, used when
// FFTEST_RABBITMQ_SCRIPT is not set. (The /usr/sbin/rabbitmq-server wrapper
// must not be used: it switches user and drops the environment.)
const RabbitScriptDefault = "/usr/lib/rabbitmq/bin/rabbitmq-server"

// RabbitOptions configures nodes started by StartRabbit and
// StartRabbitCluster.
type RabbitOptions struct {
	// ConsumerTimeout is the broker's consumer_timeout (delivery
	// acknowledgement timeout, millisecond resolution). 0 keeps the broker
	// default (30 minutes in 3.10).
	ConsumerTimeout time.Duration
	// ExtraConfig is appended verbatim to the generated rabbitmq.conf
	// (new-style sysctl format, one "key = value" per line).
	ExtraConfig string
	// Listen are addresses of this machine the node also accepts AMQP
	// on, at Port (a Netns's HostAddr, so that a daemon in the namespace
	// reaches it); guest may then log in from anywhere, not only from
	// loopback.
	Listen []string
}

// Rabbit is a private RabbitMQ node started by StartRabbit or
// StartRabbitCluster. It listens for AMQP on 127.0.0.1:Port only and accepts
// guest/guest.
type Rabbit struct {
	// Node is the Erlang node name, e.g. "fft-1a2b3c4d@localhost".
	Node string
	// Port is the AMQP port on 127.0.0.1.
	Port int
	// DistPort is the Erlang distribution port (bound to 127.0.0.1).
	DistPort int
	// Dir is the node's private directory: Mnesia data, logs, HOME (with
	// the Erlang cookie) and config files.
	Dir string
	// LogPath is the broker's own log file (in Dir/log).
	LogPath string

	scriptDir string
	env       []string
	stdout    string // stdout+stderr of the server script

	mu        sync.Mutex
	proc      *child // the rabbitmq-server script, nil if stopped
	watermark string // vm_memory_high_watermark saved by SetMemoryAlarm
}

// StartRabbit starts a private single RabbitMQ node with the given options
// and waits until it answers the AMQP handshake and has finished booting
// (~7 s of CPU time: 6-8 s on an idle 2-CPU machine, much more under load). The test
// fails (t.Fatalf) on error and is skipped if RabbitMQ is not installed (see
// the package documentation).
//
// t.Cleanup SIGKILLs the node if it is still running (only the node's own
// processes) and removes Dir, also when the test fails; on failure it prints
// the last 50 lines of the broker log.
func StartRabbit(t testing.TB, opt RabbitOptions) *Rabbit {
	t.Helper()
	start := time.Now()
	r := newRabbit(t, opt, randomHex(16))
	if err := r.start(); err != nil {
		t.Fatalf("harness: StartRabbit: %v", err)
	}
	t.Logf("harness: rabbitmq %s on 127.0.0.1:%d ready in %v", r.Node, r.Port, time.Since(start).Round(time.Millisecond))
	return r
}

func randomHex(nbytes int) string {
	b := make([]byte, nbytes)
	if _, err := rand.Read(b); err != nil {
		panic(err) // crypto/rand never fails on Linux
	}
	return hex.EncodeToString(b)
}

func rabbitScript(t testing.TB) string {
	t.Helper()
	s := os.Getenv("FFTEST_RABBITMQ_SCRIPT")
	if s == "" {
		s = RabbitScriptDefault
		if _, err := os.Stat(s); err != nil {
			if m, _ := filepath.Glob("/usr/lib/rabbitmq/lib/rabbitmq_server-*/sbin/rabbitmq-server"); len(m) > 0 {
				s = m[len(m)-1]
			}
		}
	}
	requireFile(t, "RabbitMQ server script", s)
	requireFile(t, "rabbitmqctl", filepath.Join(filepath.Dir(s), "rabbitmqctl"))
	return s
}

// newRabbit prepares (but does not start) a node with its own directory,
// ports and the given Erlang cookie, and registers its cleanup.
func newRabbit(t testing.TB, opt RabbitOptions, cookie string) *Rabbit {
	t.Helper()
	script := rabbitScript(t)
	dir, err := os.MkdirTemp("", "fft-rmq-")
	if err != nil {
		t.Fatalf("harness: rabbit: %v", err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) }) // runs after the kill below
	r := &Rabbit{
		Node:      "fft-" + randomHex(4) + "@localhost",
		Port:      FreePort(t),
		DistPort:  FreePort(t),
		Dir:       dir,
		scriptDir: filepath.Dir(script),
		stdout:    filepath.Join(dir, "stdout.log"),
	}
	r.LogPath = filepath.Join(dir, "log", r.Node+".log")
	home := filepath.Join(dir, "home")
	for _, d := range []string{home, filepath.Join(dir, "mnesia"), filepath.Join(dir, "log")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatalf("harness: rabbit: %v", err)
		}
	}
	if err := r.writeFiles(home, cookie, opt); err != nil {
		t.Fatalf("harness: rabbit: %v", err)
	}
	r.env = r.environment(home)
	t.Cleanup(func() {
		if err := r.kill(); err != nil {
			t.Logf("harness: rabbit %s cleanup: %v", r.Node, err)
		}
		if t.Failed() {
			t.Logf("harness: last 50 lines of rabbitmq log %s:\n%s", r.LogPath, tailFile(r.LogPath, 50))
			t.Logf("harness: last 20 lines of rabbitmq stdout %s:\n%s", r.stdout, tailFile(r.stdout, 20))
		}
	})
	return r
}

// writeFiles writes the node's configuration into its directory: the Erlang
// cookie (in home), an empty plugin list, rabbitmq.conf (its listener,
// logging and opt's settings) and an empty env file.
func (r *Rabbit) writeFiles(home, cookie string, opt RabbitOptions) error {
	var conf strings.Builder
	fmt.Fprintf(&conf, "listeners.tcp.1 = 127.0.0.1:%d\n", r.Port)
	for i, addr := range opt.Listen {
		fmt.Fprintf(&conf, "listeners.tcp.%d = %s:%d\n", i+2, addr, r.Port)
	}
	if len(opt.Listen) == 0 {
		conf.WriteString("loopback_users.guest = true\n")
	} else {
		conf.WriteString("loopback_users = none\n")
	}
	conf.WriteString("log.file.level = info\nlog.console = false\n")
	if opt.ConsumerTimeout > 0 {
		fmt.Fprintf(&conf, "consumer_timeout = %d\n", opt.ConsumerTimeout.Milliseconds())
	}
	if opt.ExtraConfig != "" {
		conf.WriteString(opt.ExtraConfig + "\n")
	}
	files := []struct {
		path, content string
		mode          os.FileMode
	}{
		{filepath.Join(home, ".erlang.cookie"), cookie, 0o400},
		{filepath.Join(r.Dir, "enabled_plugins"), "[].\n", 0o644},
		{filepath.Join(r.Dir, "rabbitmq.conf"), conf.String(), 0o644},
		// Our own (empty) env file, so /etc/rabbitmq/rabbitmq-env.conf
		// (which names the shared node) is not read.
		{filepath.Join(r.Dir, "rabbitmq-env.conf"), "", 0o644},
	}
	for _, f := range files {
		if err := os.WriteFile(f.path, []byte(f.content), f.mode); err != nil {
			return err
		}
	}
	return nil
}

// environment is the server's environment: the test's, less every
// RABBITMQ_*/ERL_* variable and the like, plus the node's own name, ports
// and files (home is its HOME).
func (r *Rabbit) environment(home string) []string {
	env := make([]string, 0, len(os.Environ())+16)
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(k, "RABBITMQ_") || strings.HasPrefix(k, "ERL_") || k == "HOME" ||
			k == "NODENAME" || k == "CONFIG_FILE" || k == "NOTIFY_SOCKET" || k == "detached" {
			continue
		}
		env = append(env, kv)
	}
	return append(env,
		"HOME="+home,
		"RABBITMQ_NODENAME="+r.Node,
		"RABBITMQ_NODE_IP_ADDRESS=127.0.0.1",
		"RABBITMQ_NODE_PORT="+strconv.Itoa(r.Port),
		"RABBITMQ_DIST_PORT="+strconv.Itoa(r.DistPort),
		"RABBITMQ_MNESIA_BASE="+filepath.Join(r.Dir, "mnesia"),
		"RABBITMQ_LOG_BASE="+filepath.Join(r.Dir, "log"),
		"RABBITMQ_PID_FILE="+filepath.Join(r.Dir, "rabbit.pid"),
		"RABBITMQ_ENABLED_PLUGINS_FILE="+filepath.Join(r.Dir, "enabled_plugins"),
		// 3.10 accepts the full file name, extension included.
		"RABBITMQ_CONFIG_FILE="+filepath.Join(r.Dir, "rabbitmq.conf"),
		"RABBITMQ_CONF_ENV_FILE="+filepath.Join(r.Dir, "rabbitmq-env.conf"),
		"RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS=-kernel inet_dist_use_interface {127,0,0,1}",
		// rabbitmqctl's own distribution port: any free one (the default
		// range 35672-35682 limits concurrent CLI calls machine-wide).
		"RABBITMQ_CTL_DIST_PORT_MIN=0",
		"RABBITMQ_CTL_DIST_PORT_MAX=0",
		// epmd, if the node has to start one, only on loopback.
		"ERL_EPMD_ADDRESS=127.0.0.1",
	)
}

// start launches the server script in the foreground (as a child of the test
// binary, so it can be reaped) and waits until the node answers AMQP and
// `rabbitmqctl await_startup` reports the boot complete.
func (r *Rabbit) start() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.proc != nil && !r.proc.exited() {
		return errors.New("node is already running")
	}
	var err error
	for attempt := 1; attempt <= 3; attempt++ {
		if err = r.startOnce(); err == nil || !errors.Is(err, errEarlyExit) {
			return err
		}
		time.Sleep(500 * time.Millisecond)
	}
	return err
}

func (r *Rabbit) startOnce() error {
	_ = os.Remove(filepath.Join(r.Dir, "rabbit.pid"))
	logf, err := os.OpenFile(r.stdout, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer logf.Close()
	cmd := exec.Command(filepath.Join(r.scriptDir, "rabbitmq-server"))
	cmd.Dir = r.Dir
	cmd.Env = r.env
	cmd.Stdout = logf
	cmd.Stderr = logf
	c, err := startChild(cmd)
	if err != nil {
		return fmt.Errorf("starting %s: %w", cmd.Path, err)
	}
	err = poll(90*time.Second, func() (bool, error) {
		if c.exited() {
			return true, nil
		}
		return amqpReady(r.Port)
	})
	if c.exited() {
		return fmt.Errorf("%w: node %s (status %d); stdout tail:\n%s\nlog tail:\n%s", errEarlyExit, r.Node,
			c.exitCode(), tailFile(r.stdout, 10), tailFile(r.LogPath, 15))
	}
	if err != nil {
		_ = c.killTree(10 * time.Second)
		return fmt.Errorf("node %s not answering AMQP on port %d: %w; log tail:\n%s", r.Node, r.Port, err, tailFile(r.LogPath, 15))
	}
	// The AMQP listener opens shortly before the boot completes; commands
	// that reach recovering quorum queues that early have been seen to stall
	// their leader election, so also wait for the end of the boot.
	if out, err := r.cli("rabbitmqctl", "await_startup", "--timeout", "90"); err != nil {
		_ = c.killTree(10 * time.Second)
		return fmt.Errorf("node %s: await_startup: %v: %s", r.Node, err, out)
	}
	r.proc = c
	return nil
}

// amqpReady performs the start of an AMQP 0-9-1 handshake and reports
// whether the server answered with a method frame (connection.start).
func amqpReady(port int) (bool, error) {
	conn, err := net.DialTimeout("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), time.Second)
	if err != nil {
		return false, err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(3 * time.Second))
	if _, err := conn.Write([]byte("AMQP\x00\x00\x09\x01")); err != nil {
		return false, err
	}
	hdr := make([]byte, 7)
	if _, err := io.ReadFull(conn, hdr); err != nil {
		return false, err
	}
	if hdr[0] != 1 {
		return false, fmt.Errorf("unexpected AMQP frame type %d", hdr[0])
	}
	return true, nil
}

// beamPid returns the Erlang VM's pid from the pid file, checking that it is
// a child of our server script (so that we never signal a stranger).
func (r *Rabbit) beamPid(c *child) (int, error) {
	b, err := os.ReadFile(filepath.Join(r.Dir, "rabbit.pid"))
	if err != nil {
		return 0, err
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return 0, fmt.Errorf("bad pid file: %w", err)
	}
	if _, ppid, ok := procStat(pid); !ok || (pid != c.pid() && ppid != c.pid()) {
		return 0, fmt.Errorf("pid %d from the pid file is not a child of our server script (pid %d)", pid, c.pid())
	}
	return pid, nil
}

// kill SIGKILLs the node's VM and the script around it and waits for them.
func (r *Rabbit) kill() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	c := r.proc
	r.proc = nil
	if c == nil || c.exited() {
		return nil
	}
	var err error
	if pid, perr := r.beamPid(c); perr == nil {
		desc := append([]int{pid}, descendants(pid)...)
		_ = syscall.Kill(pid, syscall.SIGKILL)
		err = waitGone(desc, 10*time.Second)
		// The script exits by itself once the VM is gone.
		c.wait(5 * time.Second)
	} else {
		err = perr
	}
	if kerr := c.killTree(10 * time.Second); kerr != nil && err == nil {
		err = kerr
	}
	return err
}

// Pid returns the process id of the node's Erlang VM (beam.smp), or 0 if the
// node is not running.
func (r *Rabbit) Pid() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.proc == nil || r.proc.exited() {
		return 0
	}
	pid, err := r.beamPid(r.proc)
	if err != nil {
		return 0
	}
	return pid
}

// URL returns the AMQP URL of the node: amqp://guest:guest@127.0.0.1:PORT/.
func (r *Rabbit) URL() string {
	return fmt.Sprintf("amqp://guest:guest@127.0.0.1:%d/", r.Port)
}

// Stop stops the node gracefully (`rabbitmqctl stop`) and waits up to 60 s
// for its processes to exit. The test fails (t.Fatalf) on error. No-op if
// the node is not running.
func (r *Rabbit) Stop(t testing.TB) {
	t.Helper()
	r.mu.Lock()
	c := r.proc
	r.mu.Unlock()
	if c == nil || c.exited() {
		return
	}
	if _, err := r.cli("rabbitmqctl", "stop"); err != nil {
		t.Fatalf("harness: Rabbit.Stop %s: %v", r.Node, err)
	}
	if !c.wait(60 * time.Second) {
		t.Fatalf("harness: Rabbit.Stop %s: node still running 60s after rabbitmqctl stop", r.Node)
	}
	r.mu.Lock()
	r.proc = nil
	r.mu.Unlock()
}

// Kill crashes the node abruptly: SIGKILL to its Erlang VM (pid from the pid
// file, verified to be a child of the server script this Rabbit started),
// without any flushing, then waits up to 10 s for the processes to be gone.
// The test fails (t.Fatalf) on error. No-op if not running. See
// SyncDurableState for quorum queues declared shortly before a Kill.
func (r *Rabbit) Kill(t testing.TB) {
	t.Helper()
	if err := r.kill(); err != nil {
		t.Fatalf("harness: Rabbit.Kill %s: %v", r.Node, err)
	}
}

// Start starts a stopped or killed node again with the same node name,
// ports, cookie and data directory and waits (up to 90 s) until it answers
// AMQP and has finished booting (`rabbitmqctl await_startup`). A clustered node rejoins its cluster by itself. The test fails
// (t.Fatalf) on error or if the node is already running.
func (r *Rabbit) Start(t testing.TB) {
	t.Helper()
	start := time.Now()
	if err := r.start(); err != nil {
		t.Fatalf("harness: Rabbit.Start: %v", err)
	}
	t.Logf("harness: rabbitmq %s restarted in %v", r.Node, time.Since(start).Round(time.Millisecond))
}
