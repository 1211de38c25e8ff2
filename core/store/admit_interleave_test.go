package store_test

import (
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/flowforge/flowforge/core"
	"github.com/flowforge/flowforge/core/store"
)

// Flow control's failure modes at the store (FAILURE_MODEL.md modes
// 108-112): slots given back by the statements that end their holders, two
// admitters under one key, a limit lowered below the running, the rate
// limit's clock, and the paths that could dispatch a waiting task.

const oneSlot = "name: limited\ntasks:\n  - {name: a, handler: noop, concurrency: {key: k, limit: 1}}\n"

// slotHolders counts the task runs holding a slot of key k.
func (f *fixture) slotHolders() int {
	f.t.Helper()
	return f.count(`SELECT count(*) FROM task_runs WHERE concurrency_key = 'k' AND state IN ('READY', 'RUNNING')
	                   AND flow_wait IS DISTINCT FROM 'concurrency'`)
}

// admittedAndWaiting splits ids into the task runs that have an outbox row
// and those that have none.
func (f *fixture) admittedAndWaiting(ids []uuid.UUID) (admitted, waiting []uuid.UUID) {
	f.t.Helper()
	for _, id := range ids {
		if f.outboxRows(id) > 0 {
			admitted = append(admitted, id)
		} else {
			waiting = append(waiting, id)
		}
	}
	return admitted, waiting
}

// TestTwoAdmissionsUnderOneKeyNeverExceedItsLimit forces the interleaving
// the key's lock exists for (mode 109): a first admitter has locked key k
// (limit 2), admitted two of four waiters and is held before its commit
// (MidAdmit); a second admitter runs then. With the lock it waits for the
// first's commit and its count, a statement after its lock, sees the two
// slots held: it admits none. Without the lock it would count the
// committed holders (none), skip the two rows the first holds and admit the
// other two: four dispatched under a limit of 2.
func TestTwoAdmissionsUnderOneKeyNeverExceedItsLimit(t *testing.T) {
	f := newFixture(t)
	f.apply("name: limited\ntasks:\n  - {name: a, handler: noop, concurrency: {key: k, limit: 2}}\n")
	ids := f.triggerN("limited", "a", 4, "x")
	f.advance()
	held, release := make(chan struct{}), make(chan struct{})
	s2, err := store.Open(f.ctx, f.url, store.Options{MaxConns: 2, MidAdmit: func() {
		close(held)
		<-release
	}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s2.Close() })
	first := make(chan store.AdmitResult, 1)
	go func() {
		res, err := s2.Admit(f.ctx, "", "held-scheduler")
		if err != nil {
			t.Errorf("held admission: %v", err)
		}
		first <- res
	}()
	select {
	case <-held:
	case <-time.After(10 * time.Second):
		t.Fatal("the first admission never reached its commit")
	}
	second := make(chan store.AdmitResult, 1)
	go func() {
		res, err := f.s.Admit(f.ctx, "", "second-scheduler")
		if err != nil {
			t.Errorf("second admission: %v", err)
		}
		second <- res
	}()
	// The second admission either ends (no lock: it counted the committed
	// holders) or waits on the first's row lock; only then is the first
	// let go.
	f.waitUntil("the second admission to end or wait for the key's lock", func() bool {
		select {
		case res := <-second:
			second <- res
			return true
		default:
			return f.count(`SELECT count(*) FROM pg_locks WHERE NOT granted AND locktype IN ('transactionid', 'tuple')
			                  AND database IS DISTINCT FROM 0`) > 0 ||
				f.count(`SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'`) > 0
		}
	})
	close(release)
	r1, r2 := <-first, <-second
	if r1.Dispatched+r2.Dispatched != 2 {
		t.Fatalf("the two admissions dispatched %d + %d under a limit of 2", r1.Dispatched, r2.Dispatched)
	}
	if admitted, _ := f.admittedAndWaiting(ids); len(admitted) != 2 || f.slotHolders() != 2 {
		t.Fatalf("%d tasks dispatched, %d slots held; want 2 and 2", len(admitted), f.slotHolders())
	}
}

// TestALimitLoweredBelowTheRunningAdmitsNoneUntilUnder: mode 110. Three
// tasks of a key with limit 3 run; the operator lowers the key's limit to
// 1 (flow_limits.operator_limit). The running keep running, and no waiter
// is admitted until fewer than one run: two finishes admit none, the third
// admits one.
func TestALimitLoweredBelowTheRunningAdmitsNoneUntilUnder(t *testing.T) {
	f := newFixture(t)
	f.apply("name: limited\ntasks:\n  - {name: a, handler: noop, concurrency: {key: k, limit: 3}}\n")
	ids := f.triggerN("limited", "a", 6, "x")
	f.advance()
	if res := f.admit(); res.Dispatched != 3 {
		t.Fatalf("admission %+v, want 3 dispatched", res)
	}
	admitted, _ := f.admittedAndWaiting(ids)
	var claims []store.ClaimedTask
	for _, id := range admitted {
		claims = append(claims, f.claim(id, "w1", 30*time.Second))
	}
	if _, err := f.db.ExecContext(f.ctx, `UPDATE flow_limits SET operator_limit = 1 WHERE kind = 'concurrency' AND key = 'k'`); err != nil {
		t.Fatal(err)
	}
	for i, c := range claims {
		f.succeed(c)
		want := 0
		if i == len(claims)-1 {
			want = 1
		}
		if res := f.admit(); res.Dispatched != want {
			t.Fatalf("after %d of 3 finishes under a limit lowered to 1 the round dispatched %d, want %d", i+1, res.Dispatched, want)
		}
	}
	if n := f.slotHolders(); n != 1 {
		t.Fatalf("%d slots held, want 1", n)
	}
}

