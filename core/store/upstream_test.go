package store_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/flowforge/flowforge/core"
	"github.com/flowforge/flowforge/core/store"
)

// Mode 46: the tasks downstream of a DEAD task are UPSTREAM_FAILED, set in
// the statement that buries it, and revived by its requeue.

// upstreamFailed is spelled out (not core.TaskUpstreamFailed) so that these
// tests compile, and fail, on the code before the state existed.
const upstreamFailed = core.TaskState("UPSTREAM_FAILED")

// downstreamCase is a workflow with a task in the middle that dies: its
// transitive descendants must be buried, the rest must run.
type downstreamCase struct {
	name     string
	src      string
	workflow string
	first    []string // run to SUCCEEDED first, in order
	dies     string
	buried   []string // UPSTREAM_FAILED once dies is DEAD
	after    []string // run after the requeue, in order, to finish the run
}

var downstreamCases = []downstreamCase{
	{
		name: "chain",
		src: `
name: chain
tasks:
  - {name: a, handler: noop}
  - {name: b, handler: fail, retry: {max_attempts: 1}, depends_on: [a]}
  - {name: c, handler: noop, depends_on: [b]}
  - {name: d, handler: noop, depends_on: [c]}
`,
		workflow: "chain", first: []string{"a"}, dies: "b", buried: []string{"c", "d"}, after: []string{"b", "c", "d"},
	},
	{
		name: "diamond",
		src: `
name: diamond
tasks:
  - {name: a, handler: noop}
  - {name: b, handler: fail, retry: {max_attempts: 1}, depends_on: [a]}
  - {name: c, handler: noop, depends_on: [a]}
  - {name: d, handler: noop, depends_on: [b, c]}
  - {name: e, handler: noop, depends_on: [d]}
`,
		workflow: "diamond", first: []string{"a", "c"}, dies: "b", buried: []string{"d", "e"}, after: []string{"b", "d", "e"},
	},
}

// failedRun runs tc up to the death of tc.dies (finished by Finish, no
// scheduler pass after it) and returns the run and its tasks by name.
func (f *fixture) failedRun(tc downstreamCase) (uuid.UUID, map[string]store.TaskRun) {
	f.t.Helper()
	f.apply(tc.src)
	runID := f.trigger(tc.workflow, "")
	ts := f.tasks(runID)
	for _, n := range tc.first {
		f.advance()
		f.runTask(ts[n].ID)
	}
	f.advance()
	c := f.claim(ts[tc.dies].ID, "w1", time.Minute)
	if st := f.finish(c, store.FinishRequest{Outcome: store.OutcomeFailed, Error: "boom", Permanent: true}); st != core.TaskDead {
		f.t.Fatalf("%s: %s, want DEAD", tc.dies, st)
	}
	return runID, ts
}

// wantBuried checks, before any scheduler pass, that each named task is
// UPSTREAM_FAILED with an error and an audit row naming dead, as actor.
func (f *fixture) wantBuried(ts map[string]store.TaskRun, dead, actor string, names ...string) {
	f.t.Helper()
	for _, n := range names {
		d := f.task(ts[n].ID)
		if d.State != upstreamFailed || d.FinishedAt == nil || d.Error == nil || !strings.Contains(*d.Error, "upstream task "+dead+" is DEAD") {
			f.t.Fatalf("%s after %s died: state %s finished %v error %v; want UPSTREAM_FAILED naming %s", n, dead, d.State, d.FinishedAt, d.Error, dead)
		}
		last := d.Events[len(d.Events)-1]
		if last.FromState == nil || *last.FromState != "PENDING" || last.ToState != upstreamFailed || last.Actor != actor {
			f.t.Fatalf("%s audit row %+v, want PENDING -> UPSTREAM_FAILED by %s", n, last, actor)
		}
	}
}

