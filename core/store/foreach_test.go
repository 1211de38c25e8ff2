package store_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/flowforge/flowforge/core"
	"github.com/flowforge/flowforge/core/store"
)

// for_each in the scheduler's pass (foreach.go): the expansion, in the
// transaction of its decision with its elements' outbox rows, and the join
// of the elements' results.

const fanout = `
name: fanout
tasks:
  - {name: split, handler: noop}
  - name: count
    handler: shell
    depends_on: [split]
    for_each: upstream.split.chunks
    max_items: 1000
    params: {command: [wc, "{{ .Item }}", "{{ .Params.mode }}"]}
    idempotency_key: "count-{{ .Item }}"
  - {name: merge, handler: noop, depends_on: [count]}
`

// elements returns the run's element task runs of for_each task name, in
// element order.
func (f *fixture) elements(run uuid.UUID, name string) []store.TaskRun {
	f.t.Helper()
	var out []store.TaskRun
	for _, tr := range f.run(run).Tasks {
		if tr.ElementOf != nil && *tr.ElementOf == name {
			out = append(out, tr)
		}
	}
	for i := range out {
		for j := i + 1; j < len(out); j++ {
			if *out[j].ElementIndex < *out[i].ElementIndex {
				out[i], out[j] = out[j], out[i]
			}
		}
	}
	return out
}

// TestAForEachRunsOneTaskPerElementAndJoinsTheirResultsInOrder: the
// split's result decides the list at run time; the pass makes count
// RUNNING and one READY task run per element, each with one outbox row,
// its params and key rendered with .Item and its item returned by the
// claim; the elements finish in reverse order, and the pass ends count
// SUCCEEDED with their results in element order, which merge gets as
// upstream.count.
func TestAForEachRunsOneTaskPerElementAndJoinsTheirResultsInOrder(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.apply(fanout)
	run := f.trigger("fanout", `{"mode": "-w"}`)
	f.finishWith(f.taskID(run, "split"), store.OutcomeSucceeded, `{"chunks": ["a.txt", "b.txt", "c.txt"]}`)
	res := f.advance()
	if res.Expanded != 3 {
		t.Fatalf("pass: %+v, want 3 elements", res)
	}
	f.wantStates(run, map[string]core.TaskState{"count": core.TaskRunning, "merge": core.TaskPending})
	els := f.elements(run, "count")
	if len(els) != 3 {
		t.Fatalf("%d elements, want 3", len(els))
	}
	for i, e := range els {
		d := f.task(e.ID)
		want := fmt.Sprintf(`{"command": ["wc", "%c.txt", "-w"]}`, 'a'+i)
		if e.Name != fmt.Sprintf("count[%d]", i) || e.State != core.TaskReady || f.outboxRows(e.ID) != 1 ||
			string(d.Params) != want || *d.IdempotencyKey != fmt.Sprintf("count-%c.txt", 'a'+i) {
			t.Fatalf("element %d: %+v params %s key %v; want count[%d] READY, 1 outbox row, %s", i, e, d.Params, d.IdempotencyKey, i, want)
		}
	}
	for i := len(els) - 1; i >= 0; i-- {
		c := f.claim(els[i].ID, "w1", 30*time.Second)
		if string(c.Item) != fmt.Sprintf(`"%c.txt"`, 'a'+i) || string(c.Upstream) != `{"split": {"chunks": ["a.txt", "b.txt", "c.txt"]}}` {
			t.Fatalf("claim of element %d: item %s upstream %s", i, c.Item, c.Upstream)
		}
		f.finish(c, store.FinishRequest{Outcome: store.OutcomeSucceeded, Result: json.RawMessage(fmt.Sprintf(`{"n": %d}`, i))})
	}
	f.advance()
	count := f.task(f.taskID(run, "count"))
	if count.State != core.TaskSucceeded || string(count.Result) != `[{"n": 0}, {"n": 1}, {"n": 2}]` {
		t.Fatalf("count: %s with %s, want SUCCEEDED with the results in element order", count.State, count.Result)
	}
	c := f.claim(f.taskID(run, "merge"), "w1", 30*time.Second)
	if string(c.Upstream) != `{"count": [{"n": 0}, {"n": 1}, {"n": 2}]}` {
		t.Fatalf("merge's upstream: %s", c.Upstream)
	}
	f.succeed(c)
	f.advance()
	if r := f.run(run); r.State != core.RunSucceeded || r.TasksDone != 6 {
		t.Fatalf("run: %s, %d done of 6", r.State, r.TasksDone)
	}
}

