package store_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/flowforge/flowforge/core"
	"github.com/flowforge/flowforge/core/store"
)

const pauseChain = `
name: held
tasks:
  - {name: a, handler: noop}
  - {name: b, handler: noop, depends_on: [a]}
`

// pause pauses workflow with mode, insisting it succeeds.
func (f *fixture) pause(workflow string, mode core.PauseMode) store.PauseResult {
	f.t.Helper()
	res, err := f.s.PauseWorkflow(f.ctx, workflow, mode, "alice", "incident 42")
	if err != nil {
		f.t.Fatalf("pause %s: %v", workflow, err)
	}
	return res
}

// resume resumes workflow, insisting it succeeds.
func (f *fixture) resume(workflow string) store.ResumeResult {
	f.t.Helper()
	res, err := f.s.ResumeWorkflow(f.ctx, workflow, "bob", "fixed")
	if err != nil {
		f.t.Fatalf("resume %s: %v", workflow, err)
	}
	return res
}

// publishable reports how many outbox rows of task id a publisher's
// LockOutbox takes (it rolls the batch back).
func (f *fixture) publishable(id uuid.UUID) int {
	f.t.Helper()
	b, err := f.s.LockOutbox(f.ctx, 10000)
	if err != nil {
		f.t.Fatalf("lock outbox: %v", err)
	}
	defer b.Rollback()
	n := 0
	for _, r := range b.Rows {
		var d struct {
			ID uuid.UUID `json:"task_run_id"`
		}
		if err := json.Unmarshal(r.Payload, &d); err != nil {
			f.t.Fatal(err)
		}
		if d.ID == id {
			n++
		}
	}
	return n
}

// publishAll stamps every pending outbox row published, as a publisher
// whose broker confirmed them all would.
func (f *fixture) publishAll() {
	f.t.Helper()
	if _, err := f.db.ExecContext(f.ctx, `UPDATE outbox SET published_at = now() WHERE published_at IS NULL`); err != nil {
		f.t.Fatal(err)
	}
}

// wantHeld checks that the READY task id is held by the pause: no
// publisher takes its outbox rows and a claim with its token (the one its
// dispatch carries) loses; the task stays READY.
func (f *fixture) wantHeld(id uuid.UUID) {
	f.t.Helper()
	st, tok := f.state(id)
	if st != core.TaskReady {
		f.t.Fatalf("task %s is %s, want READY (held by the pause)", id, st)
	}
	if n := f.publishable(id); n != 0 {
		f.t.Fatalf("a publisher takes %d outbox rows of task %s of a paused workflow, want 0", n, id)
	}
	if _, ok, err := f.s.Claim(f.ctx, id, tok, "w9", time.Minute); ok || err != nil {
		f.t.Fatalf("claim of task %s of a paused workflow: ok=%v err=%v, want a lost claim", id, ok, err)
	}
	f.wantState(id, core.TaskReady)
}

// wantReleased checks that after the resume task id goes out and runs: a
// publisher takes exactly one of its rows, and the claim with its token
// wins.
func (f *fixture) wantReleased(id uuid.UUID) {
	f.t.Helper()
	if n := f.publishable(id); n != 1 {
		f.t.Fatalf("after the resume a publisher takes %d outbox rows of task %s, want 1", n, id)
	}
	f.runTask(id)
}