// TestADeadTaskBuriesItsDescendantsInTheSameStatement: in a chain and a
// diamond, the moment Finish makes the middle task DEAD (no scheduler pass
// yet) its transitive descendants are UPSTREAM_FAILED; a pass then settles
// the run FAILED with every task done.
func TestADeadTaskBuriesItsDescendantsInTheSameStatement(t *testing.T) {
	t.Parallel()
	for _, tc := range downstreamCases {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			runID, ts := f.failedRun(tc)
			f.wantBuried(ts, tc.dies, "w1", tc.buried...)
			f.advance()
			r := f.run(runID)
			if r.State != core.RunFailed || r.FinishedAt == nil || r.TasksDone != r.TasksTotal || r.TasksTotal != len(ts) {
				t.Fatalf("run %s finished %v, %d/%d tasks done; want FAILED, settled, %d/%d", r.State, r.FinishedAt, r.TasksDone, r.TasksTotal, len(ts), len(ts))
			}
			f.wantBuried(ts, tc.dies, "w1", tc.buried...) // the pass left them alone
		})
	}
}

// TestARequeueRevivesTheDescendantsAndTheRunSucceeds: the requeue of the
// DEAD task returns its UPSTREAM_FAILED descendants to PENDING in the same
// statement (no scheduler pass yet), reopens the run, and the run then
// runs to SUCCEEDED.
func TestARequeueRevivesTheDescendantsAndTheRunSucceeds(t *testing.T) {
	t.Parallel()
	for _, tc := range downstreamCases {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			runID, ts := f.failedRun(tc)
			f.advance()
			moved, err := f.s.RequeueTask(f.ctx, ts[tc.dies].ID, "alice", "fixed")
			if err != nil {
				t.Fatal(err)
			}
			if len(moved) != 1+len(tc.buried) || moved[0] != ts[tc.dies].ID {
				t.Fatalf("requeue moved %v, want %s and its %d descendants", moved, tc.dies, len(tc.buried))
			}
			for _, n := range tc.buried {
				d := f.task(ts[n].ID)
				if d.State != core.TaskPending || d.Error != nil || d.FinishedAt != nil {
					t.Fatalf("%s after the requeue: %s error %v finished %v; want PENDING", n, d.State, d.Error, d.FinishedAt)
				}
				last := d.Events[len(d.Events)-1]
				if last.ToState != "PENDING" || last.Actor != "alice" || last.Reason == nil || !strings.Contains(*last.Reason, "fixed") {
					t.Fatalf("%s audit row %+v", n, last)
				}
			}
			if r := f.run(runID); r.FinishedAt != nil {
				t.Fatalf("run still settled after the requeue: %s %v", r.State, r.FinishedAt)
			}
			for _, n := range tc.after {
				f.advance()
				f.runTask(ts[n].ID)
			}
			f.advance()
			if r := f.run(runID); r.State != core.RunSucceeded || r.FinishedAt == nil || r.TasksDone != r.TasksTotal {
				t.Fatalf("run %s finished %v %d/%d done, want SUCCEEDED", r.State, r.FinishedAt, r.TasksDone, r.TasksTotal)
			}
		})
	}
}

// TestARequeueLeavesBuriedWhatAnotherDeadAncestorStillBlocks: in a diamond
// whose two middle tasks died, requeueing one leaves the join
// UPSTREAM_FAILED (its other parent is still DEAD); requeueing the other
// revives it.
func TestARequeueLeavesBuriedWhatAnotherDeadAncestorStillBlocks(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.apply(`
name: twodead
tasks:
  - {name: b, handler: fail, retry: {max_attempts: 1}}
  - {name: c, handler: fail, retry: {max_attempts: 1}}
  - {name: d, handler: noop, depends_on: [b, c]}
`)
	runID := f.trigger("twodead", "")
	ts := f.tasks(runID)
	for _, n := range []string{"b", "c"} {
		f.finish(f.claim(ts[n].ID, "w1", time.Minute), store.FinishRequest{Outcome: store.OutcomeFailed, Error: "boom", Permanent: true})
	}
	f.wantBuried(ts, "b", "w1", "d")
	f.advance()
	if _, err := f.s.RequeueTask(f.ctx, ts["b"].ID, "alice", "fixed b"); err != nil {
		t.Fatal(err)
	}
	f.wantState(ts["d"].ID, upstreamFailed)
	f.advance()
	f.wantState(ts["d"].ID, upstreamFailed) // nor does a pass revive it
	if r := f.run(runID); r.State != core.RunFailed {
		t.Fatalf("run %s, want FAILED (c is still DEAD)", r.State)
	}
	if _, err := f.s.RequeueTask(f.ctx, ts["c"].ID, "alice", "fixed c"); err != nil {
		t.Fatal(err)
	}
	f.wantState(ts["d"].ID, core.TaskPending)
}

