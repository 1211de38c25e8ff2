package handlers_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/flowforge/flowforge/core"
	"github.com/flowforge/flowforge/daemon/handlers"
)

// supervisorCommand makes this test binary act as the shell supervisor,
// as ffctl's hidden command does.
const supervisorCommand = "__shell-supervisor"

// TestMain runs the supervisor when asked to, and otherwise the tests,
// failing the run if any goroutine outlives them (the shell handler's
// output readers and process watchers must stop with their command).
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == supervisorCommand {
		os.Exit(handlers.SuperviseShell(os.Args[2:]))
	}
	goleak.VerifyTestMain(m)
}

// supervised is the shell handler under the supervisor, started the way
// ffctl starts it (through /proc/self/exe).
func supervised() core.Handler {
	return handlers.ShellHandler(handlers.ShellOptions{Supervisor: []string{"/proc/self/exe", supervisorCommand}})
}

// groupMembers returns the live (not zombie) processes of process group
// pgid, each as "pid cmdline", read from /proc.
func groupMembers(t *testing.T, pgid int) []string {
	t.Helper()
	dirs, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, d := range dirs {
		pid, err := strconv.Atoi(d.Name())
		if err != nil {
			continue
		}
		state, pg, ok := procStat(pid)
		if !ok || pg != pgid || state == "Z" {
			continue
		}
		cmdline, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		out = append(out, fmt.Sprintf("%d %s", pid, strings.ReplaceAll(string(cmdline), "\x00", " ")))
	}
	return out
}

// procStat returns the state and process group of pid (from
// /proc/PID/stat), and false when pid is gone.
func procStat(pid int) (state string, pgid int, ok bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return "", 0, false
	}
	// pid (comm) state ppid pgrp ...; comm may hold spaces and parentheses.
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(f) < 3 {
		return "", 0, false
	}
	pgid, err = strconv.Atoi(f[2])
	return f[0], pgid, err == nil
}

// waitForPids polls for path to hold the two pids a test command writes
// and returns them.
func waitForPids(t *testing.T, path string, deadline time.Time) (sh, bg int) {
	t.Helper()
	for {
		if b, err := os.ReadFile(path); err == nil {
			if f := strings.Fields(string(b)); len(f) == 2 {
				sh, _ = strconv.Atoi(f[0])
				bg, _ = strconv.Atoi(f[1])
				return sh, bg
			}
		}
		if time.Now().After(deadline) {
			t.Fatal("the command never started")
		}
		time.Sleep(20 * time.Millisecond) // polling a file the command writes
	}
}

// waitGroupGone polls until process group pgid has no live member, and
// fails (killing what is left) at deadline.
func waitGroupGone(t *testing.T, pgid int, deadline time.Time, what string) {
	t.Helper()
	for {
		left := groupMembers(t, pgid)
		if len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			_ = syscall.Kill(-pgid, syscall.SIGKILL)
			t.Fatalf("%s: process group %d still runs: %q", what, pgid, left)
		}
		time.Sleep(20 * time.Millisecond) // polling /proc
	}
}

// groupCommand backgrounds a grandchild, writes "SH_PID BG_PID" to pidfile
// (atomically) and waits on a second sleep: the shape of a command whose
// grandchildren outlived a SIGKILLed worker.
func groupCommand(pidfile string) string {
	script := fmt.Sprintf("sleep 3173 & echo $$ $! > %[1]s.tmp && mv %[1]s.tmp %[1]s; sleep 3174", pidfile)
	b, _ := json.Marshal(map[string]any{"command": []string{"sh", "-c", script}})
	return string(b)
}

// TestShellCommandsWholeGroupDiesWithItsWorker: when the worker is
// SIGKILLed, every process of a shell command's group dies, the command's
// backgrounded grandchild and the child it waits on included, not only the
// command itself. The "worker" is this test binary re-executed as a child,
// running the shell handler under the supervisor as ffctl does.
func TestShellCommandsWholeGroupDiesWithItsWorker(t *testing.T) {
	if pidfile := os.Getenv("FF_GROUP_PIDFILE"); pidfile != "" {
		out, err := supervised()(context.Background(), task(groupCommand(pidfile), 1))
		t.Logf("%s %v", out, err)
		return
	}
	pidfile := filepath.Join(t.TempDir(), "pids")
	worker := exec.Command(os.Args[0], "-test.run", "^TestShellCommandsWholeGroupDiesWithItsWorker$")
	worker.Env = append(os.Environ(), "FF_GROUP_PIDFILE="+pidfile)
	if err := worker.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = worker.Process.Kill(); _ = worker.Wait() })
	deadline := time.Now().Add(20 * time.Second)
	sh, bg := waitForPids(t, pidfile, deadline)
	_, pgid, ok := procStat(sh)
	if !ok {
		t.Fatalf("the command (pid %d) is already gone", sh)
	}
	t.Cleanup(func() { _ = syscall.Kill(-pgid, syscall.SIGKILL) })
	if _, bgGroup, _ := procStat(bg); bgGroup != pgid {
		t.Fatalf("the grandchild %d is in group %d, not the command's %d", bg, bgGroup, pgid)
	}
	if n := len(groupMembers(t, pgid)); n < 3 {
		t.Fatalf("group %d has %d live members, want the command and both sleeps", pgid, n)
	}
	if err := worker.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = worker.Wait()
	waitGroupGone(t, pgid, deadline, "after the worker was SIGKILLed")
}

