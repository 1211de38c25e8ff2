package store_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/flowforge/flowforge/core"
	"github.com/flowforge/flowforge/core/store"
)

// What GetRun and GetTask say of held tasks (query.go, childruns.go): a
// sleep's due time, a wait's event, key and on_timeout and the event that
// completed it, a child run both ways.

const holder = `
name: holder
tasks:
  - {name: nap, sleep: {for: 24h}}
  - name: approve
    wait_for: {event: order.approved, key: "params.order_id", timeout: 7d, on_timeout: skip}
  - name: ship
    workflow: {name: child, params: "{'order': params.order_id}"}
`

// TestGetRunAndGetTaskShowWhatHeldTasksHold: once a pass starts them, the
// sleep has its due time 24 h after its start and about as many seconds
// left on the database clock; the wait its event, key, on_timeout and its
// timeout as due time; the ship task its child run, which the parent
// lists among its children (with the task, workflow and state) and which
// names its parent run, task run and task and its depth. An event then
// completes the wait: its due time is gone and the event's id is named.
// A plain task has none of these fields, in Go or in JSON.
func TestGetRunAndGetTaskShowWhatHeldTasksHold(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.apply(childFile)
	f.apply(holder)
	run := f.trigger("holder", `{"order_id": "ORDER-17"}`)
	f.advance()
	tasks := f.tasks(run)
	nap, approve, ship := tasks["nap"], tasks["approve"], tasks["ship"]
	if nap.State != core.TaskRunning || nap.DueAt == nil || nap.StartedAt == nil || nap.DueAt.Sub(*nap.StartedAt).Hours() != 24 {
		t.Fatalf("nap: %s due %v started %v, want RUNNING due 24h after its start", nap.State, nap.DueAt, nap.StartedAt)
	}
	if nap.DueSeconds == nil || *nap.DueSeconds < 24*3600-60 || *nap.DueSeconds > 24*3600 {
		t.Errorf("nap: %v seconds left, want about 86400", nap.DueSeconds)
	}
	if nap.WaitEvent != nil || nap.ChildRunID != nil || nap.CompletedByEvent != nil {
		t.Errorf("nap has wait or child fields: %+v", nap)
	}
	if approve.WaitEvent == nil || *approve.WaitEvent != "order.approved" || approve.WaitKey == nil || *approve.WaitKey != "ORDER-17" ||
		approve.OnTimeout == nil || *approve.OnTimeout != "skip" || approve.DueAt == nil || approve.DueAt.Sub(*approve.StartedAt).Hours() != 7*24 {
		t.Fatalf("approve: %+v, want waiting for order.approved ORDER-17, skip, due 7d after its start", approve)
	}
	if ship.ChildRunID == nil || ship.DueAt != nil {
		t.Fatalf("ship: child %v due %v, want a child run and no due time", ship.ChildRunID, ship.DueAt)
	}
	child := *ship.ChildRunID

	r := f.run(run)
	if r.ParentRunID != nil || r.ParentTaskRunID != nil || r.ParentTask != nil || r.Depth != 0 {
		t.Errorf("the top run names a parent: %v %v %v depth %d", r.ParentRunID, r.ParentTaskRunID, r.ParentTask, r.Depth)
	}
	want := store.ChildRun{RunID: child, TaskRunID: ship.ID, Task: "ship", Workflow: "child", State: f.run(child).State}
	if len(r.Children) != 1 || r.ChildrenTotal != 1 {
		t.Fatalf("children %+v (total %d), want %+v", r.Children, r.ChildrenTotal, want)
	}
	got := r.Children[0]
	got.CreatedAt = want.CreatedAt
	if got != want {
		t.Errorf("child %+v, want %+v", got, want)
	}
	c := f.run(child)
	if c.ParentRunID == nil || *c.ParentRunID != run || c.ParentTaskRunID == nil || *c.ParentTaskRunID != ship.ID ||
		c.ParentTask == nil || *c.ParentTask != "ship" || c.Depth != 1 || len(c.Children) != 0 {
		t.Errorf("child run: parent %v task run %v task %v depth %d children %v; want %s, %s, ship, 1, none",
			c.ParentRunID, c.ParentTaskRunID, c.ParentTask, c.Depth, c.Children, run, ship.ID)
	}
	if d := f.task(ship.ID); d.ChildRun == nil || d.ChildRun.RunID != child || d.ChildRun.Workflow != "child" || d.ChildRun.Task != "ship" {
		t.Errorf("task show of ship: child run %+v, want %s of child", d.ChildRun, child)
	}

	f.send(store.SendEventRequest{Name: "order.approved", Key: "ORDER-17", ID: "ev-17"})
	d := f.task(approve.ID)
	if d.State != core.TaskSucceeded || d.CompletedByEvent == nil || *d.CompletedByEvent != "ev-17" || d.DueAt != nil || d.DueSeconds != nil {
		t.Fatalf("approve after the event: %s by %v due %v (%v s), want SUCCEEDED by ev-17 with no due time", d.State, d.CompletedByEvent, d.DueAt, d.DueSeconds)
	}
	if d.WaitEvent == nil || *d.WaitKey != "ORDER-17" {
		t.Errorf("approve forgot what it waited for: %v %v", d.WaitEvent, d.WaitKey)
	}

	plain := f.trigger("child", "")
	js, err := json.Marshal(f.run(plain))
	if err != nil {
		t.Fatal(err)
	}
	for _, absent := range []string{"due_at", "due_seconds_left", "wait_event", "wait_key", "on_timeout", "completed_by_event",
		"child_run_id", "parent_run_id", "parent_task_run_id", "parent_task", "children"} {
		if strings.Contains(string(js), `"`+absent+`"`) {
			t.Errorf("a plain run's JSON has %q: %s", absent, js)
		}
	}
	if !strings.Contains(string(js), `"depth":0`) {
		t.Errorf("a plain run's JSON lacks its depth: %s", js)
	}
}

// TestAGoneChildRunIsNotListed: once a child run is deleted, its parent
// task keeps the child's id, GetTask's ChildRun is nil and the parent
// lists no child.
func TestAGoneChildRunIsNotListed(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.apply(childFile)
	f.apply(parentFile)
	run := f.trigger("parent", `{"order_id": 1}`)
	f.finishWith(f.taskID(run, "a"), store.OutcomeSucceeded, `{"n": 1}`)
	f.advance()
	kid := f.taskID(run, "kid")
	child := f.childOf(kid)
	for _, q := range []string{`DELETE FROM task_runs WHERE run_id = $1`, `DELETE FROM workflow_runs WHERE id = $1`} {
		if _, err := f.db.ExecContext(f.ctx, q, child); err != nil {
			t.Fatal(err)
		}
	}
	d := f.task(kid)
	if d.ChildRunID == nil || *d.ChildRunID != child || d.ChildRun != nil {
		t.Errorf("kid: child id %v run %+v, want %s with no run", d.ChildRunID, d.ChildRun, child)
	}
	if r := f.run(run); len(r.Children) != 0 || r.ChildrenTotal != 0 {
		t.Errorf("parent lists %+v (total %d), want none", r.Children, r.ChildrenTotal)
	}
}
