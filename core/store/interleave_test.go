package store_test

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/flowforge/flowforge/core"
	"github.com/flowforge/flowforge/core/store"
)

// These tests put a concurrent writer at one precise point inside a store
// statement, with a held transaction that the statement must wait for (no
// sleeps, no luck): each proves one guard of e2e/MUTANTS.yaml, and goes red
// every time that guard is taken away.

// hold begins a transaction on the raw connection, rolled back in cleanup
// unless committed.
func (f *fixture) hold() *sql.Tx {
	f.t.Helper()
	tx, err := f.db.BeginTx(f.ctx, nil)
	if err != nil {
		f.t.Fatal(err)
	}
	f.t.Cleanup(func() { _ = tx.Rollback() })
	return tx
}

func (f *fixture) exec(tx *sql.Tx, query string, args ...any) {
	f.t.Helper()
	if _, err := tx.ExecContext(f.ctx, query, args...); err != nil {
		f.t.Fatalf("%s: %v", query, err)
	}
}

func (f *fixture) commit(tx *sql.Tx) {
	f.t.Helper()
	if err := tx.Commit(); err != nil {
		f.t.Fatalf("commit held transaction: %v", err)
	}
}

// advanceInBackground starts a scheduler pass and returns where its error
// lands.
func (f *fixture) advanceInBackground() <-chan error {
	out := make(chan error, 1)
	go func() {
		_, err := f.s.Advance(f.ctx, nil, 100, "sched")
		out <- err
	}()
	return out
}

// reapInBackground starts a reaper pass and returns where its count lands.
func (f *fixture) reapInBackground() <-chan int {
	out := make(chan int, 1)
	go func() {
		n, err := f.s.ReapExpired(f.ctx, 10, zeroBackoff, "reaper")
		if err != nil {
			f.t.Errorf("reap: %v", err)
		}
		out <- n
	}()
	return out
}

// reaperBehindAHeldRow returns a RUNNING task whose lease has expired, a
// held transaction that locks its row, and a reaper pass that has read the
// expired lease and now waits for that row (its count lands on reaped).
func (f *fixture) reaperBehindAHeldRow() (uuid.UUID, int64, *sql.Tx, <-chan int) {
	f.t.Helper()
	id, tok := f.expiredClaim()
	h := f.hold()
	f.exec(h, `SELECT 1 FROM task_runs WHERE id = $1 FOR UPDATE`, id)
	reaped := f.reapInBackground()
	f.waitBlocked(1)
	return id, tok, h, reaped
}

// expiredClaim returns a RUNNING task whose lease has expired.
func (f *fixture) expiredClaim() (uuid.UUID, int64) {
	f.t.Helper()
	f.apply(oneTask)
	tid := f.taskID(f.trigger("one", ""), "a")
	c := f.claim(tid, "w1", time.Millisecond)
	f.waitLeaseExpired(tid)
	return tid, c.FencingToken
}

// TestAReaperQueuedBehindARenewalLeavesTheRenewedLeaseAlone: the reaper
// has read an expired lease and waits for the task's row while a renewal
// holding it commits; its write re-checks the lease on the row it finally
// locks, so the renewed attempt keeps running.
func TestAReaperQueuedBehindARenewalLeavesTheRenewedLeaseAlone(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	id, tok, h, reaped := f.reaperBehindAHeldRow()
	// The renewal, committed while the reaper waits: same token, new lease.
	f.exec(h, `UPDATE task_runs SET lease_expires_at = now() + interval '1 minute', heartbeat_at = now() WHERE id = $1`, id)
	f.commit(h)
	if n := <-reaped; n != 0 {
		t.Fatalf("the reaper reaped %d tasks whose lease was renewed while it waited", n)
	}
	f.wantRunning(id, tok)
}

