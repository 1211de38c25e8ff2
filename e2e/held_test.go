package e2e

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/flowforge/flowforge/core/store"
	"github.com/flowforge/flowforge/core/store/storetest"
	"github.com/flowforge/flowforge/daemon/failpoint"
	"github.com/flowforge/flowforge/e2e/harness"
)

// The tasks the scheduler holds without a worker (issue 26, part 2: a
// durable sleep, a wait for an event, a child run) against real processes
// and real faults. Modes 100 to 106. Every scheduler here runs with a
// --full-sweep-interval of ten minutes, so that a held task that ends
// within the test ended through its own sweep part or its own notification,
// not through the safety net of the full pass.

// heldFullSweep keeps the full pass out of the tests' time (see above).
const heldFullSweep = "10m"

// heldTask is one task_runs row with the columns of a held task.
type heldTask struct {
	ID         string
	State      string
	Attempt    int
	Token      int64
	DueAt      sql.NullTime
	StartedAt  sql.NullTime
	FinishedAt sql.NullTime
	Child      sql.NullString
	Result     sql.NullString
	Error      sql.NullString
}

func heldTaskOf(t *testing.T, db *sql.DB, runID, name string) (heldTask, error) {
	t.Helper()
	var h heldTask
	err := db.QueryRow(`SELECT id::text, state, attempt, fencing_token, due_at, started_at, finished_at, child_run_id::text, result::text, error
	                      FROM task_runs WHERE run_id = $1 AND task_name = $2`, runID, name).
		Scan(&h.ID, &h.State, &h.Attempt, &h.Token, &h.DueAt, &h.StartedAt, &h.FinishedAt, &h.Child, &h.Result, &h.Error)
	if err != nil {
		return heldTask{}, fmt.Errorf("read task %s of run %s: %w", name, runID, err)
	}
	return h, nil
}

// heldWaitTask polls the task until cond holds and returns it (a read that
// fails, as across a database restart, is retried until the deadline).
func heldWaitTask(t *testing.T, db *sql.DB, runID, name string, timeout time.Duration, what string, cond func(heldTask) bool) heldTask {
	t.Helper()
	var last heldTask
	harness.Eventually(t, timeout, name+" "+what, func() (bool, error) {
		h, err := heldTaskOf(t, db, runID, name)
		if err != nil {
			return false, err
		}
		last = h
		return cond(h), fmt.Errorf("task is %+v", h)
	})
	return last
}

// heldMustTask is heldTaskOf failing the test on an error.
func heldMustTask(t *testing.T, db *sql.DB, runID, name string) heldTask {
	t.Helper()
	h, err := heldTaskOf(t, db, runID, name)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// heldMoves counts a task's history rows from -> to.
func heldMoves(t *testing.T, db *sql.DB, taskID, from, to string) int {
	t.Helper()
	return harness.QueryInt(t, db, `SELECT count(*) FROM task_events WHERE task_run_id = $1 AND from_state = $2 AND to_state = $3`, taskID, from, to)
}

// heldWaitSettled waits until the run is in state want with finished_at
// set; it fails at once when the run settled in another state.
func heldWaitSettled(t *testing.T, db *sql.DB, runID, want string, timeout time.Duration) {
	t.Helper()
	harness.Eventually(t, timeout, "run "+runID+" to settle "+want, func() (bool, error) {
		var state string
		var settled bool
		if err := db.QueryRow(`SELECT state, finished_at IS NOT NULL FROM workflow_runs WHERE id = $1`, runID).Scan(&state, &settled); err != nil {
			return false, err
		}
		if settled && state != want {
			t.Fatalf("run %s settled %s, want %s", runID, state, want)
		}
		return settled, fmt.Errorf("run is %s, settled %v", state, settled)
	})
}

// heldLines returns the lines of a file the tasks append to ("" when it
// does not exist yet).
func heldLines(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	return strings.Fields(string(b))
}

// heldAppend is a shell task's command that appends its task run id to
// path (one line per execution) and writes result as its result.
func heldAppend(path, result string) string {
	return fmt.Sprintf(`{command: [sh, -c, 'echo "$FLOWFORGE_TASK_RUN_ID" >> %s; echo %q > "$FLOWFORGE_RESULT_FILE"']}`, path, result)
}

// heldRanOnce fails the test unless the task was claimed once and its
// command (heldAppend) ran once.
func heldRanOnce(t *testing.T, db *sql.DB, runID, name, file string) {
	t.Helper()
	h := heldMustTask(t, db, runID, name)
	if h.State != "SUCCEEDED" {
		t.Errorf("%s is %s, want SUCCEEDED", name, h.State)
	}
	if n := crashClaims(t, db, h.ID); n != 1 {
		t.Errorf("%s was claimed %d times, want once", name, n)
	}
	n := 0
	for _, l := range heldLines(t, file) {
		if l == h.ID {
			n++
		}
	}
	if n != 1 {
		t.Errorf("%s (%s) ran %d times, want once", name, h.ID, n)
	}
}

// heldSendEvent sends an event through the store, as `ffctl event send`
// does, and fails the test on an error.
func heldSendEvent(t *testing.T, s *harness.Stack, req store.SendEventRequest) store.SendEventResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if req.Actor == "" {
		req.Actor = "e2e"
	}
	res, err := s.Store.SendEvent(ctx, req)
	if err != nil {
		t.Fatalf("send event %s (%s): %v", req.Name, req.ID, err)
	}
	return res
}

