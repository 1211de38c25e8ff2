package store_test

import (
	"encoding/json"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/flowforge/flowforge/core"
	"github.com/flowforge/flowforge/core/store"
)

func TestAStaleTokenNeverFinishes(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.apply(oneTask)
	id := f.taskID(f.trigger("one", ""), "a")
	c := f.claim(id, "w1", time.Millisecond)
	f.waitLeaseExpired(id)
	if n, err := f.s.ReapExpired(f.ctx, 10, zeroBackoff, "reaper"); err != nil || n != 1 {
		t.Fatalf("reap: %d %v", n, err)
	}
	before := f.task(id)
	for _, out := range []store.Outcome{store.OutcomeSucceeded, store.OutcomeFailed, store.OutcomeCancelled} {
		st, ok, err := f.s.Finish(f.ctx, store.FinishRequest{ID: id, Token: c.FencingToken, Outcome: out, Result: json.RawMessage(`{"late":true}`), WorkerID: "w1"})
		if ok || err != nil || st != "" {
			t.Fatalf("finish %s with the pre-reap token: state=%q ok=%v err=%v", out, st, ok, err)
		}
	}
	after := f.task(id)
	if after.State != before.State || after.FencingToken != before.FencingToken || after.Attempt != before.Attempt ||
		len(after.Result) != 0 || len(after.Events) != len(before.Events) {
		t.Fatalf("a stale finish changed the task:\nbefore %+v\nafter  %+v", before.TaskRun, after.TaskRun)
	}
	if r, err := f.s.Renew(f.ctx, id, c.FencingToken, time.Minute); err != nil || r.OK {
		t.Fatalf("renew with the pre-reap token: %+v %v", r, err)
	}
}

func TestOnlyOneWriterCanFinishWithTheSameToken(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.apply(oneTask)
	id := f.taskID(f.trigger("one", ""), "a")
	c := f.claim(id, "w1", 30*time.Second)
	outcomes := []store.Outcome{store.OutcomeSucceeded, store.OutcomeFailed, store.OutcomeCancelled}
	var oks atomic.Int32
	var won atomic.Value
	together(20, func(i int) {
		st, ok, err := f.s.Finish(f.ctx, store.FinishRequest{ID: id, Token: c.FencingToken, Outcome: outcomes[i%3], Result: json.RawMessage(`{"i":1}`), WorkerID: "w1"})
		if err != nil {
			t.Errorf("finish %d: %v", i, err)
		}
		if ok {
			oks.Add(1)
			won.Store(st)
		}
	})
	if n := oks.Load(); n != 1 {
		t.Fatalf("%d finishes recorded, want exactly 1", n)
	}
	d := f.task(id)
	if d.State != won.Load() {
		t.Fatalf("task is %s, the winning finish said %s", d.State, won.Load())
	}
	ends := 0
	for _, e := range d.Events {
		if e.FromState != nil && *e.FromState == "RUNNING" {
			ends++
		}
	}
	if ends != 1 {
		t.Fatalf("%d RUNNING -> x events, want 1: %+v", ends, d.Events)
	}
}

