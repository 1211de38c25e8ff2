package cli_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/flowforge/flowforge/core/store"
	"github.com/flowforge/flowforge/core/store/storetest"
)

// run show, task show and run list of the tasks the scheduler holds (a
// sleep, a wait, a child run) and of runs started by a task.

const shippingFile = `
name: shipping
tasks:
  - {name: pack, handler: noop}
`

const orderFile = `
name: order
tasks:
  - {name: nap, sleep: {for: 24h}}
  - name: approve
    wait_for: {event: order.approved, key: "params.order_id", timeout: 7d}
  - name: ship
    workflow: {name: shipping, params: "{'order': params.order_id}"}
  - {name: done, handler: noop, depends_on: [approve]}
`

// heldOrder applies shippingFile and orderFile, triggers an order with
// order_id id and runs the scheduler's pass that starts its held tasks.
// It returns the order's run and its ship task's child run.
func heldOrder(h *harness, id string) (run, child uuid.UUID) {
	h.t.Helper()
	h.apply(shippingFile)
	h.apply(orderFile)
	params, err := json.Marshal(map[string]string{"order_id": id})
	if err != nil {
		h.t.Fatal(err)
	}
	run = storetest.Trigger(h.t, h.s, "order", string(params))
	h.advance()
	for _, t := range h.run(run).Tasks {
		if t.Name == "ship" && t.ChildRunID != nil {
			return run, *t.ChildRunID
		}
	}
	h.t.Fatalf("run %s: ship started no child run", run)
	return run, uuid.Nil
}

// rowOf returns the line of run show's table that holds id.
func rowOf(t *testing.T, out string, id uuid.UUID) string {
	t.Helper()
	_, table, _ := strings.Cut(out, "\nTASK ")
	for _, l := range strings.Split(table, "\n") {
		if strings.Contains(l, id.String()) {
			return l
		}
	}
	t.Fatalf("no table row holds %s:\n%s", id, out)
	return ""
}

// TestRunShowSaysWhatEachHeldTaskHolds: run show's table says a sleep's due
// time (UTC) and the time left, a wait's event, key, time left and
// on_timeout, and a workflow task's child run with its workflow and state;
// the header lists the child run, and the child's run show names its
// parent run and task. Once an event completes the wait, its row names
// the event. task show says the same on a line labelled with the block.
// Once the parent is deleted, the child still names its ids.
func TestRunShowSaysWhatEachHeldTaskHolds(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	run, child := heldOrder(h, "ORDER-17")
	tasks := map[string]store.TaskRun{}
	for _, tk := range h.run(run).Tasks {
		tasks[tk.Name] = tk
	}
	childState := h.run(child).State
	due := tasks["nap"].DueAt.UTC().Format("2006-01-02 15:04:05Z")
	out := h.must("run", "show", run.String()).stdout
	for task, want := range map[string]string{
		"nap":     "sleeping until " + due + " (in 23h59m)",
		"approve": "waiting for event order.approved key ORDER-17 (times out in 6d23h, on timeout: fail)",
		"ship":    "child run " + child.String() + " (shipping, " + string(childState) + ")",
		"done":    "PENDING",
	} {
		if row := rowOf(t, out, tasks[task].ID); !strings.Contains(row, want) {
			t.Errorf("%s's row %q lacks %q", task, row, want)
		}
	}
	if want := "  children  " + child.String() + " (task ship, workflow shipping, " + string(childState) + ")\n"; !strings.Contains(out, want) {
		t.Errorf("run show lacks %q:\n%s", want, out)
	}
	if strings.Contains(out, "  parent ") {
		t.Errorf("a run no task started names a parent:\n%s", out)
	}
	if co := h.must("run", "show", child.String()).stdout; !strings.Contains(co, "  parent    run "+run.String()+" (task ship, depth 1)\n") || strings.Contains(co, "children") {
		t.Errorf("the child's run show does not name its parent run and task (or lists children):\n%s", co)
	}

	for task, want := range map[string]string{
		"nap":     "  sleep     sleeping until " + due + " (in 23h59m)\n",
		"approve": "  wait_for  waiting for event order.approved key ORDER-17 (times out in 6d23h, on timeout: fail)\n",
		"ship":    "  workflow  child run " + child.String() + " (shipping, " + string(childState) + ")\n",
	} {
		if o := h.must("task", "show", tasks[task].ID.String()).stdout; !strings.Contains(o, want) || !strings.Contains(o, "  handler   -\n") {
			t.Errorf("task show of %s lacks %q (or a handler of -):\n%s", task, want, o)
		}
	}

	if _, err := h.s.SendEvent(h.ctx, store.SendEventRequest{Name: "order.approved", Key: "ORDER-17", ID: "ev-17", Actor: "test"}); err != nil {
		t.Fatal(err)
	}
	out = h.must("run", "show", run.String()).stdout
	if row := rowOf(t, out, tasks["approve"].ID); !strings.Contains(row, "SUCCEEDED") || !strings.Contains(row, "completed by event ev-17") {
		t.Errorf("the completed wait's row %q does not name its event", row)
	}
	if o := h.must("task", "show", tasks["approve"].ID.String()).stdout; !strings.Contains(o, "  wait_for  completed by event ev-17\n") {
		t.Errorf("task show of the completed wait does not name its event:\n%s", o)
	}

	// The parent deleted (no foreign key keeps it): the child still names it.
	for _, q := range []string{`DELETE FROM task_runs WHERE run_id = $1`, `DELETE FROM workflow_runs WHERE id = $1`} {
		if _, err := h.db.ExecContext(h.ctx, q, run); err != nil {
			t.Fatal(err)
		}
	}
	want := "  parent    run " + run.String() + ", task run " + tasks["ship"].ID.String() + " (depth 1; that run has since been deleted)\n"
	if co := h.must("run", "show", child.String()).stdout; !strings.Contains(co, want) {
		t.Errorf("the child of a deleted run lacks %q:\n%s", want, co)
	}
}