// TestAForEachOverAnEmptyListSucceedsAndOneTooLongFails: an empty list is
// a SUCCEEDED task with result [] (its downstream runs); a list longer
// than max_items, or an expression that gives no list, makes the task
// DEAD with a clear error and inserts no element.
func TestAForEachOverAnEmptyListSucceedsAndOneTooLongFails(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.apply(fanout)
	for _, tc := range []struct {
		chunks string
		state  core.TaskState
		result string
		err    string
	}{
		{`[]`, core.TaskSucceeded, `[]`, ""},
		{`[` + strings.Repeat(`"x", `, 1000) + `"x"]`, core.TaskDead, "", "for_each: upstream.split.chunks gave 1001 elements, more than max_items 1000"},
		{`"abc"`, core.TaskDead, "", "for_each: expression failed: upstream.split.chunks: gives string, want list"},
	} {
		run := f.trigger("fanout", `{"mode": "-w"}`)
		f.finishWith(f.taskID(run, "split"), store.OutcomeSucceeded, `{"chunks": `+tc.chunks+`}`)
		f.advance()
		count := f.task(f.taskID(run, "count"))
		if count.State != tc.state || (tc.result != "" && string(count.Result) != tc.result) ||
			(tc.err != "" && (count.Error == nil || *count.Error != tc.err)) {
			t.Errorf("chunks %.20s: count %s, result %s, error %v; want %s %s %q", tc.chunks, count.State, count.Result, count.Error, tc.state, tc.result, tc.err)
		}
		if n := len(f.elements(run, "count")); n != 0 {
			t.Errorf("chunks %.20s: %d elements", tc.chunks, n)
		}
		want := core.TaskReady
		if tc.state == core.TaskDead {
			want = core.TaskUpstreamFailed
		}
		f.wantState(f.taskID(run, "merge"), want)
	}
}

// TestAnExpansionStoppedInsideItsTransactionLeavesNoElement: the
// expansion of a 1,000-element for_each is written in the pass's
// transaction, with the for_each task's decision and the elements' outbox
// rows: a pass that dies after inserting them (its MidExpansion hook
// cancels it before the commit) leaves the task PENDING with no element
// and no outbox row, and the next pass makes exactly 1,000, each with one
// outbox row. The e2e test kills a scheduler process at the same point.
func TestAnExpansionStoppedInsideItsTransactionLeavesNoElement(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.apply(fanout)
	run := f.trigger("fanout", `{"mode": "-w"}`)
	chunks, _ := json.Marshal(make([]int, 1000))
	f.finishWith(f.taskID(run, "split"), store.OutcomeSucceeded, `{"chunks": `+string(chunks)+`}`)
	ctx, cancel := context.WithCancel(f.ctx)
	defer cancel()
	dying, err := store.Open(ctx, f.url, store.Options{MaxConns: 2, MidExpansion: cancel})
	if err != nil {
		t.Fatal(err)
	}
	defer dying.Close()
	if _, err := dying.AdvanceRuns(ctx, []uuid.UUID{run}, "dying-scheduler"); err == nil {
		t.Fatal("the pass stopped inside its expansion returned no error")
	}
	f.wantState(f.taskID(run, "count"), core.TaskPending)
	if n := f.count(`SELECT count(*) FROM task_runs WHERE run_id = $1 AND element_of IS NOT NULL`, run); n != 0 {
		t.Fatalf("%d elements left by the stopped pass", n)
	}
	if n := f.count(`SELECT count(*) FROM outbox o JOIN task_runs t ON t.id = o.task_run_id WHERE t.run_id = $1 AND t.element_of IS NOT NULL`, run); n != 0 {
		t.Fatalf("%d outbox rows left by the stopped pass", n)
	}
	// The dying pass's connection may hold the run's row until its server
	// process notices the cancel: a pass skips a held run, so pass again
	// until one locks it.
	dying.Close()
	deadline := time.Now().Add(10 * time.Second)
	for f.advance().Runs == 0 && time.Now().Before(deadline) {
	}
	f.wantState(f.taskID(run, "count"), core.TaskRunning)
	if n := f.count(`SELECT count(*) FROM task_runs WHERE run_id = $1 AND element_of IS NOT NULL AND state = 'READY'`, run); n != 1000 {
		t.Fatalf("%d elements READY, want 1000", n)
	}
	if n := f.count(`SELECT count(*) FROM outbox o JOIN task_runs t ON t.id = o.task_run_id WHERE t.run_id = $1 AND t.element_of IS NOT NULL`, run); n != 1000 {
		t.Fatalf("%d outbox rows for the elements, want 1000", n)
	}
}

