package cli_test

import (
	"encoding/json"
	"regexp"
	"strings"
	"testing"
)

const (
	rollbackGood = "name: bill\ntasks:\n  - {name: charge, handler: sleep, params: {duration: 1ms}, retry: {max_attempts: 7}, timeout: 45s}\n"
	rollbackBad  = "name: bill\ntasks:\n  - {name: charge, handler: nop}\n"
)

// workflowEvents counts the rows of workflow_events (not in the harness's
// snapshot tables).
func (h *harness) workflowEvents() int {
	h.t.Helper()
	var n int
	if err := h.db.QueryRowContext(h.ctx, `SELECT count(*) FROM workflow_events`).Scan(&n); err != nil {
		h.t.Fatal(err)
	}
	return n
}

// TestWorkflowRollbackMakesAnOldVersionTheNewestAgain (issue 23, hazard 1):
// after a typo'd handler became version 2, `workflow rollback --to-version
// 1` stores version 3 with version 1's definition, says so, and `workflow
// show` lists the rollback (who, when, why; table and JSON); the next
// trigger makes a run of version 3; the bad version's runs keep version 2.
func TestWorkflowRollbackMakesAnOldVersionTheNewestAgain(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.apply(rollbackGood)
	h.liveWorker("w1", "noop", "sleep")
	if r := h.ffIn(rollbackBad, "workflow", "apply", "-f", "-", "--allow-unknown-handler"); r.code != 0 {
		t.Fatal(r)
	}
	badRun := h.trigger("bill")

	r := h.ff("workflow", "rollback", "bill", "--to-version", "1", "--reason", "v2 names handler nop")
	if r.code != 0 || r.stderr != "" {
		t.Fatal(r)
	}
	line := regexp.MustCompile(`version 3: rollback of version 1 by cli:[^ ]+@[^ ]* at \d{4}-\d\d-\d\d \d\d:\d\d:\d\d: v2 names handler nop\n`)
	if !strings.HasPrefix(r.stdout, "workflow bill: stored version 3 (1 tasks), the definition of version 1 (the newest was version 2)\n") ||
		!line.MatchString(r.stdout) || !strings.Contains(r.stdout, "Runs already made keep their version; schedules are unchanged.\n") {
		t.Fatalf("rollback output:\n%s", r.stdout)
	}
	show := h.must("workflow", "show", "bill").stdout
	if !strings.HasPrefix(show, "workflow bill version 3 ") || !line.MatchString(show) ||
		!strings.Contains(show, "charge  sleep    -           7             1s (default)     1m (default)  45s") {
		t.Fatalf("show after the rollback:\n%s", show)
	}
	var v struct {
		Version int `json:"version"`
		Events  []struct {
			Workflow    string `json:"workflow"`
			Action      string `json:"action"`
			Version     int    `json:"version"`
			FromVersion int    `json:"from_version"`
			ToVersion   int    `json:"to_version"`
			By          string `json:"by"`
			Reason      string `json:"reason"`
			At          string `json:"at"`
		} `json:"events"`
	}
	js := h.must("workflow", "show", "bill", "--version", "1", "-o", "json").stdout
	if err := json.Unmarshal([]byte(js), &v); err != nil || v.Version != 1 || len(v.Events) != 1 {
		t.Fatalf("%v\n%s", err, js)
	}
	e := v.Events[0]
	if e.Workflow != "bill" || e.Action != "rollback" || e.Version != 3 || e.FromVersion != 2 || e.ToVersion != 1 ||
		!strings.HasPrefix(e.By, "cli:") || e.Reason != "v2 names handler nop" || e.At == "" {
		t.Fatalf("event %+v", e)
	}
	if got := h.run(h.trigger("bill")).WorkflowVersion; got != 3 {
		t.Fatalf("a trigger after the rollback made a run of version %d, want 3", got)
	}
	if got := h.run(badRun).WorkflowVersion; got != 2 {
		t.Fatalf("the bad version's run is of version %d now, want 2 (runs keep their version)", got)
	}
	// JSON output of the command itself.
	h.ffIn(rollbackBad, "workflow", "apply", "-f", "-", "--allow-unknown-handler")
	r = h.ff("workflow", "rollback", "bill", "--to-version", "3", "--reason", "again", "-o", "json")
	if r.code != 0 || !strings.Contains(r.stdout, `"version": 5`) || !strings.Contains(r.stdout, `"to_version": 3`) || !strings.Contains(r.stdout, `"warnings": []`) {
		t.Fatalf("rollback -o json: %s", r)
	}
}

