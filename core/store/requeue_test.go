package store_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/flowforge/flowforge/core"
	"github.com/flowforge/flowforge/core/store"
	"github.com/flowforge/flowforge/core/store/storetest"
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

// TestRequeueManyReportsEveryIdAndMovesTheSetAtOnce: one call with the DEAD
// tasks of two runs, a task that is not DEAD, an unknown id, a repeat and a
// DEAD task of a cancelled run gives one result per distinct id in the
// order given; each refusal says what the task is and changes nothing; the
// two DEAD tasks move in one transaction (one xmin on their audit rows) and
// both runs reopen.
func TestRequeueManyReportsEveryIdAndMovesTheSetAtOnce(t *testing.T) {
	f := newFixture(t)
	run1, b1 := f.deadRun()
	run2, b2 := f.deadRun()
	run3, b3 := f.deadRun()
	if _, err := f.s.CancelRun(f.ctx, run3, "alice", "give up"); err != nil {
		t.Fatal(err)
	}
	a1 := f.taskID(run1, "a")
	events := f.count(`SELECT count(*) FROM task_events WHERE task_run_id = ANY ($1::uuid[])`, []uuid.UUID{a1, b3})
	unknown := uuid.New()
	res, err := f.s.RequeueMany(f.ctx, []uuid.UUID{b1, a1, unknown, b2, b1, b3}, "alice", "fixed")
	if err != nil {
		t.Fatal(err)
	}
	want := []struct {
		id      uuid.UUID
		outcome store.RequeueOutcome
		state   core.TaskState
		err     error
		says    string
	}{
		{b1, store.RequeueMoved, core.TaskDead, nil, ""},
		{a1, store.RequeueNotDead, core.TaskSucceeded, store.ErrNotDead, "(it is SUCCEEDED)"},
		{unknown, store.RequeueNotFound, "", store.ErrNotFound, unknown.String()},
		{b2, store.RequeueMoved, core.TaskDead, nil, ""},
		{b3, store.RequeueRunCancelled, core.TaskDead, store.ErrNotDead, "its run was cancelled"},
	}
	if len(res) != len(want) {
		t.Fatalf("%d results, want %d: %+v", len(res), len(want), res)
	}
	for i, w := range want {
		r := res[i]
		if r.ID != w.id || r.Outcome != w.outcome || r.State != w.state || r.Requeued() != (w.err == nil) || len(r.Also) != 0 || r.With != uuid.Nil {
			t.Errorf("result %d: %+v, want %s %s %s", i, r, w.id, w.outcome, w.state)
		}
		if err := r.Err(); !errors.Is(err, w.err) || (err != nil && !strings.Contains(err.Error(), w.says)) {
			t.Errorf("result %d: Err() = %v, want %v saying %q", i, err, w.err, w.says)
		}
	}
	f.wantState(b1, core.TaskPending)
	f.wantState(b2, core.TaskPending)
	f.wantState(b3, core.TaskDead)
	f.wantState(a1, core.TaskSucceeded)
	if n := f.count(`SELECT count(*) FROM task_events WHERE task_run_id = ANY ($1::uuid[])`, []uuid.UUID{a1, b3}); n != events {
		t.Errorf("the refused tasks have %d audit rows, had %d", n, events)
	}
	if n := f.count(`SELECT count(*) FROM task_events WHERE task_run_id = ANY ($1::uuid[]) AND to_state = 'PENDING' AND actor = 'alice' AND reason = 'fixed'`, []uuid.UUID{b1, b2}); n != 2 {
		t.Errorf("%d audit rows of the requeues, want 2", n)
	}
	if n := f.count(`SELECT count(DISTINCT xmin::text) FROM task_events WHERE task_run_id = ANY ($1::uuid[]) AND to_state = 'PENDING'`, []uuid.UUID{b1, b2}); n != 1 {
		t.Errorf("the two requeues' audit rows were written by %d transactions, want 1", n)
	}
	for _, id := range []uuid.UUID{run1, run2} {
		if r := f.run(id); r.FinishedAt != nil {
			t.Errorf("run %s still settled after the requeue", id)
		}
	}
	if res, err := f.s.RequeueMany(f.ctx, nil, "alice", "fixed"); res != nil || err != nil {
		t.Errorf("no ids: %v %v, want nothing", res, err)
	}
}

