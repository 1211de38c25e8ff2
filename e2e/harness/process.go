package harness

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// ---------------------------------------------------------------------------
// child: an exec.Cmd that is reaped in the background as soon as it exits.

type child struct {
	cmd  *exec.Cmd
	done chan struct{} // closed once cmd.Wait has returned
}

// startChild starts cmd and reaps it in a goroutine. cmd's Stdout/Stderr
// should be *os.File (or nil) so that Wait does not depend on pipes closing.
func startChild(cmd *exec.Cmd) (*child, error) {
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	c := &child{cmd: cmd, done: make(chan struct{})}
	go func() {
		_ = cmd.Wait() // the outcome is in cmd.ProcessState
		close(c.done)
	}()
	return c, nil
}

func (c *child) pid() int { return c.cmd.Process.Pid }

func (c *child) exited() bool {
	select {
	case <-c.done:
		return true
	default:
		return false
	}
}

// wait waits up to timeout for the child to exit and reports whether it did.
func (c *child) wait(timeout time.Duration) bool {
	select {
	case <-c.done:
		return true
	case <-time.After(timeout):
		return false
	}
}

// signal sends sig to the child unless it has already been reaped (the pid
// could then belong to somebody else).
func (c *child) signal(sig os.Signal) error {
	if c.exited() {
		return os.ErrProcessDone
	}
	return c.cmd.Process.Signal(sig)
}

// exitCode is the shell-style exit status: the exit code, or 128+signal
// number when the process was killed by a signal. -1 if still running.
func (c *child) exitCode() int {
	if !c.exited() {
		return -1
	}
	st := c.cmd.ProcessState
	if ws, ok := st.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return st.ExitCode()
}

// killTree SIGKILLs the child and every process descending from it (found
// through /proc before the kill), then waits up to timeout for all of them
// to be gone. Descendants are processes this package started transitively,
// so killing them is within the "own processes only" rule.
func (c *child) killTree(timeout time.Duration) error {
	if c.exited() {
		return nil
	}
	desc := descendants(c.pid())
	_ = c.cmd.Process.Signal(syscall.SIGKILL)
	for _, pid := range desc {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	if !c.wait(timeout) {
		return fmt.Errorf("pid %d did not exit %v after SIGKILL", c.pid(), timeout)
	}
	return waitGone(desc, timeout)
}

// ---------------------------------------------------------------------------
// /proc helpers

// ProcessAlive reports whether a process with the given pid exists and is not
// a zombie. Zombies count as dead: on machines whose init does not reap
// orphans, killed daemons stay around as zombies forever.
func ProcessAlive(pid int) bool {
	if pid <= 0 {
		return false
	}
	if err := syscall.Kill(pid, 0); err != nil && !errors.Is(err, syscall.EPERM) {
		return false
	}
	st, _, ok := procStat(pid)
	if !ok {
		// /proc not readable: trust kill(2).
		return true
	}
	return st != 'Z' && st != 'X' && st != 'x'
}

// procStat returns the state letter and parent pid of pid from
// /proc/PID/stat.
func procStat(pid int) (state byte, ppid int, ok bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, 0, false
	}
	// Format: pid (comm) state ppid ...; comm may contain spaces and ')'.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 || i+2 >= len(b) {
		return 0, 0, false
	}
	f := strings.Fields(string(b[i+2:]))
	if len(f) < 2 {
		return 0, 0, false
	}
	pp, err := strconv.Atoi(f[1])
	if err != nil {
		return 0, 0, false
	}
	return f[0][0], pp, true
}

// descendants returns the live (non-zombie) descendants of root, found by
// scanning /proc. It returns nil where /proc is unavailable.
func descendants(root int) []int {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	kids := map[int][]int{}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		st, pp, ok := procStat(pid)
		if !ok || st == 'Z' {
			continue
		}
		kids[pp] = append(kids[pp], pid)
	}
	var out []int
	queue := []int{root}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		for _, k := range kids[p] {
			out = append(out, k)
			queue = append(queue, k)
		}
	}
	return out
}

// waitGone waits up to timeout until none of pids is alive.
func waitGone(pids []int, timeout time.Duration) error {
	return poll(timeout, func() (bool, error) {
		for _, p := range pids {
			if ProcessAlive(p) {
				return false, fmt.Errorf("pid %d still alive", p)
			}
		}
		return true, nil
	})
}

// ---------------------------------------------------------------------------
// Process

// Process is a subprocess started by StartProcess. Its stdout and stderr go
// to the file LogPath. Cmd is the underlying command; do not call Cmd.Wait
// (the harness reaps the process itself) — use Wait.
type Process struct {
	Cmd     *exec.Cmd
	Name    string
	LogPath string

	c *child
}