func TestExactlyOneReaperReclaimsAnExpiredLease(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.apply(`
name: two
tasks:
  - {name: dying, handler: noop}
  - {name: live, handler: noop}
`)
	ts := f.tasks(f.trigger("two", ""))
	dying := f.claim(ts["dying"].ID, "w-dead", time.Millisecond)
	live := f.claim(ts["live"].ID, "w-live", 30*time.Second)
	f.waitLeaseExpired(dying.ID)
	var total atomic.Int32
	together(10, func(int) {
		n, err := f.s.ReapExpired(f.ctx, 100, func(core.RetryPolicy, int) time.Duration { return time.Hour }, "reaper")
		if err != nil {
			t.Errorf("reap: %v", err)
		}
		total.Add(int32(n))
	})
	if n := total.Load(); n != 1 {
		t.Fatalf("reaped %d in total, want exactly 1", n)
	}
	d := f.task(dying.ID)
	if d.State != core.TaskRetrying || d.FencingToken != dying.FencingToken+1 || d.Attempt != 1 {
		t.Fatalf("reaped task: state %s token %d attempt %d; want RETRYING, %d, 1", d.State, d.FencingToken, d.Attempt, dying.FencingToken+1)
	}
	if d.Error == nil || d.LeaseExpiresAt != nil || d.NextAttemptAt == nil {
		t.Fatalf("reaped task: error %v lease %v next attempt %v", d.Error, d.LeaseExpiresAt, d.NextAttemptAt)
	}
	if !f.dbBool(`SELECT next_attempt_at > now() + interval '59 minutes' FROM task_runs WHERE id = $1`, dying.ID) {
		t.Fatalf("next attempt at %v: the backoff was not applied on the database clock", d.NextAttemptAt)
	}
	last := d.Events[len(d.Events)-1]
	if last.Actor != "reaper" || last.ToState != "RETRYING" {
		t.Fatalf("last event %+v", last)
	}
	if st, tok := f.state(live.ID); st != core.TaskRunning || tok != live.FencingToken {
		t.Fatalf("the live lease was touched: %s token %d", st, tok)
	}
	// Nothing left to reap.
	if n, err := f.s.ReapExpired(f.ctx, 100, zeroBackoff, "reaper"); n != 0 || err != nil {
		t.Fatalf("second pass reaped %d, %v", n, err)
	}
}

func TestReapBuriesWhenAttemptsAreUsedUp(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.apply(oneShot)
	runID := f.trigger("oneshot", "")
	id := f.taskID(runID, "a")
	c := f.claim(id, "w1", time.Millisecond)
	f.waitLeaseExpired(id)
	if n, err := f.s.ReapExpired(f.ctx, 10, zeroBackoff, "reaper"); n != 1 || err != nil {
		t.Fatalf("reap: %d %v", n, err)
	}
	d := f.task(id)
	if d.State != core.TaskDead || d.FencingToken != c.FencingToken+1 || d.FinishedAt == nil || d.NextAttemptAt != nil {
		t.Fatalf("buried task: %+v", d.TaskRun)
	}
	f.advance()
	if r := f.run(runID); r.State != core.RunFailed || r.FinishedAt == nil {
		t.Fatalf("run %s finished %v, want FAILED and settled", r.State, r.FinishedAt)
	}
}

func TestRenewExtendsTheLeaseOnTheDatabaseClock(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.apply(oneTask)
	id := f.taskID(f.trigger("one", ""), "a")
	c := f.claim(id, "w1", time.Millisecond)
	f.waitLeaseExpired(id)
	// An expired but not yet reaped lease can still be renewed: it is the
	// reaper's conditional update that decides.
	r, err := f.s.Renew(f.ctx, id, c.FencingToken, time.Minute)
	if err != nil || !r.OK || r.Stop {
		t.Fatalf("renew: %+v %v", r, err)
	}
	if !f.dbBool(`SELECT lease_expires_at > now() + interval '50 seconds' FROM task_runs WHERE id = $1`, id) {
		t.Fatal("the lease was not extended")
	}
	if n, err := f.s.ReapExpired(f.ctx, 10, zeroBackoff, "reaper"); n != 0 || err != nil {
		t.Fatalf("reaped a renewed lease: %d %v", n, err)
	}
}

func TestRenewRefusesAStaleToken(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.apply(oneTask)
	id := f.taskID(f.trigger("one", ""), "a")
	c := f.claim(id, "w1", 30*time.Second)
	for _, tok := range []int64{c.FencingToken - 1, c.FencingToken + 1} {
		if r, err := f.s.Renew(f.ctx, id, tok, time.Minute); r.OK || err != nil {
			t.Fatalf("renew with token %d (current %d): %+v %v", tok, c.FencingToken, r, err)
		}
	}
	f.succeed(c)
	if r, err := f.s.Renew(f.ctx, id, c.FencingToken, time.Minute); r.OK || err != nil {
		t.Fatalf("renew after finish: %+v %v", r, err)
	}
}

