package store_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/flowforge/flowforge/core"
	"github.com/flowforge/flowforge/core/store"
)

// The tasks the scheduler holds (held.go, events.go): a durable sleep, a
// wait for an event, a child run.

const sleeper = `
name: sleeper
tasks:
  - {name: a, handler: noop}
  - {name: nap, depends_on: [a], sleep: {for: 1500ms}}
  - {name: after, handler: noop, depends_on: [nap]}
`

// TestASleepEndsAtItsDueTimeOnTheDatabaseClock: the pass starts the sleep
// RUNNING with no lease and no outbox row, due for 1.5 s after its start
// on the database clock; a pass before then leaves it; the sweep names
// its run only once it is due, and the pass then ends it SUCCEEDED with
// its due and wake times, and promotes what depends on it.
func TestASleepEndsAtItsDueTimeOnTheDatabaseClock(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.apply(sleeper)
	run := f.trigger("sleeper", "")
	f.finishWith(f.taskID(run, "a"), store.OutcomeSucceeded, `{}`)
	f.advance()
	nap := f.taskID(run, "nap")
	f.wantState(nap, core.TaskRunning)
	if n := f.count(`SELECT count(*) FROM task_runs WHERE id = $1 AND lease_expires_at IS NULL AND worker_id IS NULL
	                    AND due_at - started_at = interval '1500 milliseconds' AND attempt = 1`, nap); n != 1 {
		t.Fatalf("the sleep is not RUNNING without a lease, due 1.5 s after its start on the database clock")
	}
	if n := f.outboxRows(nap); n != 0 {
		t.Fatalf("the sleep has %d outbox rows, want 0 (no worker runs it)", n)
	}
	if ids, _, err := f.s.SweepCandidates(f.ctx, 100, store.Cursor{}); err != nil || contains(ids, run) {
		t.Fatalf("sweep before the due time names the run (%v, %v)", ids, err)
	}
	f.advance()
	f.wantState(nap, core.TaskRunning)
	f.waitDB("the sleep to fall due", `SELECT due_at <= now() FROM task_runs WHERE id = $1`, nap)
	if ids, _, err := f.s.SweepCandidates(f.ctx, 100, store.Cursor{}); err != nil || !contains(ids, run) {
		t.Fatalf("sweep after the due time does not name the run (%v, %v)", ids, err)
	}
	if res := f.advance(); res.HeldEnded != 1 {
		t.Fatalf("pass: %+v, want one held task ended", res)
	}
	f.wantStates(run, map[string]core.TaskState{"nap": core.TaskSucceeded})
	if n := f.count(`SELECT count(*) FROM task_runs WHERE id = $1 AND (result->>'woke_at')::timestamptz >= (result->>'due_at')::timestamptz
	                   AND finished_at >= started_at + interval '1500 milliseconds'`, nap); n != 1 {
		t.Fatalf("the sleep ended before its due time: %+v", f.task(nap))
	}
	f.advance()
	f.wantStates(run, map[string]core.TaskState{"after": core.TaskReady})
}

func contains(ids []uuid.UUID, id uuid.UUID) bool {
	for _, x := range ids {
		if x == id {
			return true
		}
	}
	return false
}

const approval = `
name: approval
tasks:
  - name: approve
    wait_for: {event: order.approved, key: "params.order_id", timeout: 1h}
  - {name: ship, handler: noop, depends_on: [approve]}
`

// send sends an event and fails the test on an error.
func (f *fixture) send(req store.SendEventRequest) store.SendEventResult {
	f.t.Helper()
	if req.Actor == "" {
		req.Actor = "test"
	}
	res, err := f.s.SendEvent(f.ctx, req)
	if err != nil {
		f.t.Fatalf("send event: %v", err)
	}
	return res
}

