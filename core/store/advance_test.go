package store_test

import (
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/flowforge/flowforge/core"
	"github.com/flowforge/flowforge/core/store"
)

const diamond = `
name: diamond
tasks:
  - {name: a, handler: noop}
  - {name: b, handler: noop, depends_on: [a]}
  - {name: c, handler: noop, depends_on: [a]}
  - {name: d, handler: noop, depends_on: [b, c]}
`

func (f *fixture) states(runID uuid.UUID) string {
	f.t.Helper()
	ts := f.tasks(runID)
	var b strings.Builder
	for _, n := range []string{"a", "b", "c", "d"} {
		fmt.Fprintf(&b, "%s=%s ", n, ts[n].State)
	}
	return strings.TrimSpace(b.String())
}

func TestAdvancePromotesADiamondInOrder(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.apply(diamond)
	runID := f.trigger("diamond", "")
	ids := map[string]uuid.UUID{}
	for n, tr := range f.tasks(runID) {
		ids[n] = tr.ID
	}
	step := func(wantStates string, wantRun core.RunState, wantPromoted int) {
		t.Helper()
		res := f.advance()
		if res.Promoted != wantPromoted {
			t.Fatalf("promoted %d, want %d (%s)", res.Promoted, wantPromoted, f.states(runID))
		}
		if got := f.states(runID); got != wantStates {
			t.Fatalf("tasks %s, want %s", got, wantStates)
		}
		if r := f.run(runID); r.State != wantRun {
			t.Fatalf("run %s, want %s", r.State, wantRun)
		}
	}
	if got := f.states(runID); got != "a=READY b=PENDING c=PENDING d=PENDING" {
		t.Fatalf("after trigger: %s", got)
	}
	// The trigger writes the run RUNNING, started: its root is READY.
	if r := f.run(runID); r.State != "RUNNING" || r.StartedAt == nil {
		t.Fatalf("after trigger the run is %s (started %v), want RUNNING and started", r.State, r.StartedAt)
	}
	step("a=READY b=PENDING c=PENDING d=PENDING", "RUNNING", 0)
	f.runTaskUncounted(ids["a"])
	step("a=SUCCEEDED b=READY c=READY d=PENDING", "RUNNING", 2)
	f.runTaskUncounted(ids["b"])
	step("a=SUCCEEDED b=SUCCEEDED c=READY d=PENDING", "RUNNING", 0)
	f.runTaskUncounted(ids["c"])
	step("a=SUCCEEDED b=SUCCEEDED c=SUCCEEDED d=READY", "RUNNING", 1)
	f.runTaskUncounted(ids["d"])
	res := f.advance()
	if res.RunsSettled != 1 || res.RunsChanged != 1 {
		t.Fatalf("last pass: %+v", res)
	}
	r := f.run(runID)
	if r.State != "SUCCEEDED" || r.FinishedAt == nil || r.TasksDone != 4 {
		t.Fatalf("run %s finished %v done %d", r.State, r.FinishedAt, r.TasksDone)
	}
	// A settled run is no longer examined.
	if res := f.advance(); res.Runs != 0 {
		t.Fatalf("a settled run was examined again: %+v", res)
	}
	for n, id := range ids {
		if got := f.outboxRows(id); got != 1 {
			t.Errorf("task %s has %d outbox rows, want 1", n, got)
		}
	}
}

