package harness

import (
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"testing"
	"time"
)

// pollInterval is how often Eventually and the internal wait loops re-check
// their condition.
const pollInterval = 25 * time.Millisecond

// Eventually calls cond every ~25 ms until it returns true or timeout
// (a duration, typically seconds) has elapsed since the call. cond is always
// called at least once. An error returned by cond is not fatal: it is
// remembered and polling continues. On timeout the test fails (t.Fatalf)
// with a message naming what was awaited and the last error cond returned.
func Eventually(t testing.TB, timeout time.Duration, what string, cond func() (bool, error)) {
	t.Helper()
	if err := poll(timeout, cond); err != nil {
		t.Fatalf("harness: timed out after %v waiting for %s: %v", timeout, what, err)
	}
}

// poll is Eventually without a testing.TB: it returns nil as soon as cond
// reports true, or an error carrying cond's last error after timeout.
func poll(timeout time.Duration, cond func() (bool, error)) error {
	deadline := time.Now().Add(timeout)
	var last error
	for {
		ok, err := cond()
		if ok {
			return nil
		}
		if err != nil {
			last = err
		}
		if time.Now().After(deadline) {
			if last == nil {
				last = errors.New("condition still false")
			}
			return fmt.Errorf("last error: %w", last)
		}
		time.Sleep(pollInterval)
	}
}

// FreePort returns a TCP port on 127.0.0.1 that was free at the time of the
// call: it listens on 127.0.0.1:0, reads the port the kernel chose and closes
// the listener. Another process may grab the port before the caller binds
// it; the kernel hands out ephemeral ports round-robin, which makes that
// unlikely. The test fails (t.Fatalf) if no port can be obtained.
func FreePort(t testing.TB) int {
	t.Helper()
	p, err := freePort()
	if err != nil {
		t.Fatalf("harness: FreePort: %v", err)
	}
	return p
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// tailFile returns the last n lines of the file at path, or a short
// explanation if it cannot be read.
func tailFile(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Sprintf("(cannot read %s: %v)", path, err)
	}
	s := strings.TrimRight(string(b), "\n")
	lines := strings.Split(s, "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// requireFile skips (or, under CI, fails) the test when path does not exist.
func requireFile(t testing.TB, what, path string) {
	t.Helper()
	if _, err := os.Stat(path); err == nil {
		return
	}
	msg := fmt.Sprintf("harness: %s not found at %s", what, path)
	if inCI() {
		t.Fatal(msg + " (CI is set, so this is an error)")
	}
	t.Skip(msg + " (set CI=true to make this an error)")
}

func inCI() bool {
	v := strings.ToLower(strings.TrimSpace(os.Getenv("CI")))
	return v != "" && v != "0" && v != "false"
}