// TestAReapedTaskGivesItsSlotBack: mode 108. The one slot of key k is held
// by a RUNNING task (the other waits: a round admits none); its worker
// dies, its lease lapses and the reap that makes it RETRYING gives the
// slot back in its statement: the next round admits the waiter. The reaped
// task, READY again, waits for a slot itself.
func TestAReapedTaskGivesItsSlotBack(t *testing.T) {
	f := newFixture(t)
	f.apply("name: limited\ntasks:\n  - {name: a, handler: noop, concurrency: {key: k, limit: 1}, retry: {max_attempts: 3, initial_backoff: 1ms, max_backoff: 1ms}}\n")
	ids := f.triggerN("limited", "a", 2, "x")
	f.advance()
	f.admit()
	admitted, waiting := f.admittedAndWaiting(ids)
	if len(admitted) != 1 {
		t.Fatalf("%d dispatched, want 1", len(admitted))
	}
	f.claim(admitted[0], "doomed", 50*time.Millisecond)
	if res := f.admit(); res.Dispatched != 0 {
		t.Fatalf("a round dispatched %d while the slot's holder RUNS, want 0", res.Dispatched)
	}
	f.waitLeaseExpired(admitted[0])
	if n, err := f.s.ReapExpired(f.ctx, 10, zeroBackoff, "reaper"); err != nil || n != 1 {
		t.Fatalf("reap: %d, %v; want 1", n, err)
	}
	if n := f.slotHolders(); n != 0 {
		t.Fatalf("%d slots held after the reap, want 0", n)
	}
	if res := f.admit(); res.Dispatched != 1 || f.outboxRows(waiting[0]) != 1 {
		t.Fatalf("after the reap the round dispatched %d (waiter has %d outbox rows), want the waiter", res.Dispatched, f.outboxRows(waiting[0]))
	}
}

// TestACancelledRunGivesItsSlotsBack: mode 108. Two runs hold the two
// slots of key k (dispatched, not yet claimed), two wait; cancelling the
// holders' runs cancels their tasks and gives both slots back in that
// statement: the next round admits both waiters.
func TestACancelledRunGivesItsSlotsBack(t *testing.T) {
	f := newFixture(t)
	f.apply("name: limited\ntasks:\n  - {name: a, handler: noop, concurrency: {key: k, limit: 2}}\n")
	ids := f.triggerN("limited", "a", 4, "x")
	f.advance()
	f.admit()
	admitted, waiting := f.admittedAndWaiting(ids)
	if len(admitted) != 2 {
		t.Fatalf("%d dispatched, want 2", len(admitted))
	}
	for _, id := range admitted {
		if _, err := f.s.CancelRun(f.ctx, f.task(id).RunID, "alice", "stop"); err != nil {
			t.Fatal(err)
		}
		f.wantState(id, core.TaskCancelled)
	}
	if n := f.slotHolders(); n != 0 {
		t.Fatalf("%d slots held after the cancels, want 0", n)
	}
	if res := f.admit(); res.Dispatched != 2 {
		t.Fatalf("after the cancels the round dispatched %d, want 2", res.Dispatched)
	}
	for _, id := range waiting {
		if f.outboxRows(id) != 1 {
			t.Fatalf("waiter %s has no outbox row", id)
		}
	}
}

// TestARateLimitIsCountedOnTheDatabaseClock: mode 111. The key's last
// start is written by the database, at its now() less an offset; the
// window of a 10 s period is 10.1 s on that clock. A start 10 s old fills
// the limit of 1 (none admitted), one 10.2 s old is out of the window (one
// admitted), and the start the admission records is the database's now()
// of its transaction.
func TestARateLimitIsCountedOnTheDatabaseClock(t *testing.T) {
	f := newFixture(t)
	f.apply("name: rated\ntasks:\n  - {name: a, handler: noop, rate_limit: {key: api, limit: 1, per: 10s}}\n")
	f.triggerN("rated", "a", 2, "x")
	f.advance()
	if res := f.admit(); res.Dispatched != 1 {
		t.Fatalf("first round %+v, want 1 dispatched", res)
	}
	if !f.dbBool(`SELECT abs(extract(epoch FROM now() - starts[1])) < 5 AND cardinality(starts) = 1 FROM flow_limits WHERE kind = 'rate' AND key = 'api'`) {
		t.Fatal("the recorded start is not the database's now()")
	}
	for _, c := range []struct {
		ago  string
		want int
	}{{"10 seconds", 0}, {"10200 milliseconds", 1}} {
		if _, err := f.db.ExecContext(f.ctx, `UPDATE flow_limits SET starts = ARRAY[now() - $1::interval] WHERE kind = 'rate' AND key = 'api'`, c.ago); err != nil {
			t.Fatal(err)
		}
		if res := f.admit(); res.Dispatched != c.want {
			t.Fatalf("with the last start %s ago (database clock) the round dispatched %d, want %d", c.ago, res.Dispatched, c.want)
		}
	}
}

