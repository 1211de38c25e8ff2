package handlers

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/flowforge/flowforge/core"
)

// Bounds of what the shell handler puts into a command's environment. Run
// params may be 1 MiB and each upstream result 256 KiB, but Linux refuses
// exec(2) with E2BIG ("argument list too long") when one argument or
// NAME=value string exceeds 128 KiB or all of them together exceed about a
// quarter of the stack limit; the files (FLOWFORGE_PARAMS_FILE,
// FLOWFORGE_UPSTREAM_FILE) always hold every byte.
const (
	// ShellEnvValueMaxBytes bounds one FLOWFORGE_PARAMS, FLOWFORGE_UPSTREAM
	// or FLOWFORGE_PARAM_<KEY> value (32 KiB); a longer one is left out.
	ShellEnvValueMaxBytes = 32 << 10
	// ShellEnvTaskMaxBytes bounds those variables together (256 KiB,
	// NAME=value bytes); the ones past it are left out.
	ShellEnvTaskMaxBytes = 256 << 10
	// ShellExecStringMaxBytes is Linux's MAX_ARG_STRLEN (128 KiB, the
	// terminating NUL included): exec(2) refuses a longer argument or
	// NAME=value string.
	ShellExecStringMaxBytes = 128 << 10
)

// execSizeAdvice is what an exec-size error tells the workflow's author.
const execSizeAdvice = "Linux allows 128 KiB per argument or variable and about a quarter of the stack limit in all; " +
	"put large values in the run's params and read them from the file $FLOWFORGE_PARAMS_FILE (or on stdin with params.stdin: params) " +
	"instead of params.env or the command line"

// Stdin values of ShellParams.
const (
	shellStdinParams   = "params"
	shellStdinUpstream = "upstream"
)

// shellInputs are the files of one attempt: dir is private (0700) and
// removed by remove.
type shellInputs struct {
	dir          string
	params       string // path of the run's params (JSON)
	upstream     string // path of the upstream results (JSON object by task name)
	upstreamJSON []byte
	result       string // path the command may write its result to (shellResult)
}

// writeShellInputs makes the attempt's directory under the worker's
// temporary directory and writes the run's params and the upstream results
// into it. A failure (a full disk, an unwritable TMPDIR) is retryable.
func writeShellInputs(t core.Task) (shellInputs, error) {
	up, err := json.Marshal(t.Upstream) // keys sorted; nil is "null"
	if err != nil {
		return shellInputs{}, core.Permanent(fmt.Errorf("shell: upstream results: %w", err))
	}
	if t.Upstream == nil {
		up = []byte("{}")
	}
	dir, err := os.MkdirTemp("", "flowforge-task-")
	if err != nil {
		return shellInputs{}, fmt.Errorf("shell: make the task's input directory: %w", err)
	}
	in := shellInputs{dir: dir, params: filepath.Join(dir, "params.json"), upstream: filepath.Join(dir, "upstream.json"), upstreamJSON: up,
		result: filepath.Join(dir, resultFileName)}
	params := []byte(t.RunParams)
	if len(params) == 0 {
		params = []byte("{}")
	}
	for path, b := range map[string][]byte{in.params: params, in.upstream: up} {
		if err := os.WriteFile(path, b, 0o600); err != nil {
			in.remove()
			return shellInputs{}, fmt.Errorf("shell: write %s: %w", path, err)
		}
	}
	return in, nil
}

// remove deletes the attempt's directory (errors are ignored: it lies in
// the temporary directory, which the system cleans).
func (in shellInputs) remove() { _ = os.RemoveAll(in.dir) }

// open returns the file params.stdin names, nil for "" (the command reads
// /dev/null). An unknown name is a permanent error.
func (in shellInputs) open(stdin string) (*os.File, error) {
	var path string
	switch stdin {
	case "":
		return nil, nil
	case shellStdinParams:
		path = in.params
	case shellStdinUpstream:
		path = in.upstream
	default:
		return nil, core.Permanent(fmt.Errorf("shell: params.stdin %q: want %q or %q (or leave it out for no input)", stdin, shellStdinParams, shellStdinUpstream))
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("shell: open stdin: %w", err)
	}
	return f, nil
}

// checkExecSize refuses, before exec, an argv or environment that exec(2)
// would refuse with E2BIG, as a permanent error naming the culprit: one
// string over ShellExecStringMaxBytes, or the whole over execArgMax. own
// is params.env, to say where a variable came from.
func checkExecSize(argv, env []string, own map[string]string) error {
	total := 0
	for i, a := range argv {
		if len(a)+1 > ShellExecStringMaxBytes {
			return core.Permanent(fmt.Errorf("shell: argument %d of params.command is %d bytes: too large for exec (%s)", i, len(a), execSizeAdvice))
		}
		total += len(a) + 1 + 8 // the string, its NUL, its pointer
	}
	for _, kv := range env {
		if len(kv)+1 > ShellExecStringMaxBytes {
			name, _, _ := strings.Cut(kv, "=")
			where := "environment variable " + name
			if _, ok := own[name]; ok {
				where = "params.env " + name
			}
			return core.Permanent(fmt.Errorf("shell: %s is %d bytes: too large for exec (%s)", where, len(kv), execSizeAdvice))
		}
		total += len(kv) + 1 + 8
	}
	if limit := execArgMax(); total > limit {
		return core.Permanent(fmt.Errorf("shell: params.command and the environment are %d bytes in all, over this host's %d: too large for exec (%s)", total, limit, execSizeAdvice))
	}
	return nil
}

// execArgMax is the room exec(2) gives arguments and environment together,
// as Linux computes it (fs/exec.c): a quarter of the stack limit, at most
// 6 MiB and at least 128 KiB.
func execArgMax() int {
	const floor, ceiling = 128 << 10, 6 << 20
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_STACK, &rl); err != nil || rl.Cur/4 > ceiling {
		return ceiling
	}
	return max(int(rl.Cur/4), floor)
}