// heldSleepEndedOnce checks a sleep that ended: SUCCEEDED at or after
// its due time (due, read while it ran; database clock) and within late of
// it, started once and ended once, its result naming its due time.
func heldSleepEndedOnce(t *testing.T, db *sql.DB, runID, name string, due time.Time, late time.Duration) {
	t.Helper()
	h := heldMustTask(t, db, runID, name)
	if h.State != "SUCCEEDED" || !h.FinishedAt.Valid {
		t.Fatalf("%s: %+v, want SUCCEEDED", name, h)
	}
	if h.FinishedAt.Time.Before(due) {
		t.Errorf("%s ended at %v, %v before its due time %v (database clock)", name, h.FinishedAt.Time, due.Sub(h.FinishedAt.Time), due)
	}
	if d := h.FinishedAt.Time.Sub(due); d > late {
		t.Errorf("%s ended %v after its due time, want within %v (its sweep part names it)", name, d, late)
	}
	var res struct {
		DueAt  time.Time `json:"due_at"`
		WokeAt time.Time `json:"woke_at"`
	}
	if err := json.Unmarshal([]byte(h.Result.String), &res); err != nil || !res.DueAt.Equal(due) || res.WokeAt.Before(res.DueAt) {
		t.Errorf("%s's result %s (%v), want due_at %v and woke_at after it", name, h.Result.String, err, due)
	}
	if n := heldMoves(t, db, h.ID, "PENDING", "RUNNING"); n != 1 {
		t.Errorf("%s started %d times, want once", name, n)
	}
	if n := heldMoves(t, db, h.ID, "RUNNING", "SUCCEEDED"); n != 1 {
		t.Errorf("%s was promoted RUNNING -> SUCCEEDED %d times, want once", name, n)
	}
	if n := harness.QueryInt(t, db, `SELECT count(*) FROM task_events WHERE task_run_id = $1`, h.ID); n != 2 {
		t.Errorf("%s has %d history rows, want 2 (started, ended)", name, n)
	}
	if n := harness.QueryInt(t, db, `SELECT count(*) FROM outbox WHERE task_run_id = $1`, h.ID); n != 0 {
		t.Errorf("%s has %d outbox rows, want none (no worker runs a sleep)", name, n)
	}
}