// TestAReaperQueuedBehindAFinishLeavesTheFinishedTaskAlone: the finish
// commits while the reaper waits for the row; the reaper's write re-checks
// state (and the lease the finish cleared), so the outcome stands.
func TestAReaperQueuedBehindAFinishLeavesTheFinishedTaskAlone(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	id, tok, h, reaped := f.reaperBehindAHeldRow()
	// A finish keeps the token: only state and lease tell the reaper.
	f.exec(h, `UPDATE task_runs SET state = 'SUCCEEDED', lease_expires_at = NULL, finished_at = now() WHERE id = $1 AND fencing_token = $2`, id, tok)
	f.commit(h)
	if n := <-reaped; n != 0 {
		t.Fatalf("the reaper reaped %d tasks that finished while it waited", n)
	}
	f.wantStateToken(id, core.TaskSucceeded, tok)
}

// TestAReaperWritesOnlyTheGenerationItRead: while the reaper waits for the
// row, the task is reaped, dispatched and claimed again by someone else
// (its new lease already expired too); the waiting reaper's write names the
// token it read and leaves the newer attempt to a later pass.
func TestAReaperWritesOnlyTheGenerationItRead(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	id, tok, h, reaped := f.reaperBehindAHeldRow()
	f.exec(h, `UPDATE task_runs SET fencing_token = fencing_token + 3, attempt = attempt + 1, worker_id = 'w2',
	           lease_expires_at = now() - interval '1 second' WHERE id = $1`, id)
	f.commit(h)
	if n := <-reaped; n != 0 {
		t.Fatalf("the reaper reaped %d tasks of a generation it never read", n)
	}
	f.wantRunning(id, tok+3)
}

// TestAPassSkipsARunAnotherSessionHolds: a scheduler pass locks the runs it
// works on with FOR UPDATE SKIP LOCKED, so a run another pass (or a cancel,
// or a requeue) holds is left to that holder, not promoted twice.
func TestAPassSkipsARunAnotherSessionHolds(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.apply(diamond)
	runID := f.trigger("diamond", "")
	ts := f.tasks(runID)
	f.runTaskUncounted(ts["a"].ID)
	h := f.hold()
	f.exec(h, `SELECT 1 FROM workflow_runs WHERE id = $1 FOR UPDATE`, runID)
	ctx, cancel := context.WithTimeout(f.ctx, 5*time.Second)
	defer cancel()
	if res, err := f.s.Advance(ctx, nil, 100, "sched"); err != nil || res.Runs != 0 || res.Promoted != 0 {
		t.Fatalf("a pass worked on (or waited for) a run another session holds: %+v %v", res, err)
	}
	f.commit(h)
	if res := f.advance(); res.Promoted != 2 {
		t.Fatalf("after the holder let go the pass promoted %d tasks, want 2 (b, c)", res.Promoted)
	}
}

// TestAPromotionRechecksTheStateItRead: the promotion's candidate is read
// PENDING, then its row is held by a writer that moves it on; the UPDATE
// re-checks the state on the row it locks and promotes nothing.
func TestAPromotionRechecksTheStateItRead(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.apply(diamond)
	runID := f.trigger("diamond", "")
	ts := f.tasks(runID)
	f.runTaskUncounted(ts["a"].ID)
	h := f.hold()
	f.exec(h, `SELECT 1 FROM task_runs WHERE id = $1 FOR UPDATE`, ts["b"].ID)
	advanced := f.advanceInBackground()
	f.waitBlocked(1)
	f.exec(h, `UPDATE task_runs SET state = 'CANCELLED', finished_at = now() WHERE id = $1`, ts["b"].ID)
	f.commit(h)
	if err := <-advanced; err != nil {
		t.Fatal(err)
	}
	f.wantState(ts["b"].ID, core.TaskCancelled)
	if n := f.outboxRows(ts["b"].ID); n != 0 {
		t.Fatalf("%d outbox rows for a task that was not PENDING any more", n)
	}
}