// TestADeadElementFailsItsForEachAndARequeueRunsOnlyWhatFailed: an element
// that dies makes its for_each task DEAD once every element ended (naming
// the element), its downstream UPSTREAM_FAILED; requeueing the for_each
// task reopens the elements that did not succeed (not the others), and
// the run succeeds.
func TestADeadElementFailsItsForEachAndARequeueRunsOnlyWhatFailed(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.apply(fanout)
	run := f.trigger("fanout", `{"mode": "-w"}`)
	f.finishWith(f.taskID(run, "split"), store.OutcomeSucceeded, `{"chunks": ["a", "b"]}`)
	f.advance()
	els := f.elements(run, "count")
	f.finishWith(els[0].ID, store.OutcomeSucceeded, `0`)
	f.finishWith(els[1].ID, store.OutcomeFailed, "")
	f.advance()
	count := f.task(f.taskID(run, "count"))
	if count.State != core.TaskDead || count.Error == nil || *count.Error != "element count[1] is DEAD: boom" {
		t.Fatalf("count: %s, %v", count.State, count.Error)
	}
	f.wantState(f.taskID(run, "merge"), core.TaskUpstreamFailed)
	if _, err := f.s.RequeueTask(f.ctx, count.ID, "ops", "retry the chunk"); err != nil {
		t.Fatal(err)
	}
	f.advance()
	els = f.elements(run, "count")
	if els[0].State != core.TaskSucceeded || els[1].State != core.TaskReady {
		t.Fatalf("after the requeue: elements %s and %s, want SUCCEEDED and READY", els[0].State, els[1].State)
	}
	f.finishWith(els[1].ID, store.OutcomeSucceeded, `1`)
	f.advance()
	f.runTask(f.taskID(run, "merge"))
	f.advance()
	if r := f.run(run); r.State != core.RunSucceeded {
		t.Fatalf("run: %s", r.State)
	}
	if got := f.task(f.taskID(run, "count")).Result; string(got) != `[0, 1]` {
		t.Fatalf("count's result: %s", got)
	}
}

// fanoutFailFast is fanout in a fail_fast run.
const fanoutFailFast = `
name: fanout-ff
fail_fast: true
tasks:
  - {name: split, handler: noop}
  - {name: count, handler: noop, depends_on: [split], for_each: upstream.split.chunks}
  - {name: merge, handler: noop, depends_on: [count]}
`

// deadElements returns a run of workflow whose split gave the chunks
// ["a", "b", "c"] and whose count ended DEAD: the elements at the indexes
// in dead died (a permanent failure), the others succeeded with their
// index as their result.
func (f *fixture) deadElements(workflow string, dead ...int) uuid.UUID {
	f.t.Helper()
	run := f.trigger(workflow, `{"mode": "-w"}`)
	f.finishWith(f.taskID(run, "split"), store.OutcomeSucceeded, `{"chunks": ["a", "b", "c"]}`)
	f.advance()
	for i, e := range f.elements(run, "count") {
		if slices.Contains(dead, i) {
			f.finishWith(e.ID, store.OutcomeFailed, "")
		} else {
			f.finishWith(e.ID, store.OutcomeSucceeded, fmt.Sprint(i))
		}
	}
	f.advance()
	f.wantState(f.taskID(run, "count"), core.TaskDead)
	if r := f.run(run); r.State != core.RunFailed {
		f.t.Fatalf("run with DEAD elements %v: %s, want FAILED", dead, r.State)
	}
	return run
}