// TestASleepAcrossAPostgresRestartEndsOnceAtOrAfterItsDueTime: mode 100.
// Two sleeps run under a scheduler, a publisher and a worker on a private
// PostgreSQL: short (3 s) falls due while the server is down (it is shut
// down before, and started again only once the host's clock, the
// server's, passed short's due time and the scheduler failed a pass);
// long (20 s) falls due well after the restart (the restart and the
// waits around it take about 5 s idle, and up to 12 s seen under load). Each ends SUCCEEDED once,
// at or after its due time on the database clock and within a few sweeps
// of it (long through the sweep alone: the full pass runs every ten
// minutes), and the task below both runs once.
func TestASleepAcrossAPostgresRestartEndsOnceAtOrAfterItsDueTime(t *testing.T) {
	t.Parallel()
	pg := harness.StartPostgres(t)
	s := harness.NewStack(t, harness.StackOptions{DatabaseURL: storetest.NewDatabaseOn(t, pg.URL("postgres"))})
	sched := s.Daemon(t, "scheduler", "scheduler", "--sweep-interval", "200ms", "--full-sweep-interval", heldFullSweep)
	s.Daemon(t, "publisher", "publisher")
	s.Daemon(t, "worker", "worker", "--allow-shell")
	ran := filepath.Join(t.TempDir(), "ran")
	s.Apply(t, `name: nap
tasks:
  - {name: a, handler: noop}
  - {name: short, depends_on: [a], sleep: {for: 3s}}
  - {name: long, depends_on: [a], sleep: {for: 20s}}
  - {name: after, depends_on: [short, long], handler: shell, params: `+heldAppend(ran, "{}")+`}
`)
	db := s.DB(t)
	id := s.Trigger(t, "nap")
	running := func(h heldTask) bool { return h.State == "RUNNING" && h.DueAt.Valid }
	short := heldWaitTask(t, db, id, "short", 30*time.Second, "RUNNING with its due time", running)
	long := heldWaitTask(t, db, id, "long", 30*time.Second, "RUNNING with its due time", running)
	for _, h := range []heldTask{short, long} {
		if n := harness.QueryInt(t, db, `SELECT count(*) FROM task_runs WHERE id = $1 AND lease_expires_at IS NULL AND worker_id IS NULL`, h.ID); n != 1 {
			t.Fatalf("sleep %s holds a lease or a worker; the scheduler holds it", h.ID)
		}
	}
	if !short.DueAt.Time.After(time.Now()) {
		t.Fatalf("short fell due (%v) before the outage could begin; the test cannot tell", short.DueAt.Time)
	}

	failed := recoveryCountLogs(sched, "scheduler: pass failed")
	pg.Stop(t)
	harness.Eventually(t, 30*time.Second, "the outage to outlast short's due time and a failed pass", func() (bool, error) {
		// The private server runs on this host: its clock is the test's.
		return time.Now().After(short.DueAt.Time) && recoveryCountLogs(sched, "scheduler: pass failed") > failed, nil
	})
	pg.Start(t)
	db = s.DB(t) // the old pool's connections died with the server
	harness.Eventually(t, 30*time.Second, "short to end after the restart", func() (bool, error) {
		h, err := heldTaskOf(t, db, id, "short")
		return err == nil && h.State != "RUNNING", err
	})
	// One snapshot: whether long is still due later, and its state then.
	if n := harness.QueryInt(t, db, `SELECT count(*) FROM task_runs WHERE id = $1 AND due_at > now()`, long.ID); n != 1 {
		t.Fatalf("long fell due (%v) before the database came back; the test cannot tell an early wake from a late one", long.DueAt.Time)
	}
	if n := harness.QueryInt(t, db, `SELECT count(*) FROM task_runs WHERE id = $1 AND due_at > now() AND state <> 'RUNNING'`, long.ID); n != 0 {
		t.Fatalf("long ended right after the restart, before its due time %v", long.DueAt.Time)
	}
	heldWaitSettled(t, db, id, "SUCCEEDED", 60*time.Second)
	heldSleepEndedOnce(t, db, id, "short", short.DueAt.Time, 30*time.Second)
	heldSleepEndedOnce(t, db, id, "long", long.DueAt.Time, 3*time.Second)
	heldRanOnce(t, db, id, "after", ran)
}

// TestASleepUnderASkewedSchedulerEndsOnTheDatabaseClock: mode 101. The
// scheduler's clock runs three hours fast (--debug-clock-skew +3h). A
// 15 s sleep is due 15 s after its start on the database clock, exactly;
// a pass over its run while it sleeps (forced: an event ends the gate
// beside it, and the task below the gate is promoted and runs) leaves it
// RUNNING, not three hours early; it ends at or after its due time, within
// a few 200 ms sweeps (the full pass runs every ten minutes).
func TestASleepUnderASkewedSchedulerEndsOnTheDatabaseClock(t *testing.T) {
	t.Parallel()
	s := harness.NewStack(t, harness.StackOptions{})
	sched := s.Daemon(t, "scheduler", "scheduler", "--sweep-interval", "200ms", "--full-sweep-interval", heldFullSweep, "--debug-clock-skew", "+3h")
	if off := time.Until(skewProcessClock(t, sched)); off < 3*time.Hour-time.Minute || off > 3*time.Hour+time.Minute {
		t.Fatalf("the scheduler's clock is off by %v, want 3h", off)
	}
	s.Daemon(t, "publisher", "publisher")
	s.Daemon(t, "worker", "worker")
	s.Apply(t, `name: skewed-nap
tasks:
  - {name: gate, wait_for: {event: skew.gate, timeout: 1h}}
  - {name: after-gate, handler: noop, depends_on: [gate]}
  - {name: nap, sleep: {for: 15s}}
  - {name: after-nap, handler: noop, depends_on: [nap]}
`)
	db := s.DB(t)
	id := s.Trigger(t, "skewed-nap")
	nap := heldWaitTask(t, db, id, "nap", 30*time.Second, "RUNNING with its due time", func(h heldTask) bool { return h.State == "RUNNING" && h.DueAt.Valid })
	if n := harness.QueryInt(t, db, `SELECT count(*) FROM task_runs WHERE id = $1 AND due_at - started_at = interval '15 seconds'`, nap.ID); n != 1 {
		t.Fatalf("nap is due at %v from its start at %v: want exactly 15 s on the database clock", nap.DueAt.Time, nap.StartedAt.Time)
	}
	heldWaitTask(t, db, id, "gate", 30*time.Second, "RUNNING", func(h heldTask) bool { return h.State == "RUNNING" })
	if res := heldSendEvent(t, s, store.SendEventRequest{Name: "skew.gate"}); len(res.Completed) != 1 {
		t.Fatalf("the gate event completed %d waits, want 1: %+v", len(res.Completed), res)
	}
	heldWaitTask(t, db, id, "after-gate", 30*time.Second, "SUCCEEDED", func(h heldTask) bool { return h.State == "SUCCEEDED" })
	// after-gate was promoted, run and finished: passes over the run ran
	// while nap slept.
	if n := harness.QueryInt(t, db, `SELECT count(*) FROM task_runs WHERE id = $1 AND state = 'RUNNING' AND due_at > now()`, nap.ID); n != 1 {
		if h := heldMustTask(t, db, id, "nap"); h.State == "RUNNING" {
			t.Fatalf("nap fell due before the passes the gate forced; the test cannot tell")
		}
		t.Fatalf("nap is %+v before its due time %v: promoted on the scheduler's clock", heldMustTask(t, db, id, "nap"), nap.DueAt.Time)
	}
	heldWaitSettled(t, db, id, "SUCCEEDED", 60*time.Second)
	heldSleepEndedOnce(t, db, id, "nap", nap.DueAt.Time, 3*time.Second)
}