func TestDueRetryIsPromotedWithANewTokenAndANewOutboxRow(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.apply(oneTask)
	id := f.taskID(f.trigger("one", ""), "a")
	c := f.claim(id, "w1", time.Minute)
	f.finish(c, store.FinishRequest{Outcome: store.OutcomeFailed, Error: "flaky", RetryDelay: time.Hour})
	if res := f.advance(); res.RetriesDue != 0 {
		t.Fatalf("a retry due in an hour was promoted: %+v", res)
	}
	f.wantState(id, core.TaskRetrying)
	// Bring the due time forward on the database clock.
	if _, err := f.db.ExecContext(f.ctx, `UPDATE task_runs SET next_attempt_at = now() - interval '1 second' WHERE id = $1`, id); err != nil {
		t.Fatal(err)
	}
	if res := f.advance(); res.RetriesDue != 1 || res.Promoted != 0 {
		t.Fatalf("advance: %+v", res)
	}
	st, tok := f.state(id)
	if st != core.TaskReady || tok <= c.FencingToken {
		t.Fatalf("after the retry fell due: %s token %d (claimed with %d)", st, tok, c.FencingToken)
	}
	if n := f.count(`SELECT count(*) FROM outbox WHERE task_run_id = $1`, id); n != 2 {
		t.Fatalf("%d outbox rows, want 2 (first dispatch and retry)", n)
	}
	if n := f.count(`SELECT count(*) FROM outbox WHERE task_run_id = $1 AND fencing_token_snapshot = $2 AND (payload->>'fencing_token')::bigint = $2`, id, tok); n != 1 {
		t.Fatalf("no outbox row carries the new token %d", tok)
	}
	for range 3 {
		f.advance()
	}
	if n := f.outboxRows(id); n != 2 {
		t.Fatalf("repeated passes: %d outbox rows, want 2", n)
	}
	c2 := f.claim(id, "w2", time.Minute)
	if c2.Attempt != 2 {
		t.Fatalf("second claim attempt %d, want 2", c2.Attempt)
	}
}

func TestRepeatedAdvanceDoesNotDuplicateOutboxRows(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.apply(diamond)
	for range 3 {
		f.trigger("diamond", "")
	}
	for range 5 {
		f.advance()
	}
	if n := f.count(`SELECT count(*) FROM outbox`); n != 3 {
		t.Fatalf("%d outbox rows, want 3 (one per root)", n)
	}
	if n := f.count(`SELECT count(*) FROM task_runs WHERE state = 'READY'`); n != 3 {
		t.Fatalf("%d READY tasks, want 3", n)
	}
}

func TestConcurrentAdvanceNeverDuplicatesADispatch(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.apply(diamond)
	for range 10 {
		runID := f.trigger("diamond", "")
		f.runTaskUncounted(f.taskID(runID, "a"))
	}
	var promoted atomic.Int32
	together(8, func(int) {
		res, err := f.s.Advance(f.ctx, nil, 1000, "sched")
		if err != nil {
			t.Errorf("advance: %v", err)
			return
		}
		promoted.Add(int32(res.Promoted))
	})
	if n := promoted.Load(); n != 20 {
		t.Fatalf("promoted %d in total, want 20 (b and c of 10 runs)", n)
	}
	if n := f.count(`SELECT count(*) FROM (SELECT 1 FROM outbox GROUP BY task_run_id, fencing_token_snapshot HAVING count(*) > 1) d`); n != 0 {
		t.Fatalf("%d (task, token) pairs have more than one outbox row", n)
	}
	if n := f.count(`SELECT count(*) FROM outbox`); n != 30 {
		t.Fatalf("%d outbox rows, want 30", n)
	}
	if n := f.count(`SELECT count(*) FROM task_events WHERE to_state = 'READY' AND from_state = 'PENDING'`); n != 20 {
		t.Fatalf("%d promotion events, want 20", n)
	}
}