// TestAnEventIsDeliveredOnceToTheWaitsOfItsKey: an event completes the
// RUNNING wait whose key it carries (SUCCEEDED, its payload the result)
// and no other; the same id sent again changes nothing and says it is a
// duplicate; an event sent before a wait started is matched when it
// starts; ship then runs with the payload as upstream.approve.
func TestAnEventIsDeliveredOnceToTheWaitsOfItsKey(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.apply(approval)
	r17 := f.trigger("approval", `{"order_id": 17}`)
	r18 := f.trigger("approval", `{"order_id": "18"}`)
	f.advance()
	f.wantStates(r17, map[string]core.TaskState{"approve": core.TaskRunning})
	if n := f.count(`SELECT count(*) FROM task_runs WHERE run_id = $1 AND wait_event = 'order.approved' AND wait_key = '17'
	                   AND due_at - started_at = interval '1 hour'`, r17); n != 1 {
		t.Fatal("the wait does not wait for order.approved with key 17 for an hour")
	}
	res := f.send(store.SendEventRequest{Name: "order.approved", Key: "17", Payload: json.RawMessage(`{"by": "ana"}`), ID: "ev-1"})
	if res.Duplicate || len(res.Completed) != 1 || res.Completed[0].RunID != r17 || res.Completed[0].Task != "approve" {
		t.Fatalf("first send: %+v, want approve of %s completed", res, r17)
	}
	again := f.send(store.SendEventRequest{Name: "order.approved", Key: "17", Payload: json.RawMessage(`{"by": "bob"}`), ID: "ev-1"})
	if !again.Duplicate || len(again.Completed) != 0 || string(again.Event.Payload) != `{"by": "ana"}` || len(again.Event.Deliveries) != 1 {
		t.Fatalf("second send of ev-1: %+v, want a duplicate of the first, delivered once", again)
	}
	f.wantStates(r17, map[string]core.TaskState{"approve": core.TaskSucceeded})
	f.wantStates(r18, map[string]core.TaskState{"approve": core.TaskRunning})
	if got := string(f.task(f.taskID(r17, "approve")).Result); got != `{"by": "ana"}` {
		t.Fatalf("approve's result %s, want the payload", got)
	}
	if n := f.count(`SELECT count(*) FROM event_deliveries WHERE event_id = 'ev-1'`); n != 1 {
		t.Fatalf("%d deliveries of ev-1, want 1", n)
	}
	f.advance()
	f.wantStates(r17, map[string]core.TaskState{"ship": core.TaskReady})

	// Sent before its wait: kept for its lookback, matched when the wait
	// starts (in the pass that starts it).
	f.send(store.SendEventRequest{Name: "order.approved", Key: "19", Payload: json.RawMessage(`{"early": true}`), ID: "ev-early"})
	r19 := f.trigger("approval", `{"order_id": 19}`)
	if res := f.advance(); res.EventsMatched != 1 {
		t.Fatalf("pass: %+v, want the kept event matched", res)
	}
	f.wantStates(r19, map[string]core.TaskState{"approve": core.TaskSucceeded})
	if got := string(f.task(f.taskID(r19, "approve")).Result); got != `{"early": true}` {
		t.Fatalf("approve's result %s, want the early payload", got)
	}
	evs, err := f.s.ListEvents(f.ctx, store.EventFilter{Name: "order.approved"})
	if err != nil || len(evs) != 2 || evs[0].ID != "ev-early" || len(evs[0].Deliveries) != 1 || evs[0].Deliveries[0].RunID != r19 {
		t.Fatalf("ListEvents = %+v, %v; want ev-early (delivered to %s) then ev-1", evs, err, r19)
	}
}

// TestAnEventPastItsLookbackIsNotMatched: an event whose lookback passed
// is not matched by a wait that starts afterwards.
func TestAnEventPastItsLookbackIsNotMatched(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.apply(approval)
	f.send(store.SendEventRequest{Name: "order.approved", Key: "5", ID: "old", Lookback: time.Millisecond})
	f.waitDB("the lookback to pass", `SELECT keep_until <= now() FROM events WHERE id = 'old'`)
	run := f.trigger("approval", `{"order_id": 5}`)
	f.advance()
	f.wantStates(run, map[string]core.TaskState{"approve": core.TaskRunning})
}