func TestPauseAndResumeAreAuditedIdempotentAndRefuseBadInput(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.apply(pauseChain)

	_, err := f.s.PauseWorkflow(f.ctx, "nope", core.PauseQueue, "alice", "x")
	if !errors.Is(err, store.ErrNotFound) || err.Error() != `pause workflow "nope": not found: no workflow is called "nope"` {
		t.Fatalf("pause of an unknown workflow: %v", err)
	}
	_, err = f.s.ResumeWorkflow(f.ctx, "nope", "alice", "")
	if !errors.Is(err, store.ErrNotFound) || err.Error() != `resume workflow "nope": not found: no workflow is called "nope"` {
		t.Fatalf("resume of an unknown workflow: %v", err)
	}
	_, err = f.s.PauseWorkflow(f.ctx, "held", "later", "alice", "x")
	if !errors.Is(err, core.ErrBadPauseMode) || err.Error() != `pause workflow "held": pause mode must be queue or drop, not "later"` {
		t.Fatalf("pause with a bad mode: %v", err)
	}
	if _, err = f.s.PauseWorkflow(f.ctx, "held", core.PauseQueue, "alice", " "); !errors.Is(err, core.ErrBadReason) {
		t.Fatalf("pause without a reason: %v", err)
	}
	if n := f.count(`SELECT count(*) FROM workflow_pause_events`) + f.count(`SELECT count(*) FROM workflow_pauses`); n != 0 {
		t.Fatalf("refused pauses wrote %d rows", n)
	}
	if res, err := f.s.ResumeWorkflow(f.ctx, "held", "alice", ""); err != nil || res.Resumed {
		t.Fatalf("resume of a workflow that is not paused: %+v %v, want a no-op", res, err)
	}

	first := f.pause("held", core.PauseQueue)
	if !first.Changed || first.Repaused || first.Pause.Mode != core.PauseQueue || first.Pause.Actor != "alice" || first.Pause.Reason != "incident 42" {
		t.Fatalf("pause: %+v", first)
	}
	if again := f.pause("held", core.PauseQueue); again.Changed || again.Pause != first.Pause {
		t.Fatalf("identical re-pause: %+v, want no change from %+v", again, first.Pause)
	}
	re, err := f.s.PauseWorkflow(f.ctx, "held", core.PauseDrop, "carol", "drop the flood")
	if err != nil || !re.Changed || !re.Repaused || re.Pause.Mode != core.PauseDrop || re.Pause.Actor != "carol" ||
		re.Pause.Reason != "drop the flood" || !re.Pause.Since.Equal(first.Pause.Since) {
		t.Fatalf("re-pause with mode drop: %+v %v", re, err)
	}
	if p, ok, err := f.s.WorkflowPause(f.ctx, "held"); err != nil || !ok || p != re.Pause {
		t.Fatalf("WorkflowPause: %+v %v %v, want %+v", p, ok, err, re.Pause)
	}
	if _, err := f.s.Trigger(f.ctx, store.TriggerRequest{Workflow: "held"}); !errors.Is(err, store.ErrWorkflowPaused) {
		t.Fatalf("trigger while dropping: %v", err)
	}
	res := f.resume("held")
	if !res.Resumed || res.Pause.Dropped != 1 || res.Pause.Mode != core.PauseDrop {
		t.Fatalf("resume: %+v", res)
	}
	if res, err := f.s.ResumeWorkflow(f.ctx, "held", "alice", ""); err != nil || res.Resumed {
		t.Fatalf("second resume: %+v %v, want a no-op", res, err)
	}
	evs, err := f.s.PauseEvents(f.ctx, "held", 0)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range evs {
		d := "-"
		if e.Dropped != nil {
			d = strings.Repeat("x", int(*e.Dropped))
		}
		got = append(got, e.Action+"/"+string(e.Mode)+"/"+e.Actor+"/"+e.Reason+"/"+d)
	}
	want := []string{"resume/drop/bob/fixed/x", "pause/drop/carol/drop the flood/-", "pause/queue/alice/incident 42/-"}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("pause events, newest first:\n got %q\nwant %q", got, want)
	}
	if ps, err := f.s.WorkflowPauses(f.ctx); err != nil || len(ps) != 0 {
		t.Fatalf("pauses after the resume: %+v %v", ps, err)
	}
}

