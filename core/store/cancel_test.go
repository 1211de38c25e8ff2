package store_test

import (
	"testing"
	"time"

	"github.com/flowforge/flowforge/core"
	"github.com/flowforge/flowforge/core/store"
)

// waitBlocked polls until n sessions of this test (same application name,
// see storetest) wait on a lock.
func (f *fixture) waitBlocked(n int) {
	f.t.Helper()
	f.waitDB("sessions to block on a lock",
		`SELECT count(*) >= $1 FROM pg_stat_activity
		  WHERE datname = current_database() AND application_name = current_setting('application_name') AND wait_event_type = 'Lock'`, n)
}

// TestCancelRunRacingAPromotionCancelsThePromotedTasks drives, step by
// step, a scheduler pass that promotes tasks while an operator cancels the
// run: CancelRun waits for the run row the pass holds, then cancels the
// tasks in a second statement whose snapshot includes the promotion, so the
// promoted tasks end CANCELLED and no worker can claim them. (A single
// statement would have taken its snapshot before the pass committed and
// missed them: the bug this test was written for.)
func TestCancelRunRacingAPromotionCancelsThePromotedTasks(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.apply(diamond)
	runID := f.trigger("diamond", "")
	ts := f.tasks(runID)
	f.runTask(ts["a"].ID) // b and c are now eligible

	// Hold c's row so the scheduler pass stops inside qPromote, holding the
	// run's lock.
	hold, err := f.db.BeginTx(f.ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { hold.Rollback() })
	if _, err := hold.ExecContext(f.ctx, `SELECT 1 FROM task_runs WHERE id = $1 FOR UPDATE`, ts["c"].ID); err != nil {
		t.Fatal(err)
	}
	advanced := f.advanceInBackground()
	f.waitBlocked(1)
	type cancelOut struct {
		res store.CancelResult
		err error
	}
	cancelled := make(chan cancelOut, 1)
	go func() {
		res, err := f.s.CancelRun(f.ctx, runID, "alice", "stop")
		cancelled <- cancelOut{res, err}
	}()
	f.waitBlocked(2)
	if err := hold.Commit(); err != nil {
		t.Fatal(err)
	}
	if err := <-advanced; err != nil {
		t.Fatalf("advance: %v", err)
	}
	co := <-cancelled
	if co.err != nil {
		t.Fatalf("cancel: %v", co.err)
	}
	// The cancel itself caught the promoted tasks: no later pass is needed.
	if co.res.TasksCancelled != 3 {
		t.Errorf("cancel reported %d tasks cancelled, want 3 (b and c promoted by the pass, d)", co.res.TasksCancelled)
	}
	for _, n := range []string{"b", "c", "d"} {
		if st, _ := f.state(ts[n].ID); st != core.TaskCancelled {
			t.Errorf("task %s is %s when the cancel returned", n, st)
		}
	}
	f.advance()
	for _, n := range []string{"b", "c", "d"} {
		st, tok := f.state(ts[n].ID)
		if st != core.TaskCancelled {
			t.Errorf("task %s is %s after the run was cancelled (cancel reported %d tasks)", n, st, co.res.TasksCancelled)
			if st == core.TaskReady {
				if _, ok, _ := f.s.Claim(f.ctx, ts[n].ID, tok, "w", time.Minute); ok {
					t.Errorf("task %s of a cancelled run was claimed", n)
				}
			}
		}
	}
}