func TestJoinIsPromotedExactlyOnce(t *testing.T) {
	t.Parallel()
	var b strings.Builder
	b.WriteString("name: join\ntasks:\n")
	var parents []string
	for i := range 8 {
		p := fmt.Sprintf("p%d", i)
		parents = append(parents, p)
		fmt.Fprintf(&b, "  - {name: %s, handler: noop}\n", p)
	}
	fmt.Fprintf(&b, "  - {name: j, handler: noop, depends_on: [%s]}\n", strings.Join(parents, ", "))
	f := newFixture(t)
	f.apply(b.String())
	for round := range 20 {
		runID := f.trigger("join", "")
		ts := f.tasks(runID)
		// The parents finish together.
		together(len(parents), func(i int) {
			id := ts[parents[i]].ID
			_, tok, err := f.s.TaskStateOf(f.ctx, id)
			if err != nil {
				t.Error(err)
				return
			}
			c, ok, err := f.s.Claim(f.ctx, id, tok, "w", time.Minute)
			if !ok || err != nil {
				t.Errorf("claim %s: %v %v", parents[i], ok, err)
				return
			}
			if _, ok, err := f.s.Finish(f.ctx, store.FinishRequest{ID: id, Token: c.FencingToken, Outcome: store.OutcomeSucceeded}); !ok || err != nil {
				t.Errorf("finish %s: %v %v", parents[i], ok, err)
			}
		})
		var promoted atomic.Int32
		together(6, func(int) {
			res, err := f.s.Advance(f.ctx, nil, 1000, "sched")
			if err != nil {
				t.Errorf("advance: %v", err)
				return
			}
			promoted.Add(int32(res.Promoted))
		})
		// The last parent's finish promotes the join (the counter join);
		// the passes after it find it promoted. Either way: once.
		j := ts["j"].ID
		st, _ := f.state(j)
		events := f.count(`SELECT count(*) FROM task_events WHERE task_run_id = $1 AND to_state = 'READY'`, j)
		if events != 1 || promoted.Load() != 0 || st != core.TaskReady || f.outboxRows(j) != 1 {
			t.Fatalf("round %d: the join was promoted %d times (%d by the passes), is %s with %d outbox rows; want once (by a finish), READY, 1",
				round, events, promoted.Load(), st, f.outboxRows(j))
		}
		f.runTask(j)
		f.advance()
		if r := f.run(runID); r.State != "SUCCEEDED" || r.FinishedAt == nil {
			t.Fatalf("round %d: run %s", round, r.State)
		}
	}
}

func TestRunIsFailedWhileASiblingStillRuns(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.apply(`
name: siblings
tasks:
  - {name: doomed, handler: fail, retry: {max_attempts: 1}}
  - {name: slow, handler: sleep}
  - {name: after, handler: noop, depends_on: [doomed]}
`)
	runID := f.trigger("siblings", "")
	ts := f.tasks(runID)
	slow := f.claim(ts["slow"].ID, "w1", time.Minute)
	doomed := f.claim(ts["doomed"].ID, "w2", time.Minute)
	f.advance()
	if r := f.run(runID); r.State != "RUNNING" {
		t.Fatalf("run %s, want RUNNING", r.State)
	}
	if st := f.finish(doomed, store.FinishRequest{Outcome: store.OutcomeFailed, Error: "nope"}); st != core.TaskDead {
		t.Fatalf("doomed: %s", st)
	}
	f.advance()
	r := f.run(runID)
	if r.State != "FAILED" || r.FinishedAt != nil {
		t.Fatalf("run %s finished %v; want FAILED and still open (a sibling runs)", r.State, r.FinishedAt)
	}
	f.wantState(ts["slow"].ID, core.TaskRunning)         // not fail_fast: untouched
	f.wantState(ts["after"].ID, core.TaskUpstreamFailed) // its parent is DEAD
	f.succeed(slow)
	f.advance()
	r = f.run(runID)
	if r.State != "FAILED" || r.FinishedAt == nil {
		t.Fatalf("run %s finished %v; want FAILED and settled", r.State, r.FinishedAt)
	}
}