// TestModeDropDropsEveryTriggerPathAndCountsIt: with mode drop no trigger
// (one run, many runs) creates anything, each returns ErrWorkflowPaused,
// and the pause counts every run not created; with mode queue the run is
// created and its root waits, unpublished, until the resume.
func TestModeDropDropsEveryTriggerPathAndCountsIt(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.apply(pauseChain)
	f.pause("held", core.PauseDrop)
	_, err := f.s.Trigger(f.ctx, store.TriggerRequest{Workflow: "held", IdempotencyKey: "k1"})
	if !errors.Is(err, store.ErrWorkflowPaused) || !strings.HasPrefix(err.Error(), `trigger "held": workflow is paused (mode drop)`) {
		t.Fatalf("trigger: %v", err)
	}
	_, err = f.s.TriggerMany(f.ctx, store.TriggerManyRequest{Workflow: "held", Params: []json.RawMessage{nil, nil, nil}})
	if !errors.Is(err, store.ErrWorkflowPaused) {
		t.Fatalf("trigger many: %v", err)
	}
	if n := f.count(`SELECT count(*) FROM workflow_runs`); n != 0 {
		t.Fatalf("dropped triggers created %d runs", n)
	}
	if p, _, _ := f.s.WorkflowPause(f.ctx, "held"); p.Dropped != 4 {
		t.Fatalf("dropped %d, want 4", p.Dropped)
	}

	// Mode queue: the run is created, its root waits.
	f.pause("held", core.PauseQueue)
	runID := f.trigger("held", "")
	a := f.taskID(runID, "a")
	f.wantHeld(a)
	if st, err := f.s.OutboxStatus(f.ctx); err != nil || st.Pending != 0 || st.Paused != 1 || st.OldestPendingSeconds != 0 {
		t.Fatalf("outbox status while paused: %+v %v, want the row counted as paused, not pending", st, err)
	}
	res := f.resume("held")
	if res.Pause.Dropped != 4 || res.Redispatched != 0 {
		t.Fatalf("resume: %+v (the root's row was still pending: nothing to re-send)", res)
	}
	if st, err := f.s.OutboxStatus(f.ctx); err != nil || st.Pending != 1 || st.Paused != 0 {
		t.Fatalf("outbox status after the resume: %+v %v", st, err)
	}
	f.wantReleased(a)
	f.advance()
	b := f.taskID(runID, "b")
	f.runTask(b)
	f.advance()
	if r := f.run(runID); r.State != "SUCCEEDED" {
		t.Fatalf("run %s after the resume, want SUCCEEDED", r.State)
	}
}

// TestADispatchAlreadyOnTheQueueIsHandedBackAndResentOnResume: the
// dispatch went out before the pause; its claim loses (the task stays
// READY, nothing runs), the redispatch leaves it alone, and the resume
// re-sends it at once.
func TestADispatchAlreadyOnTheQueueIsHandedBackAndResentOnResume(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.apply(pauseChain)
	runID := f.trigger("held", "")
	a := f.taskID(runID, "a")
	f.publishAll()
	f.pause("held", core.PauseQueue)
	f.wantHeld(a)
	if n, err := f.s.Redispatch(f.ctx, 0, 100, "test"); err != nil || n != 0 {
		t.Fatalf("redispatch while paused: %d %v, want 0 (a paused task is not lost)", n, err)
	}
	// A long pause: the time it waited is not time it waited for a worker.
	if _, err := f.db.ExecContext(f.ctx, `UPDATE task_runs SET ready_at = now() - interval '1 hour' WHERE id = $1`, a); err != nil {
		t.Fatal(err)
	}
	res := f.resume("held")
	if res.Redispatched != 1 {
		t.Fatalf("resume re-sent %d tasks, want 1", res.Redispatched)
	}
	if age, ok, err := f.s.ReadyFor(f.ctx, a); err != nil || !ok || age > time.Minute {
		t.Fatalf("READY for %v (%v %v) after the resume, want counted from the resume", age, ok, err)
	}
	if n := f.count(`SELECT count(*) FROM task_events WHERE task_run_id = $1 AND reason LIKE '%its workflow was resumed'`, a); n != 1 {
		t.Fatalf("%d history rows for the resume's redispatch, want 1", n)
	}
	f.wantReleased(a)
}

// TestAPauseRacingAPromotionHoldsThePromotedTask (race 1): a scheduler
// pass promotes b (READY, with its outbox row) in the same instant as the
// pause commits; whichever commits first, once the pause has committed b
// is neither published nor claimed until the resume.
func TestAPauseRacingAPromotionHoldsThePromotedTask(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.apply(pauseChain)
	for range 10 {
		runID := f.trigger("held", "")
		f.runTask(f.taskID(runID, "a"))
		together(2, func(g int) {
			if g == 0 {
				if _, err := f.s.Advance(f.ctx, nil, 1000, "test-scheduler"); err != nil {
					t.Errorf("advance: %v", err)
				}
				return
			}
			if _, err := f.s.PauseWorkflow(f.ctx, "held", core.PauseQueue, "alice", "race"); err != nil {
				t.Errorf("pause: %v", err)
			}
		})
		f.advance() // in case the racing pass ran before a's finish was visible
		b := f.taskID(runID, "b")
		f.wantHeld(b)
		f.resume("held")
		f.wantReleased(b)
	}
}

