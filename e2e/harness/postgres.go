package harness

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// PGBinDirDefault is where the PostgreSQL server binaries are looked for when
// FFTEST_PG_BINDIR is not set.
const PGBinDirDefault = "/usr/lib/postgresql/15/bin"

// Postgres is a private PostgreSQL server started by StartPostgres. It
// listens on 127.0.0.1:Port (and a Unix socket in Dir) and accepts the
// superuser "postgres" without a password.
type Postgres struct {
	// Port is the TCP port on 127.0.0.1; it stays the same across
	// Stop/Kill/Start/Restart.
	Port int
	// Dir is the private base directory (owned by the postgres user when
	// running as root). It holds the Unix socket, the logs and DataDir.
	Dir string
	// DataDir is the cluster's data directory (Dir/data).
	DataDir string
	// LogPath is the server's stderr log; it is appended to across restarts.
	LogPath string

	binDir string
	cred   *syscall.Credential // nil when not running as root
	opt    PostgresOptions

	mu   sync.Mutex
	proc *child // the running postmaster, nil if stopped
}

// PostgresOptions configures StartPostgresWith. The zero value is
// StartPostgres's server.
type PostgresOptions struct {
	// Listen are addresses of this machine the server listens on besides
	// 127.0.0.1, on the same Port (a Netns's HostAddr, so that a daemon in
	// the namespace reaches it); pg_hba.conf then trusts every client, as
	// it trusts 127.0.0.1.
	Listen []string
	// Settings are server settings given at each start, "name=value"
	// (postgres -c), e.g. "tcp_keepalives_idle=2".
	Settings []string
}

// StartPostgres creates and starts a private PostgreSQL cluster for the test:
// initdb (-A trust -U postgres --no-sync) into a new temporary directory,
// then the postmaster on a free port with listen_addresses=127.0.0.1,
// fsync=off and max_connections=200, waiting until it reports ready
// (typically ~1.5 s in total). The test fails (t.Fatalf) on any error and is
// skipped if the binaries are missing (see the package documentation).
//
// t.Cleanup stops the server with an immediate shutdown (SIGQUIT, then
// SIGKILL after 10 s) and removes Dir, also when the test fails; on failure
// the last 50 lines of the server log are printed.
func StartPostgres(t testing.TB) *Postgres {
	t.Helper()
	return StartPostgresWith(t, PostgresOptions{})
}

// StartPostgresWith is StartPostgres with opt's addresses and settings.
func StartPostgresWith(t testing.TB, opt PostgresOptions) *Postgres {
	t.Helper()
	started := time.Now()
	binDir := os.Getenv("FFTEST_PG_BINDIR")
	if binDir == "" {
		binDir = PGBinDirDefault
	}
	requireFile(t, "PostgreSQL initdb", filepath.Join(binDir, "initdb"))
	requireFile(t, "PostgreSQL server", filepath.Join(binDir, "postgres"))

	p := &Postgres{binDir: binDir, opt: opt}
	dir, err := os.MkdirTemp("", "fft-pg-")
	if err != nil {
		t.Fatalf("harness: StartPostgres: %v", err)
	}
	// Registered first, so it runs last (after the server is stopped).
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	p.Dir = dir
	p.DataDir = filepath.Join(dir, "data")
	p.LogPath = filepath.Join(dir, "postgres.log")

	if os.Geteuid() == 0 {
		cred, err := postgresCredential()
		if err != nil {
			t.Fatalf("harness: StartPostgres: running as root and %v", err)
		}
		p.cred = cred
		if err := os.Chown(dir, int(cred.Uid), int(cred.Gid)); err != nil {
			t.Fatalf("harness: StartPostgres: %v", err)
		}
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		t.Fatalf("harness: StartPostgres: %v", err)
	}

	initdb := p.command(filepath.Join(binDir, "initdb"),
		"-D", p.DataDir, "-A", "trust", "-U", "postgres", "--no-sync",
		"-E", "UTF8", "--locale=C", "--no-instructions")
	if out, err := initdb.CombinedOutput(); err != nil {
		t.Fatalf("harness: initdb: %v\n%s", err, out)
	}
	if err := p.trustListenAddresses(); err != nil {
		t.Fatalf("harness: StartPostgres: %v", err)
	}
	initDone := time.Now()

	p.Port = FreePort(t)
	t.Cleanup(func() {
		if err := p.stopWith(syscall.SIGQUIT, 10*time.Second); err != nil {
			t.Logf("harness: postgres cleanup: %v", err)
		}
		if t.Failed() {
			t.Logf("harness: last 50 lines of postgres log (%s):\n%s", p.LogPath, tailFile(p.LogPath, 50))
		}
	})
	if err := p.start(); err != nil {
		t.Fatalf("harness: StartPostgres: %v", err)
	}
	t.Logf("harness: postgres on 127.0.0.1:%d ready in %v (initdb %v)", p.Port,
		time.Since(started).Round(time.Millisecond), initDone.Sub(started).Round(time.Millisecond))
	return p
}

