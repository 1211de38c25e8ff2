package handlers

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/flowforge/flowforge/core"
)

// OutputTailBytes bounds the stdout and stderr tails a shell result keeps.
const OutputTailBytes = 4096

// ShellParams are the shell handler's params.
type ShellParams struct {
	// Command is the argv to run (no shell unless argv[0] is one).
	Command []string `json:"command"`
	// Env adds variables to the command's environment.
	Env map[string]string `json:"env"`
	// Dir is the working directory (default: the worker's).
	Dir string `json:"dir"`
	// Stdin names what the command reads on standard input: "" (nothing,
	// /dev/null), "params" (the run's params, as FLOWFORGE_PARAMS_FILE) or
	// "upstream" (the upstream results, as FLOWFORGE_UPSTREAM_FILE). Any
	// other value is a permanent error.
	Stdin string `json:"stdin"`
}

// ShellResult is the shell handler's result.
type ShellResult struct {
	ExitCode int    `json:"exit_code"`
	Stdout   string `json:"stdout"`
	Stderr   string `json:"stderr"`
}

// tail keeps the last n bytes written to it.
type tail struct {
	n       int
	buf     []byte
	dropped int
}

func (t *tail) Write(p []byte) (int, error) {
	t.buf = append(t.buf, p...)
	if over := len(t.buf) - t.n; over > 0 {
		t.dropped += over
		t.buf = append(t.buf[:0], t.buf[over:]...)
	}
	return len(p), nil
}

func (t *tail) String() string {
	s := core.SanitizeText(string(t.buf), 0)
	if t.dropped > 0 {
		return fmt.Sprintf("[%d bytes dropped] %s", t.dropped, s)
	}
	return s
}

// Shell is the shell handler with the default ShellOptions: the minimal
// environment (ShellBaseEnv) and nothing passed through. See ShellHandler.
func Shell(ctx context.Context, t core.Task) (json.RawMessage, error) {
	return runShell(ctx, t, ShellOptions{})
}

// ShellHandler returns the shell handler configured by opt. It runs
// params.command in a minimal, explicit environment, never the worker's
// own (which holds FLOWFORGE_DATABASE_URL, FLOWFORGE_AMQP_URL, PG* and
// whatever credentials the worker was started with):
//
//   - PATH, HOME, USER, LOGNAME, TMPDIR, TZ, LANG, LANGUAGE, LC_ALL and the
//     POSIX LC_* categories, and the opt.EnvPass names, copied from the
//     worker's environment when set there (PATH falls back to
//     ShellPathDefault);
//   - FLOWFORGE_RUN_ID, FLOWFORGE_TASK_RUN_ID, FLOWFORGE_TASK_NAME,
//     FLOWFORGE_ATTEMPT, FLOWFORGE_WORKFLOW;
//   - FLOWFORGE_PARAMS_FILE and FLOWFORGE_UPSTREAM_FILE: the paths of two
//     files holding the run's params and the upstream results as JSON,
//     whole (params up to core.MaxParamsBytes, results up to
//     core.MaxResultBytes each), in a private directory made for the
//     attempt and removed when the command exits;
//   - FLOWFORGE_RESULT_FILE: where the command may write its result as
//     JSON (shellResult);
//   - FLOWFORGE_ITEM, in an element of a for_each task: its element (a
//     string as itself, another value as JSON), when it fits;
//   - FLOWFORGE_PARAMS (the run's params as JSON), FLOWFORGE_UPSTREAM
//     (upstream results as JSON) and one FLOWFORGE_PARAM_<KEY> per
//     top-level scalar run param (key upper-cased, non-alphanumerics as _),
//     each only when it fits (see shellEnv: ShellEnvValueMaxBytes each,
//     ShellEnvTaskMaxBytes together); those left out are named in
//     FLOWFORGE_ENV_OMITTED;
//   - params.env, last (so a workflow may set PATH or LANG itself).
//
// params.stdin "params" or "upstream" gives the command that file on
// standard input (else it reads /dev/null).
//
// Each line the command writes to stdout or stderr also goes into the
// attempt's task log (streams stdout and stderr; see logLines), beside the
// tails the result keeps.
//
// A zero exit succeeds with ShellResult; a non-zero exit fails (retryable)
// with the stderr tail; a missing command is permanent, and so are
// arguments or an environment too large for exec(2) (a params.env value
// over 128 KiB, say): the error says where large values go instead. On
// cancellation the whole process group is killed. If the worker process
// dies, the command is killed too, and with opt.Supervisor everything it
// forked (see SuperviseShell). The caller checks opt.EnvPass with CheckShellEnvPass
// first (names it refuses are skipped).
func ShellHandler(opt ShellOptions) core.Handler {
	if opt.Concurrency <= 0 {
		return func(ctx context.Context, t core.Task) (json.RawMessage, error) { return runShell(ctx, t, opt) }
	}
	turns := make(chan struct{}, opt.Concurrency)
	return func(ctx context.Context, t core.Task) (json.RawMessage, error) {
		select {
		case turns <- struct{}{}:
		case <-ctx.Done():
			return nil, fmt.Errorf("shell: waiting for one of the %d commands at once (--shell-concurrency): %w", opt.Concurrency, context.Cause(ctx))
		}
		defer func() { <-turns }()
		return runShell(ctx, t, opt)
	}
}