func TestRenewReportsCancellation(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.apply(oneTask)
	runID := f.trigger("one", "")
	id := f.taskID(runID, "a")
	c := f.claim(id, "w1", 30*time.Second)
	if r, err := f.s.Renew(f.ctx, id, c.FencingToken, time.Minute); !r.OK || r.Stop || err != nil {
		t.Fatalf("renew before cancel: %+v %v", r, err)
	}
	res, err := f.s.CancelRun(f.ctx, runID, "alice", "wrong params")
	if err != nil || res.TasksCancelled != 0 {
		t.Fatalf("cancel: %+v %v", res, err)
	}
	r, err := f.s.Renew(f.ctx, id, c.FencingToken, time.Minute)
	if err != nil || !r.OK || !r.Stop {
		t.Fatalf("renew after cancel: %+v %v; want OK and Stop", r, err)
	}
	if st := f.finish(c, store.FinishRequest{Outcome: store.OutcomeCancelled, Error: "run cancelled"}); st != core.TaskCancelled {
		t.Fatalf("finish: %s", st)
	}
	f.advance()
	if r := f.run(runID); r.State != core.RunCancelled || r.FinishedAt == nil {
		t.Fatalf("run %s finished %v", r.State, r.FinishedAt)
	}
}

func (f *fixture) dbBool(query string, args ...any) bool {
	f.t.Helper()
	var ok bool
	if err := f.db.QueryRowContext(f.ctx, query, args...).Scan(&ok); err != nil {
		f.t.Fatalf("%s: %v", query, err)
	}
	return ok
}

// TestAStaleTokenCannotFinishANewerRunningAttempt isolates the fencing
// token: the task is RUNNING again (a newer claim), so the state check alone
// would let the old attempt's finish through; only the token refuses it.
func TestAStaleTokenCannotFinishANewerRunningAttempt(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.apply(oneTask)
	id := f.taskID(f.trigger("one", ""), "a")
	old := f.claim(id, "w1", time.Millisecond)
	f.waitLeaseExpired(id)
	if n, err := f.s.ReapExpired(f.ctx, 10, zeroBackoff, "reaper"); err != nil || n != 1 {
		t.Fatalf("reap: %d %v", n, err)
	}
	f.waitRetryDue(id)
	f.advance() // RETRYING -> READY with a new token
	_, readyToken := f.state(id)
	newer, ok, err := f.s.Claim(f.ctx, id, readyToken, "w2", time.Minute)
	if err != nil || !ok {
		t.Fatalf("second claim: ok=%v err=%v", ok, err)
	}
	before := f.task(id)
	for _, out := range []store.Outcome{store.OutcomeSucceeded, store.OutcomeFailed, store.OutcomeCancelled} {
		st, ok, err := f.s.Finish(f.ctx, store.FinishRequest{ID: id, Token: old.FencingToken, Outcome: out, Result: json.RawMessage(`{"late":true}`), WorkerID: "w1"})
		if ok || err != nil || st != "" {
			t.Fatalf("finish %s with the old token while the newer attempt runs: state=%q ok=%v err=%v", out, st, ok, err)
		}
	}
	if r, err := f.s.Renew(f.ctx, id, old.FencingToken, time.Hour); err != nil || r.OK {
		t.Fatalf("renew with the old token while the newer attempt runs: %+v %v", r, err)
	}
	after := f.task(id)
	if after.State != "RUNNING" || after.FencingToken != newer.FencingToken || after.Attempt != 2 ||
		*after.WorkerID != "w2" || !after.LeaseExpiresAt.Equal(*before.LeaseExpiresAt) || len(after.Result) != 0 {
		t.Fatalf("the stale writes changed the running attempt:\nbefore %+v\nafter  %+v", before.TaskRun, after.TaskRun)
	}
	if st := f.finish(newer, store.FinishRequest{Outcome: store.OutcomeSucceeded, Result: json.RawMessage(`{"newer":true}`)}); st != "SUCCEEDED" {
		t.Fatalf("the newer attempt's finish: %s", st)
	}
}