// TestARedispatchWhilePausedSendsNothing (race 2): a stale READY task whose
// dispatch went out long ago; a redispatch racing the pause may write its
// new row before the pause commits, but that row is held, no claim wins,
// and the resume leaves exactly one row to publish.
func TestARedispatchWhilePausedSendsNothing(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.apply(pauseChain)
	for range 10 {
		runID := f.trigger("held", "")
		a := f.taskID(runID, "a")
		f.publishAll()
		together(2, func(g int) {
			if g == 0 {
				if _, err := f.s.Redispatch(f.ctx, 0, 100, "test"); err != nil {
					t.Errorf("redispatch: %v", err)
				}
				return
			}
			if _, err := f.s.PauseWorkflow(f.ctx, "held", core.PauseQueue, "alice", "race"); err != nil {
				t.Errorf("pause: %v", err)
			}
		})
		f.wantHeld(a)
		// Even when every copy went out (the racing one too, had it won),
		// a redispatch after the pause sends nothing.
		f.publishAll()
		if n, err := f.s.Redispatch(f.ctx, 0, 100, "test"); err != nil || n != 0 {
			t.Fatalf("redispatch after the pause: %d %v, want 0", n, err)
		}
		f.resume("held")
		f.wantReleased(a)
	}
}

// TestARequeueWhilePausedMakesTheTaskReadyButHoldsIt (race 3): a DEAD task
// requeued while its workflow is paused goes PENDING, then READY with its
// outbox row, and is neither published nor claimed until the resume.
func TestARequeueWhilePausedMakesTheTaskReadyButHoldsIt(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	runID, b := f.deadRun()
	f.publishAll() // b's first dispatch went out
	together(2, func(g int) {
		if g == 0 {
			if err := f.s.Requeue(f.ctx, b, "alice", "retry it"); err != nil {
				t.Errorf("requeue: %v", err)
			}
			return
		}
		if _, err := f.s.PauseWorkflow(f.ctx, "twostep", core.PauseQueue, "alice", "race"); err != nil {
			t.Errorf("pause: %v", err)
		}
	})
	f.advance()
	f.wantHeld(b)
	f.resume("twostep")
	if n := f.publishable(b); n != 1 {
		t.Fatalf("after the resume a publisher takes %d rows of the requeued task, want 1", n)
	}
	c := f.claim(b, "w1", time.Minute)
	f.succeed(c)
	f.advance()
	if r := f.run(runID); r.State != "SUCCEEDED" {
		t.Fatalf("run %s, want SUCCEEDED", r.State)
	}
}

// TestARetryComingDueWhilePausedIsHeld (race 4): a RETRYING task falls due
// in the same instant as the pause; the scheduler makes it READY with its
// outbox row, and it is neither published nor claimed until the resume.
func TestARetryComingDueWhilePausedIsHeld(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.apply(pauseChain)
	for range 5 {
		runID := f.trigger("held", "")
		a := f.taskID(runID, "a")
		f.publishAll() // a's first dispatch went out
		c := f.claim(a, "w1", time.Minute)
		f.finish(c, store.FinishRequest{Outcome: store.OutcomeFailed, Error: "flaky", RetryDelay: time.Millisecond})
		f.waitRetryDue(a)
		together(2, func(g int) {
			if g == 0 {
				if _, err := f.s.Advance(f.ctx, nil, 1000, "test-scheduler"); err != nil {
					t.Errorf("advance: %v", err)
				}
				return
			}
			if _, err := f.s.PauseWorkflow(f.ctx, "held", core.PauseQueue, "alice", "race"); err != nil {
				t.Errorf("pause: %v", err)
			}
		})
		f.advance()
		f.wantHeld(a)
		f.resume("held")
		f.wantReleased(a)
	}
}

// TestAClaimRacingThePauseEitherRunsOrIsHeld: a claim and the pause in the
// same instant; the claim either won (the task RUNNING: it finishes as an
// already running task does) or lost and the task is held; once the pause
// has committed, no claim wins.
func TestAClaimRacingThePauseEitherRunsOrIsHeld(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.apply(pauseChain)
	for range 10 {
		runID := f.trigger("held", "")
		a := f.taskID(runID, "a")
		later := f.taskID(f.trigger("held", ""), "a")
		_, tok := f.state(a)
		var won bool
		together(2, func(g int) {
			if g == 0 {
				var err error
				if _, won, err = f.s.Claim(f.ctx, a, tok, "w1", time.Minute); err != nil {
					t.Errorf("claim: %v", err)
				}
				return
			}
			if _, err := f.s.PauseWorkflow(f.ctx, "held", core.PauseQueue, "alice", "race"); err != nil {
				t.Errorf("pause: %v", err)
			}
		})
		if won {
			f.wantState(a, core.TaskRunning)
		} else {
			f.wantHeld(a)
		}
		f.wantHeld(later) // a claim after the pause committed
		f.resume("held")
		if !won {
			f.wantReleased(a)
		}
		f.wantReleased(later)
	}
}

