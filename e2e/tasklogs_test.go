package e2e

// Per-task logs (issue 28) through real processes: `ffctl daemon all`
// stores a handler's core.Logger lines and a shell command's output per
// attempt; `ffctl task logs` reads them; a deleted run takes them along.

import (
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/flowforge/flowforge/core/store"
	"github.com/flowforge/flowforge/e2e/harness"
)

// TestTaskLogsOfARealWorkerAcrossARetry: a noop task logging 3 lines and a
// shell task whose attempt 1 fails and attempt 2 succeeds, on `daemon all
// --allow-shell`: `task logs` prints each attempt's lines (the shell's
// attempt 1 kept beside attempt 2), --attempt selects one, --follow of an
// ended task exits 0 at once, and `run delete` leaves no line behind.
func TestTaskLogsOfARealWorkerAcrossARetry(t *testing.T) {
	s := harness.NewStack(t, harness.StackOptions{})
	s.Daemon(t, "all", "all", "--allow-shell")
	s.Apply(t, `
name: logged
tasks:
  - {name: quiet, handler: noop, params: {log_lines: 3}}
  - name: flaky
    handler: shell
    params: {command: [sh, -c, 'echo "try $FLOWFORGE_ATTEMPT"; test "$FLOWFORGE_ATTEMPT" = 2 || { echo no >&2; exit 1; }']}
    retry: {max_attempts: 2, initial_backoff: 50ms, max_backoff: 50ms}
`)
	run := s.Trigger(t, "logged")
	r := s.WaitRunTerminal(t, run, 60*time.Second)
	if r.State != "SUCCEEDED" {
		t.Fatalf("run %s, want SUCCEEDED", r.State)
	}
	flaky, _, _ := r.Task(t, "flaky")
	quiet, _, _ := r.Task(t, "quiet")
	type line struct {
		Attempt int    `json:"attempt"`
		Stream  string `json:"stream"`
		Level   string `json:"level"`
		Line    string `json:"line"`
	}
	read := func(args ...string) []string {
		out, errOut, code := s.CLI(t, append([]string{"task", "logs", "-o", "json"}, args...)...)
		if code != 0 {
			t.Fatalf("task logs %v: exit %d: %s", args, code, errOut)
		}
		var lines []line
		if err := json.Unmarshal([]byte(out), &lines); err != nil {
			t.Fatalf("task logs %v: %v: %s", args, err, out)
		}
		var got []string
		for _, l := range lines {
			got = append(got, strings.Join(slices.DeleteFunc([]string{strconv.Itoa(l.Attempt), l.Stream, l.Level, l.Line}, func(f string) bool { return f == "" }), " "))
		}
		slices.Sort(got) // stdout and stderr are read apart: their order is not fixed; attempts sort first
		return got
	}
	want := map[string]string{
		flaky: "1 stderr no|1 stdout try 1|2 stdout try 2",
		quiet: "1 log INFO noop: line 1 of 3|1 log INFO noop: line 2 of 3|1 log INFO noop: line 3 of 3",
	}
	for id, w := range want {
		// The lines commit beside the finish: poll for them.
		harness.Eventually(t, 20*time.Second, "the task log of "+id, func() (bool, error) {
			if got := strings.Join(read(id), "|"); got != w {
				return false, fmt.Errorf("lines %q, want %q", got, w)
			}
			return true, nil
		})
	}
	if got := strings.Join(read(flaky, "--attempt", "2"), "|"); got != "2 stdout try 2" {
		t.Fatalf("--attempt 2: %q", got)
	}
	out, errOut, code := s.CLI(t, "task", "logs", flaky[:8], "--follow")
	if code != 0 || !strings.Contains(out, "#1 stderr  no\n") || !strings.HasSuffix(out, "#2 stdout  try 2\n") {
		t.Fatalf("task logs --follow of an ended task: exit %d\n%s\n%s", code, out, errOut)
	}
	if _, errOut, code := s.CLI(t, "run", "delete", run, "--reason", "test"); code != 0 {
		t.Fatalf("run delete: exit %d: %s", code, errOut)
	}
	for id := range want {
		lines, err := s.Store.TaskLogs(t.Context(), store.TaskLogQuery{TaskRunID: uuid.MustParse(id)})
		if err != nil || len(lines) != 0 {
			t.Fatalf("task %s: %d log lines left after run delete (%v), want none", id, len(lines), err)
		}
	}
}