// trustListenAddresses lets every client in (trust) when the server
// listens on more than 127.0.0.1: initdb -A trust trusts only loopback
// clients.
func (p *Postgres) trustListenAddresses() error {
	if len(p.opt.Listen) == 0 {
		return nil
	}
	f, err := os.OpenFile(filepath.Join(p.DataDir, "pg_hba.conf"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		return fmt.Errorf("pg_hba.conf: %w", err)
	}
	_, err = f.WriteString("host all all all trust\n")
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("pg_hba.conf: %w", err)
	}
	return nil
}

// postgresCredential looks up the uid/gid of the "postgres" user.
func postgresCredential() (*syscall.Credential, error) {
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, fmt.Errorf("cannot find the postgres user: %w", err)
	}
	uid, err1 := strconv.ParseUint(u.Uid, 10, 32)
	gid, err2 := strconv.ParseUint(u.Gid, 10, 32)
	if err1 != nil || err2 != nil {
		return nil, fmt.Errorf("bad uid/gid %q/%q for postgres", u.Uid, u.Gid)
	}
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
}

// command builds a command that runs as the postgres user (when root), in
// Dir, with PG* variables removed from the environment.
func (p *Postgres) command(bin string, args ...string) *exec.Cmd {
	cmd := exec.Command(bin, args...)
	cmd.Dir = p.Dir
	env := []string{"LC_ALL=C"}
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "PG") || strings.HasPrefix(kv, "LC_") || strings.HasPrefix(kv, "HOME=") {
			continue
		}
		env = append(env, kv)
	}
	cmd.Env = append(env, "HOME="+p.Dir)
	if p.cred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: p.cred}
	}
	return cmd
}

// start launches the postmaster and waits until it is ready. Because a
// freshly killed server's orphaned backends may briefly keep the old shared
// memory segment busy, an early exit is retried for up to 10 s.
func (p *Postgres) start() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.proc != nil && !p.proc.exited() {
		return errors.New("postgres is already running")
	}
	retryUntil := time.Now().Add(10 * time.Second)
	for {
		err := p.startOnce()
		if err == nil || !errors.Is(err, errEarlyExit) || time.Now().After(retryUntil) {
			return err
		}
		time.Sleep(100 * time.Millisecond)
	}
}

var errEarlyExit = errors.New("server exited during startup")

func (p *Postgres) startOnce() error {
	logf, err := os.OpenFile(p.LogPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer logf.Close()
	args := []string{
		"-D", p.DataDir,
		"-p", strconv.Itoa(p.Port),
		"-k", p.Dir,
		"-c", "listen_addresses=" + strings.Join(append([]string{"127.0.0.1"}, p.opt.Listen...), ","),
		"-c", "fsync=off",
		"-c", "max_connections=200",
	}
	for _, kv := range p.opt.Settings {
		args = append(args, "-c", kv)
	}
	cmd := p.command(filepath.Join(p.binDir, "postgres"), args...)
	cmd.Stdout = logf
	cmd.Stderr = logf
	c, err := startChild(cmd)
	if err != nil {
		return fmt.Errorf("starting postgres: %w", err)
	}
	pidFile := filepath.Join(p.DataDir, "postmaster.pid")
	err = poll(60*time.Second, func() (bool, error) {
		if c.exited() {
			return true, nil
		}
		b, err := os.ReadFile(pidFile)
		if err != nil {
			return false, err
		}
		lines := strings.Split(string(b), "\n")
		// Line 1 is the pid, line 8 the postmaster status (PG >= 10).
		// A hot standby says "standby" once it accepts connections.
		if len(lines) >= 8 && strings.TrimSpace(lines[0]) == strconv.Itoa(c.pid()) &&
			(strings.TrimSpace(lines[7]) == "ready" || strings.TrimSpace(lines[7]) == "standby") {
			return true, nil
		}
		return false, errors.New("postmaster.pid does not say ready yet")
	})
	if c.exited() {
		return fmt.Errorf("%w (status %d); log tail:\n%s", errEarlyExit, c.exitCode(), tailFile(p.LogPath, 15))
	}
	if err != nil {
		_ = c.killTree(10 * time.Second)
		return fmt.Errorf("postgres not ready: %w; log tail:\n%s", err, tailFile(p.LogPath, 15))
	}
	p.proc = c
	return nil
}

// stopWith sends sig to the running postmaster and waits up to timeout for
// it to exit; then SIGKILLs what is left. No-op if not running.
func (p *Postgres) stopWith(sig syscall.Signal, timeout time.Duration) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	c := p.proc
	if c == nil || c.exited() {
		p.proc = nil
		return nil
	}
	p.proc = nil
	desc := descendants(c.pid())
	_ = c.signal(sig)
	var err error
	if !c.wait(timeout) {
		err = fmt.Errorf("postgres (pid %d) did not exit within %v of %v; killed", c.pid(), timeout, sig)
	}
	if kerr := c.killTree(10 * time.Second); kerr != nil && err == nil {
		err = kerr
	}
	if gerr := waitGone(desc, 10*time.Second); gerr != nil && err == nil {
		err = gerr
	}
	return err
}