// TestFailFastCancelsOnlyWhatIsNotDownstreamOfTheDeadTask: in a fail_fast
// run the dead task's descendants are UPSTREAM_FAILED (at once, by Finish)
// and fail_fast cancels only the rest; a requeue returns both to PENDING
// and the run succeeds.
func TestFailFastCancelsOnlyWhatIsNotDownstreamOfTheDeadTask(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.apply(`
name: ffdown
fail_fast: true
tasks:
  - {name: x, handler: fail, retry: {max_attempts: 1}}
  - {name: after, handler: noop, depends_on: [x]}
  - {name: later, handler: noop, depends_on: [after]}
  - {name: sibling, handler: noop}
  - {name: cousin, handler: noop, depends_on: [sibling]}
`)
	runID := f.trigger("ffdown", "")
	ts := f.tasks(runID)
	f.finish(f.claim(ts["x"].ID, "w1", time.Minute), store.FinishRequest{Outcome: store.OutcomeFailed, Error: "boom", Permanent: true})
	f.wantBuried(ts, "x", "w1", "after", "later")
	res := f.advance()
	if res.FailFastCancelled != 2 {
		t.Fatalf("fail_fast cancelled %d tasks, want 2 (sibling, cousin)", res.FailFastCancelled)
	}
	f.wantBuried(ts, "x", "w1", "after", "later")
	f.wantState(ts["sibling"].ID, core.TaskCancelled)
	f.wantState(ts["cousin"].ID, core.TaskCancelled)
	r := f.run(runID)
	if r.State != core.RunFailed || r.FinishedAt == nil || r.TasksDone != r.TasksTotal {
		t.Fatalf("run %s finished %v %d/%d done, want FAILED, settled, all done", r.State, r.FinishedAt, r.TasksDone, r.TasksTotal)
	}
	moved, err := f.s.RequeueTask(f.ctx, ts["x"].ID, "alice", "fixed")
	if err != nil {
		t.Fatal(err)
	}
	if len(moved) != 5 {
		t.Fatalf("requeue moved %d tasks, want all 5", len(moved))
	}
	for _, n := range []string{"x", "after", "later", "sibling", "cousin"} {
		f.wantState(ts[n].ID, core.TaskPending)
	}
	f.advance()
	for _, n := range []string{"x", "sibling"} {
		f.runTask(ts[n].ID)
	}
	f.advance()
	f.runTask(ts["after"].ID)
	f.runTask(ts["cousin"].ID)
	f.advance()
	f.runTask(ts["later"].ID)
	f.advance()
	if r := f.run(runID); r.State != core.RunSucceeded || r.FinishedAt == nil {
		t.Fatalf("run %s finished %v, want SUCCEEDED", r.State, r.FinishedAt)
	}
}

const chainOneShot = `
name: chainshot
tasks:
  - {name: a, handler: noop, retry: {max_attempts: 1}}
  - {name: b, handler: noop, depends_on: [a]}
  - {name: c, handler: noop, depends_on: [b]}
`