func TestFailFastCancelsUnstartedSiblings(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.apply(`
name: ff
fail_fast: true
tasks:
  - {name: doomed, handler: fail, retry: {max_attempts: 1}}
  - {name: running, handler: sleep}
  - {name: ready, handler: noop}
  - {name: pending, handler: noop, depends_on: [ready]}
  - {name: retrying, handler: noop}
`)
	runID := f.trigger("ff", "")
	ts := f.tasks(runID)
	running := f.claim(ts["running"].ID, "w1", time.Minute)
	retrying := f.claim(ts["retrying"].ID, "w1", time.Minute)
	f.finish(retrying, store.FinishRequest{Outcome: store.OutcomeFailed, Error: "x", RetryDelay: time.Hour})
	doomed := f.claim(ts["doomed"].ID, "w2", time.Minute)
	f.finish(doomed, store.FinishRequest{Outcome: store.OutcomeFailed, Error: "fatal", Permanent: true})
	res := f.advance()
	if res.FailFastCancelled != 3 {
		t.Fatalf("fail-fast cancelled %d, want 3 (ready, pending, retrying): %+v", res.FailFastCancelled, res)
	}
	for _, n := range []string{"ready", "pending", "retrying"} {
		f.wantState(ts[n].ID, core.TaskCancelled)
	}
	f.wantState(ts["running"].ID, core.TaskRunning)
	if r := f.run(runID); r.State != "FAILED" || r.FinishedAt != nil {
		t.Fatalf("run %s finished %v", r.State, r.FinishedAt)
	}
	// The running sibling is told to stop at its next heartbeat.
	if rr, err := f.s.Renew(f.ctx, running.ID, running.FencingToken, time.Minute); err != nil || !rr.OK || !rr.Stop {
		t.Fatalf("renew of the running sibling: %+v %v", rr, err)
	}
	f.finish(running, store.FinishRequest{Outcome: store.OutcomeCancelled, Error: "run failed"})
	f.advance()
	if r := f.run(runID); r.State != "FAILED" || r.FinishedAt == nil {
		t.Fatalf("run %s finished %v; want FAILED and settled", r.State, r.FinishedAt)
	}
	d := f.task(ts["ready"].ID)
	last := d.Events[len(d.Events)-1]
	if last.ToState != "CANCELLED" || last.Actor != "test-scheduler" || last.Reason == nil || !strings.Contains(*last.Reason, "fail_fast") {
		t.Fatalf("cancel event %+v", last)
	}
}

func TestAdvancePagesWithACursor(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.apply(oneTask)
	for range 5 {
		f.trigger("one", "")
	}
	seen := 0
	var cur *store.Cursor
	for pass := 0; ; pass++ {
		res, err := f.s.Advance(f.ctx, cur, 2, "sched")
		if err != nil {
			t.Fatal(err)
		}
		seen += res.Runs
		if res.Next == nil {
			break
		}
		if pass > 5 {
			t.Fatal("the cursor does not move")
		}
		cur = res.Next
	}
	if seen != 5 {
		t.Fatalf("the passes examined %d runs, want 5", seen)
	}
}

// TestASettledRunHasATerminalState: once finished_at is set a run is no
// longer derived, so its state must be final. After fail_fast cancelled a
// sibling and the DEAD task is requeued and succeeds, the run's tasks are
// SUCCEEDED + CANCELLED without a cancel request: DeriveRunState says
// RUNNING, RunSettled says settled, and the run stays "RUNNING" forever.
func TestASettledRunHasATerminalState(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.apply("name: ff\nfail_fast: true\ntasks:\n  - {name: x, handler: noop}\n  - {name: y, handler: noop}\n")
	runID := f.trigger("ff", "")
	ts := f.tasks(runID)
	c := f.claim(ts["x"].ID, "w", time.Minute)
	f.finish(c, store.FinishRequest{Outcome: store.OutcomeFailed, Permanent: true, Error: "e"})
	f.advance()
	if err := f.s.Requeue(f.ctx, ts["x"].ID, "alice", "fixed"); err != nil {
		t.Fatal(err)
	}
	f.advance()
	f.runTask(ts["x"].ID)
	f.advance()
	r := f.run(runID)
	if r.FinishedAt != nil && !r.State.Terminal() {
		t.Fatalf("run settled in state %s (x %s, y %s)", r.State, f.tasks(runID)["x"].State, f.tasks(runID)["y"].State)
	}
}