// TestARedispatchLeavesATaskWaitingForItsAdmission: mode 112. A task
// waiting for its slot far longer than the redispatch threshold has no
// dispatch and gets none from the redispatch: only its admission writes
// one.
func TestARedispatchLeavesATaskWaitingForItsAdmission(t *testing.T) {
	f := newFixture(t)
	f.apply(oneSlot)
	ids := f.triggerN("limited", "a", 2, "x")
	f.advance()
	f.admit()
	_, waiting := f.admittedAndWaiting(ids)
	if _, err := f.db.ExecContext(f.ctx, `UPDATE task_runs SET ready_at = now() - interval '1 hour' WHERE concurrency_key = 'k'`); err != nil {
		t.Fatal(err)
	}
	if _, err := f.s.Redispatch(f.ctx, time.Millisecond, 100, "test"); err != nil {
		t.Fatal(err)
	}
	if n := f.outboxRows(waiting[0]); n != 0 {
		t.Fatalf("the waiting task has %d outbox rows after a redispatch, want 0", n)
	}
}

// TestAResumeLeavesATaskWaitingForItsAdmission: mode 112. A resume re-sends
// the paused workflow's READY tasks; a task waiting for its slot is not
// one of them.
func TestAResumeLeavesATaskWaitingForItsAdmission(t *testing.T) {
	f := newFixture(t)
	f.apply(oneSlot)
	ids := f.triggerN("limited", "a", 2, "x")
	f.advance()
	f.admit()
	_, waiting := f.admittedAndWaiting(ids)
	if _, err := f.s.PauseWorkflow(f.ctx, "limited", core.PauseQueue, "alice", "incident"); err != nil {
		t.Fatal(err)
	}
	if _, err := f.s.ResumeWorkflow(f.ctx, "limited", "bob", "fixed"); err != nil {
		t.Fatal(err)
	}
	if n := f.outboxRows(waiting[0]); n != 0 {
		t.Fatalf("the waiting task has %d outbox rows after a resume, want 0", n)
	}
}

// TestAPausedWorkflowsWaiterTakesNoSlot: two workflows share a task key
// with limit 1. While the older waiter's workflow is paused, the admission
// passes it over (its task could not be claimed: a slot given to it would
// be held through the pause, starving the other workflow) and admits the
// other's; after the resume it is admitted once the slot is free.
func TestAPausedWorkflowsWaiterTakesNoSlot(t *testing.T) {
	f := newFixture(t)
	f.apply("name: held\ntasks:\n  - {name: a, handler: noop, concurrency: {key: shared, limit: 1}}\n")
	f.apply("name: live\ntasks:\n  - {name: a, handler: noop, concurrency: {key: shared, limit: 1}}\n")
	held := f.triggerN("held", "a", 1, "x")[0]
	f.pause("held", core.PauseQueue)
	live := f.triggerN("live", "a", 1, "x")[0]
	if res := f.admit(); res.Dispatched != 1 {
		t.Fatalf("admission %+v, want 1 dispatched", res)
	}
	if n := f.outboxRows(held); n != 0 {
		t.Fatalf("the paused workflow's task was admitted (%d outbox rows) and holds the slot", n)
	}
	if n := f.outboxRows(live); n != 1 {
		t.Fatalf("the live workflow's task has %d outbox rows, want 1 (the paused one must not hold the slot)", n)
	}
	// What task show says of the passed-over waiter: its key, and that
	// its workflow is paused (not a scheduler that forgot it).
	waiting := func() string {
		d, err := f.s.GetTask(f.ctx, held)
		if err != nil {
			t.Fatal(err)
		}
		return d.Waiting
	}
	if w := waiting(); w != "waiting: concurrency shared (1/1)"+store.PausedWaitSuffix {
		t.Fatalf("the paused waiter shows %q, want its key and that its workflow is paused", w)
	}
	if _, err := f.s.ResumeWorkflow(f.ctx, "held", "bob", "fixed"); err != nil {
		t.Fatal(err)
	}
	if w := waiting(); w != "waiting: concurrency shared (1/1)" {
		t.Fatalf("after the resume the waiter shows %q, want its key alone", w)
	}
	if res := f.admit(); res.Dispatched != 0 {
		t.Fatalf("admission %+v with the slot held, want none", res)
	}
	f.runTask(live)
	if res := f.admit(); res.Dispatched != 1 || f.outboxRows(held) != 1 {
		t.Fatalf("admission %+v after the resume and a freed slot, want the resumed workflow's task dispatched", res)
	}
}