// ShellConcurrencyDefault is the shell handler's default bound on the
// commands it runs at once: twice the CPUs. A command is a process of its
// own (a fork, an exec, its own memory), unlike the in-process handlers
// the worker's slots are sized for (worker.ConcurrencyDefault).
func ShellConcurrencyDefault() int { return 2 * runtime.NumCPU() }

func runShell(ctx context.Context, t core.Task, opt ShellOptions) (json.RawMessage, error) {
	var p ShellParams
	if err := decodeParams(t.Params, &p); err != nil {
		return nil, err
	}
	if len(p.Command) == 0 {
		return nil, core.Permanent(errors.New("shell: params.command is empty"))
	}
	if p.Command[0] == "" {
		return nil, core.Permanent(errors.New("shell: params.command[0] is empty: it names the program to run"))
	}
	in, err := writeShellInputs(t)
	if err != nil {
		return nil, err
	}
	defer in.remove()
	cmd, status, statusW, err := shellCommand(ctx, p, opt)
	if err != nil {
		return nil, err
	}
	if status != nil {
		defer status.Close()
	}
	cmd.Env = append(baseEnv(opt), shellEnv(t, in)...)
	keys := make([]string, 0, len(p.Env))
	for k := range p.Env {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		cmd.Env = append(cmd.Env, k+"="+p.Env[k])
	}
	if err := checkExecSize(p.Command, cmd.Env, p.Env); err != nil {
		return nil, err
	}
	stdin, err := in.open(p.Stdin)
	if err != nil {
		return nil, err
	}
	if stdin != nil {
		defer stdin.Close()
		cmd.Stdin = stdin
	}
	stdout, stderr := &tail{n: OutputTailBytes}, &tail{n: OutputTailBytes}
	outLines, errLines := newLogLines(ctx, core.LogStreamStdout), newLogLines(ctx, core.LogStreamStderr)
	cmd.Stdout, cmd.Stderr = teeLines(stdout, outLines), teeLines(stderr, errLines)
	err = startShell(cmd, status, statusW, p)
	outLines.flush()
	errLines.flush()
	res := ShellResult{ExitCode: cmd.ProcessState.ExitCode(), Stdout: stdout.String(), Stderr: stderr.String()}
	if err != nil {
		return nil, shellError(ctx, err, p.Command[0], res)
	}
	return shellResult(in.result, res)
}

// shellCommand prepares the command of p, under opt.Supervisor when set:
// then status is the read end of the supervisor's status pipe (the caller
// closes it) and statusW its write end (see startShell).
func shellCommand(ctx context.Context, p ShellParams, opt ShellOptions) (cmd *exec.Cmd, status, statusW *os.File, err error) {
	cmd = exec.CommandContext(ctx, p.Command[0], p.Command[1:]...)
	cmd.Dir = p.Dir
	// Its own process group, so cancellation kills the whole group; and the
	// parent-death signal, so a SIGKILLed worker does not leave the command
	// running beside the retry. Under a supervisor (opt.Supervisor) the
	// group is the supervisor's, which kills it whole when the worker dies;
	// without one, only the command itself gets the signal, not what it
	// forks.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if len(opt.Supervisor) > 0 && cmd.Err == nil {
		if status, statusW, err = superviseShell(cmd, opt.Supervisor, p.Command); err != nil {
			return nil, nil, nil, fmt.Errorf("shell: %w", err)
		}
		// SIGTERM, which the supervisor catches to kill the group.
		cmd.SysProcAttr.Pdeathsig = syscall.SIGTERM
	}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	return cmd, status, statusW, nil
}

// startShell starts cmd and waits for it. Under the shell supervisor
// (statusW not nil) it first closes the status pipe's write end and reads
// from status whether the supervisor could start the command.
func startShell(cmd *exec.Cmd, status, statusW *os.File, p ShellParams) error {
	err := cmd.Start()
	if statusW != nil {
		_ = statusW.Close()
		if err != nil {
			err = fmt.Errorf("start %s under the shell supervisor (dir %q): %w", p.Command[0], p.Dir, err)
		} else if err = startFailure(status); err != nil {
			_ = cmd.Wait()
		}
	}
	if err == nil {
		err = cmd.Wait()
	}
	return err
}

