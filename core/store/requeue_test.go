package store_test

import (
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/flowforge/flowforge/core"
	"github.com/flowforge/flowforge/core/store"
)

const twoStep = `
name: twostep
tasks:
  - {name: a, handler: noop}
  - {name: b, handler: fail, depends_on: [a], retry: {max_attempts: 2}}
`

// deadRun returns a run of twoStep whose b is DEAD and which has settled
// FAILED.
func (f *fixture) deadRun() (runID, b uuid.UUID) {
	f.t.Helper()
	f.apply(twoStep)
	runID = f.trigger("twostep", "")
	f.runTask(f.taskID(runID, "a"))
	f.advance()
	b = f.taskID(runID, "b")
	c := f.claim(b, "w1", time.Minute)
	if st := f.finish(c, store.FinishRequest{Outcome: store.OutcomeFailed, Error: "bad", Permanent: true}); st != core.TaskDead {
		f.t.Fatalf("b: %s", st)
	}
	f.advance()
	if r := f.run(runID); r.State != "FAILED" || r.FinishedAt == nil {
		f.t.Fatalf("run %s finished %v, want FAILED and settled", r.State, r.FinishedAt)
	}
	return runID, b
}

func TestRequeueReopensAFailedRun(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	runID, b := f.deadRun()
	before := f.task(b)
	if err := f.s.Requeue(f.ctx, b, "alice", "fixed the input"); err != nil {
		t.Fatalf("requeue: %v", err)
	}
	d := f.task(b)
	if d.State != "PENDING" || d.Attempt != 0 || d.FencingToken != before.FencingToken+1 || d.FinishedAt != nil || d.WorkerID != nil || d.StartedAt != nil {
		t.Fatalf("requeued task: %+v", d.TaskRun)
	}
	last := d.Events[len(d.Events)-1]
	if last.FromState == nil || *last.FromState != "DEAD" || last.ToState != "PENDING" || last.Actor != "alice" || last.Reason == nil || *last.Reason != "fixed the input" {
		t.Fatalf("audit event %+v", last)
	}
	if r := f.run(runID); r.FinishedAt != nil {
		t.Fatal("requeue did not reopen the run")
	}
	f.advance()
	if r := f.run(runID); r.State != "RUNNING" || r.FinishedAt != nil {
		t.Fatalf("run %s finished %v after requeue, want RUNNING and open", r.State, r.FinishedAt)
	}
	// A fresh budget of attempts.
	c := f.claim(b, "w2", time.Minute)
	if c.Attempt != 1 {
		t.Fatalf("attempt after requeue %d, want 1", c.Attempt)
	}
	f.succeed(c)
	f.advance()
	if r := f.run(runID); r.State != "SUCCEEDED" || r.FinishedAt == nil {
		t.Fatalf("run %s", r.State)
	}
}

func TestRequeueRefusesWhatIsNotDead(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.apply(`
name: mix
tasks:
  - {name: running, handler: noop}
  - {name: done, handler: noop}
  - {name: ready, handler: noop}
  - {name: pending, handler: noop, depends_on: [running]}
`)
	runID := f.trigger("mix", "")
	ts := f.tasks(runID)
	f.claim(ts["running"].ID, "w1", time.Minute)
	f.runTask(ts["done"].ID)
	for _, n := range []string{"running", "done", "ready", "pending"} {
		before := f.task(ts[n].ID)
		err := f.s.Requeue(f.ctx, ts[n].ID, "alice", "oops")
		if !errors.Is(err, store.ErrNotDead) {
			t.Fatalf("requeue %s: %v, want ErrNotDead", n, err)
		}
		after := f.task(ts[n].ID)
		if after.State != before.State || after.FencingToken != before.FencingToken || len(after.Events) != len(before.Events) {
			t.Fatalf("requeue of %s changed it: %+v -> %+v", n, before.TaskRun, after.TaskRun)
		}
	}
	if err := f.s.Requeue(f.ctx, uuid.New(), "alice", "oops"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("requeue of an unknown id: %v, want ErrNotFound", err)
	}
}