// TestTwoPassesOverOneRunPromoteEachTaskOnce: pass 1 waits inside its
// promotion for a held task row; pass 2 starts meanwhile. The run lock makes
// pass 2 skip the run, and even without it the promotion's state re-check
// would refuse to promote again what pass 1 promoted: each guard masks the
// other's removal, and with both gone the task is dispatched twice.
func TestTwoPassesOverOneRunPromoteEachTaskOnce(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.apply(diamond)
	runID := f.trigger("diamond", "")
	ts := f.tasks(runID)
	f.runTaskUncounted(ts["a"].ID)
	h := f.hold()
	f.exec(h, `SELECT 1 FROM task_runs WHERE id = $1 FOR UPDATE`, ts["b"].ID)
	first := f.advanceInBackground()
	f.waitBlocked(1)
	second := f.advanceInBackground()
	var secondErr error
	secondDone := false
	f.waitUntil("the second pass to skip the run or to wait behind the first", func() bool {
		select {
		case secondErr = <-second:
			secondDone = true
			return true
		default:
			return f.blocked() >= 2
		}
	})
	f.commit(h)
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	if !secondDone {
		secondErr = <-second
	}
	if secondErr != nil {
		t.Fatal(secondErr)
	}
	for _, n := range []string{"b", "c"} {
		if rows := f.outboxRows(ts[n].ID); rows != 1 {
			t.Errorf("task %s has %d outbox rows, want 1", n, rows)
		}
		if ev := f.count(`SELECT count(*) FROM task_events WHERE task_run_id = $1 AND to_state = 'READY'`, ts[n].ID); ev != 1 {
			t.Errorf("task %s was promoted %d times, want once", n, ev)
		}
	}
}

// blocked counts this test's sessions that wait on a lock.
func (f *fixture) blocked() int {
	return f.count(`SELECT count(*) FROM pg_stat_activity
	  WHERE datname = current_database() AND application_name = current_setting('application_name') AND wait_event_type = 'Lock'`)
}

// waitUntil polls cond for up to 10 s.
func (f *fixture) waitUntil(what string, cond func() bool) {
	f.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			f.t.Fatalf("gave up waiting for %s", what)
		}
		time.Sleep(2 * time.Millisecond) // poll interval, not a wait for state
	}
}

// TestARunDoesNotSettleWhileAParentFinishedDuringThePass: a parent
// finishes after the pass's promotion statement read the run but before it
// counted the run's tasks; the child is then eligible but unpromoted, and
// the run must stay open so that the next pass (woken by the finish)
// promotes it.
func TestARunDoesNotSettleWhileAParentFinishedDuringThePass(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.apply(`
name: late-parent
tasks:
  - {name: parent, handler: noop}
  - {name: child, handler: noop, depends_on: [parent]}
  - {name: side, handler: noop, retry: {max_attempts: 3, initial_backoff: 1ms, max_backoff: 1ms}}
`)
	runID := f.trigger("late-parent", "")
	ts := f.tasks(runID)
	parent := f.claim(ts["parent"].ID, "w1", time.Minute)
	side := f.claim(ts["side"].ID, "w2", time.Minute)
	f.finish(side, failed())
	f.waitRetryDue(ts["side"].ID)
	// Hold the due retry's row: the pass's promotion statement (whose
	// snapshot sees the parent RUNNING) waits for it.
	h := f.hold()
	f.exec(h, `SELECT 1 FROM task_runs WHERE id = $1 FOR UPDATE`, ts["side"].ID)
	advanced := f.advanceInBackground()
	f.waitBlocked(1)
	f.succeedUncounted(parent) // commits while the pass is inside its promotion
	f.exec(h, `UPDATE task_runs SET state = 'SUCCEEDED', next_attempt_at = NULL, finished_at = now() WHERE id = $1`, ts["side"].ID)
	f.commit(h)
	if err := <-advanced; err != nil {
		t.Fatal(err)
	}
	if r := f.run(runID); r.FinishedAt != nil {
		t.Fatalf("the run settled (%s) with its child eligible and PENDING", r.State)
	}
	if res := f.advance(); res.Promoted != 1 {
		t.Fatalf("the next pass promoted %d tasks, want the child", res.Promoted)
	}
	f.wantState(ts["child"].ID, core.TaskReady)
}

