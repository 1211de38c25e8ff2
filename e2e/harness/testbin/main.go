// Command testbin is ffctl built the way a program with handlers of its
// own builds it (cli.Main with a registry), for the end-to-end tests that
// need a handler the built-ins do not have. It registers, beside the
// built-ins:
//
//   - "boom": panics (assignment to entry in nil map) on attempt 1 and
//     returns {"survived": true} on later attempts (mode 33);
//   - "special": returns {"ran": "testbin"}, so a test can tell which
//     worker ran a task (mode 32: workers with different handler sets on
//     one queue);
//   - "stubborn": on attempt 1 blocks for params.seconds (default 120)
//     ignoring its context, as a handler stuck in a call that takes no
//     context does; later attempts return {"attempt": N} at once (mode
//     127: the abort grace);
//   - "innocent": writes the file started-<task run id>-<attempt> in
//     params.dir, then blocks (honouring its context) until the file
//     params.dir/release exists, and returns {"attempt": N} (modes 128
//     and 129: the innocent tasks in flight with a poison task);
//   - "poison": SIGKILLs its own worker process, once params.others
//     "started-" files exist in params.dir or params.dir/release exists:
//     a task that kills its worker, caught with that many other tasks in
//     flight at its first crash (modes 128 and 129).
//
// The e2e harness builds it with harness.BuildTestBin (under make mutate,
// with the mutant's overlay, like ffctl).
package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/flowforge/flowforge/cli"
	"github.com/flowforge/flowforge/core"
)

func main() {
	reg := core.NewRegistry()
	reg.MustRegister("boom", boom)
	reg.MustRegister("special", func(context.Context, core.Task) (json.RawMessage, error) {
		return json.RawMessage(`{"ran": "testbin"}`), nil
	})
	reg.MustRegister("stubborn", stubborn)
	reg.MustRegister("innocent", innocent)
	reg.MustRegister("poison", poison)
	cli.Main(reg)
}

// stubborn ignores its context on a task's first attempt: it blocks for
// params.seconds (default 120) whatever happens to ctx.
func stubborn(_ context.Context, task core.Task) (json.RawMessage, error) {
	if task.Attempt == 1 {
		var p struct {
			Seconds int `json:"seconds"`
		}
		if err := json.Unmarshal(task.Params, &p); err != nil {
			return nil, fmt.Errorf("stubborn: params: %w", err)
		}
		time.Sleep(time.Duration(cmp.Or(p.Seconds, 120)) * time.Second)
	}
	return json.RawMessage(fmt.Sprintf(`{"attempt": %d}`, task.Attempt)), nil
}

// boom panics on a task's first attempt and succeeds on the others.
func boom(_ context.Context, task core.Task) (json.RawMessage, error) {
	if task.Attempt == 1 {
		var m map[string]int
		m["nil map"] = 1 // panics: assignment to entry in nil map
	}
	return json.RawMessage(`{"survived": true}`), nil
}

// crashParams are the params of "innocent" and "poison".
type crashParams struct {
	Dir    string `json:"dir"`
	Others int    `json:"others"`
}

// crashPoll is how often "innocent" and "poison" look at their directory.
const crashPoll = 10 * time.Millisecond

// innocent marks its start in params.dir and blocks until params.dir/release
// exists (or its context ends).
func innocent(ctx context.Context, task core.Task) (json.RawMessage, error) {
	var p crashParams
	if err := json.Unmarshal(task.Params, &p); err != nil || p.Dir == "" {
		return nil, core.Permanent(fmt.Errorf("innocent: params need a dir: %s (%v)", task.Params, err))
	}
	mark := filepath.Join(p.Dir, fmt.Sprintf("started-%s-%d", task.TaskRunID, task.Attempt))
	if err := os.WriteFile(mark, nil, 0o644); err != nil {
		return nil, fmt.Errorf("innocent: %w", err)
	}
	for !exists(filepath.Join(p.Dir, "release")) {
		select {
		case <-ctx.Done():
			return nil, context.Cause(ctx)
		case <-time.After(crashPoll):
		}
	}
	return json.RawMessage(fmt.Sprintf(`{"attempt": %d}`, task.Attempt)), nil
}

// poison kills its own process (the worker) with SIGKILL once params.others
// innocent tasks have started or params.dir/release exists.
func poison(ctx context.Context, task core.Task) (json.RawMessage, error) {
	var p crashParams
	if err := json.Unmarshal(task.Params, &p); err != nil || p.Dir == "" {
		return nil, core.Permanent(fmt.Errorf("poison: params need a dir: %s (%v)", task.Params, err))
	}
	for {
		started, err := filepath.Glob(filepath.Join(p.Dir, "started-*"))
		if err != nil {
			return nil, fmt.Errorf("poison: %w", err)
		}
		if len(started) >= p.Others || exists(filepath.Join(p.Dir, "release")) {
			break
		}
		select {
		case <-ctx.Done():
			return nil, context.Cause(ctx)
		case <-time.After(crashPoll):
		}
	}
	if err := syscall.Kill(os.Getpid(), syscall.SIGKILL); err != nil {
		return nil, fmt.Errorf("poison: kill its worker: %w", err)
	}
	<-ctx.Done() // the signal ends the process first
	return nil, context.Cause(ctx)
}

// exists reports whether path exists.
func exists(path string) bool {
	_, err := os.Stat(path)
	return !errors.Is(err, os.ErrNotExist)
}