// TestAnEventSentWhileItsWaitStartsIsDelivered forces the interleaving the
// event lock exists for: a pass has made the wait RUNNING and found no
// kept event, and is held before its commit (MidWaitArm); the event is
// sent then. The send waits for the pass's lock on the event's name and
// key, reads the committed wait after it and completes it. Without the
// lock the send reads no wait (the pass has not committed), the pass read
// no event, and the wait would sleep through its event until its timeout.
func TestAnEventSentWhileItsWaitStartsIsDelivered(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.apply(approval)
	run := f.trigger("approval", `{"order_id": 7}`)
	held, release := make(chan struct{}), make(chan struct{})
	s2, err := store.Open(f.ctx, f.url, store.Options{MaxConns: 2, MidWaitArm: func() {
		close(held)
		<-release
	}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s2.Close() })
	passDone := make(chan error, 1)
	go func() {
		_, err := s2.Advance(f.ctx, nil, 100, "held-pass")
		passDone <- err
	}()
	<-held
	sent := make(chan error, 1)
	go func() {
		_, err := f.s.SendEvent(f.ctx, store.SendEventRequest{Name: "order.approved", Key: "7", ID: "race", Actor: "test"})
		sent <- err
	}()
	// The send either ends (no lock: it read no wait) or waits on the
	// pass's advisory lock; only then is the pass let go.
	deadline := time.Now().Add(10 * time.Second)
	for waiting := false; !waiting; {
		select {
		case err := <-sent:
			sent <- err
			waiting = true
		default:
			waiting = f.count(`SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted AND database = (SELECT oid FROM pg_database WHERE datname = current_database())`) > 0
		}
		if time.Now().After(deadline) {
			t.Fatal("the send neither ended nor waited for the pass's lock")
		}
		time.Sleep(2 * time.Millisecond) // poll interval
	}
	close(release)
	if err := <-passDone; err != nil {
		t.Fatalf("pass: %v", err)
	}
	if err := <-sent; err != nil {
		t.Fatalf("send: %v", err)
	}
	f.wantStates(run, map[string]core.TaskState{"approve": core.TaskSucceeded})
}

const timeouts = `
name: timeouts
tasks:
  - name: skipme
    wait_for: {event: never, timeout: 300ms, on_timeout: skip}
  - name: retryme
    wait_for: {event: never, key: "'k'", timeout: 300ms}
    retry: {max_attempts: 2, initial_backoff: 1ms, max_backoff: 1ms}
  - {name: below, handler: noop, depends_on: [retryme]}
`

// TestAWaitsTimeoutSkipsOrFailsItWithItsRetryPolicy: on_timeout skip makes
// the wait SKIPPED; otherwise a timeout is a failed attempt: RETRYING, then
// waiting again (attempt 2, a new token), then DEAD naming the event and
// the timeout, its downstream UPSTREAM_FAILED.
func TestAWaitsTimeoutSkipsOrFailsItWithItsRetryPolicy(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.apply(timeouts)
	run := f.trigger("timeouts", "")
	f.advance()
	retry := f.taskID(run, "retryme")
	f.wantStates(run, map[string]core.TaskState{"skipme": core.TaskRunning, "retryme": core.TaskRunning})
	f.waitDB("the timeouts", `SELECT bool_and(due_at <= now()) FROM task_runs WHERE run_id = $1 AND kind = 'wait'`, run)
	f.advance()
	f.wantStates(run, map[string]core.TaskState{"skipme": core.TaskSkipped, "retryme": core.TaskRetrying})
	f.waitRetryDue(retry)
	f.advance()
	f.wantStates(run, map[string]core.TaskState{"retryme": core.TaskRunning})
	if n := f.count(`SELECT count(*) FROM task_runs WHERE id = $1 AND attempt = 2 AND due_at > now()`, retry); n != 1 {
		t.Fatal("the wait does not wait again as attempt 2")
	}
	f.waitDB("the second timeout", `SELECT due_at <= now() FROM task_runs WHERE id = $1`, retry)
	f.advance()
	f.wantStates(run, map[string]core.TaskState{"retryme": core.TaskDead, "below": core.TaskUpstreamFailed})
	if e := f.task(retry).Error; e == nil || !strings.Contains(*e, "no event never with key 'k' came within") {
		t.Fatalf("error %v, want it to name the event, key and timeout", e)
	}
	f.advance()
	if r := f.run(run); r.State != core.RunFailed {
		t.Fatalf("run is %s, want FAILED", r.State)
	}
}