// TestRunShowJSONHasTheHeldFields: -o json of run show and task show has
// the held fields (due_at and the seconds left, wait_event, wait_key,
// on_timeout, child_run_id, children; a child's parent_run_id,
// parent_task_run_id, parent_task and depth), and run list -o json has a
// child's parent; run list's table lists parent and child alike.
func TestRunShowJSONHasTheHeldFields(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	run, child := heldOrder(h, "ORDER-18")
	type task struct {
		Name       string     `json:"name"`
		Kind       string     `json:"kind"`
		DueAt      *time.Time `json:"due_at"`
		DueLeft    *float64   `json:"due_seconds_left"`
		WaitEvent  *string    `json:"wait_event"`
		WaitKey    *string    `json:"wait_key"`
		OnTimeout  *string    `json:"on_timeout"`
		ChildRunID *uuid.UUID `json:"child_run_id"`
		ChildRun   *struct {
			RunID    uuid.UUID `json:"run_id"`
			Workflow string    `json:"workflow"`
		} `json:"child_run"`
	}
	type runJSON struct {
		ID              uuid.UUID  `json:"id"`
		ParentRunID     *uuid.UUID `json:"parent_run_id"`
		ParentTaskRunID *uuid.UUID `json:"parent_task_run_id"`
		ParentTask      *string    `json:"parent_task"`
		Depth           *int       `json:"depth"`
		Tasks           []task     `json:"tasks"`
		Children        []struct {
			RunID    uuid.UUID `json:"run_id"`
			Task     string    `json:"task"`
			Workflow string    `json:"workflow"`
			State    string    `json:"state"`
		} `json:"children"`
		ChildrenTotal int `json:"children_total"`
	}
	r := decode[runJSON](t, h.must("run", "show", run.String(), "-o", "json").stdout)
	byName := map[string]task{}
	for _, tk := range r.Tasks {
		byName[tk.Name] = tk
	}
	nap, approve, ship := byName["nap"], byName["approve"], byName["ship"]
	if nap.Kind != "sleep" || nap.DueAt == nil || nap.DueLeft == nil || *nap.DueLeft <= 0 {
		t.Errorf("nap: %+v, want a sleep with its due time and seconds left", nap)
	}
	if approve.Kind != "wait" || approve.WaitEvent == nil || *approve.WaitEvent != "order.approved" || *approve.WaitKey != "ORDER-18" || *approve.OnTimeout != "fail" {
		t.Errorf("approve: %+v, want a wait for order.approved ORDER-18, on timeout fail", approve)
	}
	if ship.ChildRunID == nil || *ship.ChildRunID != child || len(r.Children) != 1 || r.Children[0].RunID != child ||
		r.Children[0].Task != "ship" || r.Children[0].Workflow != "shipping" || r.ChildrenTotal != 1 {
		t.Errorf("ship %+v, children %+v (total %d); want child %s", ship, r.Children, r.ChildrenTotal, child)
	}
	if r.ParentRunID != nil || r.Depth == nil || *r.Depth != 0 {
		t.Errorf("the order's parent %v depth %v, want none and 0", r.ParentRunID, r.Depth)
	}
	shipID := h.taskID(run, "ship")
	c := decode[runJSON](t, h.must("run", "show", child.String(), "-o", "json").stdout)
	if c.ParentRunID == nil || *c.ParentRunID != run || c.ParentTaskRunID == nil || *c.ParentTaskRunID != shipID ||
		c.ParentTask == nil || *c.ParentTask != "ship" || c.Depth == nil || *c.Depth != 1 {
		t.Errorf("the child's parent %v task run %v task %v depth %v, want %s, ship, 1", c.ParentRunID, c.ParentTaskRunID, c.ParentTask, c.Depth, run)
	}
	d := decode[task](t, h.must("task", "show", shipID.String(), "-o", "json").stdout)
	if d.ChildRun == nil || d.ChildRun.RunID != child || d.ChildRun.Workflow != "shipping" {
		t.Errorf("task show -o json of ship: child_run %+v, want %s of shipping", d.ChildRun, child)
	}

	list := decode[[]runJSON](t, h.must("run", "list", "-o", "json").stdout)
	found := 0
	for _, l := range list {
		switch l.ID {
		case run:
			found++
		case child:
			if l.ParentRunID != nil && *l.ParentRunID == run && *l.Depth == 1 {
				found++
			}
		}
	}
	if found != 2 {
		t.Errorf("run list -o json does not list the order and its child with its parent: %+v", list)
	}
	if out := h.must("run", "list").stdout; !strings.Contains(out, run.String()) || !strings.Contains(out, child.String()) {
		t.Errorf("run list lacks the order or its child:\n%s", out)
	}
}

