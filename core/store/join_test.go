package store_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/flowforge/flowforge/core"
	"github.com/flowforge/flowforge/core/store"
)

// The finish's own promotions and settles (mode 92): the counter join and
// the settle of a run whose only task succeeded (finishDoneTail).

// countOf returns a task's deps_succeeded.
func (f *fixture) countOf(id uuid.UUID) int {
	f.t.Helper()
	return f.count(`SELECT deps_succeeded FROM task_runs WHERE id = $1`, id)
}

// promotions counts a task's history rows that made it READY from PENDING.
func (f *fixture) promotions(id uuid.UUID) int {
	f.t.Helper()
	return f.count(`SELECT count(*) FROM task_events WHERE task_run_id = $1 AND from_state = 'PENDING' AND to_state = 'READY'`, id)
}

// TestAFinishPromotesAChildOnlyWhenItsLastParentSucceeds: mode 92, the
// counter join along a diamond (a; b and c after a; d after b and c),
// with no scheduler pass at all. a's finish makes b and c READY, each with
// its token bumped, one outbox row carrying that token and one history
// row; b's finish counts d (1 of 2) and leaves it PENDING; c's finish
// completes the count and makes d READY.
func TestAFinishPromotesAChildOnlyWhenItsLastParentSucceeds(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.apply(diamond)
	run := f.trigger("diamond", "")
	ts := f.tasks(run)
	f.runTask(ts["a"].ID)
	for _, n := range []string{"b", "c"} {
		st, tok := f.state(ts[n].ID)
		if st != core.TaskReady || tok != 1 || f.outboxRows(ts[n].ID) != 1 || f.promotions(ts[n].ID) != 1 {
			t.Fatalf("after a: %s is %s at token %d with %d outbox rows and %d promotions; want READY at 1, 1, 1",
				n, st, tok, f.outboxRows(ts[n].ID), f.promotions(ts[n].ID))
		}
		if tok := f.count(`SELECT fencing_token_snapshot FROM outbox WHERE task_run_id = $1`, ts[n].ID); tok != 1 {
			t.Fatalf("%s's outbox row carries token %d, want 1", n, tok)
		}
	}
	f.wantState(ts["d"].ID, core.TaskPending)
	f.runTask(ts["b"].ID)
	if st, _ := f.state(ts["d"].ID); st != core.TaskPending || f.countOf(ts["d"].ID) != 1 || f.outboxRows(ts["d"].ID) != 0 {
		t.Fatalf("after b: d is %s, counted %d, %d outbox rows; want PENDING, 1, 0", st, f.countOf(ts["d"].ID), f.outboxRows(ts["d"].ID))
	}
	f.runTask(ts["c"].ID)
	if st, _ := f.state(ts["d"].ID); st != core.TaskReady || f.countOf(ts["d"].ID) != 2 || f.outboxRows(ts["d"].ID) != 1 || f.promotions(ts["d"].ID) != 1 {
		t.Fatalf("after c: d is %s, counted %d, %d outbox rows, %d promotions; want READY, 2, 1, 1",
			st, f.countOf(ts["d"].ID), f.outboxRows(ts["d"].ID), f.promotions(ts["d"].ID))
	}
	// A pass after the finishes finds nothing to promote.
	if res := f.advance(); res.Promoted != 0 {
		t.Fatalf("a pass after the counter join promoted %d tasks", res.Promoted)
	}
}

