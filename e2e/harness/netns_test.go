package harness

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// dialIn connects to addr from inside n's namespace: the socket is made
// by a thread that joined the namespace (setns), and stays there. The
// thread is never returned to the runtime: its goroutine ends locked, so
// it is thrown away.
func dialIn(n *Netns, addr string, timeout time.Duration) (net.Conn, error) {
	type result struct {
		c   net.Conn
		err error
	}
	ch := make(chan result, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread dies with the goroutine
		f, err := os.Open("/run/netns/" + n.Name)
		if err != nil {
			ch <- result{err: err}
			return
		}
		defer f.Close()
		if err := unix.Setns(int(f.Fd()), unix.CLONE_NEWNET); err != nil {
			ch <- result{err: fmt.Errorf("setns: %w", err)}
			return
		}
		c, err := net.DialTimeout("tcp", addr, timeout)
		ch <- result{c, err}
	}()
	r := <-ch
	return r.c, r.err
}

// echoOn serves a line echo on a free port of host until the test ends.
func echoOn(t *testing.T, host string) string {
	t.Helper()
	ln, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				r := bufio.NewReader(c)
				for {
					l, err := r.ReadString('\n')
					if err != nil {
						return
					}
					if _, err := c.Write([]byte(l)); err != nil {
						return
					}
				}
			}()
		}
	}()
	return ln.Addr().String()
}

// echo writes line on c and reads it back within wait.
func echo(c net.Conn, r *bufio.Reader, line string, wait time.Duration) error {
	if err := c.SetDeadline(time.Now().Add(wait)); err != nil {
		return err
	}
	if line != "" {
		if _, err := c.Write([]byte(line + "\n")); err != nil {
			return err
		}
	}
	got, err := r.ReadString('\n')
	if err != nil {
		return err
	}
	if got != line+"\n" && line != "" {
		return fmt.Errorf("echoed %q, want %q", got, line)
	}
	return nil
}

func isNetTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// TestNetnsCutIsSilentAndHealResumesTheConnection: a connection from
// the namespace to HostAddr works; Cut(port) black-holes it silently (a
// write is accepted, no reply, no reset; a new connect times out, it is
// not refused), while another port of HostAddr still answers; after Heal
// the segment written during the cut is retransmitted and echoed on the
// same connection; Cut() with no port cuts every port. The namespaces and
// the host's link are gone after the test's cleanup.
func TestNetnsCutIsSilentAndHealResumesTheConnection(t *testing.T) {
	var n *Netns
	t.Run("cut", func(t *testing.T) {
		n = NewNetns(t)
		cutAddr, otherAddr := echoOn(t, n.HostAddr), echoOn(t, n.HostAddr)
		c, err := dialIn(n, cutAddr, 3*time.Second)
		if err != nil {
			t.Fatalf("dial %s from the namespace: %v", cutAddr, err)
		}
		defer c.Close()
		r := bufio.NewReader(c)
		if err := echo(c, r, "before", 3*time.Second); err != nil {
			t.Fatalf("before the cut: %v", err)
		}
		_, port, _ := net.SplitHostPort(cutAddr)
		var p int
		fmt.Sscan(port, &p)
		n.Cut(t, p)
		if err := echo(c, r, "during", time.Second); !isNetTimeout(err) {
			t.Fatalf("during the cut: %v, want a timeout (silence, not a reset)", err)
		}
		start := time.Now()
		if _, err := dialIn(n, cutAddr, time.Second); !isNetTimeout(err) {
			t.Fatalf("a connect during the cut: %v after %v, want a timeout", err, time.Since(start))
		}
		o, err := dialIn(n, otherAddr, 3*time.Second)
		if err != nil {
			t.Fatalf("another port during the cut: %v", err)
		}
		o.Close()
		n.Heal(t)
		if err := echo(c, r, "", 15*time.Second); err != nil {
			t.Fatalf("after the heal, the line written during the cut: %v", err)
		}
		if err := echo(c, r, "after", 3*time.Second); err != nil {
			t.Fatalf("after the heal: %v", err)
		}
		n.Cut(t)
		if _, err := dialIn(n, otherAddr, time.Second); !isNetTimeout(err) {
			t.Fatalf("a connect to another port after Cut(): %v, want a timeout", err)
		}
	})
	if n == nil {
		return
	}
	out, _ := ipCmd("netns", "list")
	links, _ := ipCmd("link", "show")
	for _, name := range []string{n.Name, n.router} {
		if strings.Contains(out, name) {
			t.Errorf("namespace %s left after the test:\n%s", name, out)
		}
	}
	if strings.Contains(links, n.hostLink) {
		t.Errorf("link %s left after the test", n.hostLink)
	}
}
