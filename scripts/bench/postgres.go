package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// pgSettings are the server settings every system runs against: durable
// commits (fsync and synchronous_commit on, as shipped), pg_stat_statements
// preloaded with planning tracked too (the cost table's plan ms per call),
// commit timestamps tracked (they are how latency is observed), and
// checkpoints pushed out of the measuring windows.
var pgSettings = []string{
	"listen_addresses=127.0.0.1",
	"fsync=on",
	"synchronous_commit=on",
	"full_page_writes=on",
	"shared_preload_libraries=pg_stat_statements",
	"pg_stat_statements.max=10000",
	"pg_stat_statements.track=top",
	"pg_stat_statements.track_utility=on",
	"pg_stat_statements.track_planning=on",
	"track_commit_timestamp=on",
	"max_connections=300",
	"shared_buffers=1GB",
	"max_wal_size=8GB",
	"wal_keep_size=4GB",
	"checkpoint_timeout=30min",
	"log_min_messages=warning",
}

// observerRole is the login the driver itself uses: its polling and
// statistics queries are told apart from the systems' (which run as
// "postgres") by this role in pg_stat_statements.
const observerRole = "bench_observer"

// postgres is a private PostgreSQL server the driver started (initdb into a
// temporary directory, the postmaster on a free port), used by nothing else.
type postgres struct {
	Dir, Data, BinDir string
	Port              int
	cred              *syscall.Credential
	proc              *child
	admin             *pgxpool.Pool // observer role, database "postgres"
}

// pgBinDir finds the newest installed server binaries (Debian's layout), or
// FFTEST_PG_BINDIR when set.
func pgBinDir() (string, error) {
	if d := os.Getenv("FFTEST_PG_BINDIR"); d != "" {
		return d, nil
	}
	m, _ := filepath.Glob("/usr/lib/postgresql/*/bin/postgres")
	if len(m) == 0 {
		return "", errors.New("no PostgreSQL server under /usr/lib/postgresql (apt-get install postgresql)")
	}
	sort.Slice(m, func(i, j int) bool { return pgMajor(m[i]) < pgMajor(m[j]) })
	return filepath.Dir(m[len(m)-1]), nil
}

func pgMajor(path string) int {
	v, _ := strconv.Atoi(filepath.Base(filepath.Dir(filepath.Dir(path))))
	return v
}

// startPostgres initialises and starts the private server and connects the
// observer. Errors name the step that failed, with the server log's tail.
func startPostgres(ctx context.Context) (*postgres, error) {
	bin, err := pgBinDir()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "ffbench-pg-")
	if err != nil {
		return nil, fmt.Errorf("postgres: %w", err)
	}
	p := &postgres{Dir: dir, Data: filepath.Join(dir, "data"), BinDir: bin}
	if err := p.prepareDir(); err != nil {
		return nil, err
	}
	initdb := p.command("initdb", "-D", p.Data, "-A", "trust", "-U", "postgres", "-E", "UTF8", "--locale=C", "--no-instructions")
	if out, err := initdb.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("postgres: initdb: %w\n%s", err, out)
	}
	if p.Port, err = freePort(); err != nil {
		return nil, err
	}
	if err := p.start(); err != nil {
		return nil, err
	}
	if err := p.connectObserver(ctx); err != nil {
		p.stop()
		return nil, err
	}
	return p, nil
}

func (p *postgres) prepareDir() error {
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			return fmt.Errorf("postgres: running as root and no postgres user: %w", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		p.cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
		if err := os.Chown(p.Dir, uid, gid); err != nil {
			return fmt.Errorf("postgres: %w", err)
		}
	}
	if err := os.Chmod(p.Dir, 0o700); err != nil {
		return fmt.Errorf("postgres: %w", err)
	}
	return nil
}

// command runs a server binary as the postgres user (when root), with the
// caller's PG* variables removed.
func (p *postgres) command(name string, args ...string) *exec.Cmd {
	cmd := exec.Command(filepath.Join(p.BinDir, name), args...)
	cmd.Dir = p.Dir
	env := []string{"LC_ALL=C", "HOME=" + p.Dir}
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "PG") && !strings.HasPrefix(kv, "LC_") && !strings.HasPrefix(kv, "HOME=") {
			env = append(env, kv)
		}
	}
	cmd.Env = env
	if p.cred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: p.cred}
	}
	return cmd
}

