package store_test

import (
	"errors"
	"testing"
	"time"

	"github.com/google/uuid"

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
	f.runTaskUncounted(ts["a"].ID) // b and c are now eligible

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

func TestCancelRunCancelsWhatHasNotStarted(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.apply(`
name: cancel
tasks:
  - {name: ready, handler: noop}
  - {name: pending, handler: noop, depends_on: [ready]}
  - {name: retrying, handler: noop}
  - {name: done, handler: noop}
`)
	runID := f.trigger("cancel", "")
	ts := f.tasks(runID)
	c := f.claim(ts["retrying"].ID, "w1", time.Minute)
	f.finish(c, store.FinishRequest{Outcome: store.OutcomeFailed, Error: "x", RetryDelay: time.Millisecond})
	f.runTask(ts["done"].ID)
	f.waitRetryDue(ts["retrying"].ID)
	res, err := f.s.CancelRun(f.ctx, runID, "alice", "wrong day")
	if err != nil || res.TasksCancelled != 3 {
		t.Fatalf("cancel: %+v %v; want 3 tasks cancelled", res, err)
	}
	for _, n := range []string{"ready", "pending", "retrying"} {
		d := f.task(ts[n].ID)
		last := d.Events[len(d.Events)-1]
		if d.State != "CANCELLED" || last.Actor != "alice" || last.Reason == nil || *last.Reason != "run cancelled: wrong day" {
			t.Fatalf("%s: state %s, last event %+v", n, d.State, last)
		}
	}
	f.wantState(ts["done"].ID, core.TaskSucceeded)
	// The due retry must not come back, and nothing is promoted.
	if r := f.advance(); r.Promoted+r.RetriesDue != 0 {
		t.Fatalf("advance after cancel: %+v", r)
	}
	r := f.run(runID)
	if r.State != "CANCELLED" || r.FinishedAt == nil || r.CancelRequestedAt == nil {
		t.Fatalf("run %s finished %v", r.State, r.FinishedAt)
	}
	if _, err := f.s.CancelRun(f.ctx, runID, "alice", "again"); !errors.Is(err, store.ErrRunFinished) {
		t.Fatalf("second cancel: %v, want ErrRunFinished", err)
	}
}

func TestCancelRunRefusesFinishedAndUnknownRuns(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.apply(oneTask)
	runID := f.trigger("one", "")
	f.runTask(f.taskID(runID, "a"))
	f.advance()
	if r := f.run(runID); r.State != "SUCCEEDED" {
		t.Fatalf("run %s", r.State)
	}
	if _, err := f.s.CancelRun(f.ctx, runID, "alice", "late"); !errors.Is(err, store.ErrRunFinished) {
		t.Fatalf("cancel of a SUCCEEDED run: %v, want ErrRunFinished", err)
	}
	if r := f.run(runID); r.CancelRequestedAt != nil || r.State != "SUCCEEDED" {
		t.Fatalf("a refused cancel changed the run: %+v", r)
	}
	if _, err := f.s.CancelRun(f.ctx, uuid.New(), "alice", "x"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("cancel of an unknown run: %v, want ErrNotFound", err)
	}
}

// TestCancelledRunSettlesWhenItsRunningTaskFails: a task RUNNING when its
// run is cancelled may still end in RETRYING (its handler returned an
// ordinary error, or its worker died and the reaper found the lease).
// Nothing ever cancels that RETRYING task: Advance promotes and fail-fast
// cancels only runs without a cancel request, so the run stays open
// (finished_at NULL) and is re-examined by every scheduler pass forever.
func TestCancelledRunSettlesWhenItsRunningTaskFails(t *testing.T) {
	t.Parallel()
	for _, how := range []string{"finish", "reap"} {
		t.Run(how, func(t *testing.T) {
			f := newFixture(t)
			f.apply(oneTask)
			runID := f.trigger("one", "")
			id := f.taskID(runID, "a")
			lease := time.Minute
			if how == "reap" {
				lease = time.Millisecond
			}
			c := f.claim(id, "w1", lease)
			if _, err := f.s.CancelRun(f.ctx, runID, "alice", "stop"); err != nil {
				t.Fatal(err)
			}
			if how == "finish" {
				f.finish(c, store.FinishRequest{Outcome: store.OutcomeFailed, Error: "boom", RetryDelay: time.Millisecond})
			} else {
				f.waitLeaseExpired(id)
				if n, err := f.s.ReapExpired(f.ctx, 10, zeroBackoff, "reaper"); n != 1 || err != nil {
					t.Fatalf("reap: %d %v", n, err)
				}
			}
			f.waitRetryDue(id)
			f.advance()
			f.advance()
			st, _ := f.state(id)
			r := f.run(runID)
			if st != core.TaskCancelled || r.State != "CANCELLED" || r.FinishedAt == nil {
				t.Fatalf("task %s, run %s finished %v; want CANCELLED, CANCELLED and settled", st, r.State, r.FinishedAt)
			}
		})
	}
}
