package cli_test

import (
	"regexp"
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/flowforge/flowforge/core"
)

// rerunOut is the part of the run JSON the rerun tests read.
type rerunOut struct {
	ID              string         `json:"id"`
	WorkflowVersion int            `json:"workflow_version"`
	State           string         `json:"state"`
	Params          map[string]any `json:"params"`
	IdempotencyKey  *string        `json:"idempotency_key"`
	RerunOf         *struct {
		RunID   string  `json:"run_id"`
		By      string  `json:"by"`
		Reason  string  `json:"reason"`
		At      string  `json:"at"`
		State   *string `json:"state"`
		Deleted bool    `json:"deleted"`
	} `json:"rerun_of"`
	Reruns []struct {
		RunID  string `json:"run_id"`
		By     string `json:"by"`
		Reason string `json:"reason"`
		State  string `json:"state"`
	} `json:"reruns"`
	RerunsTotal int `json:"reruns_total"`
}

// TestRunRerunPrintsTheNewRunAndRunShowLinksTheTwo: the new run's id alone
// on stdout (from an id prefix, as run show resolves it); run show of the
// new run says what it reruns, by whom, when and why; run show of the old
// one lists its reruns; -o json of both commands carries the same; the new
// run has the old one's version and params, not the newest version, and no
// idempotency key.
func TestRunRerunPrintsTheNewRunAndRunShowLinksTheTwo(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.apply(twoStep)
	old := h.must("run", "trigger", "twostep", "--param", "date=2026-11-30", "--idempotency-key", "nightly-1").stdout
	old = strings.TrimSpace(old)
	oldID := uuid.MustParse(old)
	h.succeed(h.taskID(oldID, "a"))
	h.advance()
	h.kill(h.taskID(oldID, "b"), "boom")
	h.advance()
	h.apply("name: twostep\ntasks:\n  - {name: other, handler: noop}\n")

	r := h.must("run", "rerun", old[:8], "--reason", "upstream fixed")
	if !uuidLine.MatchString(r.stdout) || r.stderr != "" {
		t.Fatalf("rerun output %q (stderr %q), want one run id", r.stdout, r.stderr)
	}
	newID := strings.TrimSpace(r.stdout)
	by := regexp.QuoteMeta("(by cli:") + `[^@ ]+@[^ ]* at \d{4}-\d\d-\d\d \d\d:\d\d:\d\d: `
	show := h.must("run", "show", newID).stdout
	if !regexp.MustCompile(`(?m)^  rerun of  `+old+` `+by+`upstream fixed\)$`).MatchString(show) || !strings.Contains(show, "(version 1)") {
		t.Fatalf("run show of the rerun:\n%s", show)
	}
	show = h.must("run", "show", old).stdout
	if !regexp.MustCompile(`(?m)^  reruns   ` + newID + ` ` + by + `upstream fixed\), RUNNING$`).MatchString(show) {
		t.Fatalf("run show of the old run:\n%s", show)
	}

	second := decode[rerunOut](t, h.must("run", "rerun", old, "--reason", "typed twice", "-o", "json").stdout)
	if second.ID == newID || second.WorkflowVersion != 1 || second.Params["date"] != "2026-11-30" || second.IdempotencyKey != nil ||
		second.RerunOf == nil || second.RerunOf.RunID != old || second.RerunOf.Reason != "typed twice" ||
		!strings.HasPrefix(second.RerunOf.By, "cli:") || second.RerunOf.State == nil || *second.RerunOf.State != "FAILED" {
		t.Fatalf("rerun -o json: %+v", second)
	}
	got := decode[rerunOut](t, h.must("run", "show", old, "-o", "json").stdout)
	if got.RerunOf != nil || got.RerunsTotal != 2 || len(got.Reruns) != 2 || got.Reruns[0].RunID != second.ID || got.Reruns[1].RunID != newID {
		t.Fatalf("run show -o json of the old run: %+v", got)
	}
}

// TestARerunOfARunThatHasNotEndedNeedsForce: refused (exit 1, nothing
// written) with what to do; with --force it is rerun.
func TestARerunOfARunThatHasNotEndedNeedsForce(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.apply(twoStep)
	open := h.trigger("twostep")
	before := h.snapshot()
	r := h.ff("run", "rerun", open.String(), "--reason", "r")
	expect(t, r, 1, "run "+open.String()+" is RUNNING: run has not ended: a rerun would run alongside it", "--force")
	if r.stdout != "" {
		t.Fatalf("stdout %q", r.stdout)
	}
	h.assertUnchanged(before)
	r = h.must("run", "rerun", open.String(), "--reason", "r", "--force")
	if got := h.run(uuid.MustParse(strings.TrimSpace(r.stdout))); got.RerunOf == nil || got.RerunOf.RunID != open {
		t.Fatalf("forced rerun: %+v", got.RerunOf)
	}
}

