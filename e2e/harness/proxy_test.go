package harness

import (
	"bufio"
	"context"
	"errors"
	"net"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/flowforge/flowforge/core/store/storetest"
)

// proxyTarget is a line server on 127.0.0.1: it records every line it
// receives and answers "ok LINE".
type proxyTarget struct {
	addr string
	mu   sync.Mutex
	got  []string
}

func startProxyTarget(t *testing.T) *proxyTarget {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	pt := &proxyTarget{addr: ln.Addr().String()}
	var wg sync.WaitGroup
	var conns sync.Map
	t.Cleanup(func() {
		ln.Close()
		conns.Range(func(k, _ any) bool { k.(net.Conn).Close(); return true })
		wg.Wait()
	})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns.Store(c, true)
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				sc := bufio.NewScanner(c)
				for sc.Scan() {
					pt.mu.Lock()
					pt.got = append(pt.got, sc.Text())
					pt.mu.Unlock()
					if _, err := c.Write([]byte("ok " + sc.Text() + "\n")); err != nil {
						return
					}
				}
			}()
		}
	}()
	return pt
}

func (pt *proxyTarget) received() []string {
	pt.mu.Lock()
	defer pt.mu.Unlock()
	return append([]string(nil), pt.got...)
}

// proxyExchange sends line on c and reads one reply line within wait.
func proxyExchange(c net.Conn, r *bufio.Reader, line string, wait time.Duration) (string, error) {
	if _, err := c.Write([]byte(line + "\n")); err != nil {
		return "", err
	}
	_ = c.SetReadDeadline(time.Now().Add(wait))
	s, err := r.ReadString('\n')
	return strings.TrimSpace(s), err
}