// TestAPausedWorkflowsRunsAreNotStuck: what would call a task stuck — the
// redispatch (a READY task no worker claimed) and the outbox backlog's
// pending count and oldest age — does not count a paused workflow's tasks;
// other workflows' are counted as before.
func TestAPausedWorkflowsRunsAreNotStuck(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.apply(pauseChain)
	f.apply(oneTask)
	f.trigger("held", "")
	f.trigger("held", "")
	f.pause("held", core.PauseQueue)
	f.trigger("held", "")
	f.waitDB("the outbox rows to age", `SELECT min(created_at) < now() FROM outbox`)
	st, err := f.s.OutboxStatus(f.ctx)
	if err != nil || st.Pending != 0 || st.Paused != 3 || st.OldestPendingSeconds != 0 || st.FailingRows != 0 {
		t.Fatalf("outbox status: %+v %v, want 3 paused rows and nothing pending", st, err)
	}
	if rows, err := f.s.OldestPendingDispatches(f.ctx, 10); err != nil || len(rows) != 0 {
		t.Fatalf("the dashboard's oldest pending dispatches: %+v %v, want none (held, not stuck)", rows, err)
	}
	f.trigger("one", "")
	if st, _ := f.s.OutboxStatus(f.ctx); st.Pending != 1 || st.Paused != 3 {
		t.Fatalf("outbox status with another workflow's row: %+v", st)
	}
	if rows, err := f.s.OldestPendingDispatches(f.ctx, 10); err != nil || len(rows) != 1 || rows[0].Workflow != "one" {
		t.Fatalf("the dashboard's oldest pending dispatches: %+v %v, want the other workflow's row", rows, err)
	}
	f.publishAll()
	if n, err := f.s.Redispatch(f.ctx, 0, 100, "test"); err != nil || n != 1 {
		t.Fatalf("redispatch: %d %v, want only the other workflow's task", n, err)
	}
	if res := f.resume("held"); res.Redispatched != 3 {
		t.Fatalf("resume re-sent %d, want 3", res.Redispatched)
	}
}

// TestModeDropAnswersATriggerWhoseKeyNamesARunWithThatRun: a trigger retried
// with the idempotency key of a run created before the pause is not
// dropped (nothing would be created either way): it gets that run, as
// without a pause, and the pause counts no drop; with other params it is
// the key's conflict, as always. A fresh key is still dropped and counted.
func TestModeDropAnswersATriggerWhoseKeyNamesARunWithThatRun(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.apply(pauseChain)
	first, err := f.s.Trigger(f.ctx, store.TriggerRequest{Workflow: "held", IdempotencyKey: "k1"})
	if err != nil {
		t.Fatal(err)
	}
	f.pause("held", core.PauseDrop)
	again, err := f.s.Trigger(f.ctx, store.TriggerRequest{Workflow: "held", IdempotencyKey: "k1"})
	if err != nil || again.RunID != first.RunID || !again.Existing {
		t.Fatalf("retry with the key of an existing run while paused (drop): %+v %v, want run %s, existing", again, err, first.RunID)
	}
	_, err = f.s.Trigger(f.ctx, store.TriggerRequest{Workflow: "held", IdempotencyKey: "k1", Params: json.RawMessage(`{"other":1}`)})
	if !errors.Is(err, store.ErrConflict) {
		t.Fatalf("the key with other params while paused: %v, want ErrConflict", err)
	}
	if p, _, _ := f.s.WorkflowPause(f.ctx, "held"); p.Dropped != 0 {
		t.Fatalf("dropped %d, want 0 (nothing was dropped)", p.Dropped)
	}
	if _, err := f.s.Trigger(f.ctx, store.TriggerRequest{Workflow: "held", IdempotencyKey: "k2"}); !errors.Is(err, store.ErrWorkflowPaused) {
		t.Fatalf("a fresh key while paused (drop): %v, want ErrWorkflowPaused", err)
	}
	if p, _, _ := f.s.WorkflowPause(f.ctx, "held"); p.Dropped != 1 {
		t.Fatalf("dropped %d, want 1", p.Dropped)
	}
	if n := f.count(`SELECT count(*) FROM workflow_runs`); n != 1 {
		t.Fatalf("%d runs, want the first one only", n)
	}
}