// TestRenewNeverMovesALeaseBackwards: mode 36. A renewal computed with a
// shorter lease (or computed earlier and committed later) leaves the later
// expiry in place.
func TestRenewNeverMovesALeaseBackwards(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.apply(oneTask)
	id := f.taskID(f.trigger("one", ""), "a")
	c := f.claim(id, "w1", time.Hour)
	before := f.dbTime(`SELECT lease_expires_at FROM task_runs WHERE id = '` + id.String() + `'`)
	if r, err := f.s.Renew(f.ctx, id, c.FencingToken, time.Second); err != nil || !r.OK {
		t.Fatalf("renew: %+v %v", r, err)
	}
	if after := f.dbTime(`SELECT lease_expires_at FROM task_runs WHERE id = '` + id.String() + `'`); after.Before(before) {
		t.Fatalf("the lease moved backwards: %v -> %v", before, after)
	}
}

// TestARenewalThatWaitedForALockCommitsAFreshLeaseOrFails: mode 36. A
// renewal queued behind a table lock for less than its bound commits a
// lease measured from its write, not from its start; one held longer than
// its bound fails (lock_timeout) within about the bound, and writes nothing.
func TestARenewalThatWaitedForALockCommitsAFreshLeaseOrFails(t *testing.T) {
	t.Parallel()
	const lease = 4 * time.Second // bound: LockWaitFor(lease) = 1 s
	bound := store.LockWaitFor(lease)
	for _, tc := range []struct {
		name string
		hold time.Duration
		ok   bool
	}{
		{"held below the bound", bound * 6 / 10, true},
		{"held past the bound", 3 * bound, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			f.apply(oneTask)
			id := f.taskID(f.trigger("one", ""), "a")
			c := f.claim(id, "w1", lease)
			for range 3 { // the renewal's statement is prepared on the pool's connections
				if r, err := f.s.Renew(f.ctx, id, c.FencingToken, lease); err != nil || !r.OK {
					t.Fatalf("renew: %+v %v", r, err)
				}
			}
			before := f.dbTime(`SELECT lease_expires_at FROM task_runs WHERE id = '` + id.String() + `'`)
			tx, err := f.db.BeginTx(f.ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer tx.Rollback()
			if _, err := tx.Exec(`LOCK TABLE task_runs IN ACCESS EXCLUSIVE MODE`); err != nil {
				t.Fatal(err)
			}
			release := time.AfterFunc(tc.hold, func() { _ = tx.Rollback() })
			defer release.Stop()
			start := time.Now()
			r, err := f.s.Renew(f.ctx, id, c.FencingToken, lease)
			waited := time.Since(start)
			after := f.dbTime(`SELECT lease_expires_at FROM task_runs WHERE id = '` + id.String() + `'`)
			if !tc.ok {
				if !errors.Is(err, store.ErrLockTimeout) {
					t.Fatalf("renew held %v past its bound %v: %+v %v; want a lock timeout", tc.hold, bound, r, err)
				}
				if waited > bound+time.Second {
					t.Fatalf("renew failed after %v; bound %v", waited, bound)
				}
				if !after.Equal(before) {
					t.Fatalf("a failed renewal wrote the lease: %v -> %v", before, after)
				}
				return
			}
			if err != nil || !r.OK {
				t.Fatalf("renew: %+v %v", r, err)
			}
			// The lease left must be (nearly) a whole lease from the moment
			// the renewal returned, not a lease minus its wait.
			if left := f.dbDuration(`SELECT extract(epoch FROM lease_expires_at - clock_timestamp()) * 1000 FROM task_runs WHERE id = '` + id.String() + `'`); left < lease-200*time.Millisecond {
				t.Fatalf("after waiting %v behind a lock the lease has %v left of %v: computed before the wait", waited, left, lease)
			}
		})
	}
}