// wantEvent fails the test unless task id's last history row is from ->
// to by actor, its reason containing reason.
func (f *fixture) wantEvent(id uuid.UUID, from, to core.TaskState, actor, reason string) {
	f.t.Helper()
	evs := f.task(id).Events
	e := evs[len(evs)-1]
	var got core.TaskState
	if e.FromState != nil {
		got = *e.FromState
	}
	var why string
	if e.Reason != nil {
		why = *e.Reason
	}
	if got != from || e.ToState != to || e.Actor != actor || !strings.Contains(why, reason) {
		f.t.Fatalf("last event of %s: %s -> %s by %s (%q), want %s -> %s by %s, reason containing %q", id, got, e.ToState, e.Actor, why, from, to, actor, reason)
	}
}

// TestRequeueingADeadElementReopensItsForEach: mode 98. An element that
// died made its for_each task DEAD and buried merge; requeueing the
// element alone (or every DEAD task of the run, as `dead requeue --all
// --run` does, or the element of a fail_fast run) brings the for_each task
// back: in the requeue's statement (DEAD -> RUNNING, audited with the
// requeue's actor, when the element alone is requeued; DEAD -> PENDING and
// reopened by the next pass when it is requeued itself), and merge back
// to PENDING. Once the element succeeds, the join ends count SUCCEEDED
// with every result in element order, merge runs, and the run SUCCEEDED.
func TestRequeueingADeadElementReopensItsForEach(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		workflow string
		// ids are the ids the operator requeues.
		ids func(f *fixture, run uuid.UUID) []uuid.UUID
		// count is the state of the for_each task right after the
		// requeue, before any pass; from its history's last row.
		count         core.TaskState
		merge         core.TaskState // before the requeue
		reason        string
		countWithAlso bool // count is among the element's Also
	}{
		{
			name: "the element alone", workflow: "fanout",
			ids:   func(f *fixture, run uuid.UUID) []uuid.UUID { return []uuid.UUID{f.elements(run, "count")[1].ID} },
			count: core.TaskRunning, merge: core.TaskUpstreamFailed, reason: "element count[1] requeued", countWithAlso: true,
		},
		{
			name: "every DEAD task of the run", workflow: "fanout",
			ids: func(f *fixture, run uuid.UUID) []uuid.UUID {
				dead, err := f.s.ListDeadTasks(f.ctx, store.DeadQuery{Run: run, Requeueable: true})
				if err != nil || len(dead) != 2 {
					f.t.Fatalf("dead tasks of the run: %d (%v), want count and count[1]", len(dead), err)
				}
				return []uuid.UUID{dead[0].ID, dead[1].ID}
			},
			count: core.TaskPending, merge: core.TaskUpstreamFailed, reason: "retry the chunk",
		},
		{
			name: "the element of a fail_fast run", workflow: "fanout-ff",
			ids:   func(f *fixture, run uuid.UUID) []uuid.UUID { return []uuid.UUID{f.elements(run, "count")[1].ID} },
			count: core.TaskPending, merge: core.TaskCancelled, reason: "fail_fast run requeued", countWithAlso: true,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t)
			f.apply(fanout)
			f.apply(fanoutFailFast)
			run := f.deadElements(tc.workflow, 1)
			count, merge := f.taskID(run, "count"), f.taskID(run, "merge")
			f.wantState(merge, tc.merge)
			res, err := f.s.RequeueMany(f.ctx, tc.ids(f, run), "ops", "retry the chunk")
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range res {
				if !r.Requeued() {
					t.Fatalf("requeue: %+v", res)
				}
			}
			if tc.countWithAlso && !slices.Contains(res[0].Also, count) {
				t.Errorf("the requeue's result %+v does not name count %s", res[0], count)
			}
			f.wantEvent(count, core.TaskDead, tc.count, "ops", tc.reason)
			f.wantState(merge, core.TaskPending)
			if r := f.run(run); r.FinishedAt != nil {
				t.Fatal("the requeue did not reopen the run")
			}
			f.advance()
			f.wantStates(run, map[string]core.TaskState{"count": core.TaskRunning, "count[1]": core.TaskReady, "merge": core.TaskPending})
			f.finishWith(f.elements(run, "count")[1].ID, store.OutcomeSucceeded, `1`)
			f.advance()
			if d := f.task(count); d.State != core.TaskSucceeded || string(d.Result) != `[0, 1, 2]` {
				t.Fatalf("count: %s with %s, want SUCCEEDED with [0, 1, 2]", d.State, d.Result)
			}
			f.runTask(merge)
			f.advance()
			if r := f.run(run); r.State != core.RunSucceeded || r.FinishedAt == nil {
				t.Fatalf("run: %s, finished %v; want SUCCEEDED and settled", r.State, r.FinishedAt)
			}
		})
	}
}