// heldApproval is a wait for order.approved keyed by the run's order_id;
// ship, below it, appends its id to the file named by %s and takes its
// upstream results (the event's payload) as its result.
const heldApproval = `name: approval
tasks:
  - {name: a, handler: noop}
  - name: approve
    depends_on: [a]
    wait_for: {event: order.approved, key: "params.order_id", timeout: 1h}
  - name: ship
    depends_on: [approve]
    handler: shell
    params: {command: [sh, -c, 'echo "$FLOWFORGE_TASK_RUN_ID" >> %s; cat "$FLOWFORGE_UPSTREAM_FILE" > "$FLOWFORGE_RESULT_FILE"']}
`

// heldEventStack starts a scheduler, a publisher and a worker (shell
// allowed) and applies heldApproval; it returns the stack, a pool and the
// file ship appends to.
func heldEventStack(t *testing.T) (*harness.Stack, *sql.DB, string) {
	t.Helper()
	s := harness.NewStack(t, harness.StackOptions{})
	s.Daemon(t, "scheduler", "scheduler", "--sweep-interval", "200ms", "--full-sweep-interval", heldFullSweep)
	s.Daemon(t, "publisher", "publisher")
	s.Daemon(t, "worker", "worker", "--allow-shell")
	ran := filepath.Join(t.TempDir(), "ran")
	s.Apply(t, fmt.Sprintf(heldApproval, ran))
	return s, s.DB(t), ran
}

// heldShipSaw fails the test unless ship's result (its upstream results)
// holds approve's payload.
func heldShipSaw(t *testing.T, db *sql.DB, runID, payload string) {
	t.Helper()
	var got struct {
		Approve json.RawMessage `json:"approve"`
	}
	ship := heldMustTask(t, db, runID, "ship")
	if err := json.Unmarshal([]byte(ship.Result.String), &got); err != nil || !jsonEqual(got.Approve, payload) {
		t.Errorf("ship saw upstream %s (%v), want approve's result %s", ship.Result.String, err, payload)
	}
}

// jsonEqual reports whether two JSON texts hold the same value.
func jsonEqual(a json.RawMessage, b string) bool {
	var x, y any
	return json.Unmarshal(a, &x) == nil && json.Unmarshal([]byte(b), &y) == nil && fmt.Sprint(x) == fmt.Sprint(y)
}