// TestAReapThatBuriesATaskBuriesItsDescendants: the reaper's DEAD (last
// attempt's lease expired) takes the descendants with it.
func TestAReapThatBuriesATaskBuriesItsDescendants(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.apply(chainOneShot)
	runID := f.trigger("chainshot", "")
	ts := f.tasks(runID)
	f.claim(ts["a"].ID, "w1", time.Millisecond)
	f.waitLeaseExpired(ts["a"].ID)
	if n, err := f.s.ReapExpired(f.ctx, 10, zeroBackoff, "reaper"); n != 1 || err != nil {
		t.Fatalf("reap: %d %v", n, err)
	}
	f.wantState(ts["a"].ID, core.TaskDead)
	f.wantBuried(ts, "a", "reaper", "b", "c")
	f.advance()
	if r := f.run(runID); r.State != core.RunFailed || r.FinishedAt == nil || r.TasksDone != 3 {
		t.Fatalf("run %s finished %v %d done, want FAILED, settled, 3 done", r.State, r.FinishedAt, r.TasksDone)
	}
}

// TestAnOutboxDropBuriesTheTasksDescendants: dropping a quarantined
// dispatch buries its task DEAD and its descendants UPSTREAM_FAILED, in one
// transaction.
func TestAnOutboxDropBuriesTheTasksDescendants(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.apply(chainOneShot)
	runID := f.trigger("chainshot", "")
	ts := f.tasks(runID)
	b, err := f.s.LockOutbox(f.ctx, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(b.Rows) != 1 {
		b.Rollback()
		t.Fatalf("locked %d outbox rows, want a's one", len(b.Rows))
	}
	id := b.Rows[0].ID
	if n, err := b.Quarantine(f.ctx, []int64{id}, "publisher", "too big"); err != nil || n != 1 {
		b.Rollback()
		t.Fatalf("quarantine: %d %v", n, err)
	}
	if err := b.Commit(); err != nil {
		t.Fatal(err)
	}
	res, err := f.s.DropQuarantined(f.ctx, id, "cli:ann@host", "cannot be fixed")
	if err != nil || !res.TaskBuried || res.TaskRunID != ts["a"].ID {
		t.Fatalf("drop: %+v %v", res, err)
	}
	f.wantBuried(ts, "a", "cli:ann@host", "b", "c")
	f.advance()
	if r := f.run(runID); r.State != core.RunFailed || r.FinishedAt == nil || r.TasksDone != 3 {
		t.Fatalf("run %s finished %v %d done, want FAILED, settled, 3 done", r.State, r.FinishedAt, r.TasksDone)
	}
}

// TestASchedulerPassCatchesUpWithOlderBinaries: an older binary writes DEAD
// without burying the descendants, and requeues without reviving them; the
// next scheduler pass does both, so a rolling upgrade neither strands a
// run PENDING nor leaves a revived run blocked.
func TestASchedulerPassCatchesUpWithOlderBinaries(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.apply(chainOneShot)
	runID := f.trigger("chainshot", "")
	ts := f.tasks(runID)
	// An old Finish: READY -> DEAD (no lease needed for the point), nothing
	// else.
	if _, err := f.db.ExecContext(f.ctx, `UPDATE task_runs SET state = 'DEAD', finished_at = now() WHERE id = $1`, ts["a"].ID); err != nil {
		t.Fatal(err)
	}
	if res := f.advance(); res.UpstreamFailed != 2 {
		t.Fatalf("pass buried %d tasks, want 2", res.UpstreamFailed)
	}
	f.wantBuried(ts, "a", "test-scheduler", "b", "c")
	if r := f.run(runID); r.State != core.RunFailed || r.FinishedAt == nil {
		t.Fatalf("run %s finished %v, want FAILED and settled", r.State, r.FinishedAt)
	}
	// An old requeue: DEAD -> PENDING and the run reopened, nothing else.
	if _, err := f.db.ExecContext(f.ctx, `UPDATE task_runs SET state = 'PENDING', finished_at = NULL, fencing_token = fencing_token + 1 WHERE id = $1`, ts["a"].ID); err != nil {
		t.Fatal(err)
	}
	if _, err := f.db.ExecContext(f.ctx, `UPDATE workflow_runs SET finished_at = NULL WHERE id = $1`, runID); err != nil {
		t.Fatal(err)
	}
	if res := f.advance(); res.UpstreamRevived != 2 {
		t.Fatalf("pass revived %d tasks, want 2", res.UpstreamRevived)
	}
	for _, n := range []string{"b", "c"} {
		f.wantState(ts[n].ID, core.TaskPending)
	}
	for _, n := range []string{"a", "b", "c"} {
		f.advance()
		f.runTask(ts[n].ID)
	}
	f.advance()
	if r := f.run(runID); r.State != core.RunSucceeded || r.FinishedAt == nil {
		t.Fatalf("run %s finished %v, want SUCCEEDED", r.State, r.FinishedAt)
	}
}

// TestDeathsRacingPassesAndCancelsSettleEveryTask: two tasks of a fail_fast
// run die at once while scheduler passes (fail_fast cancelling) and, in odd
// rounds, a cancel write to the same descendants. Every writer takes the
// run row first, so none deadlocks (any error fails the test), and the run
// settles with every task terminal: the descendants of a task that died
// before fail_fast reached them are UPSTREAM_FAILED, the rest CANCELLED.
func TestDeathsRacingPassesAndCancelsSettleEveryTask(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.apply(`
name: ffrace
fail_fast: true
tasks:
  - {name: x, handler: fail, retry: {max_attempts: 1}}
  - {name: y, handler: fail, retry: {max_attempts: 1}}
  - {name: x1, handler: noop, depends_on: [x]}
  - {name: y1, handler: noop, depends_on: [y]}
  - {name: xy, handler: noop, depends_on: [x1, y1]}
  - {name: x2, handler: noop, depends_on: [x1]}
  - {name: y2, handler: noop, depends_on: [y1]}
  - {name: z, handler: noop, depends_on: [xy, x2, y2]}
`)
	for round := range 40 {
		runID := f.trigger("ffrace", "")
		ts := f.tasks(runID)
		cx := f.claim(ts["x"].ID, "w1", time.Minute)
		cy := f.claim(ts["y"].ID, "w2", time.Minute)
		errs := make([]error, 4)
		together(4, func(i int) {
			switch i {
			case 0, 1:
				c := []store.ClaimedTask{cx, cy}[i]
				_, _, errs[i] = f.s.Finish(f.ctx, store.FinishRequest{ID: c.ID, Token: c.FencingToken, Outcome: store.OutcomeFailed, Error: "boom", Permanent: true, WorkerID: "w"})
			case 2:
				_, errs[i] = f.s.Advance(f.ctx, nil, 1000, "test-scheduler")
			case 3:
				if round%2 == 1 {
					_, errs[i] = f.s.CancelRun(f.ctx, runID, "alice", "race")
				}
			}
		})
		for i, err := range errs {
			if err != nil {
				t.Fatalf("round %d: writer %d: %v", round, i, err)
			}
		}
		f.advance()
		r := f.run(runID)
		if !r.State.Terminal() || r.FinishedAt == nil || r.TasksDone != r.TasksTotal {
			t.Fatalf("round %d: run %s finished %v %d/%d done", round, r.State, r.FinishedAt, r.TasksDone, r.TasksTotal)
		}
		// Without a cancel, the first death's statement buries its child
		// before any fail_fast cancel can run (fail_fast needs a DEAD task).
		if round%2 == 0 {
			x1, _ := f.state(ts["x1"].ID)
			y1, _ := f.state(ts["y1"].ID)
			if x1 != upstreamFailed && y1 != upstreamFailed {
				t.Fatalf("round %d: x1 %s, y1 %s; want one of them UPSTREAM_FAILED", round, x1, y1)
			}
		}
	}
}

// TestABuryingFinishTakesTheRunLockBeforeTheTaskRows: a scheduler pass
// holds the run and then writes a descendant of a task that is dying (a
// fail_fast cancel); the failing finish that arrives in between waits for
// the run first (retrying, as the worker does, each time the run stays held
// past store.FinishRunLockWait), so neither deadlocks, and the descendant
// the pass did not take is buried.
func TestABuryingFinishTakesTheRunLockBeforeTheTaskRows(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.apply(chainOneShot)
	runID := f.trigger("chainshot", "")
	ts := f.tasks(runID)
	c := f.claim(ts["a"].ID, "w1", time.Minute)
	h := f.hold()
	f.exec(h, `SELECT 1 FROM workflow_runs WHERE id = $1 FOR UPDATE`, runID)
	done := make(chan error, 1)
	go func() {
		for {
			_, _, err := f.s.Finish(f.ctx, store.FinishRequest{ID: c.ID, Token: c.FencingToken, Outcome: store.OutcomeFailed, Error: "boom", Permanent: true, WorkerID: "w1"})
			if !errors.Is(err, store.ErrLockTimeout) {
				done <- err
				return
			}
			// The run stayed held past store.FinishRunLockWait and
			// nothing was written: try again, as the worker does.
		}
	}()
	f.waitBlockedOnARow()
	f.wantState(ts["a"].ID, core.TaskRunning) // it waits for the run before it writes
	f.exec(h, `UPDATE task_runs SET state = 'CANCELLED' WHERE id = $1`, ts["c"].ID)
	f.exec(h, `UPDATE task_runs SET error = error WHERE id = $1`, ts["b"].ID)
	f.commit(h)
	if err := <-done; err != nil {
		t.Fatalf("finish: %v", err)
	}
	f.wantState(ts["a"].ID, core.TaskDead)
	f.wantBuried(ts, "a", "w1", "b")
	f.wantState(ts["c"].ID, core.TaskCancelled)
}

// TestABuryingReapTakesTheRunLockBeforeTheTaskRows: as for the finish, a
// reap that buries a task waits for the run a pass holds.
func TestABuryingReapTakesTheRunLockBeforeTheTaskRows(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.apply(chainOneShot)
	runID := f.trigger("chainshot", "")
	ts := f.tasks(runID)
	f.claim(ts["a"].ID, "w1", time.Millisecond)
	f.waitLeaseExpired(ts["a"].ID)
	h := f.hold()
	f.exec(h, `SELECT 1 FROM workflow_runs WHERE id = $1 FOR UPDATE`, runID)
	done := make(chan error, 1)
	go func() {
		_, err := f.s.ReapExpired(f.ctx, 10, zeroBackoff, "reaper")
		done <- err
	}()
	f.waitBlockedOnARow()
	f.wantState(ts["a"].ID, core.TaskRunning) // it waits for the run before it writes
	f.exec(h, `UPDATE task_runs SET state = 'CANCELLED' WHERE id = $1`, ts["c"].ID)
	f.exec(h, `UPDATE task_runs SET error = error WHERE id = $1`, ts["b"].ID)
	f.commit(h)
	if err := <-done; err != nil {
		t.Fatalf("reap: %v", err)
	}
	f.wantState(ts["a"].ID, core.TaskDead)
	f.wantBuried(ts, "a", "reaper", "b")
	f.wantState(ts["c"].ID, core.TaskCancelled)
}

// waitBlockedOnARow waits until a session of this test's database waits for
// a row lock (another transaction's row), not for any lock: a commit with a
// NOTIFY may wait briefly for the server-wide notify lock, which other
// databases' sessions hold too.
func (f *fixture) waitBlockedOnARow() {
	f.t.Helper()
	f.waitDB("a session to wait for a row lock",
		`SELECT count(*) >= 1 FROM pg_stat_activity
		  WHERE datname = current_database() AND application_name = current_setting('application_name')
		    AND wait_event_type = 'Lock' AND wait_event IN ('transactionid', 'tuple')`)
}