func (p *postgres) start() error {
	args := []string{"-D", p.Data, "-p", strconv.Itoa(p.Port), "-k", p.Dir}
	for _, s := range pgSettings {
		args = append(args, "-c", s)
	}
	c, err := startChild("postgres", p.command("postgres", args...), filepath.Join(p.Dir, "postgres.log"))
	if err != nil {
		return fmt.Errorf("postgres: %w", err)
	}
	p.proc = c
	err = pollUntil(60*time.Second, func() (bool, error) {
		if c.exited() {
			return false, errors.New("server exited during start-up")
		}
		b, err := os.ReadFile(filepath.Join(p.Data, "postmaster.pid"))
		lines := strings.Split(string(b), "\n")
		return err == nil && len(lines) >= 8 && strings.TrimSpace(lines[7]) == "ready", nil
	})
	if err != nil {
		c.stop(syscall.SIGKILL, time.Second)
		return fmt.Errorf("postgres: %w; log:\n%s", err, c.tail(20))
	}
	return nil
}

func (p *postgres) connectObserver(ctx context.Context) error {
	pool, err := pgxpool.New(ctx, p.URL("postgres", "postgres"))
	if err != nil {
		return fmt.Errorf("postgres: connect: %w", err)
	}
	defer pool.Close()
	for _, q := range []string{
		"CREATE ROLE " + observerRole + " SUPERUSER LOGIN",
		"CREATE EXTENSION pg_stat_statements",
	} {
		if _, err := pool.Exec(ctx, q); err != nil {
			return fmt.Errorf("postgres: %s: %w", q, err)
		}
	}
	p.admin, err = pgxpool.New(ctx, p.URL("postgres", observerRole))
	if err != nil {
		return fmt.Errorf("postgres: connect observer: %w", err)
	}
	return nil
}

// URL is the connection URL of database db as role.
func (p *postgres) URL(db, role string) string {
	return fmt.Sprintf("postgres://%s@127.0.0.1:%d/%s?sslmode=disable", role, p.Port, db)
}

// Pid is the postmaster's process id.
func (p *postgres) Pid() int { return p.proc.pid() }

// createDB creates database name as a copy of template (empty: template1).
// A history template (name ending in _hist) is copied file by file
// (STRATEGY FILE_COPY: two checkpoints, but its blocks are not WAL-logged,
// so a 1M-row history clones in seconds); any other with PostgreSQL 15's
// default WAL_LOG, which needs no checkpoint.
func (p *postgres) createDB(ctx context.Context, name, template string) error {
	q := "CREATE DATABASE " + quoteIdent(name)
	if template != "" {
		q += " TEMPLATE " + quoteIdent(template)
	}
	if strings.HasSuffix(template, "_hist") {
		q += " STRATEGY FILE_COPY"
	}
	if _, err := p.admin.Exec(ctx, q); err != nil {
		return fmt.Errorf("create database %s: %w", name, err)
	}
	return nil
}

// dropDB drops database name if it exists, ending its sessions.
func (p *postgres) dropDB(ctx context.Context, name string) error {
	if _, err := p.admin.Exec(ctx, "DROP DATABASE IF EXISTS "+quoteIdent(name)+" WITH (FORCE)"); err != nil {
		return fmt.Errorf("drop database %s: %w", name, err)
	}
	return nil
}

// pool opens a pool on database db as the observer.
func (p *postgres) pool(ctx context.Context, db string) (*pgxpool.Pool, error) {
	pl, err := pgxpool.New(ctx, p.URL(db, observerRole))
	if err != nil {
		return nil, fmt.Errorf("connect %s: %w", db, err)
	}
	return pl, nil
}

// stop shuts the server down (fast shutdown, then SIGKILL after 60 s) and
// removes its directory.
func (p *postgres) stop() {
	if p.admin != nil {
		p.admin.Close()
	}
	if p.proc != nil {
		p.proc.stop(syscall.SIGINT, 60*time.Second)
	}
	_ = os.RemoveAll(p.Dir)
}

func quoteIdent(s string) string { return `"` + strings.ReplaceAll(s, `"`, `""`) + `"` }

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// pollUntil calls f every 20 ms until it reports done, returns an error, or
// timeout passes.
func pollUntil(timeout time.Duration, f func() (bool, error)) error {
	deadline := time.Now().Add(timeout)
	for {
		done, err := f()
		if err != nil {
			return err
		}
		if done {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not done after %v", timeout)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