// shellError is the handler's error for the command name that failed with
// err: a stop when ctx ended, the exit code and stderr's tail for a
// non-zero exit, permanent for a command not found or arguments too long.
func shellError(ctx context.Context, err error, name string, res ShellResult) error {
	var ee *exec.ExitError
	switch {
	case ctx.Err() != nil:
		return fmt.Errorf("shell: %s stopped: %w", name, context.Cause(ctx))
	case errors.As(err, &ee):
		msg := fmt.Sprintf("shell: %s exited with code %d", name, res.ExitCode)
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			msg = "shell: " + name + " " + killedBy(ws.Signal())
		}
		if tail := strings.TrimSpace(res.Stderr); tail != "" {
			msg += ": " + tail
		}
		return errors.New(msg)
	case errors.Is(err, exec.ErrNotFound) || errors.Is(err, os.ErrNotExist):
		return core.Permanent(fmt.Errorf("shell: %w", err))
	case errors.Is(err, syscall.E2BIG):
		// The same arguments and environment fail the same way on every
		// attempt: no retry can fix it.
		return core.Permanent(fmt.Errorf("shell: %s: %w (%s)", name, err, execSizeAdvice))
	default:
		return fmt.Errorf("shell: %w", err)
	}
}

// killedBy says how a command ended by sig: "killed by SIGTERM", and for
// SIGKILL, which is how the kernel's out-of-memory killer ends a process,
// the question a person should ask first.
func killedBy(sig syscall.Signal) string {
	name := unix.SignalName(sig)
	if name == "" {
		name = fmt.Sprintf("signal %d", int(sig))
	}
	if sig == syscall.SIGKILL {
		return "killed by " + name + " (out of memory? the kernel's OOM killer sends SIGKILL)"
	}
	return "killed by " + name
}

// shellEnv returns the task's FLOWFORGE_* variables: the identifiers and
// the input files always; FLOWFORGE_PARAMS, FLOWFORGE_UPSTREAM and one
// FLOWFORGE_PARAM_<KEY> per top-level scalar run param (keys sorted) only
// while each value fits ShellEnvValueMaxBytes and all of them together fit
// ShellEnvTaskMaxBytes. The names left out are listed, comma-separated, in
// FLOWFORGE_ENV_OMITTED.
func shellEnv(t core.Task, in shellInputs) []string {
	env := []string{
		"FLOWFORGE_RUN_ID=" + t.RunID,
		"FLOWFORGE_TASK_RUN_ID=" + t.TaskRunID,
		"FLOWFORGE_TASK_NAME=" + t.TaskName,
		"FLOWFORGE_WORKFLOW=" + t.Workflow,
		"FLOWFORGE_ATTEMPT=" + strconv.Itoa(t.Attempt),
		"FLOWFORGE_PARAMS_FILE=" + in.params,
		"FLOWFORGE_UPSTREAM_FILE=" + in.upstream,
		"FLOWFORGE_RESULT_FILE=" + in.result,
	}
	var omitted []string
	budget := ShellEnvTaskMaxBytes
	add := func(name, value string) {
		if len(value) > ShellEnvValueMaxBytes || len(name)+1+len(value) > budget {
			omitted = append(omitted, name)
			return
		}
		budget -= len(name) + 1 + len(value)
		env = append(env, name+"="+value)
	}
	if item, ok := itemEnv(t.Item); ok {
		add("FLOWFORGE_ITEM", item)
	}
	add("FLOWFORGE_PARAMS", string(t.RunParams))
	add("FLOWFORGE_UPSTREAM", string(in.upstreamJSON))
	var params map[string]any
	dec := json.NewDecoder(bytes.NewReader(t.RunParams))
	dec.UseNumber() // 20261130 stays 20261130, not 2.026113e+07
	if dec.Decode(&params) == nil {
		keys := make([]string, 0, len(params))
		for k := range params {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			var s string
			switch x := params[k].(type) {
			case string:
				s = x
			case json.Number, bool:
				s = fmt.Sprint(x)
			default:
				continue
			}
			add("FLOWFORGE_PARAM_"+envName(k), s)
		}
	}
	if len(omitted) > 0 {
		list := strings.Join(omitted, ",")
		if len(list) > ShellEnvValueMaxBytes {
			list = list[:strings.LastIndexByte(list[:ShellEnvValueMaxBytes-4], ',')] + ",..."
		}
		env = append(env, "FLOWFORGE_ENV_OMITTED="+list)
	}
	return env
}

func envName(k string) string {
	var b strings.Builder
	for _, r := range strings.ToUpper(k) {
		if (r >= 'A' && r <= 'Z') || (r >= '0' && r <= '9') {
			b.WriteRune(r)
		} else {
			b.WriteByte('_')
		}
	}
	return b.String()
}