// TestAnEventSentTwiceCompletesItsWaitOnceEndToEnd: mode 102. While the
// wait runs, the same event id is sent twice at once with two payloads:
// one send completes the wait, the other reports a duplicate and changes
// nothing; one event row and one delivery exist, the wait ended once with
// the first send's payload and ship below it ran once with it. A third
// send of the id after the run ended is a duplicate too.
func TestAnEventSentTwiceCompletesItsWaitOnceEndToEnd(t *testing.T) {
	t.Parallel()
	s, db, ran := heldEventStack(t)
	id := s.Trigger(t, "approval", "order_id=1")
	approve := heldWaitTask(t, db, id, "approve", 30*time.Second, "waiting", func(h heldTask) bool { return h.State == "RUNNING" })
	var wg sync.WaitGroup
	results, errs := make([]store.SendEventResult, 2), make([]error, 2)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for i := range results {
		wg.Go(func() {
			results[i], errs[i] = s.Store.SendEvent(ctx, store.SendEventRequest{Name: "order.approved", Key: "1", ID: "ev-1", Actor: "e2e",
				Payload: json.RawMessage(fmt.Sprintf(`{"by": "sender-%d"}`, i))})
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatalf("send ev-1 twice: %v", err)
	}
	var first store.SendEventResult
	dups := 0
	for _, r := range results {
		if r.Duplicate {
			dups++
			if len(r.Completed) != 0 {
				t.Errorf("a duplicate send completed %+v", r.Completed)
			}
			continue
		}
		first = r
	}
	if dups != 1 || len(first.Completed) != 1 || first.Completed[0].TaskRunID.String() != approve.ID {
		t.Fatalf("two sends of ev-1: %+v; want one completing approve (%s) and one duplicate", results, approve.ID)
	}
	heldWaitSettled(t, db, id, "SUCCEEDED", 60*time.Second)
	if again := heldSendEvent(t, s, store.SendEventRequest{Name: "order.approved", Key: "1", ID: "ev-1", Payload: json.RawMessage(`{"by": "late"}`)}); !again.Duplicate || len(again.Completed) != 0 {
		t.Fatalf("a third send of ev-1: %+v, want a duplicate", again)
	}
	if n := harness.QueryInt(t, db, `SELECT count(*) FROM events`); n != 1 {
		t.Errorf("%d events stored, want 1 (ev-1)", n)
	}
	if n := harness.QueryInt(t, db, `SELECT count(*) FROM event_deliveries WHERE event_id = 'ev-1' AND task_run_id = $1`, approve.ID); n != 1 {
		t.Errorf("ev-1 was delivered %d times to approve, want once", n)
	}
	h := heldMustTask(t, db, id, "approve")
	if !jsonEqual(json.RawMessage(h.Result.String), string(first.Event.Payload)) || heldMoves(t, db, h.ID, "RUNNING", "SUCCEEDED") != 1 {
		t.Errorf("approve: %+v, want SUCCEEDED once with %s", h, first.Event.Payload)
	}
	heldRanOnce(t, db, id, "ship", ran)
	heldShipSaw(t, db, id, string(first.Event.Payload))
}

// TestAnEventSentBeforeItsWaitIsMatchedWhenTheWaitStartsEndToEnd: mode
// 102. An event is sent (twice, one id) before any run waits for its key:
// kept for its lookback, delivered to nobody. A run triggered afterwards
// starts its wait, which the pass that starts it matches with the kept
// event: SUCCEEDED with its payload (the history says the event came
// before the wait started), ship runs once with it, and the run succeeds.
// The wait's timeout is an hour: nothing else could end it.
func TestAnEventSentBeforeItsWaitIsMatchedWhenTheWaitStartsEndToEnd(t *testing.T) {
	t.Parallel()
	s, db, ran := heldEventStack(t)
	payload := `{"by": "early"}`
	req := store.SendEventRequest{Name: "order.approved", Key: "2", ID: "ev-2", Payload: json.RawMessage(payload)}
	if res := heldSendEvent(t, s, req); res.Duplicate || len(res.Completed) != 0 {
		t.Fatalf("first send of ev-2: %+v, want kept and delivered to nobody", res)
	}
	if res := heldSendEvent(t, s, req); !res.Duplicate {
		t.Fatalf("second send of ev-2: %+v, want a duplicate", res)
	}
	id := s.Trigger(t, "approval", "order_id=2")
	heldWaitSettled(t, db, id, "SUCCEEDED", 60*time.Second)
	h := heldMustTask(t, db, id, "approve")
	if !jsonEqual(json.RawMessage(h.Result.String), payload) {
		t.Errorf("approve's result %s, want the early payload %s", h.Result.String, payload)
	}
	if n := harness.QueryInt(t, db, `SELECT count(*) FROM task_events WHERE task_run_id = $1 AND from_state = 'RUNNING' AND to_state = 'SUCCEEDED'
	                                   AND reason LIKE '%came before the wait started'`, h.ID); n != 1 || heldMoves(t, db, h.ID, "RUNNING", "SUCCEEDED") != 1 {
		t.Errorf("approve's history does not end it once with the kept event: %+v", crashEvents(t, db, h.ID))
	}
	if n := harness.QueryInt(t, db, `SELECT count(*) FROM event_deliveries WHERE event_id = 'ev-2'`); n != 1 {
		t.Errorf("ev-2 has %d deliveries, want 1", n)
	}
	heldRanOnce(t, db, id, "ship", ran)
	heldShipSaw(t, db, id, payload)
}

// TestAWaitThatTimesOutWithSkipIsSkippedAndItsRunSucceedsEndToEnd: mode
// 103. A 2 s wait for an event nobody sends, on_timeout skip: SKIPPED at or
// after its timeout (database clock), found by the sweep (the full pass
// runs every ten minutes); below it a none_failed task runs once and an
// all_success one is SKIPPED without a claim; the run SUCCEEDED.
func TestAWaitThatTimesOutWithSkipIsSkippedAndItsRunSucceedsEndToEnd(t *testing.T) {
	t.Parallel()
	s := harness.NewStack(t, harness.StackOptions{})
	s.Daemon(t, "scheduler", "scheduler", "--sweep-interval", "200ms", "--full-sweep-interval", heldFullSweep)
	s.Daemon(t, "publisher", "publisher")
	s.Daemon(t, "worker", "worker", "--allow-shell")
	ran := filepath.Join(t.TempDir(), "ran")
	s.Apply(t, `name: patience
tasks:
  - {name: maybe, wait_for: {event: never.sent, key: "params.k", timeout: 2s, on_timeout: skip}}
  - {name: regardless, depends_on: [maybe], trigger_rule: none_failed, handler: shell, params: `+heldAppend(ran, "{}")+`}
  - {name: only-if-approved, depends_on: [maybe], handler: noop}
`)
	db := s.DB(t)
	id := s.Trigger(t, "patience", "k=x")
	maybe := heldWaitTask(t, db, id, "maybe", 30*time.Second, "waiting", func(h heldTask) bool { return h.State == "RUNNING" && h.DueAt.Valid })
	heldWaitSettled(t, db, id, "SUCCEEDED", 60*time.Second)
	h := heldMustTask(t, db, id, "maybe")
	if h.State != "SKIPPED" || !h.FinishedAt.Valid || h.FinishedAt.Time.Before(maybe.DueAt.Time) || h.Attempt != 1 {
		t.Fatalf("maybe: %+v; want SKIPPED on its first attempt at or after its timeout %v", h, maybe.DueAt.Time)
	}
	if n := heldMoves(t, db, h.ID, "RUNNING", "SKIPPED"); n != 1 {
		t.Errorf("maybe was skipped %d times, want once", n)
	}
	heldRanOnce(t, db, id, "regardless", ran)
	if o := heldMustTask(t, db, id, "only-if-approved"); o.State != "SKIPPED" || crashClaims(t, db, o.ID) != 0 {
		t.Errorf("only-if-approved: %+v, want SKIPPED without a claim", o)
	}
}

// heldChildStack starts a publisher and a worker (shell allowed, lease 1 s,
// with workerArgs) and, with scheduler, a scheduler (200 ms sweeps, full
// pass every ten minutes), then applies the child and the parent files.
func heldChildStack(t *testing.T, scheduler bool, child, parent string, workerArgs ...string) (*harness.Stack, *sql.DB) {
	t.Helper()
	s := harness.NewStack(t, harness.StackOptions{})
	s.Daemon(t, "publisher", "publisher")
	if workerArgs != nil {
		s.Daemon(t, "worker", "worker", append([]string{"--allow-shell", "--lease", "1s"}, workerArgs...)...)
	}
	if scheduler {
		s.Daemon(t, "scheduler", "scheduler", "--sweep-interval", "200ms", "--full-sweep-interval", heldFullSweep)
	}
	s.Apply(t, child)
	s.Apply(t, parent)
	return s, s.DB(t)
}

// heldOneChild fails the test unless exactly one run is the child of the
// task kid (and no other run of workflow exists), carrying the key derived
// from kid and the token of its attempt; it returns the child's id.
func heldOneChild(t *testing.T, db *sql.DB, kid heldTask, workflow string) string {
	t.Helper()
	if n := harness.QueryInt(t, db, `SELECT count(*) FROM workflow_runs WHERE parent_task_run_id = $1`, kid.ID); n != 1 {
		t.Fatalf("task %s has %d child runs, want exactly 1", kid.ID, n)
	}
	if n := harness.QueryInt(t, db, `SELECT count(*) FROM workflow_runs WHERE workflow_name = $1`, workflow); n != 1 {
		t.Fatalf("%d runs of %s, want exactly 1", n, workflow)
	}
	if !kid.Child.Valid {
		t.Fatalf("task %s names no child run", kid.ID)
	}
	if n := harness.QueryInt(t, db, `SELECT count(*) FROM workflow_runs WHERE id = $1 AND parent_task_run_id = $2
	                                   AND idempotency_key = 'flowforge.child:' || $2 || ':' || $3::bigint`, kid.Child.String, kid.ID, kid.Token); n != 1 {
		t.Fatalf("child run %s does not carry the key derived from task %s and its token %d", kid.Child.String, kid.ID, kid.Token)
	}
	return kid.Child.String
}

// TestAWorkerKilledUnderAChildRunsTaskIsReapedAndTheParentTakesTheResult:
// mode 104. A parent's kid task starts a child run whose task runs on a
// worker that is SIGKILLed mid-task (its first attempt would sleep 30 s:
// the kill lands while it runs); the task's lease lapses, the reaper makes
// it RETRYING and a second worker runs it; the child SUCCEEDED, and kid,
// held by the scheduler without a lease all along (never reaped, one
// attempt), takes its result through the sweep's child-ended part (the
// full pass runs every ten minutes); exactly one child run exists and the
// task below kid ran once.
func TestAWorkerKilledUnderAChildRunsTaskIsReapedAndTheParentTakesTheResult(t *testing.T) {
	t.Parallel()
	ran := filepath.Join(t.TempDir(), "ran")
	s, db := heldChildStack(t, true, `name: child-work
tasks:
  - name: work
    handler: shell
    params: {command: [sh, -c, 'if [ "$FLOWFORGE_ATTEMPT" = 1 ]; then sleep 30; fi; echo "{\"attempt\": $FLOWFORGE_ATTEMPT, \"from\": \"$FLOWFORGE_PARAM_FROM\"}" > "$FLOWFORGE_RESULT_FILE"']}
    retry: {max_attempts: 3, initial_backoff: 200ms, max_backoff: 200ms}
`, `name: parent-of-work
tasks:
  - {name: a, handler: noop}
  - {name: kid, depends_on: [a], workflow: {name: child-work, params: "{'from': params.order}"}}
  - {name: after, depends_on: [kid], handler: shell, params: `+heldAppend(ran, "{}")+`}
`)
	victim := s.Daemon(t, "worker-victim", "worker", "--allow-shell", "--lease", "1s", "--id", "victim")
	id := s.Trigger(t, "parent-of-work", "order=o-7")
	kid := heldWaitTask(t, db, id, "kid", 30*time.Second, "RUNNING with its child", func(h heldTask) bool { return h.State == "RUNNING" && h.Child.Valid })
	child := kid.Child.String
	running := crashWaitTask(t, db, child, "work", 30*time.Second, "RUNNING on the victim", func(c crashTask) bool {
		return c.State == "RUNNING" && c.Worker.String == "victim"
	})
	victim.Kill()
	crashWaitTask(t, db, child, "work", 30*time.Second, "reaped", func(c crashTask) bool { return c.State != "RUNNING" || c.Token != running.Token })
	s.Daemon(t, "worker-rescuer", "worker", "--allow-shell", "--lease", "1s", "--id", "rescuer")
	heldWaitSettled(t, db, id, "SUCCEEDED", 60*time.Second)

	heldWaitSettled(t, db, child, "SUCCEEDED", 5*time.Second)
	work := crashTaskOf(t, db, child, "work")
	if work.State != "SUCCEEDED" || work.Attempt != 2 || work.Worker.String != "rescuer" || crashClaims(t, db, work.ID) != 2 {
		t.Fatalf("child's work: %+v (claims %d); want SUCCEEDED on attempt 2 by the rescuer", work, crashClaims(t, db, work.ID))
	}
	kid = heldMustTask(t, db, id, "kid")
	if got := heldOneChild(t, db, kid, "child-work"); got != child {
		t.Fatalf("kid names child %s, want %s", got, child)
	}
	var res struct {
		RunID   string `json:"run_id"`
		Results map[string]struct {
			Attempt int    `json:"attempt"`
			From    string `json:"from"`
		} `json:"results"`
	}
	if err := json.Unmarshal([]byte(kid.Result.String), &res); err != nil || res.RunID != child || res.Results["work"].Attempt != 2 || res.Results["work"].From != "o-7" {
		t.Fatalf("kid's result %s (%v), want the child's id and its work's result from attempt 2", kid.Result.String, err)
	}
	if kid.State != "SUCCEEDED" || kid.Attempt != 1 || heldMoves(t, db, kid.ID, "RUNNING", "SUCCEEDED") != 1 || heldMoves(t, db, kid.ID, "RUNNING", "RETRYING") != 0 {
		t.Fatalf("kid: %+v, history %+v; want SUCCEEDED once, on its one attempt, never reaped", kid, crashEvents(t, db, kid.ID))
	}
	heldRanOnce(t, db, id, "after", ran)
}

// TestCancellingAParentRunCancelsItsRunningChildEndToEnd: mode 105. A
// child run's task sleeps five minutes on a worker; `ffctl run cancel
// PARENT` asks for the parent's cancellation, the scheduler's pass over
// the parent asks for the child's (naming the parent) and notifies the
// worker, whose handler stops at once; the child run ends CANCELLED, kid
// (the parent's task) CANCELLED, the parent run CANCELLED; nothing below
// the sleeping task or below kid was claimed; one child run exists.
func TestCancellingAParentRunCancelsItsRunningChildEndToEnd(t *testing.T) {
	t.Parallel()
	s, db := heldChildStack(t, true, `name: slow-child
tasks:
  - {name: work, handler: sleep, params: {duration: 5m}}
  - {name: child-after, handler: noop, depends_on: [work]}
`, `name: patient-parent
tasks:
  - {name: kid, workflow: {name: slow-child}}
  - {name: after, handler: noop, depends_on: [kid]}
`, "--concurrency", "4")
	id := s.Trigger(t, "patient-parent")
	kid := heldWaitTask(t, db, id, "kid", 30*time.Second, "RUNNING with its child", func(h heldTask) bool { return h.State == "RUNNING" && h.Child.Valid })
	child := kid.Child.String
	crashWaitTask(t, db, child, "work", 30*time.Second, "RUNNING on the worker", func(c crashTask) bool { return c.State == "RUNNING" })
	start := time.Now()
	s.MustCLI(t, "run", "cancel", id, "--reason", "order withdrawn")
	heldWaitSettled(t, db, child, "CANCELLED", 30*time.Second)
	t.Logf("child settled after %v", time.Since(start))
	heldWaitSettled(t, db, id, "CANCELLED", 30*time.Second)
	t.Logf("parent settled after %v", time.Since(start))
	if el := time.Since(start); el > 20*time.Second {
		t.Errorf("the child took %v to stop; its handler was not cancelled", el)
	}
	var reason string
	if err := db.QueryRow(`SELECT coalesce(cancel_reason, '') FROM workflow_runs WHERE id = $1`, child).Scan(&reason); err != nil || !strings.Contains(reason, id) {
		t.Errorf("the child's cancel reason %q (%v) does not name its parent run %s", reason, err, id)
	}
	for _, c := range []struct{ run, name, state string }{
		{child, "work", "CANCELLED"}, {child, "child-after", "CANCELLED"}, {id, "kid", "CANCELLED"}, {id, "after", "CANCELLED"},
	} {
		h := heldMustTask(t, db, c.run, c.name)
		if h.State != c.state {
			t.Errorf("%s is %s, want %s", c.name, h.State, c.state)
		}
		claims, want := crashClaims(t, db, h.ID), 0
		if c.name == "work" {
			want = 1
		}
		if claims != want {
			t.Errorf("%s was claimed %d times, want %d", c.name, claims, want)
		}
	}
	heldOneChild(t, db, heldMustTask(t, db, id, "kid"), "slow-child")
}

// TestASchedulerKilledWhileItStartsAChildRunStartsItOnce: mode 106. The
// scheduler that starts a parent's kid task dies inside the pass's
// transaction, after it triggered the child run and named the parent on it
// and before its commit (failpoint scheduler.exit-mid-child-start). No
// child run is left and kid is PENDING as before; a second scheduler
// starts kid: exactly one child run, with the key derived from kid and its
// token, whose task runs once; the parent succeeds.
func TestASchedulerKilledWhileItStartsAChildRunStartsItOnce(t *testing.T) {
	t.Parallel()
	ran := filepath.Join(t.TempDir(), "ran")
	s, db := heldChildStack(t, false, `name: once-child
tasks:
  - {name: work, handler: shell, params: `+heldAppend(ran, `{"done": true}`)+`}
`, `name: once-parent
tasks:
  - {name: kid, workflow: {name: once-child, params: "{'n': 1}"}}
  - {name: after, handler: noop, depends_on: [kid]}
`, "--concurrency", "4")
	victim := s.DaemonEnv(t, "scheduler-victim", "scheduler", []string{failpoint.EnvVar + "=" + string(failpoint.SchedulerExitMidChildStart)},
		"--id", "victim")
	id := s.Trigger(t, "once-parent")
	before := heldMustTask(t, db, id, "kid")
	if code, err := victim.Wait(60 * time.Second); err != nil || code != failpoint.ExitCode {
		t.Fatalf("victim: exit %d (%v), want the failpoint's %d\n%s", code, err, failpoint.ExitCode, victim.Logs())
	}
	if n := harness.QueryInt(t, db, `SELECT count(*) FROM workflow_runs WHERE workflow_name = 'once-child'`); n != 0 {
		t.Fatalf("the dead scheduler left %d child runs; the child's start must die with its pass", n)
	}
	if h := heldMustTask(t, db, id, "kid"); h.State != "PENDING" || h.Token != before.Token || h.Child.Valid {
		t.Fatalf("kid after the dead scheduler's pass: %+v, want PENDING as before (%+v)", h, before)
	}
	s.Daemon(t, "scheduler-rescuer", "scheduler", "--id", "rescuer", "--sweep-interval", "200ms", "--full-sweep-interval", heldFullSweep)
	heldWaitSettled(t, db, id, "SUCCEEDED", 60*time.Second)
	kid := heldMustTask(t, db, id, "kid")
	child := heldOneChild(t, db, kid, "once-child")
	heldWaitSettled(t, db, child, "SUCCEEDED", 5*time.Second)
	heldRanOnce(t, db, child, "work", ran)
	if heldMoves(t, db, kid.ID, "PENDING", "RUNNING") != 1 || heldMoves(t, db, kid.ID, "RUNNING", "SUCCEEDED") != 1 {
		t.Fatalf("kid's history %+v; want started once and ended once", crashEvents(t, db, kid.ID))
	}
	if n := harness.QueryInt(t, db, `SELECT count(*) FROM task_events e JOIN task_runs t ON t.id = e.task_run_id
	                                   WHERE t.run_id = $1 AND e.actor LIKE '%victim%'`, id); n != 0 {
		t.Fatalf("the dead scheduler's pass left %d history rows", n)
	}
}