// TestARequeueTakesTheRunLockBeforeTheTaskRow: a scheduler pass holds the
// run and then writes one of its tasks; a requeue of that task that
// arrives in between waits for the run first, so neither deadlocks.
func TestARequeueTakesTheRunLockBeforeTheTaskRow(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.apply(oneShot)
	runID := f.trigger("oneshot", "")
	id := f.taskID(runID, "a")
	c := f.claim(id, "w1", time.Minute)
	f.finish(c, failed())
	f.wantState(id, core.TaskDead)
	h := f.hold()
	f.exec(h, `SELECT 1 FROM workflow_runs WHERE id = $1 FOR UPDATE`, runID)
	requeued := make(chan error, 1)
	go func() { requeued <- f.s.Requeue(f.ctx, id, "cli:test", "retry it") }()
	f.waitBlocked(1)
	// The pass now writes the task row (any write of a task of a run it
	// holds: a promotion, a fail-fast cancel).
	if _, err := h.ExecContext(f.ctx, `UPDATE task_runs SET error = error WHERE id = $1`, id); err != nil {
		t.Fatalf("the scheduler's write deadlocked with the requeue: %v", err)
	}
	f.commit(h)
	if err := <-requeued; err != nil {
		t.Fatalf("requeue: %v", err)
	}
	f.wantState(id, core.TaskPending)
}

// TestAClaimRequiresReadyWhateverTheToken: the claim's state guard alone
// (its token and run guards kept from matching by nothing else) refuses a
// task in any state but READY, even with the token the task holds.
func TestAClaimRequiresReadyWhateverTheToken(t *testing.T) {
	t.Parallel()
	for _, st := range []core.TaskState{core.TaskPending, core.TaskRunning, core.TaskRetrying, core.TaskSucceeded, core.TaskDead, core.TaskCancelled} {
		t.Run(string(st), func(t *testing.T) {
			f := newFixture(t)
			f.apply(oneTask)
			id := f.taskID(f.trigger("one", ""), "a")
			_, tok := f.state(id)
			// A RUNNING task holds a lease (migration 00022's constraint).
			if _, err := f.db.ExecContext(f.ctx, `UPDATE task_runs SET state = $2,
			    lease_expires_at = CASE WHEN $2 = 'RUNNING' THEN now() + interval '1 hour' END WHERE id = $1`, id, string(st)); err != nil {
				t.Fatal(err)
			}
			if _, ok, err := f.s.Claim(f.ctx, id, tok, "w1", time.Minute); ok || err != nil {
				t.Fatalf("claim of a %s task with its own token: ok=%v err=%v", st, ok, err)
			}
			f.wantStateToken(id, st, tok)
		})
	}
}

func (f *fixture) wantStateToken(id uuid.UUID, want core.TaskState, tok int64) {
	f.t.Helper()
	var st string
	var got int64
	if err := f.db.QueryRowContext(f.ctx, `SELECT state, fencing_token FROM task_runs WHERE id = $1`, id).Scan(&st, &got); err != nil {
		f.t.Fatal(err)
	}
	if core.TaskState(st) != want || got != tok {
		f.t.Fatalf("task is %s with token %d, want %s with token %d", st, got, want, tok)
	}
}

func (f *fixture) wantRunning(id uuid.UUID, tok int64) {
	f.t.Helper()
	f.wantStateToken(id, core.TaskRunning, tok)
}

// failed is a retryable failure whose retry is due at once.
func failed() store.FinishRequest {
	return store.FinishRequest{Outcome: store.OutcomeFailed, Error: "boom", RetryDelay: time.Millisecond}
}
