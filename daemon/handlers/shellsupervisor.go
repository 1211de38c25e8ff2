package handlers

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"strconv"
	"syscall"
	"unsafe"
)

// Exit codes of SuperviseShell when the command never ran (the shell's own
// conventions).
const (
	// ShellSupervisorExitUsage: bad arguments, or the worker already gone.
	ShellSupervisorExitUsage = 125
	// ShellSupervisorExitCannotRun: the command could not be started.
	ShellSupervisorExitCannotRun = 126
	// ShellSupervisorExitNotFound: the command does not exist.
	ShellSupervisorExitNotFound = 127
)

// shellStatusFD is the descriptor on which a supervisor reports a command
// it could not start (the write end of a pipe the worker reads; see
// superviseShell). It is closed, unwritten, once the command runs.
const shellStatusFD = 3

// Kinds of start failure a supervisor reports on shellStatusFD (the first
// byte of its message).
const (
	shellStatusNotFound = 'N'
	shellStatusOther    = 'E'
)

// SuperviseShell runs one shell command as the shell handler's supervisor
// and returns the process's exit code; it is the body of a hidden
// subcommand of the worker's own executable (ffctl __shell-supervisor,
// also in every binary built with cli.Main), which the shell handler
// starts when ShellOptions.Supervisor is set. args are what the handler
// passes after the Supervisor prefix: "--", the worker's pid, the
// command's path, then the command's argv.
//
// The supervisor is the worker's direct child, leads its own process group
// (the command and everything it forks stay in it) and gets SIGTERM when
// the worker dies (its parent-death signal: a SIGKILL could not be
// caught). On SIGTERM, SIGINT or SIGHUP it SIGKILLs the whole group,
// itself included, so no grandchild of a dead worker runs on beside the
// task's retry. If the worker is already gone when the supervisor starts
// (it died between fork and prctl), the supervisor runs nothing.
// Otherwise it ends as the command did: with its exit code, or killed by
// the same signal. A command that cannot be started is reported to the
// worker on descriptor 3 (and with exit code 126, or 127 when it does not
// exist).
func SuperviseShell(args []string) int {
	if len(args) > 0 && args[0] == "--" {
		args = args[1:]
	}
	if len(args) < 3 {
		args = append(args, "", "", "") // fails below
	}
	parent, err := strconv.Atoi(args[0])
	if err != nil || args[2] == "" {
		fmt.Fprintln(os.Stderr, "shell supervisor: usage: -- WORKER_PID PATH ARGV0 [ARG...] (started by the shell handler, not by hand)")
		return ShellSupervisorExitUsage
	}
	status := statusPipe()
	// A group of our own, so that killing it never reaches the worker's.
	if syscall.Getpgrp() != os.Getpid() {
		if err := syscall.Setpgid(0, 0); err != nil {
			return cannotRun(status, fmt.Errorf("setpgid: %w", err))
		}
	}
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	// The handler sets the parent-death signal when it starts us; set it
	// again (it is idempotent), then make sure the parent is still the
	// worker: a worker that died before the signal was armed never sends it.
	if _, _, errno := syscall.RawSyscall(syscall.SYS_PRCTL, syscall.PR_SET_PDEATHSIG, uintptr(syscall.SIGTERM), 0); errno != 0 {
		return cannotRun(status, fmt.Errorf("prctl PR_SET_PDEATHSIG: %w", errno))
	}
	if os.Getppid() != parent {
		fmt.Fprintf(os.Stderr, "shell supervisor: worker %d is gone; not running %s\n", parent, args[1])
		return ShellSupervisorExitUsage
	}
	cmd := &exec.Cmd{Path: args[1], Args: args[2:], Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr,
		// Same group; and should the supervisor itself be SIGKILLed, the
		// command at least goes with it.
		SysProcAttr: &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}}
	if err := cmd.Start(); err != nil {
		return cannotRun(status, err)
	}
	_ = status.Close()
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait() // its status is in cmd.ProcessState
		close(done)
	}()
	select {
	case <-sigs:
		// The worker died or asked us to stop: the whole group goes, us too.
		_ = syscall.Kill(-os.Getpid(), syscall.SIGKILL)
		select {} // SIGKILL is on its way
	case <-done:
	}
	ws, _ := cmd.ProcessState.Sys().(syscall.WaitStatus)
	if ws.Signaled() {
		dieBySignal(ws.Signal())
	}
	return cmd.ProcessState.ExitCode()
}