// TestRunRerunBadInputIsRefusedAndWritesNothing: every bad input is a
// usage error (exit 2) or a refusal (exit 1: not found; 3: the workflow
// is paused with mode drop, as run trigger), says what is wrong, prints
// nothing on stdout and writes nothing.
func TestRunRerunBadInputIsRefusedAndWritesNothing(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	old, dead := h.deadRun()
	h.apply("name: one\ntasks:\n  - {name: a, handler: noop}\n")
	if _, err := h.db.ExecContext(h.ctx, `INSERT INTO workflow_runs (id, workflow_id, workflow_name, workflow_version, state)
SELECT v.id::uuid, w.id, 'one', 1, 'SUCCEEDED' FROM workflows w,
       (VALUES ('abcdef01-0000-4000-8000-000000000001'), ('abcdef02-0000-4000-8000-000000000002')) v(id) WHERE w.name = 'one'`); err != nil {
		t.Fatal(err)
	}
	const nilRun = "00000000-0000-0000-0000-000000000000"
	unknown := uuid.New().String()
	cases := []struct {
		name string
		args []string
		code int
		want string
	}{
		{"no id", []string{"run", "rerun", "--reason", "r"}, 2, "expected exactly one run id"},
		{"two ids", []string{"run", "rerun", old.String(), old.String(), "--reason", "r"}, 2, "expected exactly one run id"},
		{"malformed id", []string{"run", "rerun", "nope", "--reason", "r"}, 2, `malformed run id "nope"`},
		{"short prefix", []string{"run", "rerun", "abcde", "--reason", "r"}, 2, `malformed run id "abcde"`},
		{"nil id", []string{"run", "rerun", nilRun, "--reason", "r"}, 2, "nil UUID"},
		{"ambiguous prefix", []string{"run", "rerun", "abcdef0", "--reason", "r"}, 2, "run id prefix abcdef0 is ambiguous"},
		{"a task id", []string{"run", "rerun", dead.String(), "--reason", "r"}, 2, "is a task id, not a run id"},
		{"unknown id", []string{"run", "rerun", unknown, "--reason", "r"}, 1, "not found"},
		{"no reason", []string{"run", "rerun", old.String()}, 2, "--reason is required: say why the run is rerun"},
		{"blank reason", []string{"run", "rerun", old.String(), "--reason", "  "}, 2, "--reason is required"},
		{"bad output", []string{"run", "rerun", old.String(), "--reason", "r", "-o", "yaml"}, 2, `-o "yaml": want table or json`},
		{"unknown flag", []string{"run", "rerun", old.String(), "--reason", "r", "--wait"}, 2, "flag provided but not defined: --wait"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			before := h.snapshot()
			r := h.ff(tc.args...)
			expect(t, r, tc.code, tc.want)
			if r.stdout != "" {
				t.Fatalf("a refused rerun printed %q", r.stdout)
			}
			h.assertUnchanged(before)
		})
	}
	// A drop pause: exit 3, no run (the drop is counted on the pause, as
	// for a trigger).
	h.must("workflow", "pause", "twostep", "--mode", "drop", "--reason", "maintenance")
	runs := h.runCount()
	r := h.ff("run", "rerun", old.String(), "--reason", "r")
	expect(t, r, 3, "workflow is paused (mode drop)", "ffctl workflow resume twostep")
	if r.stdout != "" || h.runCount() != runs {
		t.Fatalf("a dropped rerun printed %q or created a run", r.stdout)
	}
	if p, _, err := h.s.WorkflowPause(h.ctx, "twostep"); err != nil || p.Dropped != 1 {
		t.Fatalf("pause: dropped %d (%v), want 1", p.Dropped, err)
	}
}

// TestARerunWhoseRunWasDeletedStillSaysWhatItReruns: run delete of the
// old run is not held back by its rerun, and run show of the rerun then
// says the old run is gone.
func TestARerunWhoseRunWasDeletedStillSaysWhatItReruns(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	old, _ := h.deadRun()
	newID := strings.TrimSpace(h.must("run", "rerun", old.String(), "--reason", "try again").stdout)
	h.must("run", "delete", old.String(), "--include-dead", "--reason", "clean up")
	show := h.must("run", "show", newID).stdout
	if !strings.Contains(show, "  rerun of  "+old.String()+" (by cli:") || !strings.Contains(show, ": try again); that run has since been deleted\n") {
		t.Fatalf("run show of a rerun of a deleted run:\n%s", show)
	}
	got := decode[rerunOut](t, h.must("run", "show", newID, "-o", "json").stdout)
	if got.RerunOf == nil || got.RerunOf.RunID != old.String() || !got.RerunOf.Deleted || got.RerunOf.State != nil {
		t.Fatalf("rerun_of of a deleted run: %+v", got.RerunOf)
	}
	if st := h.run(uuid.MustParse(newID)).State; st != core.RunRunning {
		t.Fatalf("the rerun is %s, want RUNNING", st)
	}
}