func dialProxy(t *testing.T, p *Proxy) (net.Conn, *bufio.Reader) {
	t.Helper()
	c, err := net.DialTimeout("tcp", p.Addr, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c, bufio.NewReader(c)
}

// proxyAfterAnExchange starts a line server and a proxy in front of it,
// and returns them with a connection through the proxy that has sent "a"
// and read its reply.
func proxyAfterAnExchange(t *testing.T) (*proxyTarget, *Proxy, net.Conn, *bufio.Reader) {
	t.Helper()
	pt := startProxyTarget(t)
	p := StartProxy(t, pt.addr)
	c, r := dialProxy(t, p)
	if _, err := proxyExchange(c, r, "a", 2*time.Second); err != nil {
		t.Fatal(err)
	}
	return pt, p, c, r
}

func TestProxyModes(t *testing.T) {
	t.Parallel()
	t.Run("pass forwards both ways", func(t *testing.T) {
		t.Parallel()
		pt := startProxyTarget(t)
		p := StartProxy(t, pt.addr)
		if !strings.HasPrefix(p.Addr, "127.0.0.1:") {
			t.Fatalf("Addr = %s", p.Addr)
		}
		c, r := dialProxy(t, p)
		if got, err := proxyExchange(c, r, "a", 2*time.Second); err != nil || got != "ok a" {
			t.Fatalf("reply %q, %v", got, err)
		}
		if u := p.URL("postgres://u@10.1.2.3:5432/db?sslmode=disable"); u != "postgres://u@"+p.Addr+"/db?sslmode=disable" {
			t.Fatalf("URL = %s", u)
		}
	})
	for _, tc := range []struct {
		mode  ProxyMode
		fresh func(*testing.T, *Proxy) // checks a new connection under mode
	}{
		{ProxyReset, newConnIsReset},
		{ProxyRefuse, newConnIsRefusedAndThePortKept},
	} {
		t.Run(tc.mode.String()+" cuts open connections and new ones, pass forwards again", func(t *testing.T) {
			t.Parallel()
			pt, p, c, r := proxyAfterAnExchange(t)
			p.SetMode(tc.mode)
			if _, err := proxyExchange(c, r, "b", 2*time.Second); err == nil || isTimeout(err) {
				t.Fatalf("an open connection under %s: err %v, want a reset", tc.mode, err)
			}
			tc.fresh(t, p)
			p.SetMode(ProxyPass)
			c3, r3 := dialProxy(t, p)
			if got, err := proxyExchange(c3, r3, "d", 2*time.Second); err != nil || got != "ok d" {
				t.Fatalf("after %s: %q, %v", tc.mode, got, err)
			}
			if got := pt.received(); strings.Join(got, ",") != "a,d" {
				t.Fatalf("target received %v, want [a d]", got)
			}
		})
	}
	t.Run("blackhole holds both directions until pass", func(t *testing.T) {
		t.Parallel()
		pt, p, c, r := proxyAfterAnExchange(t)
		p.SetMode(ProxyBlackhole)
		if _, err := proxyExchange(c, r, "b", 300*time.Millisecond); !isTimeout(err) {
			t.Fatalf("under blackhole: err %v, want a read timeout", err)
		}
		c2, r2 := dialProxy(t, p) // accepted, not forwarded
		if _, err := proxyExchange(c2, r2, "c", 300*time.Millisecond); !isTimeout(err) {
			t.Fatalf("new connection under blackhole: err %v, want a read timeout", err)
		}
		if got := pt.received(); len(got) != 1 {
			t.Fatalf("target received %v under blackhole", got)
		}
		p.SetMode(ProxyPass)
		_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
		if s, err := r.ReadString('\n'); err != nil || strings.TrimSpace(s) != "ok b" {
			t.Fatalf("held reply after pass: %q, %v", s, err)
		}
		_ = c2.SetReadDeadline(time.Now().Add(2 * time.Second))
		if s, err := r2.ReadString('\n'); err != nil || strings.TrimSpace(s) != "ok c" {
			t.Fatalf("held new connection after pass: %q, %v", s, err)
		}
	})
	t.Run("drop replies: the server gets it, the client never hears", func(t *testing.T) {
		t.Parallel()
		pt, p, c, r := proxyAfterAnExchange(t)
		p.SetMode(ProxyDropReplies)
		if _, err := proxyExchange(c, r, "b", 300*time.Millisecond); !isTimeout(err) {
			t.Fatalf("under drop-replies: err %v, want a read timeout", err)
		}
		Eventually(t, 2*time.Second, "the target to receive b", func() (bool, error) {
			return len(pt.received()) == 2, nil
		})
		if p.DroppedBytes() != int64(len("ok b\n")) {
			t.Fatalf("dropped %d bytes, want %d", p.DroppedBytes(), len("ok b\n"))
		}
		// The connection lost a reply: leaving the mode resets it.
		p.SetMode(ProxyPass)
		_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
		if _, err := r.ReadString('\n'); err == nil || isTimeout(err) {
			t.Fatalf("the out-of-step connection after pass: err %v, want a reset", err)
		}
		c2, r2 := dialProxy(t, p)
		if got, err := proxyExchange(c2, r2, "c", 2*time.Second); err != nil || got != "ok c" {
			t.Fatalf("new connection after drop: %q, %v", got, err)
		}
	})
	t.Run("close ends every connection", func(t *testing.T) {
		t.Parallel()
		pt := startProxyTarget(t)
		p := StartProxy(t, pt.addr)
		c, r := dialProxy(t, p)
		p.SetMode(ProxyBlackhole)
		done := make(chan struct{})
		go func() { p.Close(); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			t.Fatal("Close did not return with a held connection")
		}
		_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
		if _, err := r.ReadString('\n'); err == nil || isTimeout(err) {
			t.Fatalf("after Close: err %v, want the connection closed", err)
		}
		if p.Conns() != 0 {
			t.Fatalf("%d connections left", p.Conns())
		}
		p.Close() // idempotent
	})
}

// newConnIsReset checks that a connection made under ProxyReset, accepted,
// is reset.
func newConnIsReset(t *testing.T, p *Proxy) {
	t.Helper()
	if c, err := net.DialTimeout("tcp", p.Addr, time.Second); err == nil {
		defer c.Close()
		if _, err := proxyExchange(c, bufio.NewReader(c), "c", 2*time.Second); err == nil || isTimeout(err) {
			t.Fatalf("a new connection under reset: err %v, want a reset", err)
		}
	}
}

// newConnIsRefusedAndThePortKept checks that every connection made under
// ProxyRefuse is refused, and that the port is still bound: a socket that
// binds it as the kernel's own choice of a port would (no SO_REUSEADDR)
// finds it taken.
func newConnIsRefusedAndThePortKept(t *testing.T, p *Proxy) {
	t.Helper()
	for range 20 {
		if c, err := net.DialTimeout("tcp", p.Addr, time.Second); !errors.Is(err, syscall.ECONNREFUSED) {
			if c != nil {
				c.Close()
			}
			t.Fatalf("a new connection under refuse: err %v, want ECONNREFUSED", err)
		}
	}
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Close(fd) })
	_, portText, _ := net.SplitHostPort(p.Addr)
	port, _ := strconv.Atoi(portText)
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Port: port, Addr: [4]byte{127, 0, 0, 1}}); !errors.Is(err, syscall.EADDRINUSE) {
		t.Fatalf("binding the refusing proxy's port: %v, want EADDRINUSE", err)
	}
}