// TestRequeueingOneOfTwoDeadElementsKeepsItsDownstreamBuried: mode 98.
// With two elements DEAD, requeueing one reopens the for_each task but
// leaves merge UPSTREAM_FAILED (the other element still fails the task);
// once the requeued one succeeds the join ends count DEAD again, naming the
// other, and requeueing that one lets the run succeed.
func TestRequeueingOneOfTwoDeadElementsKeepsItsDownstreamBuried(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.apply(fanout)
	run := f.deadElements("fanout", 1, 2)
	count, merge := f.taskID(run, "count"), f.taskID(run, "merge")
	els := f.elements(run, "count")
	moved, err := f.s.RequeueTask(f.ctx, els[1].ID, "ops", "retry b")
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(moved, []uuid.UUID{els[1].ID, count}) {
		t.Fatalf("requeue moved %v, want count[1] %s and count %s", moved, els[1].ID, count)
	}
	f.wantStates(run, map[string]core.TaskState{"count": core.TaskRunning, "count[1]": core.TaskPending, "count[2]": core.TaskDead, "merge": core.TaskUpstreamFailed})
	f.advance()
	f.finishWith(els[1].ID, store.OutcomeSucceeded, `1`)
	f.advance()
	if d := f.task(count); d.State != core.TaskDead || d.Error == nil || *d.Error != "element count[2] is DEAD: boom" {
		t.Fatalf("count: %s, %v; want DEAD naming count[2]", d.State, d.Error)
	}
	f.wantState(merge, core.TaskUpstreamFailed)
	if _, err := f.s.RequeueTask(f.ctx, els[2].ID, "ops", "retry c"); err != nil {
		t.Fatal(err)
	}
	f.wantStates(run, map[string]core.TaskState{"count": core.TaskRunning, "merge": core.TaskPending})
	f.advance()
	f.finishWith(els[2].ID, store.OutcomeSucceeded, `2`)
	f.advance()
	f.runTask(merge)
	f.advance()
	if r := f.run(run); r.State != core.RunSucceeded {
		t.Fatalf("run: %s", r.State)
	}
	if got := f.task(count).Result; string(got) != `[0, 1, 2]` {
		t.Fatalf("count's result: %s", got)
	}
}