// TestShellUnderTheSupervisorKeepsItsBehaviour: under the supervisor a
// command's result, exit code, output tails, failures and environment are
// what they are without it.
func TestShellUnderTheSupervisorKeepsItsBehaviour(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "ok.sh"), []byte("#!/bin/sh\necho from-script\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name      string
		params    string
		stdout    string // the result's stdout, for a success
		errHas    []string
		permanent bool
	}{
		{"success with stdout", `{"command": ["sh", "-c", "echo $FLOWFORGE_TASK_RUN_ID $EXTRA; echo e >&2"], "env": {"EXTRA": "x"}}`, "task-1 x\n", nil, false},
		{"relative command in dir", `{"command": ["./ok.sh"], "dir": "` + dir + `"}`, "from-script\n", nil, false},
		{"non-zero exit", `{"command": ["sh", "-c", "echo oops >&2; exit 3"]}`, "", []string{"code 3", "oops"}, false},
		{"killed by a signal", `{"command": ["sh", "-c", "kill -TERM $$"]}`, "", []string{"killed by SIGTERM"}, false},
		{"missing binary", `{"command": ["/no/such/binary"]}`, "", []string{"no such file"}, true},
		{"missing command on PATH", `{"command": ["no-such-command-ff"]}`, "", []string{"not found"}, true},
		{"missing relative command", `{"command": ["./nope.sh"], "dir": "` + dir + `"}`, "", []string{"nope.sh"}, true},
		{"missing dir", `{"command": ["true"], "dir": "` + dir + `/nope"}`, "", []string{"no such file"}, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			for _, h := range []struct {
				name string
				h    core.Handler
			}{{"supervised", supervised()}, {"plain", handlers.Shell}} {
				out, err := h.h(context.Background(), task(c.params, 1))
				if c.errHas == nil {
					var res handlers.ShellResult
					if err != nil || json.Unmarshal(out, &res) != nil || res.Stdout != c.stdout || res.ExitCode != 0 {
						t.Fatalf("%s: out %s err %v, want stdout %q exit 0", h.name, out, err, c.stdout)
					}
					continue
				}
				if err == nil || core.IsPermanent(err) != c.permanent {
					t.Fatalf("%s: err %v (permanent %v), want an error (permanent %v)", h.name, err, core.IsPermanent(err), c.permanent)
				}
				for _, s := range c.errHas {
					if !strings.Contains(err.Error(), s) {
						t.Fatalf("%s: err %v, want it to say %q", h.name, err, s)
					}
				}
			}
		})
	}
	// The environment is the same, the supervisor adds nothing.
	env := func(h core.Handler) string {
		out, err := h(context.Background(), task(`{"command": ["sh", "-c", "env | sort"]}`, 1))
		var res handlers.ShellResult
		if err != nil || json.Unmarshal(out, &res) != nil {
			t.Fatalf("env: out %s err %v", out, err)
		}
		// The per-attempt input files live in a directory of their own.
		return regexp.MustCompile(`flowforge-task-[0-9]+`).ReplaceAllString(res.Stdout, "flowforge-task-N")
	}
	if a, b := env(supervised()), env(handlers.Shell); a != b {
		t.Fatalf("environment under the supervisor:\n%s\nwithout:\n%s", a, b)
	}
}

// TestShellUnderTheSupervisorKillsTheWholeGroupOnCancel: a cancelled
// command's whole group, grandchildren and supervisor included, is gone
// when the handler returns the cancellation.
func TestShellUnderTheSupervisorKillsTheWholeGroupOnCancel(t *testing.T) {
	pidfile := filepath.Join(t.TempDir(), "pids")
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	errc := make(chan error, 1)
	go func() {
		_, err := supervised()(ctx, task(groupCommand(pidfile), 1))
		errc <- err
	}()
	deadline := time.Now().Add(20 * time.Second)
	sh, _ := waitForPids(t, pidfile, deadline)
	_, pgid, ok := procStat(sh)
	if !ok {
		t.Fatalf("the command (pid %d) is already gone", sh)
	}
	t.Cleanup(func() { _ = syscall.Kill(-pgid, syscall.SIGKILL) })
	cancel(core.ErrRunCancelled)
	select {
	case err := <-errc:
		if !errors.Is(err, core.ErrRunCancelled) {
			t.Fatalf("err = %v, want the cancellation's cause", err)
		}
	case <-time.After(time.Until(deadline)):
		t.Fatal("the cancelled command never returned")
	}
	waitGroupGone(t, pgid, deadline, "after cancellation")
}

// TestAShellCommandKilledByASignalIsNamedSo: a command ended by a signal
// (a kernel OOM kill is a SIGKILL) is reported by the signal's name, with
// the out-of-memory question for SIGKILL, not as "exited with code -1";
// with and without the shell supervisor, which dies by the command's
// signal.
func TestAShellCommandKilledByASignalIsNamedSo(t *testing.T) {
	for _, tc := range []struct{ sig, want string }{
		{"KILL", "shell: sh killed by SIGKILL (out of memory? the kernel's OOM killer sends SIGKILL)"},
		{"TERM", "shell: sh killed by SIGTERM"},
	} {
		for _, via := range []struct {
			name string
			h    core.Handler
		}{{"direct", handlers.Shell}, {"supervised", supervised()}} {
			t.Run(tc.sig+"/"+via.name, func(t *testing.T) {
				_, err := via.h(context.Background(), task(`{"command": ["sh", "-c", "kill -`+tc.sig+` $$"]}`, 1))
				if err == nil || err.Error() != tc.want {
					t.Fatalf("err = %v, want exactly %q", err, tc.want)
				}
				if core.IsPermanent(err) {
					t.Fatalf("err %v is permanent: a killed command is retried", err)
				}
			})
		}
	}
}
