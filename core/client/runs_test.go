package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/flowforge/flowforge/core"
	"github.com/flowforge/flowforge/core/client"
	"github.com/flowforge/flowforge/core/store"
	"github.com/flowforge/flowforge/core/store/storetest"
)

// TestMain fails the run if a goroutine outlives the tests: a Client
// starts none, and Close releases the database/sql handle New opens over
// the caller's pool.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// TestARunReadsAsRunShowShowsIt: Run takes an 8-digit prefix as ffctl
// does and returns the run with its tasks in DAG order; its JSON has the
// fields of `ffctl run show -o json`.
func TestARunReadsAsRunShowShowsIt(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	res, err := f.c.Trigger(f.ctx, "pair", map[string]string{"day": "mon"}, client.TriggerOptions{IdempotencyKey: "mon"})
	if err != nil {
		t.Fatal(err)
	}
	run, err := f.c.Run(f.ctx, res.RunID.String()[:8])
	if err != nil {
		t.Fatal(err)
	}
	if run.ID != res.RunID || run.TasksTotal != 2 || run.Tasks[0].Name != "a" || run.Tasks[1].Name != "b" {
		t.Fatalf("run %+v, want %s with tasks a, b", run, res.RunID)
	}
	raw, err := json.Marshal(run)
	if err != nil {
		t.Fatal(err)
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(raw, &fields); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"id", "workflow", "workflow_version", "state", "params", "idempotency_key", "fail_fast", "created_at", "tasks_total", "tasks_done", "tasks", "rerun_of"} {
		if _, ok := fields[k]; !ok {
			t.Errorf("the run's JSON lacks %q: %s", k, raw)
		}
	}
	runs, err := f.c.ListRuns(f.ctx, client.RunFilter{Workflow: "pair"})
	if err != nil || len(runs) != 1 || runs[0].ID != res.RunID {
		t.Fatalf("list: %v, %v", runs, err)
	}
}

// TestWaitReturnsTheRunOnceItHasEnded: Wait reads until the run has
// settled, calling OnRead with each read; the run ends while it waits.
func TestWaitReturnsTheRunOnceItHasEnded(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	res, err := f.c.Trigger(f.ctx, "pair", nil, client.TriggerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	read := make(chan client.Run, 1000)
	type waited struct {
		run client.Run
		err error
	}
	done := make(chan waited, 1)
	go func() {
		r, err := f.c.Wait(f.ctx, res.RunID.String(), client.WaitOptions{OnRead: func(r client.Run) { read <- r }})
		done <- waited{r, err}
	}()
	<-read // Wait has read the run once, not ended
	f.finishRun(res.RunID)
	select {
	case w := <-done:
		if w.err != nil || w.run.State != core.RunSucceeded || !w.run.Ended() {
			t.Fatalf("wait: %s, %v; want SUCCEEDED", w.run.State, w.err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("Wait did not return within 20s of the run's end")
	}
}

// TestWaitStopsWhenItsContextEnds: the last read and an error wrapping
// the deadline; the run is untouched.
func TestWaitStopsWhenItsContextEnds(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	res, err := f.c.Trigger(f.ctx, "pair", nil, client.TriggerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(f.ctx, 300*time.Millisecond)
	defer cancel()
	r, err := f.c.Wait(ctx, res.RunID.String(), client.WaitOptions{})
	if !errors.Is(err, context.DeadlineExceeded) || r.ID != res.RunID || r.State != core.RunRunning {
		t.Fatalf("wait cut short: run %s %s, %v; want the RUNNING run (its root READY, no worker) and DeadlineExceeded", r.ID, r.State, err)
	}
}

// TestCancelCancelsOnceThenConflicts: the unstarted tasks are cancelled,
// audited with the call's actor; a second cancel is ErrConflict.
func TestCancelCancelsOnceThenConflicts(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	res, err := f.c.Trigger(f.ctx, "pair", nil, client.TriggerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	got, err := f.c.Cancel(f.ctx, res.RunID.String(), client.ActionOptions{Reason: "wrong order", Actor: "token:ops"})
	if err != nil || got.TasksCancelled != 2 {
		t.Fatalf("cancel: %+v, %v; want 2 tasks cancelled", got, err)
	}
	if n := f.count(`SELECT count(*) FROM task_events WHERE actor = 'token:ops' AND reason LIKE '%wrong order%'`); n != 2 {
		t.Fatalf("%d audited cancellations by token:ops, want 2", n)
	}
	if _, err := f.c.Cancel(f.ctx, res.RunID.String(), client.ActionOptions{Reason: "again"}); !errors.Is(err, client.ErrConflict) {
		t.Fatalf("second cancel: %v, want ErrConflict", err)
	}
}

// TestRequeueDeadRequeuesADeadTaskAndRefusesALiveOne: the DEAD task goes
// back to PENDING; a task that is not DEAD is a result whose Err is
// ErrConflict.
func TestRequeueDeadRequeuesADeadTaskAndRefusesALiveOne(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	dead, err := f.c.Trigger(f.ctx, "one", nil, client.TriggerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	live, err := f.c.Trigger(f.ctx, "one", nil, client.TriggerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	d, _ := f.c.Run(f.ctx, dead.RunID.String())
	l, _ := f.c.Run(f.ctx, live.RunID.String())
	ct, ok := storetest.Claim(t, f.s, d.Tasks[0].ID, d.Tasks[0].FencingToken, "w1", time.Minute)
	if !ok {
		t.Fatal("claim lost")
	}
	storetest.Finish(t, f.s, store.FinishRequest{ID: ct.ID, Token: ct.FencingToken, WorkerID: "w1", Outcome: store.OutcomeFailed, Error: "boom", Permanent: true})
	res, err := f.c.RequeueDead(f.ctx, []string{d.Tasks[0].ID.String()[:8], l.Tasks[0].ID.String()}, client.ActionOptions{Reason: "fixed"})
	if err != nil || len(res) != 2 {
		t.Fatalf("requeue: %v, %v", res, err)
	}
	if !res[0].Requeued() || res[0].Err() != nil {
		t.Fatalf("the DEAD task: %+v, %v; want requeued", res[0], res[0].Err())
	}
	if res[1].Requeued() || !errors.Is(res[1].Err(), client.ErrConflict) {
		t.Fatalf("the READY task: %+v, %v; want refused with ErrConflict", res[1], res[1].Err())
	}
	task, err := f.c.Task(f.ctx, d.Tasks[0].ID.String())
	if err != nil || task.State != core.TaskPending || len(task.Attempts) != 1 || task.Attempts[0].Outcome != core.TaskDead {
		t.Fatalf("task after the requeue: %s, attempts %+v, %v", task.State, task.Attempts, err)
	}
}