var unsafeName = regexp.MustCompile(`[^A-Za-z0-9._-]+`)

// StartProcess starts bin with args as a child of the test binary. The
// environment is os.Environ() followed by env ("KEY=value" entries; later
// entries override earlier ones). stdout and stderr are both written to
// <t.TempDir()>/<name>.log. The test fails (t.Fatalf) if the process cannot
// be started.
//
// t.Cleanup sends SIGTERM if the process is still running, waits up to 10 s
// for it to exit, then SIGKILLs it and all its remaining descendants. If the
// test failed, the last 50 lines of the log are printed with t.Log.
func StartProcess(t testing.TB, name string, bin string, args []string, env []string) *Process {
	t.Helper()
	logPath := filepath.Join(t.TempDir(), unsafeName.ReplaceAllString(name, "_")+".log")
	f, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatalf("harness: StartProcess %s: %v", name, err)
	}
	defer f.Close() // the child has its own descriptor
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout = f
	cmd.Stderr = f
	// The process dies with the test binary: a test binary killed by its
	// -timeout, or by a mutant that panics it (make mutate), runs no
	// cleanup, and orphaned daemons would hold database connections and
	// queue consumers for the rest of the run.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	c, err := startChild(cmd)
	if err != nil {
		t.Fatalf("harness: StartProcess %s (%s): %v", name, bin, err)
	}
	p := &Process{Cmd: cmd, Name: name, LogPath: logPath, c: c}
	t.Cleanup(func() {
		if !c.exited() {
			desc := descendants(c.pid())
			_ = c.signal(syscall.SIGTERM)
			if !c.wait(10 * time.Second) {
				t.Logf("harness: process %s (pid %d) ignored SIGTERM for 10s; sending SIGKILL", name, c.pid())
			}
			// Whatever is left of the tree (including grandchildren that
			// survived their parent) is killed now.
			desc = append(desc, descendants(c.pid())...)
			_ = c.killTree(5 * time.Second)
			for _, d := range desc {
				_ = syscall.Kill(d, syscall.SIGKILL)
			}
			if err := waitGone(desc, 5*time.Second); err != nil {
				t.Logf("harness: process %s: %v", name, err)
			}
		}
		if t.Failed() {
			t.Logf("harness: last 50 lines of %s (%s):\n%s", name, logPath, tailFile(logPath, 50))
		}
	})
	return p
}

// Pid returns the process id of the started process.
func (p *Process) Pid() int { return p.c.pid() }

// Signal sends sig to the process (not to its children). It returns
// os.ErrProcessDone if the process has already exited and been reaped.
func (p *Process) Signal(sig os.Signal) error { return p.c.signal(sig) }

// Kill SIGKILLs the process and all of its descendants and waits (up to
// 10 s) until they are gone. It is a no-op if the process already exited.
func (p *Process) Kill() { _ = p.c.killTree(10 * time.Second) }

// Exited reports whether the process has exited (and been reaped).
func (p *Process) Exited() bool { return p.c.exited() }

// Wait waits up to timeout for the process to exit. exitCode is the exit
// status, or 128+N if the process was killed by signal N (shell convention).
// err is non-nil only if the process is still running after timeout, in
// which case exitCode is -1. Wait may be called any number of times.
func (p *Process) Wait(timeout time.Duration) (exitCode int, err error) {
	if !p.c.wait(timeout) {
		return -1, fmt.Errorf("harness: process %s (pid %d) still running after %v", p.Name, p.Pid(), timeout)
	}
	return p.c.exitCode(), nil
}

// Logs returns everything the process has written to stdout and stderr so
// far (the contents of LogPath), or "" if the file cannot be read.
func (p *Process) Logs() string {
	b, _ := os.ReadFile(p.LogPath)
	return string(b)
}

// WaitForLog polls the log file until it contains substr. The test fails
// (t.Fatalf, including the log tail) after timeout, or as soon as the
// process has exited without having written substr.
func (p *Process) WaitForLog(t testing.TB, substr string, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		exited := p.c.exited() // sample before reading: output precedes exit
		if strings.Contains(p.Logs(), substr) {
			return
		}
		if exited {
			t.Fatalf("harness: process %s exited (status %d) without logging %q; last lines:\n%s",
				p.Name, p.c.exitCode(), substr, tailFile(p.LogPath, 50))
		}
		if time.Now().After(deadline) {
			t.Fatalf("harness: process %s did not log %q within %v; last lines:\n%s",
				p.Name, substr, timeout, tailFile(p.LogPath, 50))
		}
		time.Sleep(pollInterval)
	}
}