// TestRequeueManyOfAFailFastRunRequeuesItWithTheFirstIdGiven: both DEAD
// tasks of a fail_fast run and a task fail_fast cancelled, in one call and
// in either order: the first id given requeues the whole run (its Also
// lists the other three tasks it moved), the others are reported moved with
// it, and the audit rows of what it moved name it.
func TestRequeueManyOfAFailFastRunRequeuesItWithTheFirstIdGiven(t *testing.T) {
	for _, order := range [][2]string{{"x", "y"}, {"y", "x"}} {
		t.Run(order[0]+" first", func(t *testing.T) {
			f := newFixture(t)
			_, ts := f.failFastPairRun()
			first, second, sibling := ts[order[0]].ID, ts[order[1]].ID, ts["sibling"].ID
			res, err := f.s.RequeueMany(f.ctx, []uuid.UUID{first, second, sibling}, "alice", "fixed")
			if err != nil {
				t.Fatal(err)
			}
			if len(res) != 3 || res[0].Outcome != store.RequeueMoved || len(res[0].Also) != 3 ||
				!slices.Contains(res[0].Also, second) || !slices.Contains(res[0].Also, sibling) || !slices.Contains(res[0].Also, ts["after"].ID) {
				t.Fatalf("results %+v; want %s requeued with the other three", res, order[0])
			}
			for i, st := range map[int]core.TaskState{1: core.TaskDead, 2: core.TaskCancelled} {
				if r := res[i]; r.Outcome != store.RequeueMovedWith || r.With != first || r.State != st || r.Err() != nil {
					t.Errorf("result %d: %+v, want moved with %s from %s", i, r, first, st)
				}
			}
			for n, why := range map[string]string{
				order[1]:  "fail_fast run requeued with task " + first.String() + ": fixed",
				"sibling": "fail_fast run requeued with task " + first.String() + ": fixed",
				"after":   "upstream task requeued with task " + first.String() + ": fixed",
				order[0]:  "fixed",
			} {
				d := f.task(ts[n].ID)
				if last := d.Events[len(d.Events)-1]; d.State != "PENDING" || last.Reason == nil || *last.Reason != why {
					t.Errorf("%s: %s, last audit row %+v; want PENDING, %q", n, d.State, last, why)
				}
			}
		})
	}
}

// TestRequeueManyFailsWholeOnADatabaseError: a requeue through a closed
// store, or whose context is cancelled, returns that error for the call:
// no result, nothing reported not found or not DEAD, nothing changed. A
// reason core.ValidateReason refuses fails the same way before the
// database is asked.
func TestRequeueManyFailsWholeOnADatabaseError(t *testing.T) {
	f := newFixture(t)
	_, b := f.deadRun()
	closed, _ := storetest.New(t)
	closed.Close()
	cancelled, cancel := context.WithCancel(f.ctx)
	cancel()
	for _, tc := range []struct {
		name   string
		s      *store.Store
		ctx    context.Context
		reason string
		want   error
	}{
		{"closed store", closed, f.ctx, "fixed", nil},
		{"cancelled context", f.s, cancelled, "fixed", context.Canceled},
		{"blank reason", f.s, f.ctx, " ", core.ErrBadReason},
	} {
		res, err := tc.s.RequeueMany(tc.ctx, []uuid.UUID{b, uuid.New()}, "alice", tc.reason)
		if err == nil || res != nil || errors.Is(err, store.ErrNotFound) || errors.Is(err, store.ErrNotDead) || (tc.want != nil && !errors.Is(err, tc.want)) {
			t.Errorf("%s: %+v, %v; want no result and an error (%v), not a refusal", tc.name, res, err, tc.want)
		}
		if _, err := tc.s.RequeueTask(tc.ctx, b, "alice", tc.reason); err == nil || errors.Is(err, store.ErrNotFound) {
			t.Errorf("%s: RequeueTask: %v, want the call's error", tc.name, err)
		}
	}
	f.wantState(b, core.TaskDead)
}

// TestEveryOperatorActionRefusesAReasonCoreRefuses: requeue, cancel,
// forget-key, outbox retry and drop check their audit reason with
// core.ValidateReason before the database is asked (so the ids need not
// exist): blank, over core.MaxReasonBytes or with a NUL, each is refused
// with core.ErrBadReason, never with ErrNotFound.
func TestEveryOperatorActionRefusesAReasonCoreRefuses(t *testing.T) {
	f := newFixture(t)
	id := uuid.New()
	actions := map[string]func(reason string) error{
		"requeue": func(r string) error { return f.s.Requeue(f.ctx, id, "alice", r) },
		"cancel":  func(r string) error { _, err := f.s.CancelRun(f.ctx, id, "alice", r); return err },
		"forget":  func(r string) error { _, err := f.s.ForgetIdempotencyKey(f.ctx, id, "alice", r); return err },
		"retry":   func(r string) error { return f.s.RetryQuarantined(f.ctx, 1, "alice", r) },
		"drop":    func(r string) error { _, err := f.s.DropQuarantined(f.ctx, 1, "alice", r); return err },
	}
	for name, act := range actions {
		for _, reason := range []string{"", "  ", strings.Repeat("r", core.MaxReasonBytes+1), "a\x00b"} {
			if err := act(reason); !errors.Is(err, core.ErrBadReason) || errors.Is(err, store.ErrNotFound) {
				t.Errorf("%s with reason %.10q: %v, want core.ErrBadReason", name, reason, err)
			}
		}
		if err := act("fixed"); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("%s of an unknown id with a good reason: %v, want ErrNotFound", name, err)
		}
	}
}