// TestTwoParentsFinishingAtOnceCountTheJoinOnce: modes 20 and 92, forced.
// A transaction holds the join's row; the finishes of its two parents
// start meanwhile, each in its own statement whose snapshot sees the
// other parent still RUNNING, and both wait for the join's row. Once it is
// let go, the first adds its count and the second adds to the first's (it
// re-reads the row it waited for): the join is promoted once, by the
// second, with one outbox row. A count judged from the statement's
// snapshot would leave the join PENDING (each saw one parent succeed).
func TestTwoParentsFinishingAtOnceCountTheJoinOnce(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.apply(joinOfTwo)
	_, ts, a, b := f.joinWithParentsRunning()
	h := f.hold()
	f.exec(h, `SELECT 1 FROM task_runs WHERE id = $1 FOR UPDATE`, ts["join"].ID)
	done := make(chan error, 2)
	for _, c := range []store.ClaimedTask{a, b} {
		go func() {
			st, ok, err := f.s.Finish(f.ctx, store.FinishRequest{ID: c.ID, Token: c.FencingToken, Outcome: store.OutcomeSucceeded, WorkerID: "w"})
			if err == nil && (!ok || st != core.TaskSucceeded) {
				err = errors.New("a parent's finish was not recorded")
			}
			done <- err
		}()
	}
	f.waitBlocked(2)
	f.commit(h)
	for range 2 {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	j := ts["join"].ID
	if st, _ := f.state(j); st != core.TaskReady || f.countOf(j) != 2 || f.promotions(j) != 1 || f.outboxRows(j) != 1 {
		t.Fatalf("the join is %s, counted %d, promoted %d times with %d outbox rows; want READY, 2, once, 1",
			st, f.countOf(j), f.promotions(j), f.outboxRows(j))
	}
}

// TestAFinishLeavesAFailFastRunsChildrenToTheScheduler: mode 92. In a
// fail_fast run a finish counts the child but does not promote it (the
// scheduler's pass, under the run's lock, cancels the rest of a failing
// run before it promotes anything); the pass promotes it. Likewise in a
// run whose cancel was requested, where the pass cancels it instead.
func TestAFinishLeavesAFailFastRunsChildrenToTheScheduler(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.apply(`
name: ff
fail_fast: true
tasks:
  - {name: a, handler: noop}
  - {name: b, handler: noop, depends_on: [a]}
`)
	f.apply(chainOfTwo)
	ff := f.tasks(f.trigger("ff", ""))
	f.runTask(ff["a"].ID)
	if st, _ := f.state(ff["b"].ID); st != core.TaskPending || f.countOf(ff["b"].ID) != 1 {
		t.Fatalf("fail_fast run: b is %s counted %d after a's finish; want PENDING, 1 (the pass's to promote)", st, f.countOf(ff["b"].ID))
	}
	if res := f.advance(); res.Promoted != 1 {
		t.Fatalf("the pass promoted %d tasks of the fail_fast run, want b", res.Promoted)
	}
	f.wantState(ff["b"].ID, core.TaskReady)

	run := f.trigger("chain2", "")
	ch := f.tasks(run)
	a := f.claim(ch["a"].ID, "w1", time.Minute)
	if _, err := f.s.CancelRun(f.ctx, run, "cli:test", "stop"); err != nil {
		t.Fatal(err)
	}
	f.succeed(a)
	if st, _ := f.state(ch["b"].ID); st != core.TaskCancelled || f.outboxRows(ch["b"].ID) != 0 {
		t.Fatalf("cancelled run: b is %s with %d outbox rows after a's finish; want CANCELLED (by the cancel), none", st, f.outboxRows(ch["b"].ID))
	}
}

// TestAFinishSettlesARunWhoseOnlyTaskSucceeded: mode 92. The finish of a
// single-task run's task settles the run in the same statement — state
// SUCCEEDED, finished (started when it was triggered) — and names it to
// no scheduler; a run with another task still to run stays open and is
// named. Both finishes are one batch, so one statement names exactly the
// open run (commit order on one listener: nothing came before it).
func TestAFinishSettlesARunWhoseOnlyTaskSucceeded(t *testing.T) {
	// Not parallel: the package's tests share a database, whose
	// notifications every listener of a channel receives.
	f, url := notifyFixture(t)
	f.apply(oneTask)
	f.apply(twoRoots)
	solo := f.trigger("one", "")
	open := f.trigger("two", "")
	l := listenOn(t, url, store.TasksChannel)
	cs := f.claim(f.taskID(solo, "a"), "w1", time.Minute)
	co := f.claim(f.taskID(open, "a"), "w1", time.Minute)
	res, err := f.s.FinishMany(f.ctx, []store.FinishRequest{
		{ID: cs.ID, Token: cs.FencingToken, Outcome: store.OutcomeSucceeded, Result: json.RawMessage(`1`), WorkerID: "w1"},
		{ID: co.ID, Token: co.FencingToken, Outcome: store.OutcomeSucceeded, WorkerID: "w1"},
	})
	if err != nil || !res[0].OK || !res[1].OK {
		t.Fatalf("finish: %+v %v", res, err)
	}
	got := nextNaming(t, l, []string{solo.String(), open.String()})
	if len(got) != 1 || got[0] != open.String() {
		t.Fatalf("the finish named %v; want only the open run %s (the solo run %s settled)", got, open, solo)
	}
	r := f.run(solo)
	if r.State != core.RunSucceeded || r.FinishedAt == nil || r.StartedAt == nil || !r.StartedAt.Equal(r.CreatedAt) {
		t.Fatalf("the solo run: %s started %v finished %v; want SUCCEEDED, started when triggered (%v), finished", r.State, r.StartedAt, r.FinishedAt, r.CreatedAt)
	}
	if o := f.run(open); o.FinishedAt != nil {
		t.Fatalf("the run with a task still READY settled (%s)", o.State)
	}
}

// TestAFinishNeverWaitsForAHeldRunAndLeavesItToTheSchedulers: mode 92.
// While another transaction holds a single-task run's row, the finish of
// its task neither waits for it nor settles the run: it records the task,
// names the run to the schedulers, and a pass settles it once the holder
// let go. A run whose cancel was requested is not settled by the finish
// either (its state is CANCELLED: the pass derives it).
func TestAFinishNeverWaitsForAHeldRunAndLeavesItToTheSchedulers(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.apply(oneTask)
	held := f.trigger("one", "")
	c := f.claim(f.taskID(held, "a"), "w1", time.Minute)
	h := f.holdRun(held)
	ctx, cancel := context.WithTimeout(f.ctx, 5*time.Second)
	defer cancel()
	if st, ok, err := f.s.Finish(ctx, store.FinishRequest{ID: c.ID, Token: c.FencingToken, Outcome: store.OutcomeSucceeded, WorkerID: "w1"}); err != nil || !ok || st != core.TaskSucceeded {
		t.Fatalf("the finish beside a held run: %s %v %v; want SUCCEEDED at once", st, ok, err)
	}
	if r := f.run(held); r.FinishedAt != nil {
		t.Fatalf("the held run was settled (%s) under its holder", r.State)
	}
	f.commit(h)
	if res, err := f.s.AdvanceRuns(f.ctx, []uuid.UUID{held}, "sched"); err != nil || res.RunsSettled != 1 {
		t.Fatalf("the pass after the holder: %+v %v; want the run settled", res, err)
	}
	if r := f.run(held); r.State != core.RunSucceeded {
		t.Fatalf("the run is %s, want SUCCEEDED", r.State)
	}

	cancelled := f.trigger("one", "")
	c = f.claim(f.taskID(cancelled, "a"), "w1", time.Minute)
	if _, err := f.s.CancelRun(f.ctx, cancelled, "cli:test", "stop"); err != nil {
		t.Fatal(err)
	}
	f.succeed(c)
	if r := f.run(cancelled); r.FinishedAt != nil {
		t.Fatalf("a cancelled run was settled by its task's finish (%s)", r.State)
	}
	if res, err := f.s.AdvanceRuns(f.ctx, []uuid.UUID{cancelled}, "sched"); err != nil || res.RunsSettled != 1 {
		t.Fatalf("the pass: %+v %v", res, err)
	}
	if r := f.run(cancelled); r.State != core.RunCancelled {
		t.Fatalf("the cancelled run is %s, want CANCELLED", r.State)
	}
}