// URL returns a connection URL for database db:
// postgres://postgres@127.0.0.1:PORT/DB?sslmode=disable.
func (p *Postgres) URL(db string) string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/%s?sslmode=disable", p.Port, db)
}

// Pid returns the postmaster's process id, or 0 if the server is not
// running.
func (p *Postgres) Pid() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.proc == nil || p.proc.exited() {
		return 0
	}
	return p.proc.pid()
}

// Psql runs sql against database db with psql (-X -A -t, ON_ERROR_STOP) and
// returns its trimmed stdout. The test fails (t.Fatalf) if psql fails.
func (p *Postgres) Psql(t testing.TB, db, sql string) string {
	t.Helper()
	out, err := p.psql(db, sql)
	if err != nil {
		t.Fatalf("harness: psql %q: %v", sql, err)
	}
	return out
}

func (p *Postgres) psql(db, sql string) (string, error) {
	cmd := p.command(filepath.Join(p.binDir, "psql"), "-X", "-A", "-t", "-q",
		"-v", "ON_ERROR_STOP=1", "-h", "127.0.0.1", "-p", strconv.Itoa(p.Port),
		"-U", "postgres", "-d", db, "-c", sql)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("%v: %s", err, strings.TrimSpace(stderr.String()))
	}
	return strings.TrimSpace(string(out)), nil
}

// CreateDatabase creates database name (owned by postgres) and returns its
// URL (see URL). The test fails (t.Fatalf) if it cannot be created, e.g.
// because it already exists or the server is down.
func (p *Postgres) CreateDatabase(t testing.TB, name string) string {
	t.Helper()
	quoted := `"` + strings.ReplaceAll(name, `"`, `""`) + `"`
	if _, err := p.psql("postgres", "CREATE DATABASE "+quoted); err != nil {
		t.Fatalf("harness: CreateDatabase %s: %v", name, err)
	}
	return p.URL(name)
}

// Stop shuts the server down with a fast shutdown (SIGINT to the postmaster,
// like pg_ctl stop -m fast) and waits up to 30 s for it to exit. The test
// fails (t.Fatalf) if it has to be killed instead. No-op if not running.
func (p *Postgres) Stop(t testing.TB) {
	t.Helper()
	if err := p.stopWith(syscall.SIGINT, 30*time.Second); err != nil {
		t.Fatalf("harness: Postgres.Stop: %v", err)
	}
}

// Kill crashes the server abruptly: SIGKILL to the postmaster and to every
// process it had forked (backends, checkpointer, WAL writer...), then waits
// (up to 10 s) until all of them are gone. Committed data survives (WAL was
// written to the OS); the next Start performs crash recovery. No-op if not
// running.
func (p *Postgres) Kill(t testing.TB) {
	t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	c := p.proc
	p.proc = nil
	if c == nil {
		return
	}
	if err := c.killTree(10 * time.Second); err != nil {
		t.Fatalf("harness: Postgres.Kill: %v", err)
	}
}

// Start starts the stopped or killed server again on the same port and data
// directory and waits until it accepts connections (after crash recovery if
// it was killed). The test fails (t.Fatalf) if it is already running or does
// not come up within 60 s.
func (p *Postgres) Start(t testing.TB) {
	t.Helper()
	start := time.Now()
	if err := p.start(); err != nil {
		t.Fatalf("harness: Postgres.Start: %v", err)
	}
	t.Logf("harness: postgres restarted on port %d in %v", p.Port, time.Since(start).Round(time.Millisecond))
}

// Restart performs a fast shutdown (see Stop) followed by Start, keeping the
// port and data directory; like pg_ctl restart -m fast. The test fails
// (t.Fatalf) on error.
func (p *Postgres) Restart(t testing.TB) {
	t.Helper()
	p.Stop(t)
	p.Start(t)
}