const childFile = `
name: child
tasks:
  - {name: work, handler: noop}
`

const parentFile = `
name: parent
tasks:
  - {name: a, handler: noop}
  - name: kid
    depends_on: [a]
    workflow: {name: child, params: "{'order': params.order_id, 'from': upstream.a.n}"}
  - {name: after, handler: noop, depends_on: [kid]}
`

// childOf returns the child run of the parent's task id.
func (f *fixture) childOf(task uuid.UUID) uuid.UUID {
	f.t.Helper()
	var id uuid.UUID
	if err := f.db.QueryRowContext(f.ctx, `SELECT child_run_id FROM task_runs WHERE id = $1`, task).Scan(&id); err != nil {
		f.t.Fatalf("child of %s: %v", task, err)
	}
	return id
}

// TestAChildRunIsStartedOnceAndItsParentTakesItsResult: the pass that
// starts the kid task triggers the child run in its transaction, with
// params from the CEL expression, the key derived from the task and its
// token, and the parent named on it; a replay of that start (the task
// PENDING again with the same token, as a pass replayed after a lost
// commit would see it) gets the same child, not a second; when the child
// succeeds, the kid task takes its results.
func TestAChildRunIsStartedOnceAndItsParentTakesItsResult(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.apply(childFile)
	f.apply(parentFile)
	run := f.trigger("parent", `{"order_id": "o-1"}`)
	f.finishWith(f.taskID(run, "a"), store.OutcomeSucceeded, `{"n": 3}`)
	f.advance()
	kid := f.taskID(run, "kid")
	f.wantState(kid, core.TaskRunning)
	child := f.childOf(kid)
	_, tok := f.state(kid)
	if n := f.count(`SELECT count(*) FROM workflow_runs WHERE id = $1 AND parent_task_run_id = $2 AND parent_run_id = $3 AND depth = 1
	                   AND params = '{"order": "o-1", "from": 3}' AND idempotency_key = 'flowforge.child:' || $2 || ':' || $4::bigint`,
		child, kid, run, tok); n != 1 {
		t.Fatalf("child run %s lacks its parent, depth, params or derived key", child)
	}
	// Replay the start: the task PENDING with its token and no link to
	// the child, as before the start committed.
	if _, err := f.db.ExecContext(f.ctx, `UPDATE task_runs SET state = 'PENDING', fencing_token = fencing_token - 1, attempt = 0, child_run_id = NULL WHERE id = $1`, kid); err != nil {
		t.Fatal(err)
	}
	f.advance()
	if again := f.childOf(kid); again != child {
		t.Fatalf("a replayed start made child %s, want %s again", again, child)
	}
	if n := f.count(`SELECT count(*) FROM workflow_runs WHERE workflow_name = 'child'`); n != 1 {
		t.Fatalf("%d child runs, want 1", n)
	}
	f.finishWith(f.taskID(child, "work"), store.OutcomeSucceeded, `{"done": 1}`)
	f.advance()
	if r := f.run(child); r.State != core.RunSucceeded {
		t.Fatalf("child is %s", r.State)
	}
	f.advance()
	f.wantStates(run, map[string]core.TaskState{"kid": core.TaskSucceeded})
	var res struct {
		RunID   uuid.UUID                  `json:"run_id"`
		Results map[string]json.RawMessage `json:"results"`
	}
	if err := json.Unmarshal(f.task(kid).Result, &res); err != nil || res.RunID != child || string(res.Results["work"]) != `{"done": 1}` {
		t.Fatalf("kid's result %s (%v), want the child's id and results", f.task(kid).Result, err)
	}
	f.advance()
	f.wantStates(run, map[string]core.TaskState{"after": core.TaskReady})
}