func isTimeout(err error) bool {
	ne, ok := err.(net.Error)
	return ok && ne.Timeout()
}

// TestProxyDropCommitReplyLosesTheReplyOfACommittedStatement: through the
// proxy, an INSERT (autocommitted) and a transaction's COMMIT reach
// PostgreSQL and commit, and their replies never come back; the statements
// before them, and other connections, are unaffected.
func TestProxyDropCommitReplyLosesTheReplyOfACommittedStatement(t *testing.T) {
	t.Parallel()
	dbURL := storetest.NewDatabase(t)
	u, err := url.Parse(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	direct := openDB(t, dbURL)
	if _, err := direct.Exec(`CREATE TABLE proxy_probe (v int)`); err != nil {
		t.Fatal(err)
	}
	p := StartProxy(t, u.Host)
	via := openDB(t, p.URL(dbURL))
	count := func(v int) int {
		var n int
		if err := direct.QueryRow(`SELECT count(*) FROM proxy_probe WHERE v = $1`, v).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	cases := []struct {
		name    string
		pattern string
		run     func(ctx context.Context) error
		v       int
	}{
		{"autocommit statement", "INSERT INTO proxy_probe", func(ctx context.Context) error {
			_, err := via.ExecContext(ctx, `INSERT INTO proxy_probe VALUES ($1)`, 1)
			return err
		}, 1},
		{"commit of a transaction", "UPDATE proxy_probe", func(ctx context.Context) error {
			tx, err := via.BeginTx(ctx, nil)
			if err != nil {
				return err
			}
			if _, err := tx.ExecContext(ctx, `UPDATE proxy_probe SET v = 2 WHERE v = 1`); err != nil {
				return err
			}
			return tx.Commit()
		}, 2},
	}
	for _, tc := range cases {
		var one int
		if err := via.QueryRow(`SELECT 1`).Scan(&one); err != nil {
			t.Fatalf("%s: before arming: %v", tc.name, err)
		}
		p.DropCommitReply(tc.pattern)
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err := tc.run(ctx)
		cancel()
		if err == nil {
			t.Fatalf("%s: the statement returned although its reply was to be lost", tc.name)
		}
		if !p.Fired() || p.DroppedBytes() == 0 {
			t.Fatalf("%s: fired %v, dropped %d bytes", tc.name, p.Fired(), p.DroppedBytes())
		}
		if n := count(tc.v); n != 1 {
			t.Fatalf("%s: %d rows with v=%d on the server; the statement did not commit", tc.name, n, tc.v)
		}
		p.ResetConns()
	}
	var one int
	if err := via.QueryRow(`SELECT 1`).Scan(&one); err != nil {
		t.Fatalf("after the lost replies: %v", err)
	}
}
