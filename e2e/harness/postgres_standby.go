package harness

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// StandbyName is the application_name a standby of StartStandby streams
// under: the name the primary's synchronous_standby_names gives.
const StandbyName = "fft_standby"

// StandbyOptions are StartStandby's.
type StandbyOptions struct {
	// Synchronous sets the primary's synchronous_standby_names to the
	// standby: a commit returns once the standby has flushed its WAL.
	Synchronous bool
	// Via, when set, is a proxy (StartProxy) in front of the primary
	// that the standby streams through: a test cuts replication with it
	// (ProxyBlackhole) while the primary keeps taking writes.
	Via *Proxy
}

// StartStandby makes a streaming hot standby of primary, a running server
// of StartPostgres: pg_basebackup (-R: standby.signal and primary_conninfo,
// WAL streamed) into a new private directory, then the postmaster on a free
// port, waiting until it accepts connections and the primary reports it
// streaming (and sync, with opt.Synchronous). The standby is stopped and
// removed in t.Cleanup as StartPostgres's servers are. Promote turns it
// into a primary.
func StartStandby(t testing.TB, primary *Postgres, opt StandbyOptions) *Postgres {
	t.Helper()
	started := time.Now()
	s := &Postgres{binDir: primary.binDir, cred: primary.cred}
	dir, err := os.MkdirTemp("", "fft-pg-standby-")
	if err != nil {
		t.Fatalf("harness: StartStandby: %v", err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	s.Dir, s.DataDir, s.LogPath = dir, filepath.Join(dir, "data"), filepath.Join(dir, "postgres.log")
	if s.cred != nil {
		if err := os.Chown(dir, int(s.cred.Uid), int(s.cred.Gid)); err != nil {
			t.Fatalf("harness: StartStandby: %v", err)
		}
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		t.Fatalf("harness: StartStandby: %v", err)
	}
	from := strconv.Itoa(primary.Port)
	if opt.Via != nil {
		_, port, err := net.SplitHostPort(opt.Via.Addr)
		if err != nil {
			t.Fatalf("harness: StartStandby: the proxy's address: %v", err)
		}
		from = port
	}
	conn := fmt.Sprintf("host=127.0.0.1 port=%s user=postgres application_name=%s", from, StandbyName)
	backup := s.command(filepath.Join(s.binDir, "pg_basebackup"), "-d", conn, "-D", s.DataDir,
		"-R", "-X", "stream", "--checkpoint=fast", "--no-sync")
	if out, err := backup.CombinedOutput(); err != nil {
		t.Fatalf("harness: pg_basebackup from port %s: %v\n%s", from, err, out)
	}
	s.Port = FreePort(t)
	t.Cleanup(func() {
		if err := s.stopWith(syscall.SIGQUIT, 10*time.Second); err != nil {
			t.Logf("harness: standby cleanup: %v", err)
		}
		if t.Failed() {
			t.Logf("harness: last 50 lines of the standby's log (%s):\n%s", s.LogPath, tailFile(s.LogPath, 50))
		}
	})
	if err := s.start(); err != nil {
		t.Fatalf("harness: StartStandby: %v", err)
	}
	want := "streaming"
	if opt.Synchronous {
		primary.Psql(t, "postgres", "ALTER SYSTEM SET synchronous_standby_names = '"+StandbyName+"'")
		primary.Psql(t, "postgres", "SELECT pg_reload_conf()")
		want = "streaming sync"
	}
	err = poll(60*time.Second, func() (bool, error) {
		got, err := primary.psql("postgres", "SELECT state || ' ' || sync_state FROM pg_stat_replication WHERE application_name = '"+StandbyName+"'")
		if err != nil {
			return false, err
		}
		if strings.HasPrefix(got+" ", want+" ") {
			return true, nil
		}
		return false, fmt.Errorf("the primary reports the standby as %q, want %q", got, want)
	})
	if err != nil {
		t.Fatalf("harness: StartStandby: %v", err)
	}
	t.Logf("harness: standby of port %d on 127.0.0.1:%d (%s) ready in %v", primary.Port, s.Port, want, time.Since(started).Round(time.Millisecond))
	return s
}

// Promote ends recovery on a standby of StartStandby (pg_promote, waiting
// for it): from then on it takes writes, under a new timeline. The test
// fails (t.Fatalf) when the promotion does not complete within 60 s.
func (p *Postgres) Promote(t testing.TB) {
	t.Helper()
	start := time.Now()
	if got := p.Psql(t, "postgres", "SELECT pg_promote(true, 60)"); got != "t" {
		t.Fatalf("harness: Promote: pg_promote returned %q", got)
	}
	t.Logf("harness: standby on port %d promoted in %v", p.Port, time.Since(start).Round(time.Millisecond))
}
