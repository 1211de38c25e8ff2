package cli_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/flowforge/flowforge/core/store"
	"github.com/flowforge/flowforge/core/store/storetest"
	"github.com/flowforge/flowforge/daemon/handlers"
)

const shellOutputWorkflow = `name: shell-out
tasks:
  - {name: chatty, handler: shell, params: {command: [sh, -c, "seq 25"]}}
  - {name: quiet, handler: shell, params: {command: [echo, one]}}
  - {name: broke, handler: shell, params: {command: [sh, -c, "exit 3"]}}
`

// TestTaskShowPrintsTheLastLinesOfAShellTasksOutput: the table form of
// task show printed neither a shell task's stdout nor its stderr (issue
// 23: only -o json had them). Now it prints their last 10 lines each,
// counting the earlier ones, each line terminal-safe and cut at 200 runes,
// a carriage-return rewrite as its last state; and a failed task's error of
// several lines (a shell task's stderr tail) the same way.
func TestTaskShowPrintsTheLastLinesOfAShellTasksOutput(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.apply(shellOutputWorkflow)
	run := h.trigger("shell-out")

	var stdout strings.Builder
	for i := 1; i <= 22; i++ {
		fmt.Fprintf(&stdout, "line %d\n", i)
	}
	stdout.WriteString("evil \x1b[2J \u202eexe.txt \u009b end\n")
	stdout.WriteString("10%\r50%\r100%\n")
	stdout.WriteString(strings.Repeat("x", 300) + "\n")
	h.succeedWith(h.taskID(run, "chatty"), handlers.ShellResult{Stdout: stdout.String(), Stderr: "warn one\nwarn two\n"})
	h.succeedWith(h.taskID(run, "quiet"), handlers.ShellResult{Stdout: "one\n"})
	var errText strings.Builder
	errText.WriteString("shell: sh exited with code 3: e1")
	for i := 2; i <= 12; i++ {
		fmt.Fprintf(&errText, "\ne%d", i)
	}
	h.kill(h.taskID(run, "broke"), errText.String())

	for _, tc := range []struct {
		task string
		want string // from the end of the header to ATTEMPTS
	}{
		{"chatty", "\nSTDOUT\n  (15 earlier lines; -o json for all)\n" +
			"  line 16\n  line 17\n  line 18\n  line 19\n  line 20\n  line 21\n  line 22\n" +
			`  evil \x1b[2J \u202eexe.txt \u009b end` + "\n  100%\n  " + strings.Repeat("x", 199) + "…\n" +
			"\nSTDERR\n  warn one\n  warn two\n\nATTEMPTS\n"},
		{"quiet", "\nSTDOUT\n  one\n\nSTDERR (empty)\n\nATTEMPTS\n"},
		{"broke", "\nERROR\n  (2 earlier lines; -o json for all)\n  e3\n  e4\n  e5\n  e6\n  e7\n  e8\n  e9\n  e10\n  e11\n  e12\n\nATTEMPTS\n"},
	} {
		t.Run(tc.task, func(t *testing.T) {
			out := h.must("task", "show", h.taskID(run, tc.task).String()).stdout
			if raw := rawControls(out); len(raw) > 0 {
				t.Errorf("raw %U in the table:\n%q", raw, out)
			}
			_, rest, _ := strings.Cut(out, "\n  error     ")
			_, got, _ := strings.Cut(rest, "\n")
			got, _, _ = strings.Cut(got, "ATTEMPT  ")
			if got != tc.want {
				t.Fatalf("task show %s, after the header:\n%s\nwant:\n%s", tc.task, got, tc.want)
			}
		})
	}
	// -o json still holds the stored output whole.
	v := decode[struct {
		Result handlers.ShellResult `json:"result"`
	}](t, h.must("task", "show", h.taskID(run, "chatty").String(), "-o", "json").stdout)
	if v.Result.Stdout != stdout.String() {
		t.Fatalf("-o json stdout %q, want %q", v.Result.Stdout, stdout.String())
	}
}

// succeedWith claims a READY task and finishes it with res as its result.
func (h *harness) succeedWith(id uuid.UUID, res handlers.ShellResult) {
	h.t.Helper()
	b, err := json.Marshal(res)
	if err != nil {
		h.t.Fatal(err)
	}
	c := h.claim(id, "w-test")
	if _, ok := storetest.Finish(h.t, h.s, store.FinishRequest{ID: c.ID, Token: c.FencingToken, Outcome: store.OutcomeSucceeded,
		Result: b, WorkerID: "w-test"}); !ok {
		h.t.Fatalf("finish %s: lease lost", id)
	}
}