// statusPipe returns descriptor shellStatusFD, marked close-on-exec (it is
// never the command's), when it is the pipe the handler passes; nil
// otherwise (a supervisor started by hand: the descriptor may be one the Go
// runtime opened). A nil *os.File's Write and Close do nothing.
func statusPipe() *os.File {
	var st syscall.Stat_t
	if err := syscall.Fstat(shellStatusFD, &st); err != nil || st.Mode&syscall.S_IFMT != syscall.S_IFIFO {
		return nil
	}
	syscall.CloseOnExec(shellStatusFD)
	return os.NewFile(shellStatusFD, "shell-status")
}

// cannotRun reports err to the worker on status and returns the exit code
// for a command that never ran.
func cannotRun(status *os.File, err error) int {
	kind, code := byte(shellStatusOther), ShellSupervisorExitCannotRun
	if errors.Is(err, os.ErrNotExist) {
		kind, code = shellStatusNotFound, ShellSupervisorExitNotFound
	}
	msg := err.Error()
	_, _ = status.Write(append([]byte{kind}, msg...))
	_ = status.Close()
	fmt.Fprintf(os.Stderr, "shell supervisor: %s\n", msg)
	return code
}

// dieBySignal ends the process by sig, so that the worker sees the command's
// own death: the Go runtime's handler is replaced by the default action
// (rt_sigaction with SIG_DFL; the runtime ignores some signals and dumps
// goroutines on others), sig is unblocked on this thread and sent to it
// (tgkill), so that it is delivered on the way back from the call. It
// returns only if sig's default action does not end a process.
func dieBySignal(sig syscall.Signal) {
	runtime.LockOSThread()
	// No core file of our own: the command dumped its own, if any.
	_, _, _ = syscall.RawSyscall(syscall.SYS_PRCTL, syscall.PR_SET_DUMPABLE, 0, 0)
	var dfl [4]uintptr // struct kernel_sigaction: handler SIG_DFL (0), no flags, restorer or mask
	_, _, _ = syscall.RawSyscall6(syscall.SYS_RT_SIGACTION, uintptr(sig), uintptr(unsafe.Pointer(&dfl)), 0, 8, 0, 0)
	set := uint64(1) << (uint(sig) - 1)
	const sigUnblock = 1 // SIG_UNBLOCK
	_, _, _ = syscall.RawSyscall6(syscall.SYS_RT_SIGPROCMASK, sigUnblock, uintptr(unsafe.Pointer(&set)), 0, 8, 0, 0)
	_ = syscall.Tgkill(os.Getpid(), syscall.Gettid(), sig)
}

// superviseShell makes cmd (made by exec.CommandContext for command, whose
// path it resolved) start the supervisor argv prefix sup instead, with
// the arguments SuperviseShell expects and the status pipe as descriptor
// 3. It returns the pipe's read end (the caller closes it) and the write
// end (the caller closes it once cmd has started).
func superviseShell(cmd *exec.Cmd, sup, command []string) (r, w *os.File, err error) {
	lp, err := exec.LookPath(sup[0])
	if err != nil {
		return nil, nil, fmt.Errorf("shell supervisor %s: %w", sup[0], err)
	}
	r, w, err = os.Pipe()
	if err != nil {
		return nil, nil, fmt.Errorf("shell supervisor status pipe: %w", err)
	}
	args := append(append([]string{}, sup...), "--", strconv.Itoa(os.Getpid()), cmd.Path)
	cmd.Args = append(args, command...)
	cmd.Path = lp
	cmd.ExtraFiles = []*os.File{w}
	return r, w, nil
}

// startFailure reads the supervisor's status pipe r to its end and returns
// the start failure it reports (wrapping os.ErrNotExist when the command
// does not exist), or nil once the command runs.
func startFailure(r io.Reader) error {
	b, _ := io.ReadAll(bufio.NewReader(r))
	if len(b) == 0 {
		return nil
	}
	if b[0] == shellStatusNotFound {
		return fmt.Errorf("%s: %w", b[1:], os.ErrNotExist)
	}
	return errors.New(string(b[1:]))
}
