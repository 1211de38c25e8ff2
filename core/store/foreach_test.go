package store_test

import (
	"context"
	"encoding/json"
	"fmt"
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