// TestCancellingAParentCancelsItsChild: the parent's cancellation asks
// for the child's; the child's pass cancels it; the kid task then ends
// CANCELLED and the parent run CANCELLED. A child cancelled on its own
// fails the kid task instead (DEAD, naming the child).
func TestCancellingAParentCancelsItsChild(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.apply(childFile)
	f.apply(parentFile)
	run := f.trigger("parent", `{"order_id": 1}`)
	f.finishWith(f.taskID(run, "a"), store.OutcomeSucceeded, `{"n": 1}`)
	f.advance()
	kid := f.taskID(run, "kid")
	child := f.childOf(kid)
	if _, err := f.s.CancelRun(f.ctx, run, "test", "no longer needed"); err != nil {
		t.Fatal(err)
	}
	f.advance() // asks for the child's cancellation
	f.advance() // cancels the child
	f.advance() // ends kid and the parent
	if r := f.run(child); r.State != core.RunCancelled {
		t.Fatalf("child is %s, want CANCELLED", r.State)
	}
	f.wantStates(run, map[string]core.TaskState{"kid": core.TaskCancelled, "after": core.TaskCancelled})
	if r := f.run(run); r.State != core.RunCancelled || r.FinishedAt == nil {
		t.Fatalf("parent is %s (finished %v), want CANCELLED and settled", r.State, r.FinishedAt)
	}

	// A child cancelled on its own.
	run2 := f.trigger("parent", `{"order_id": 2}`)
	f.finishWith(f.taskID(run2, "a"), store.OutcomeSucceeded, `{"n": 1}`)
	f.advance()
	kid2 := f.taskID(run2, "kid")
	if _, err := f.s.CancelRun(f.ctx, f.childOf(kid2), "test", "operator"); err != nil {
		t.Fatal(err)
	}
	f.advance()
	f.advance()
	f.wantStates(run2, map[string]core.TaskState{"kid": core.TaskDead, "after": core.TaskUpstreamFailed})
	if e := f.task(kid2).Error; e == nil || !strings.Contains(*e, "ended CANCELLED") {
		t.Fatalf("kid's error %v, want the child named as CANCELLED", e)
	}
}

