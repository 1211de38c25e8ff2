package store_test

import (
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/flowforge/flowforge/core"
	"github.com/flowforge/flowforge/core/store"
)

// TestAPassReportsThePromotionsOfTracedRunsOnly: a retry the pass makes
// READY is reported in AdvanceResult.Traced, with its dispatch (carrying
// the run's traceparent) and the attempt it is READY for, when its run is
// traced; an untraced run's retry is promoted as before and reported by
// nothing.
func TestAPassReportsThePromotionsOfTracedRunsOnly(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.apply("name: traced-retry\ntasks:\n  - {name: a, handler: fail, retry: {max_attempts: 3, initial_backoff: 10ms, max_backoff: 10ms}}\n")
	const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	for _, traceparent := range []string{tp, ""} {
		res, err := f.s.Trigger(f.ctx, store.TriggerRequest{Workflow: "traced-retry", Traceparent: traceparent})
		if err != nil {
			t.Fatal(err)
		}
		id := f.taskID(res.RunID, "a")
		c := f.claim(id, "w1", time.Minute)
		if st := f.finish(c, store.FinishRequest{Outcome: store.OutcomeFailed, Error: "x", RetryDelay: 10 * time.Millisecond}); st != core.TaskRetrying {
			t.Fatalf("finish: %s, want RETRYING", st)
		}
		f.waitRetryDue(id)
		pass, err := f.s.AdvanceRuns(f.ctx, []uuid.UUID{res.RunID}, "test-scheduler")
		if err != nil {
			t.Fatal(err)
		}
		if pass.RetriesDue != 1 {
			t.Fatalf("the pass made %d retries READY, want 1", pass.RetriesDue)
		}
		if traceparent == "" {
			if pass.Traced != nil {
				t.Fatalf("an untraced run's promotion reported: %+v", pass.Traced)
			}
			continue
		}
		if len(pass.Traced) != 1 {
			t.Fatalf("Traced = %+v, want the one retry", pass.Traced)
		}
		d, err := core.DecodeDispatch(pass.Traced[0].Dispatch)
		if err != nil || d.TaskRunID != id || d.Traceparent != tp || pass.Traced[0].Attempt != 2 {
			t.Fatalf("Traced[0] = %s attempt %d (%v), want task %s's dispatch with %s, attempt 2", pass.Traced[0].Dispatch, pass.Traced[0].Attempt, err, id, tp)
		}
	}
}
