package cli_test

import (
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
)

// waitResult is the outcome of an ffctl invocation running in the
// background.
func (h *harness) background(args ...string) <-chan result {
	ch := make(chan result, 1)
	go func() { ch <- h.ff(args...) }()
	return ch
}

func TestRunWaitFollowsTheRunToSuccess(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.apply(twoStep)
	runID := h.trigger("twostep")
	done := h.background("run", "wait", runID.String(), "--timeout", "60s", "-o", "json")
	h.succeed(h.taskID(runID, "a"))
	h.advance()
	b := h.taskID(runID, "b")
	h.succeed(b)
	h.advance()
	var r result
	select {
	case r = <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("run wait did not return after the run SUCCEEDED")
	}
	if r.code != 0 {
		t.Fatalf("run wait: %s", r)
	}
	if run := decode[runOut](t, r.stdout); run.State != "SUCCEEDED" || run.TasksDone != 2 {
		t.Fatalf("run wait JSON: %+v", run)
	}
	if r.stderr != "" {
		t.Fatalf("run wait is not quiet when piped: %q", r.stderr)
	}
}

func TestTriggerWaitExitsOneWhenTheRunFails(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.apply(twoStep)
	done := h.background("run", "trigger", "twostep", "--wait", "--timeout", "60s")
	var runID uuid.UUID
	eventually(t, 10*time.Second, "the triggered run", func() bool {
		var id string
		if err := h.db.QueryRowContext(h.ctx, `SELECT id FROM workflow_runs`).Scan(&id); err != nil {
			return false
		}
		runID = uuid.MustParse(id)
		return true
	})
	h.succeed(h.taskID(runID, "a"))
	h.advance()
	h.kill(h.taskID(runID, "b"), "upstream said no")
	h.advance()
	r := <-done
	expect(t, r, 1, "run "+runID.String()+" ended FAILED")
	// The whole run id comes first, before the wait (issue 11).
	if !strings.HasPrefix(r.stderr, "run "+runID.String()+" triggered; waiting for it to end (ctrl-C stops waiting, not the run)\n") {
		t.Fatalf("trigger --wait does not name the run before waiting:\n%s", r)
	}
	if !strings.Contains(r.stdout, "state     FAILED") || !strings.Contains(r.stdout, "upstream said no") {
		t.Fatalf("trigger --wait output:\n%s", r)
	}
}

func TestRunWaitWaitsUntilAFailedRunSettles(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.apply("name: pair\ntasks:\n  - {name: bad, handler: fail}\n  - {name: good, handler: noop}\n")
	runID := h.trigger("pair")
	h.kill(h.taskID(runID, "bad"), "nope")
	h.advance()
	if r := h.run(runID); r.State != "FAILED" || r.FinishedAt != nil {
		t.Fatalf("run %s finished %v, want FAILED and still open (good is READY)", r.State, r.FinishedAt)
	}
	// FAILED but not ended: "good" may still run.
	r := h.ff("run", "wait", runID.String(), "--timeout", "500ms")
	expect(t, r, 1, "timed out after 500ms waiting for run "+runID.String()+" (state FAILED, 1/2 tasks done)")
	h.succeed(h.taskID(runID, "good"))
	h.advance()
	r = h.ff("run", "wait", runID.String(), "--timeout", "30s")
	expect(t, r, 1, "ended FAILED")
}

func TestRunWaitTimeoutLeavesTheRunAlone(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.apply(twoStep)
	runID := h.trigger("twostep")
	before := h.snapshot()
	start := time.Now()
	r := h.ff("run", "wait", runID.String(), "--timeout", "250ms", "-o", "json")
	expect(t, r, 1, "timed out after 250ms waiting for run "+runID.String(), "the run was not touched")
	if el := time.Since(start); el > 10*time.Second {
		t.Fatalf("--timeout 250ms took %s", el)
	}
	if r.stdout != "" {
		t.Fatalf("timed-out wait printed %q", r.stdout)
	}
	h.assertUnchanged(before)
	// trigger --wait times out the same way, after creating its run.
	r = h.ff("run", "trigger", "twostep", "--wait", "--timeout", "200ms")
	expect(t, r, 1, "timed out after 200ms", "the run was not touched")
}
