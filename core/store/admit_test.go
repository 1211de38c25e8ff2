package store_test

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/flowforge/flowforge/core"
	"github.com/flowforge/flowforge/core/store"
)

// admit runs one admission round from the first key.
func (f *fixture) admit() store.AdmitResult {
	f.t.Helper()
	res, err := f.s.Admit(f.ctx, "", "test-scheduler")
	if err != nil {
		f.t.Fatalf("admit: %v", err)
	}
	return res
}

// dispatched counts the task runs of workflow that have an outbox row.
func (f *fixture) dispatched(workflow string) int {
	f.t.Helper()
	return f.count(`SELECT count(DISTINCT o.task_run_id) FROM outbox o JOIN task_runs t ON t.id = o.task_run_id
	                  JOIN workflow_runs r ON r.id = t.run_id WHERE r.workflow_name = $1`, workflow)
}

// triggerN triggers n runs of workflow, each with params {"c": "<c>"}, and
// returns the id of each run's task called name.
func (f *fixture) triggerN(workflow, name string, n int, c string) []uuid.UUID {
	f.t.Helper()
	ids := make([]uuid.UUID, n)
	for i := range ids {
		ids[i] = f.taskID(f.trigger(workflow, fmt.Sprintf(`{"c": %q}`, c)), name)
	}
	return ids
}