// TestRunShowSaysAWaitTimedOutAndSkipped: a wait whose timeout passed with
// on_timeout skip is SKIPPED, and its row says no event came in time.
func TestRunShowSaysAWaitTimedOutAndSkipped(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.apply("name: patient\ntasks:\n  - name: w\n    wait_for: {event: never, timeout: 200ms, on_timeout: skip}\n")
	run := h.trigger("patient")
	h.advance()
	w := h.taskID(run, "w")
	eventually(t, 10*time.Second, "the wait to time out", func() bool {
		h.advance()
		return h.state(w) == "SKIPPED"
	})
	if row := rowOf(t, h.must("run", "show", run.String()).stdout, w); !strings.Contains(row, "no event never without a key came in time (on timeout: skip)") {
		t.Errorf("the skipped wait's row %q does not say it timed out", row)
	}
}

// TestHeldLinesShowNoRawControlCharacters: a wait's key comes from the
// run's params and an event's id from its sender: hostile text in either
// reaches run show's and task show's tables only as placeholders.
func TestHeldLinesShowNoRawControlCharacters(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	text := "k\x1b[2J\u009b\u202eexe"
	run, _ := heldOrder(h, text)
	approve := h.taskID(run, "approve")
	check := func(what string, args ...string) {
		t.Helper()
		out := h.must(args...).stdout
		if raw := rawControls(out); len(raw) > 0 {
			t.Errorf("%s: raw %U in the table:\n%q", what, raw, out)
		}
		if !strings.Contains(out, `k\x1b[2J\u009b\u202eexe`) {
			t.Errorf("%s: the key is not shown with placeholders:\n%s", what, out)
		}
	}
	check("run show of the wait", "run", "show", run.String())
	check("task show of the wait", "task", "show", approve.String())
	if _, err := h.s.SendEvent(h.ctx, store.SendEventRequest{Name: "order.approved", Key: text, ID: text, Actor: "test"}); err != nil {
		t.Fatal(err)
	}
	check("run show of the completed wait", "run", "show", run.String())
	check("task show of the completed wait", "task", "show", approve.String())
}