// TestWorkflowRollbackRefusesBadInput: every error of `workflow rollback`
// exits with its code and message, and writes nothing.
func TestWorkflowRollbackRefusesBadInput(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.apply(rollbackBad) // version 1 names nop; no worker seen yet
	h.apply(rollbackGood)
	h.must("workflow", "rollback", "bill", "--to-version", "1", "--reason", "setup") // version 3 = 1, with a warning
	h.apply(rollbackGood)                                                            // version 4 = 2
	h.liveWorker("w1", "noop", "sleep")
	rb := func(args ...string) []string { return append([]string{"workflow", "rollback"}, args...) }
	cases := []struct {
		name string
		args []string
		code int
		want string
	}{
		{"unknown workflow", rb("nobody", "--to-version", "1", "--reason", "r"), 1, `ffctl: workflow "nobody": not found`},
		{"unknown version", rb("bill", "--to-version", "9", "--reason", "r"), 1, `ffctl: workflow "bill" has no version 9 (its versions are 1 to 4): not found`},
		{"the newest", rb("bill", "--to-version", "4", "--reason", "r"), 2, "ffctl: workflow bill: version 4 is already the newest: nothing to roll back"},
		{"the newest's definition", rb("bill", "--to-version", "2", "--reason", "r"), 2, `version 2's definition is already the newest's (version 4) (nothing stored)`},
		{"missing reason", rb("bill", "--to-version", "2"), 2, "ffctl: --reason is required: say why the workflow is rolled back (it is audited)"},
		{"blank reason", rb("bill", "--to-version", "2", "--reason", "  "), 2, "ffctl: --reason is required"},
		{"missing version", rb("bill", "--reason", "r"), 2, "ffctl: workflow rollback needs --to-version N"},
		{"version 0", rb("bill", "--to-version", "0", "--reason", "r"), 2, "ffctl: --to-version 0: versions start at 1"},
		{"negative version", rb("bill", "--to-version=-1", "--reason", "r"), 2, "ffctl: --to-version -1: versions start at 1"},
		{"not a number", rb("bill", "--to-version", "two", "--reason", "r"), 2, `ffctl: --to-version "two": not a version number (a whole number, 1 or more)`},
		{"a fraction", rb("bill", "--to-version", "1.5", "--reason", "r"), 2, `ffctl: --to-version "1.5": not a version number`},
		{"no name", rb("--to-version", "1", "--reason", "r"), 2, "ffctl: workflow rollback takes one workflow name"},
		{"two names", rb("bill", "other", "--to-version", "1", "--reason", "r"), 2, "ffctl: workflow rollback takes one workflow name"},
		{"bad name", rb("Bill!", "--to-version", "1", "--reason", "r"), 2, `ffctl: invalid workflow: workflow name "Bill!" must match`},
		{"unknown handler", rb("bill", "--to-version", "1", "--reason", "r"), 2,
			"ffctl: workflow bill version 1: task charge: handler nop is registered by none of the 1 workers seen in the last 10 min (they register: noop, sleep); nothing stored: fix the handler name, start a worker that registers it, or pass --allow-unknown-handler to store it anyway\n"},
	}
	before, events := h.snapshot(), h.workflowEvents()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := h.ff(c.args...)
			expect(t, r, c.code, c.want)
			if r.stdout != "" {
				t.Errorf("a refused rollback wrote to stdout:\n%s", r.stdout)
			}
		})
	}
	h.assertUnchanged(before)
	if n := h.workflowEvents(); n != events {
		t.Fatalf("%d workflow events after the refusals, want %d", n, events)
	}

	r := h.ff("workflow", "rollback", "bill", "--to-version", "1", "--reason", "r", "--allow-unknown-handler")
	if r.code != 0 || !strings.Contains(r.stdout, "stored version 5") ||
		!strings.Contains(r.stderr, "warning: handler nop (task charge): none of the 1 workers seen in the last 10 min registers it; they register: noop, sleep") {
		t.Fatalf("rollback --allow-unknown-handler: %s", r)
	}
}