// ---------------------------------------------------------------------------
// Building binaries

// builds is the package's only global state: a cache of `go build` results
// so that each Go package is compiled at most once per test binary. It is
// guarded by its mutex; each entry is filled exactly once (sync.Once).
var builds struct {
	mu      sync.Mutex
	dir     string
	entries map[string]*buildEntry
}

type buildEntry struct {
	once sync.Once
	path string
	err  error
}

// BuildGo compiles the Go package pkg (an import path, built from the
// current working directory, i.e. inside this module) into an executable
// named name and returns its absolute path. The result is cached for the
// lifetime of the test binary: later calls with the same pkg return the same
// path (or fail with the same error) without rebuilding. Binaries are placed
// in one temporary directory shared by all builds; RemoveBuilds deletes it.
// The test fails (t.Fatalf, with the compiler output) if the build fails.
func BuildGo(t testing.TB, pkg, name string) string {
	t.Helper()
	builds.mu.Lock()
	if builds.entries == nil {
		builds.entries = map[string]*buildEntry{}
	}
	e := builds.entries[pkg]
	if e == nil {
		e = &buildEntry{}
		builds.entries[pkg] = e
	}
	if builds.dir == "" {
		d, err := os.MkdirTemp("", "fft-bin-")
		if err != nil {
			builds.mu.Unlock()
			t.Fatalf("harness: BuildGo: %v", err)
		}
		builds.dir = d
	}
	dir := builds.dir
	builds.mu.Unlock()

	e.once.Do(func() {
		start := time.Now()
		out := filepath.Join(dir, unsafeName.ReplaceAllString(name, "_"))
		goBin, err := exec.LookPath("go")
		if err != nil {
			e.err = fmt.Errorf("go toolchain not in PATH: %w", err)
			return
		}
		args := []string{"build", "-o", out}
		if ov := os.Getenv(MutationOverlayEnv); ov != "" {
			args = append(args, "-overlay="+ov) // make mutate: build the mutant
		}
		cmd := exec.Command(goBin, append(args, pkg)...)
		if b, err := cmd.CombinedOutput(); err != nil {
			e.err = fmt.Errorf("go build %s: %v\n%s", pkg, err, b)
			return
		}
		e.path = out
		t.Logf("harness: built %s in %v", pkg, time.Since(start).Round(time.Millisecond))
	})
	if e.err != nil {
		t.Fatalf("harness: BuildGo: %v", e.err)
	}
	return e.path
}

// MutationOverlayEnv names the `go build -overlay` file of the mutant that
// `make mutate` (scripts/mutate) is testing; BuildGo builds with it so that
// the binaries an e2e test runs carry the mutant too. Unset in normal runs.
const MutationOverlayEnv = "FLOWFORGE_MUTATION_OVERLAY"

// FFCTLPackage is the import path BuildFFCTL compiles.
const FFCTLPackage = "github.com/flowforge/flowforge/cli/ffctl"

// BuildFFCTL returns the path of an ffctl binary. If the environment variable
// FFCTL_BIN is set, its value is returned (the test fails if that file does
// not exist). Otherwise FFCTLPackage is built once per test binary with
// BuildGo; the test fails if it does not compile.
func BuildFFCTL(t testing.TB) string {
	t.Helper()
	if p := os.Getenv("FFCTL_BIN"); p != "" {
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("harness: FFCTL_BIN=%s: %v", p, err)
		}
		return p
	}
	return BuildGo(t, FFCTLPackage, "ffctl")
}

// TestBinPackage is the import path BuildTestBin compiles: ffctl with the
// test handlers of e2e/harness/testbin ("boom", "special") beside the
// built-ins.
const TestBinPackage = "github.com/flowforge/flowforge/e2e/harness/testbin"

// BuildTestBin returns the path of the testbin binary (see TestBinPackage),
// built once per test binary with BuildGo, so with the mutant's overlay
// under make mutate; the test fails if it does not compile.
func BuildTestBin(t testing.TB) string {
	t.Helper()
	return BuildGo(t, TestBinPackage, "ffctl-testbin")
}

// RemoveBuilds deletes every binary built by BuildGo/BuildFFCTL and forgets
// the cache. Call it from TestMain after m.Run:
//
//	func TestMain(m *testing.M) {
//		code := m.Run()
//		harness.RemoveBuilds()
//		os.Exit(code)
//	}
func RemoveBuilds() {
	builds.mu.Lock()
	defer builds.mu.Unlock()
	if builds.dir != "" {
		_ = os.RemoveAll(builds.dir)
	}
	builds.dir = ""
	builds.entries = nil
}