func TestRequeueOfACancelledRunsTaskIsRefused(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	runID, b := f.deadRun()
	if _, err := f.s.CancelRun(f.ctx, runID, "alice", "give up"); err != nil {
		t.Fatal(err)
	}
	if err := f.s.Requeue(f.ctx, b, "bob", "retry"); !errors.Is(err, store.ErrNotDead) {
		t.Fatalf("requeue: %v, want ErrNotDead", err)
	}
	f.wantState(b, core.TaskDead)
}

func TestConcurrentRequeuesOfOneTaskOnlyOneWins(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	_, b := f.deadRun()
	_, tok := f.state(b)
	var wins atomic.Int32
	together(20, func(int) {
		err := f.s.Requeue(f.ctx, b, "alice", "again")
		switch {
		case err == nil:
			wins.Add(1)
		case !errors.Is(err, store.ErrNotDead):
			t.Errorf("requeue: %v", err)
		}
	})
	if n := wins.Load(); n != 1 {
		t.Fatalf("%d requeues succeeded, want exactly 1", n)
	}
	if st, got := f.state(b); st != core.TaskPending || got != tok+1 {
		t.Fatalf("task %s token %d, want PENDING %d", st, got, tok+1)
	}
	if n := f.count(`SELECT count(*) FROM task_events WHERE task_run_id = $1 AND from_state = 'DEAD' AND to_state = 'PENDING'`, b); n != 1 {
		t.Fatalf("%d requeue events, want 1", n)
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

const failFastPair = `
name: ffpair
fail_fast: true
tasks:
  - {name: x, handler: fail, retry: {max_attempts: 1}}
  - {name: y, handler: fail, retry: {max_attempts: 1}}
  - {name: after, handler: noop, depends_on: [x]}
  - {name: sibling, handler: noop}
`

// failFastPairRun returns a run of failFastPair whose x and y are DEAD,
// whose task downstream of x is UPSTREAM_FAILED and whose other task
// fail_fast cancelled.
func (f *fixture) failFastPairRun() (uuid.UUID, map[string]store.TaskRun) {
	f.t.Helper()
	f.apply(failFastPair)
	runID := f.trigger("ffpair", "")
	ts := f.tasks(runID)
	for _, n := range []string{"x", "y"} {
		c := f.claim(ts[n].ID, "w", time.Minute)
		if st := f.finish(c, store.FinishRequest{Outcome: store.OutcomeFailed, Error: "boom " + n, Permanent: true}); st != core.TaskDead {
			f.t.Fatalf("%s: %s", n, st)
		}
	}
	f.advance()
	f.wantState(ts["after"].ID, core.TaskUpstreamFailed)
	f.wantState(ts["sibling"].ID, core.TaskCancelled)
	if r := f.run(runID); r.State != "FAILED" || r.FinishedAt == nil {
		f.t.Fatalf("run %s finished %v, want FAILED and settled", r.State, r.FinishedAt)
	}
	return runID, ts
}

// TestARequeueInAFailFastRunRequeuesTheWholeRun: with two DEAD tasks,
// requeueing one must not be undone by fail_fast for the other (the
// scheduler used to cancel it again at once, and a CANCELLED task can never
// be requeued): the requeue moves both DEAD tasks and the tasks fail_fast
// cancelled back to PENDING, and the run can then succeed.
func TestARequeueInAFailFastRunRequeuesTheWholeRun(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	runID, ts := f.failFastPairRun()
	if err := f.s.Requeue(f.ctx, ts["x"].ID, "alice", "fixed"); err != nil {
		t.Fatalf("requeue x: %v", err)
	}
	for _, n := range []string{"x", "y", "after", "sibling"} {
		d := f.task(ts[n].ID)
		if d.State != "PENDING" || d.Attempt != 0 || d.FencingToken <= ts[n].FencingToken {
			t.Fatalf("%s after the requeue: %s attempt %d token %d", n, d.State, d.Attempt, d.FencingToken)
		}
		last := d.Events[len(d.Events)-1]
		if last.ToState != "PENDING" || last.Actor != "alice" || last.Reason == nil || !strings.Contains(*last.Reason, "fixed") {
			t.Fatalf("%s audit event %+v", n, last)
		}
	}
	f.advance()
	for _, n := range []string{"x", "y", "sibling"} {
		f.wantState(ts[n].ID, core.TaskReady)
	}
	if err := f.s.Requeue(f.ctx, ts["y"].ID, "bob", "again"); !errors.Is(err, store.ErrNotDead) {
		t.Fatalf("requeue of y after the run was requeued: %v, want ErrNotDead", err)
	}
	f.wantState(ts["after"].ID, core.TaskPending)
	for _, n := range []string{"x", "y", "sibling"} {
		f.runTask(ts[n].ID)
	}
	f.advance()
	f.runTask(ts["after"].ID)
	f.advance()
	if r := f.run(runID); r.State != "SUCCEEDED" || r.FinishedAt == nil {
		t.Fatalf("requeued fail_fast run %s finished %v, want SUCCEEDED", r.State, r.FinishedAt)
	}
}

// TestAFailFastSiblingCancelledAfterTheRequeueIsRevived: a sibling that
// was running when the run failed is told to stop; the operator requeues
// the DEAD task before that sibling's handler returns, so it ends
// CANCELLED after the requeue. The next scheduler pass returns it to
// PENDING (the run has no DEAD task any more), and the run can succeed.
func TestAFailFastSiblingCancelledAfterTheRequeueIsRevived(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.apply(`
name: fflate
fail_fast: true
tasks:
  - {name: x, handler: fail, retry: {max_attempts: 1}}
  - {name: slow, handler: sleep}
`)
	runID := f.trigger("fflate", "")
	ts := f.tasks(runID)
	slow := f.claim(ts["slow"].ID, "w1", time.Minute)
	x := f.claim(ts["x"].ID, "w2", time.Minute)
	f.finish(x, store.FinishRequest{Outcome: store.OutcomeFailed, Error: "boom", Permanent: true})
	f.advance()
	if rr, err := f.s.Renew(f.ctx, slow.ID, slow.FencingToken, time.Minute); err != nil || !rr.OK || !rr.Stop {
		t.Fatalf("renew of the running sibling: %+v %v; want Stop", rr, err)
	}
	if err := f.s.Requeue(f.ctx, ts["x"].ID, "alice", "fixed"); err != nil {
		t.Fatal(err)
	}
	f.finish(slow, store.FinishRequest{Outcome: store.OutcomeCancelled, Error: "cancelled: run failed"})
	f.advance()
	f.wantState(ts["slow"].ID, core.TaskReady)
	f.wantState(ts["x"].ID, core.TaskReady)
	f.runTask(ts["x"].ID)
	f.runTask(ts["slow"].ID)
	f.advance()
	if r := f.run(runID); r.State != "SUCCEEDED" || r.FinishedAt == nil {
		t.Fatalf("run %s finished %v, want SUCCEEDED", r.State, r.FinishedAt)
	}
}

// TestConcurrentRequeuesOfAFailFastRunRequeueItOnce: two operators requeue
// the two DEAD tasks of one fail_fast run at once: exactly one requeue
// happens (it moves both), the other gets ErrNotDead, and every task has
// exactly one audit row back to PENDING.
func TestConcurrentRequeuesOfAFailFastRunRequeueItOnce(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	runID, ts := f.failFastPairRun()
	var wins atomic.Int32
	errs := make([]error, 2)
	together(2, func(i int) {
		errs[i] = f.s.Requeue(f.ctx, ts[[]string{"x", "y"}[i]].ID, "alice", "fixed")
		if errs[i] == nil {
			wins.Add(1)
		}
	})
	if wins.Load() != 1 {
		t.Fatalf("%d of two concurrent requeues in one fail_fast run succeeded (%v), want 1", wins.Load(), errs)
	}
	for i, err := range errs {
		if err != nil && !errors.Is(err, store.ErrNotDead) {
			t.Fatalf("losing requeue %d: %v, want ErrNotDead", i, err)
		}
	}
	if n := f.count(`SELECT count(*) FROM task_events WHERE run_id = $1 AND to_state = 'PENDING' AND actor = 'alice'`, runID); n != 4 {
		t.Fatalf("%d audit rows to PENDING, want 4 (one per task)", n)
	}
}