// TestACancelDuringAForEachStopsItsElements: mode 99. A run is cancelled
// while its for_each task's five elements are SUCCEEDED (count[0]),
// RUNNING (count[1], count[2]) and READY (count[3], count[4]): the cancel
// itself makes the READY elements and merge CANCELLED (audited, the
// reason's), leaves count RUNNING (it holds no worker: it ends with its
// elements) and tells the running elements to stop (their renewal says
// Stop); a READY element's dispatch claims nothing any more. Until the
// running elements' handlers return, count stays RUNNING and the run,
// CANCELLED, stays open; once they have, the pass ends count CANCELLED
// (DEAD, naming the element, when one died), settles the run CANCELLED,
// and merge never got a dispatch.
func TestACancelDuringAForEachStopsItsElements(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		// ends are the outcomes the handlers of count[1] and count[2]
		// return after the cancel (FAILED: a retryable error, which the
		// pass cancels; DEAD: a permanent one).
		ends  [2]string
		count core.TaskState
		err   string
	}{
		{name: "the handlers see the cancel", ends: [2]string{"CANCELLED", "CANCELLED"}, count: core.TaskCancelled},
		{name: "a handler returns its result first", ends: [2]string{"SUCCEEDED", "CANCELLED"}, count: core.TaskCancelled},
		{name: "a handler fails and would retry", ends: [2]string{"FAILED", "CANCELLED"}, count: core.TaskCancelled},
		{name: "a handler fails for good", ends: [2]string{"CANCELLED", "DEAD"}, count: core.TaskDead, err: "element count[2] is DEAD: boom"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t)
			f.apply(fanout)
			run := f.trigger("fanout", `{"mode": "-w"}`)
			f.finishWith(f.taskID(run, "split"), store.OutcomeSucceeded, `{"chunks": ["a", "b", "c", "d", "e"]}`)
			f.advance()
			els := f.elements(run, "count")
			f.finishWith(els[0].ID, store.OutcomeSucceeded, `0`)
			running := []store.ClaimedTask{f.claim(els[1].ID, "w1", time.Minute), f.claim(els[2].ID, "w2", time.Minute)}
			_, tok3 := f.state(els[3].ID)
			count, merge := f.taskID(run, "count"), f.taskID(run, "merge")

			res, err := f.s.CancelRun(f.ctx, run, "alice", "bad input")
			if err != nil || res.TasksCancelled != 3 {
				t.Fatalf("cancel: %+v, %v; want count[3], count[4] and merge cancelled", res, err)
			}
			for _, id := range []uuid.UUID{els[3].ID, els[4].ID} {
				f.wantEvent(id, core.TaskReady, core.TaskCancelled, "alice", "run cancelled: bad input")
			}
			f.wantEvent(merge, core.TaskPending, core.TaskCancelled, "alice", "run cancelled: bad input")
			f.wantStates(run, map[string]core.TaskState{"count": core.TaskRunning, "count[0]": core.TaskSucceeded, "count[1]": core.TaskRunning, "count[2]": core.TaskRunning})
			for _, c := range running {
				if r, err := f.s.Renew(f.ctx, c.ID, c.FencingToken, time.Minute); err != nil || !r.OK || !r.Stop {
					t.Fatalf("renewal of %s after the cancel: %+v, %v; want OK and Stop", c.ID, r, err)
				}
			}
			if _, ok, err := f.s.Claim(f.ctx, els[3].ID, tok3, "w3", time.Minute); ok || err != nil {
				t.Fatalf("claim of the cancelled count[3] with its dispatch's token: ok=%v err=%v, want refused", ok, err)
			}
			f.advance()
			if r := f.run(run); r.State != core.RunCancelled || r.FinishedAt != nil {
				t.Fatalf("run with elements still running: %s, finished %v; want CANCELLED and open", r.State, r.FinishedAt)
			}
			f.wantState(count, core.TaskRunning)

			for i, c := range running {
				req := store.FinishRequest{Outcome: store.Outcome(tc.ends[i])}
				switch tc.ends[i] {
				case "SUCCEEDED":
					req.Result = json.RawMessage(`1`)
				case "FAILED":
					req.Error, req.RetryDelay = "boom", time.Millisecond
				case "DEAD":
					req.Outcome, req.Error, req.Permanent = store.OutcomeFailed, "boom", true
				}
				f.finish(c, req)
				if i == 0 {
					// One element still runs: count waits for it.
					f.advance()
					f.wantState(count, core.TaskRunning)
				}
			}
			f.advance()
			d := f.task(count)
			if d.State != tc.count || d.Result != nil || (tc.err != "" && (d.Error == nil || *d.Error != tc.err)) {
				t.Fatalf("count: %s, result %s, error %v; want %s, no result, error %q", d.State, d.Result, d.Error, tc.count, tc.err)
			}
			f.wantEvent(count, core.TaskRunning, tc.count, "test-scheduler", "")
			for i, e := range f.elements(run, "count")[1:3] {
				if want := map[string]core.TaskState{"FAILED": core.TaskCancelled}[tc.ends[i]]; want != "" && e.State != want {
					t.Errorf("%s after a retryable failure in a cancelled run: %s, want %s", e.Name, e.State, want)
				}
			}
			if r := f.run(run); r.State != core.RunCancelled || r.FinishedAt == nil {
				t.Fatalf("run: %s, finished %v; want CANCELLED and settled", r.State, r.FinishedAt)
			}
			if n := f.outboxRows(merge); n != 0 {
				t.Fatalf("merge has %d outbox rows, want none", n)
			}
			f.wantState(merge, core.TaskCancelled)
			if res := f.advance(); res.Runs != 0 {
				t.Fatalf("a pass after the run settled: %+v", res)
			}
		})
	}
}