// TestAConcurrencyKeyDispatchesAtMostItsLimit: five runs share a key with
// limit 2. The trigger makes their root tasks READY waiting, without a
// dispatch (and the pass leaves them so); the admission dispatches two; a finish gives its slot back in its own
// statement and the next round dispatches one more; a key of another
// value is not held back by the first.
func TestAConcurrencyKeyDispatchesAtMostItsLimit(t *testing.T) {
	f := newFixture(t)
	f.apply("name: limited\ntasks:\n  - {name: a, handler: noop, concurrency: {key: \"'customer-' + params.c\", limit: 2}}\n")
	ids := f.triggerN("limited", "a", 5, "42")
	other := f.triggerN("limited", "a", 1, "7")[0]
	for _, id := range append(ids, other) {
		f.wantState(id, core.TaskReady)
	}
	if n := f.count(`SELECT count(*) FROM task_runs WHERE flow_wait = 'concurrency' AND fencing_token = 1`); n != 6 {
		t.Fatalf("%d root tasks waiting for a slot with fencing token 1 after the trigger, want 6", n)
	}
	if n := f.dispatched("limited"); n != 0 {
		t.Fatalf("%d tasks dispatched by the trigger, want 0", n)
	}
	f.advance()
	if n := f.dispatched("limited"); n != 0 {
		t.Fatalf("%d tasks dispatched before any admission, want 0", n)
	}
	res := f.admit()
	if res.Dispatched != 3 || res.Keys != 2 || res.Counted != 0 {
		t.Fatalf("admission %+v, want 3 dispatched over 2 keys, no slot holder counted", res)
	}
	if n := f.count(`SELECT count(*) FROM task_runs WHERE concurrency_key = 'customer-42' AND flow_wait IS NULL AND state = 'READY'`); n != 2 {
		t.Fatalf("%d tasks of customer-42 dispatched, want 2", n)
	}
	// The admission is recorded on the task run (admitted_at), not as a
	// history row; task show reads it for the dispatched, not the waiting.
	if n := f.count(`SELECT count(*) FROM task_runs WHERE flow_wait IS NULL AND admitted_at >= ready_at`); n != 3 {
		t.Fatalf("%d dispatched tasks carry their admission time, want 3", n)
	}
	if n := f.count(`SELECT count(*) FROM task_events WHERE from_state = 'READY' AND to_state = 'READY'`); n != 0 {
		t.Fatalf("the admission wrote %d history rows, want none", n)
	}
	for _, id := range ids {
		d, err := f.s.GetTask(f.ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if (d.AdmittedAt != nil) != (d.FlowWait == nil) {
			t.Fatalf("task %s: admitted_at %v with flow_wait %v; want a time exactly when it was dispatched", id, d.AdmittedAt, d.FlowWait)
		}
	}
	if n := f.outboxRows(other); n != 1 {
		t.Fatalf("the task of customer-7 has %d outbox rows, want 1", n)
	}
	// Counted is the holders of the keys with waiters (customer-42's two;
	// customer-7 has none waiting): what the scheduler spaces rounds by.
	if res := f.admit(); res.Dispatched != 0 || res.Counted != 2 {
		t.Fatalf("a second round with every slot held: %+v, want 0 dispatched, 2 holders counted", res)
	}
	var first uuid.UUID
	for _, id := range ids {
		if f.outboxRows(id) == 1 && first == uuid.Nil {
			first = id
		}
	}
	f.runTask(first)
	if res := f.admit(); res.Dispatched != 1 || res.Counted != 1 {
		t.Fatalf("after a finish the round: %+v, want 1 dispatched, 1 holder counted", res)
	}
	if n := f.dispatched("limited"); n != 4 {
		t.Fatalf("%d tasks dispatched in all, want 4", n)
	}
}

// TestAPromotedTaskWithAKeyWaitsWithoutADispatch: a downstream task that
// names a concurrency key is made READY waiting for its admission, with no
// outbox row (a dispatch written there would bypass the limit), whether
// its parent's finish promotes it (the counter join) or the scheduler's
// pass does (a parent's success counted by none of its children); the
// admission then dispatches one of the two (limit 1) and holds the other.
func TestAPromotedTaskWithAKeyWaitsWithoutADispatch(t *testing.T) {
	f := newFixture(t)
	f.apply("name: chained\ntasks:\n  - {name: a, handler: noop}\n  - {name: b, handler: noop, depends_on: [a], concurrency: {key: \"'customer-' + params.c\", limit: 1}}\n")
	byFinish, byPass := f.trigger("chained", `{"c": "42"}`), f.trigger("chained", `{"c": "42"}`)
	f.runTask(f.taskID(byFinish, "a"))
	f.runTaskUncounted(f.taskID(byPass, "a"))
	f.advance()
	for _, run := range []uuid.UUID{byFinish, byPass} {
		b := f.taskID(run, "b")
		f.wantState(b, core.TaskReady)
		if n := f.count(`SELECT count(*) FROM task_runs WHERE id = $1 AND flow_wait = 'concurrency'`, b); n != 1 {
			t.Fatalf("promoted task %s with a key is not waiting for its admission", b)
		}
		if n := f.outboxRows(b); n != 0 {
			t.Fatalf("the promotion wrote %d outbox rows for task %s waiting for its admission, want 0", n, b)
		}
	}
	if res := f.admit(); res.Dispatched != 1 {
		t.Fatalf("admission %+v, want 1 dispatched (limit 1)", res)
	}
	if n := f.dispatched("chained"); n != 3 {
		t.Fatalf("%d tasks dispatched in all, want 3 (two roots, one admitted b)", n)
	}
}

// TestARateLimitAdmitsItsLimitPerWindow: a limit of 3 per 10 s over 5
// tasks admits 3 now and says when the next has room (about 10 s).
func TestARateLimitAdmitsItsLimitPerWindow(t *testing.T) {
	f := newFixture(t)
	f.apply("name: rated\ntasks:\n  - {name: a, handler: noop, rate_limit: {key: api, limit: 3, per: 10s}}\n")
	f.triggerN("rated", "a", 5, "x")
	f.advance()
	res := f.admit()
	if res.Dispatched != 3 {
		t.Fatalf("admission %+v, want 3 dispatched", res)
	}
	if !res.RateDueOK || res.RateDue < 9*time.Second || res.RateDue > 11*time.Second {
		t.Fatalf("next rate room in %v (ok %v), want about 10.1s", res.RateDue, res.RateDueOK)
	}
	if res := f.admit(); res.Dispatched != 0 {
		t.Fatalf("a second round dispatched %d within the window, want 0", res.Dispatched)
	}
}

// TestARateKeysRoundAdmitsABatchAtATime: a rate key with room for all
// of its waiters admits AdmitBatchMax of them a round (here 2, of 5 with a
// limit of 10 a minute) and says its next round is due now, until none
// is left; one statement no longer admits a whole limit's backlog while
// the workers wait for its commit.
func TestARateKeysRoundAdmitsABatchAtATime(t *testing.T) {
	f := newFixture(t)
	f.s.SetAdmitBatch(2)
	f.apply("name: rated\ntasks:\n  - {name: a, handler: noop, rate_limit: {key: api, limit: 10, per: 1m}}\n")
	f.triggerN("rated", "a", 5, "x")
	f.advance()
	for i, want := range []int{2, 2, 1, 0} {
		res := f.admit()
		if res.Dispatched != want || res.Starts != want {
			t.Fatalf("round %d: %+v, want %d admitted", i+1, res, want)
		}
		if want == 2 && (!res.RateDueOK || res.RateDue > 0) {
			t.Fatalf("round %d admitted its batch with room left: next round due in %v (ok %v), want now", i+1, res.RateDue, res.RateDueOK)
		}
	}
	if n := f.dispatched("rated"); n != 5 {
		t.Fatalf("%d dispatched, want 5", n)
	}
}

// TestAConcurrencyKeysRoundAdmitsABatchAtATime: a concurrency key with
// free slots for all of its waiters admits AdmitBatchMax of them a round
// (here 2 of 5, with a limit of 10) and says more may be admitted at once
// (More) while the batch was full and slots were left; one statement no
// longer admits a limit of up to 100,000 while the workers wait for its
// commit. A round that fills every free slot of its key, or admits its
// last waiter, says nothing more.
func TestAConcurrencyKeysRoundAdmitsABatchAtATime(t *testing.T) {
	f := newFixture(t)
	f.s.SetAdmitBatch(2)
	f.apply("name: wide\ntasks:\n  - {name: a, handler: noop, concurrency: {key: k, limit: 10}}\n")
	f.triggerN("wide", "a", 5, "x")
	f.advance()
	for i, want := range []struct {
		n    int
		more bool
	}{{2, true}, {2, true}, {1, false}, {0, false}} {
		res := f.admit()
		if res.Dispatched != want.n || res.Slots != want.n || res.More != want.more {
			t.Fatalf("round %d: %+v, want %d admitted, more %v", i+1, res, want.n, want.more)
		}
	}
	if n := f.dispatched("wide"); n != 5 {
		t.Fatalf("%d dispatched, want 5", n)
	}
	f.apply("name: narrow\ntasks:\n  - {name: a, handler: noop, concurrency: {key: n, limit: 2}}\n")
	f.triggerN("narrow", "a", 5, "x")
	f.advance()
	if res := f.admit(); res.Dispatched != 2 || res.More {
		t.Fatalf("%+v: want the key's 2 free slots filled and nothing more to admit", res)
	}
}

// TestATriggerWhoseKeyCannotBeEvaluatedIsRefused: a key over a param the
// run does not have refuses the trigger, naming the task, and creates
// nothing.
func TestATriggerWhoseKeyCannotBeEvaluatedIsRefused(t *testing.T) {
	f := newFixture(t)
	f.apply("name: limited\ntasks:\n  - {name: a, handler: noop, concurrency: {key: \"'c-' + params.c\", limit: 1}}\n")
	_, err := f.s.Trigger(f.ctx, store.TriggerRequest{Workflow: "limited", Params: []byte(`{"d": 1}`)})
	if !errors.Is(err, core.ErrBadParams) || !strings.Contains(err.Error(), `task "a": concurrency.key`) {
		t.Fatalf("trigger: %v, want ErrBadParams naming task a's concurrency.key", err)
	}
	if n := f.count(`SELECT count(*) FROM workflow_runs`); n != 0 {
		t.Fatalf("%d runs created, want 0", n)
	}
}

// TestFlowControlReachesEveryWayATaskBecomesReady: a child promoted by its
// parent's finish (the counter join), for_each elements (they inherit the
// for_each task's key) and a retry all wait for their admission; no
// outbox row exists for a waiting task.
func TestFlowControlReachesEveryWayATaskBecomesReady(t *testing.T) {
	f := newFixture(t)
	f.apply(`name: limited
tasks:
  - {name: up, handler: noop}
  - {name: kid, handler: noop, depends_on: [up], concurrency: {key: k, limit: 1}}
  - {name: each, handler: noop, depends_on: [up], for_each: '[1, 2, 3]', concurrency: {key: k, limit: 1}}
`)
	run := f.trigger("limited", "")
	f.runTask(f.taskID(run, "up"))
	f.advance()
	waiting := f.count(`SELECT count(*) FROM task_runs WHERE run_id = $1 AND state = 'READY' AND flow_wait = 'concurrency'`, run)
	if waiting != 4 {
		t.Fatalf("%d tasks wait for their slot (states %s), want 4: kid and three elements", waiting, f.states(run))
	}
	if n := f.count(`SELECT count(*) FROM outbox o JOIN task_runs t ON t.id = o.task_run_id WHERE t.run_id = $1 AND t.flow_wait IS NOT NULL`, run); n != 0 {
		t.Fatalf("%d outbox rows for waiting tasks, want 0", n)
	}
	if res := f.admit(); res.Dispatched != 1 {
		t.Fatalf("admission %+v, want one of the four dispatched", res)
	}
}

// TestAdmissionTakesHigherPrioritiesFirstAndAgesTheRest: a key with limit
// 1; five priority-1 runs wait, then two priority-4 runs (run trigger
// --priority): each round admits a priority-4 task first although it is
// newer. A priority-1 task that has waited three PriorityAgings competes
// at 4 and, older, goes before a fresh priority-4 task: no starvation.
func TestAdmissionTakesHigherPrioritiesFirstAndAgesTheRest(t *testing.T) {
	f := newFixture(t)
	f.apply("name: prio\ntasks:\n  - {name: a, handler: noop, priority: 1, concurrency: {key: k, limit: 1}}\n")
	var low, high []uuid.UUID
	for range 5 {
		low = append(low, f.taskID(f.trigger("prio", ""), "a"))
	}
	for range 2 {
		res, err := f.s.Trigger(f.ctx, store.TriggerRequest{Workflow: "prio", Priority: 4})
		if err != nil {
			t.Fatal(err)
		}
		high = append(high, f.taskID(res.RunID, "a"))
	}
	f.advance()
	// The pass made all seven READY in one statement (one ready_at): the
	// two priority-4 tasks go first, in either order.
	for range high {
		if res := f.admit(); res.Dispatched != 1 {
			t.Fatalf("admission %+v, want one", res)
		}
		ran := false
		for _, h := range high {
			if st, _ := f.state(h); st == core.TaskReady && f.outboxRows(h) == 1 {
				f.runTask(h)
				ran = true
			}
		}
		if !ran {
			t.Fatal("a priority-1 task was admitted before the priority-4 ones")
		}
	}
	// Aging: low[4] has waited three PriorityAgings; a fresh priority-4
	// run arrives; low[4] competes at 4 and is older.
	if _, err := f.db.ExecContext(f.ctx, `UPDATE task_runs SET ready_at = now() - 3 * make_interval(secs => $2) WHERE id = $1`,
		low[4], store.PriorityAging.Seconds()); err != nil {
		t.Fatal(err)
	}
	res, err := f.s.Trigger(f.ctx, store.TriggerRequest{Workflow: "prio", Priority: 4})
	if err != nil {
		t.Fatal(err)
	}
	fresh := f.taskID(res.RunID, "a")
	f.advance()
	f.admit()
	if n := f.outboxRows(low[4]); n != 1 {
		t.Fatalf("the aged priority-1 task was not admitted first (the fresh priority-4 task has %d outbox rows)", f.outboxRows(fresh))
	}
	if _, err := f.s.Trigger(f.ctx, store.TriggerRequest{Workflow: "prio", Priority: 5}); !errors.Is(err, core.ErrBadParams) ||
		!strings.Contains(err.Error(), "priority must be between 1 (lowest) and 4 (highest), got 5") {
		t.Fatalf("trigger with priority 5: %v, want ErrBadParams", err)
	}
}

// TestFlowControlWakesTheSchedulersForAnAdmissionOnly: what flow control
// asks of the schedulers is an admission round (store.AdmitWake), not a
// pass over a run: the trigger of a root that waits for its admission, the
// finish that gives a slot back (settling its run), and the finish that
// promotes a child waiting for its admission each notify TasksChannel with
// AdmitWake alone, naming no run. (Named, each run cost the scheduler a
// pass that had nothing to do: two per run of a keyed workflow.)
func TestFlowControlWakesTheSchedulersForAnAdmissionOnly(t *testing.T) {
	f, url := notifyFixture(t)
	f.apply("name: keyed\ntasks:\n  - {name: a, handler: noop, concurrency: {key: k, limit: 1}}\n")
	f.apply("name: chained\ntasks:\n  - {name: a, handler: noop}\n  - {name: b, handler: noop, depends_on: [a], concurrency: {key: k, limit: 1}}\n")
	l := listenOn(t, url, store.TasksChannel)
	want := []string{store.AdmitWake}
	run := f.trigger("keyed", "")
	if got := next(t, l); !slices.Equal(got, want) {
		t.Fatalf("the trigger of a waiting root notified %q, want %q", got, want)
	}
	if res := f.admit(); res.Dispatched != 1 {
		t.Fatalf("admission %+v, want 1 dispatched", res)
	}
	f.runTask(f.taskID(run, "a"))
	if got := next(t, l); !slices.Equal(got, want) {
		t.Fatalf("the finish that gave a slot back notified %q, want %q", got, want)
	}
	chained := f.trigger("chained", "")
	f.runTask(f.taskID(chained, "a"))
	if got := next(t, l); !slices.Equal(got, want) {
		t.Fatalf("the finish that promoted a waiting child notified %q, want %q", got, want)
	}
	f.wantState(f.taskID(chained, "b"), core.TaskReady)
}