// TestChildWorkflowsAreCheckedAtApplyAndBoundedInDepth: a workflow that
// starts itself, or starts one that starts it, is refused at apply (and
// at a rollback) with the path; so is a child workflow not applied; and a
// chain deeper than
// --max-child-depth fails the task that would start past it.
func TestChildWorkflowsAreCheckedAtApplyAndBoundedInDepth(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	for _, tc := range []struct{ src, err string }{
		{"name: self\ntasks:\n  - {name: k, workflow: {name: self}}\n", "workflows start each other in a cycle (self -> self)"},
		{"name: lonely\ntasks:\n  - {name: k, workflow: {name: nowhere}}\n", `child run of workflow "nowhere", which is not applied`},
	} {
		def, err := core.ParseDefinition([]byte(tc.src))
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := f.s.ApplyWorkflow(f.ctx, def); !errors.Is(err, core.ErrBadWorkflow) || !strings.Contains(err.Error(), tc.err) {
			t.Errorf("apply %q: %v, want ErrBadWorkflow containing %q", tc.src, err, tc.err)
		}
	}
	f.apply("name: c3\ntasks:\n  - {name: w, handler: noop}\n")
	f.apply("name: c2\ntasks:\n  - {name: k, workflow: {name: c3}}\n")
	f.apply("name: c1\ntasks:\n  - {name: k, workflow: {name: c2}}\n")
	def, err := core.ParseDefinition([]byte("name: c3\ntasks:\n  - {name: k, workflow: {name: c1}}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := f.s.ApplyWorkflow(f.ctx, def); err == nil || !strings.Contains(err.Error(), "c3 -> c1 -> c2 -> c3") {
		t.Fatalf("apply of a cycle through two others: %v", err)
	}

	// A rollback that would close a cycle is refused as an apply is.
	f.apply("name: cx\ntasks:\n  - {name: w, handler: noop}\n")
	f.apply("name: cy\ntasks:\n  - {name: k, workflow: {name: cx}}\n")
	f.apply("name: cy\ntasks:\n  - {name: w, handler: noop}\n")
	f.apply("name: cx\ntasks:\n  - {name: k, workflow: {name: cy}}\n")
	if _, _, err := f.s.RollbackWorkflow(f.ctx, "cy", 1, "ops", "back"); !errors.Is(err, core.ErrBadWorkflow) || !strings.Contains(err.Error(), "cy -> cx -> cy") {
		t.Fatalf("a rollback closing a cycle: %v, want it refused naming cy -> cx -> cy", err)
	}

	shallow, err := store.Open(f.ctx, f.url, store.Options{MaxConns: 2, MaxChildDepth: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { shallow.Close() })
	run := f.trigger("c1", "")
	for range 3 {
		if _, err := shallow.Advance(f.ctx, nil, 100, "shallow"); err != nil {
			t.Fatal(err)
		}
	}
	k1 := f.taskID(run, "k")
	c2 := f.childOf(k1)
	k2 := f.taskID(c2, "k")
	f.wantState(k2, core.TaskDead)
	if e := f.task(k2).Error; e == nil || !strings.Contains(*e, "deeper than --max-child-depth 1") {
		t.Fatalf("k2's error %v, want the depth bound named", e)
	}
	f.wantState(k1, core.TaskDead)
	if e := f.task(k1).Error; e == nil || !strings.Contains(*e, "of c2 ended FAILED") {
		t.Fatalf("k1's error %v, want its child named FAILED", e)
	}
	if e := f.task(k2).Error; e == nil {
		t.Fatalf("k2's error %v, want the depth bound named", e)
	}
}

// TestBadEventsAreRefusedAndStoreNothing: each bad input of SendEvent is
// refused with its error and stores nothing.
func TestBadEventsAreRefusedAndStoreNothing(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	for _, tc := range []struct {
		name string
		req  store.SendEventRequest
		is   error
		err  string
	}{
		{"no name", store.SendEventRequest{}, core.ErrBadEvent, "the event name is missing"},
		{"bad name", store.SendEventRequest{Name: "Order Approved"}, core.ErrBadEvent, "must match"},
		{"NUL key", store.SendEventRequest{Name: "e", Key: "a\x00b"}, core.ErrBadEvent, "without NUL"},
		{"long key", store.SendEventRequest{Name: "e", Key: strings.Repeat("k", 513)}, core.ErrBadEvent, "longer than the limit of 512"},
		{"not JSON", store.SendEventRequest{Name: "e", Payload: json.RawMessage(`{"a":`)}, core.ErrBadParams, "not JSON"},
		{"NUL payload", store.SendEventRequest{Name: "e", Payload: json.RawMessage(`{"a": "\u0000"}`)}, core.ErrBadParams, "NUL"},
		{"array payload", store.SendEventRequest{Name: "e", Payload: json.RawMessage(`[1]`)}, core.ErrBadParams, "want a JSON object"},
		{"negative lookback", store.SendEventRequest{Name: "e", Lookback: -time.Second}, core.ErrBadEvent, "lookback must be positive"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := f.s.SendEvent(context.Background(), tc.req)
			if !errors.Is(err, tc.is) || !strings.Contains(err.Error(), tc.err) {
				t.Fatalf("SendEvent = %v, want %v containing %q", err, tc.is, tc.err)
			}
		})
	}
	if n := f.count(`SELECT count(*) FROM events`); n != 0 {
		t.Fatalf("%d events stored, want 0", n)
	}
}

// TestPruneEventsDeletesOnlyEventsPastTheirLookback: the pruner's batch
// deletes the events whose lookback ended, with their deliveries, and
// keeps the others.
func TestPruneEventsDeletesOnlyEventsPastTheirLookback(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.send(store.SendEventRequest{Name: "e", ID: "short", Lookback: time.Millisecond})
	f.send(store.SendEventRequest{Name: "e", ID: "long"})
	f.waitDB("the short lookback to end", `SELECT keep_until < now() FROM events WHERE id = 'short'`)
	if n, err := f.s.PruneEvents(f.ctx, 0, 0); err != nil || n != 1 {
		t.Fatalf("PruneEvents = %d, %v; want 1", n, err)
	}
	if n := f.count(`SELECT count(*) FROM events WHERE id = 'long'`); n != 1 {
		t.Fatal("the event still kept was pruned")
	}
	// The pruner's memory of ids: an event whose lookback ended a moment
	// ago stays while the memory lasts.
	f.send(store.SendEventRequest{Name: "e", ID: "remembered", Lookback: time.Millisecond})
	f.waitDB("its lookback to end", `SELECT keep_until < now() FROM events WHERE id = 'remembered'`)
	if n, err := f.s.PruneEvents(f.ctx, store.EventIDMemoryDefault, 0); err != nil || n != 0 {
		t.Fatalf("PruneEvents(memory) = %d, %v; want 0", n, err)
	}
	if again := f.send(store.SendEventRequest{Name: "e", ID: "remembered"}); !again.Duplicate {
		t.Fatal("an id within the memory was not a duplicate")
	}
	if _, err := f.s.PruneEvents(f.ctx, 0, -1); !errors.Is(err, store.ErrBadPrune) {
		t.Fatalf("PruneEvents(-1) = %v, want ErrBadPrune", err)
	}
}

const failFastParent = `
name: ffparent
fail_fast: true
tasks:
  - {name: a, handler: noop}
  - {name: kid, workflow: {name: child}}
`

// TestAFailFastRunStopsItsChildAndItsTaskEndsCancelled: a task of a
// fail_fast run dies while its child runs; the pass cancels the child,
// and the child's task then ends CANCELLED (stopped with its run, as
// fail_fast stops every other task), not DEAD: the run's one DEAD task is
// the one that failed it.
func TestAFailFastRunStopsItsChildAndItsTaskEndsCancelled(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.apply(childFile)
	f.apply(failFastParent)
	run := f.trigger("ffparent", "")
	f.advance()
	kid := f.taskID(run, "kid")
	f.wantState(kid, core.TaskRunning)
	child := f.childOf(kid)
	f.finishWith(f.taskID(run, "a"), store.OutcomeFailed, "")
	f.advance() // asks for the child's cancellation
	f.advance() // cancels the child
	f.advance() // ends kid
	if r := f.run(child); r.State != core.RunCancelled {
		t.Fatalf("child is %s, want CANCELLED", r.State)
	}
	f.wantStates(run, map[string]core.TaskState{"a": core.TaskDead, "kid": core.TaskCancelled})
	if r := f.run(run); r.State != core.RunFailed || r.FinishedAt == nil {
		t.Fatalf("run is %s (finished %v), want FAILED and settled", r.State, r.FinishedAt)
	}
}

// TestARequeuedChildRunTaskTakesBackItsMendedChild: a child run FAILED
// and its parent's task died with it; the operator mends the child (its
// DEAD task requeued, run again: the child SUCCEEDED), then requeues the
// parent's task. The task takes that child back, SUCCEEDED with its
// results, and starts no second child: a new one would run the child's
// work again. A child still FAILED is replaced by a new one.
func TestARequeuedChildRunTaskTakesBackItsMendedChild(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.apply(childFile)
	f.apply(parentFile)
	run := f.trigger("parent", `{"order_id": 3}`)
	f.finishWith(f.taskID(run, "a"), store.OutcomeSucceeded, `{"n": 1}`)
	f.advance()
	kid := f.taskID(run, "kid")
	child := f.childOf(kid)
	work := f.taskID(child, "work")
	f.finishWith(work, store.OutcomeFailed, "")
	f.advance() // settles the child FAILED
	f.advance() // ends kid DEAD
	f.wantState(kid, core.TaskDead)

	if err := f.s.Requeue(f.ctx, work, "ops", "mended"); err != nil {
		t.Fatal(err)
	}
	f.advance()
	f.finishWith(work, store.OutcomeSucceeded, `{"done": 2}`)
	f.advance()
	if r := f.run(child); r.State != core.RunSucceeded {
		t.Fatalf("child is %s, want SUCCEEDED", r.State)
	}
	if err := f.s.Requeue(f.ctx, kid, "ops", "its child was mended"); err != nil {
		t.Fatal(err)
	}
	f.advance() // takes the child back
	f.advance() // ends kid with its end
	f.wantStates(run, map[string]core.TaskState{"kid": core.TaskSucceeded})
	if got := f.childOf(kid); got != child {
		t.Fatalf("kid's child is %s, want the mended %s", got, child)
	}
	if n := f.count(`SELECT count(*) FROM workflow_runs WHERE workflow_name = 'child'`); n != 1 {
		t.Fatalf("%d child runs, want 1: the mended child's work would run twice", n)
	}

	// A child still FAILED is replaced.
	run2 := f.trigger("parent", `{"order_id": 4}`)
	f.finishWith(f.taskID(run2, "a"), store.OutcomeSucceeded, `{"n": 1}`)
	f.advance()
	kid2 := f.taskID(run2, "kid")
	first := f.childOf(kid2)
	f.finishWith(f.taskID(first, "work"), store.OutcomeFailed, "")
	f.advance()
	f.advance()
	if err := f.s.Requeue(f.ctx, kid2, "ops", "try again"); err != nil {
		t.Fatal(err)
	}
	f.advance()
	if again := f.childOf(kid2); again == first {
		t.Fatalf("a requeue after a FAILED child took it back (%s), want a new child", first)
	}
}

// TestAChildRunIsKeptUntilItsParentTakesItsEnd: a child run that has
// settled while its parent's task is still RUNNING (the parent's pass has
// not yet taken its end) is not settled for deletion: `run delete` refuses
// it and the pruner passes it over, since the parent's task would wait for
// ever for a child that no longer exists. Once the parent took its end,
// both may delete it.
func TestAChildRunIsKeptUntilItsParentTakesItsEnd(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.apply(childFile)
	f.apply(parentFile)
	run := f.trigger("parent", `{"order_id": "o-1"}`)
	f.finishWith(f.taskID(run, "a"), store.OutcomeSucceeded, `{"n": 3}`)
	f.advance()
	kid := f.taskID(run, "kid")
	child := f.childOf(kid)
	f.finishWith(f.taskID(child, "work"), store.OutcomeSucceeded, `{"done": 1}`)
	// The child's one task settles it in its finish; no pass has run.
	if r := f.run(child); r.State != core.RunSucceeded || r.FinishedAt == nil {
		t.Fatalf("child is %s (finished %v), want SUCCEEDED and settled by its finish", r.State, r.FinishedAt)
	}
	f.wantState(kid, core.TaskRunning)
	if _, err := f.db.ExecContext(f.ctx, `UPDATE workflow_runs SET finished_at = now() - interval '30 days' WHERE id = $1`, child); err != nil {
		t.Fatal(err)
	}
	_, err := f.s.DeleteRuns(f.ctx, store.DeleteRunsRequest{IDs: []uuid.UUID{child}, Actor: "test", Reason: "cleanup"})
	if !errors.Is(err, store.ErrRunNotSettled) || !strings.Contains(err.Error(), "its parent's task has taken its end") {
		t.Fatalf("delete of a child its parent has not taken: %v, want ErrRunNotSettled saying why", err)
	}
	if c, err := f.s.PruneRuns(f.ctx, store.PruneRequest{State: core.RunSucceeded, Age: 24 * time.Hour}); err != nil || c.Runs != 0 {
		t.Fatalf("the pruner deleted %d runs (%v), want the child kept", c.Runs, err)
	}
	f.advance()
	f.wantState(kid, core.TaskSucceeded)
	if _, err := f.s.DeleteRuns(f.ctx, store.DeleteRunsRequest{IDs: []uuid.UUID{child}, Actor: "test", Reason: "cleanup"}); err != nil {
		t.Fatalf("delete of a child its parent has taken: %v", err)
	}
}
