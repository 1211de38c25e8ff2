package scheduler

import (
	"context"
	"database/sql"
	"encoding/json"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/flowforge/flowforge/core"
	"github.com/flowforge/flowforge/core/store"
	"github.com/flowforge/flowforge/core/store/storetest"
	"github.com/flowforge/flowforge/daemon/metrics"
)

// passRig is a scheduler on a throwaway database (its LISTEN connection
// there too); tests drive its passes (RunOnce) or run it (Run) and wait on
// its test signals.
type passRig struct {
	t       *testing.T
	st      *store.Store
	db      *sql.DB
	url     string
	metrics *metrics.Metrics
	s       *Scheduler
}

// chainYAML is the rig's workflow. It is fail_fast so that promoting b is
// the scheduler's (a finish counts a fail_fast run's children but leaves
// their promotion to the pass, which cancels the rest of a failing run
// under the run's lock); in other runs the finish of a promotes b itself
// (the counter join, core/store's join tests) and the scheduler only
// derives the run's state. No test of the rig lets a task die.
const chainYAML = `
name: chain
fail_fast: true
tasks:
  - {name: a, handler: noop, retry: {max_attempts: 3, initial_backoff: 1ms, max_backoff: 1ms}}
  - {name: b, handler: noop, depends_on: [a]}
`

func newPassRig(t *testing.T, edit func(*Config)) *passRig {
	t.Helper()
	st, db, url := storetest.NewWithDB(t)
	r := &passRig{t: t, st: st, db: db, url: url, metrics: metrics.New()}
	cfg := Config{Store: st, DatabaseURL: url, ID: "test-scheduler", Metrics: r.metrics}
	if edit != nil {
		edit(&cfg)
	}
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	r.s = s
	storetest.Apply(t, st, chainYAML)
	return r
}

// pass runs one pass and fails the test on its error.
func (r *passRig) pass() {
	r.t.Helper()
	if err := r.s.RunOnce(context.Background()); err != nil {
		r.t.Fatalf("pass: %v", err)
	}
}

// task returns the run's task called name.
func (r *passRig) task(run uuid.UUID, name string) store.TaskDetail {
	r.t.Helper()
	return storetest.Task(r.t, r.st, run, name)
}

// claim claims the run's READY task name for worker "w1" with lease.
func (r *passRig) claim(run uuid.UUID, name string, lease time.Duration) store.ClaimedTask {
	r.t.Helper()
	d := r.task(run, name)
	c, ok := storetest.Claim(r.t, r.st, d.ID, d.FencingToken, "w1", lease)
	if !ok {
		r.t.Fatalf("claim %s (%s, token %d) lost", name, d.State, d.FencingToken)
	}
	return c
}

// succeed records a successful finish of c.
func (r *passRig) succeed(c store.ClaimedTask) {
	r.t.Helper()
	st, ok := storetest.Finish(r.t, r.st, store.FinishRequest{ID: c.ID, Token: c.FencingToken, WorkerID: "w1",
		Outcome: store.OutcomeSucceeded, Result: json.RawMessage(`{}`)})
	if !ok || st != core.TaskSucceeded {
		r.t.Fatalf("finish %s: %s ok=%v", c.TaskName, st, ok)
	}
}

// outboxRows counts the dispatches the store wrote for task id.
func (r *passRig) outboxRows(id uuid.UUID) int {
	r.t.Helper()
	var n int
	if err := r.db.QueryRow(`SELECT count(*) FROM outbox WHERE task_run_id = $1`, id).Scan(&n); err != nil {
		r.t.Fatal(err)
	}
	return n
}

// TestAPassPromotesADownstreamTaskOnceItsUpstreamSucceeded: a pass leaves
// b PENDING while a runs; once a succeeded the next pass makes b READY
// with a dispatch of its own (counted as promoted), and once b succeeded
// the next pass settles the run SUCCEEDED.
func TestAPassPromotesADownstreamTaskOnceItsUpstreamSucceeded(t *testing.T) {
	r := newPassRig(t, nil)
	run := storetest.Trigger(t, r.st, "chain", "")
	a := r.claim(run, "a", time.Minute)
	r.pass()
	if b := r.task(run, "b"); b.State != "PENDING" {
		t.Fatalf("b is %s while a runs, want PENDING", b.State)
	}
	r.succeed(a)
	r.pass()
	b := r.task(run, "b")
	if b.State != "READY" || r.outboxRows(b.ID) != 1 {
		t.Fatalf("after a succeeded: b is %s with %d dispatches, want READY with 1", b.State, r.outboxRows(b.ID))
	}
	if n := testutil.ToFloat64(r.metrics.TasksPromoted); n != 1 {
		t.Fatalf("flowforge_tasks_promoted_total = %v, want 1", n)
	}
	r.succeed(r.claim(run, "b", time.Minute))
	r.pass()
	got, err := r.st.GetRun(context.Background(), run)
	if err != nil || got.State != "SUCCEEDED" {
		t.Fatalf("run %s (%v) after both tasks succeeded, want SUCCEEDED", got.State, err)
	}
}

// TestAPassReapsAnExpiredLease: a RUNNING task whose lease lapsed (on the
// database clock) is taken back by the next pass: RETRYING with the
// attempt used, under the scheduler's name, counted as reaped; a later
// pass promotes the retry READY with a new fencing token, so the lapsed
// attempt can no longer finish.
func TestAPassReapsAnExpiredLease(t *testing.T) {
	r := newPassRig(t, nil)
	run := storetest.Trigger(t, r.st, "chain", "")
	c := r.claim(run, "a", time.Second)
	r.pass()
	var live bool
	if err := r.db.QueryRow(`SELECT lease_expires_at > now() FROM task_runs WHERE id = $1`, c.ID).Scan(&live); err != nil {
		t.Fatal(err)
	}
	if a := r.task(run, "a"); live && a.State != "RUNNING" {
		t.Fatalf("a is %s while its lease is live, want RUNNING", a.State)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		var lapsed bool
		if err := r.db.QueryRow(`SELECT lease_expires_at < now() FROM task_runs WHERE id = $1`, c.ID).Scan(&lapsed); err != nil {
			t.Fatal(err)
		}
		if lapsed {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the lease did not lapse on the database clock")
		}
		time.Sleep(5 * time.Millisecond) // poll interval, not a wait for state
	}
	r.pass()
	a := r.task(run, "a")
	if n := testutil.ToFloat64(r.metrics.LeasesReaped); n != 1 {
		t.Fatalf("flowforge_leases_reaped_total = %v, want 1", n)
	}
	var reaped bool
	for _, e := range a.Events {
		if e.FromState != nil && *e.FromState == "RUNNING" && e.ToState == "RETRYING" && e.Actor == "test-scheduler" && e.Attempt == 1 {
			reaped = true
		}
	}
	if !reaped {
		t.Fatalf("a after the reap: %s; no RUNNING -> RETRYING of attempt 1 by test-scheduler in %+v", a.State, a.Events)
	}
	deadline = time.Now().Add(10 * time.Second)
	for a.State != "READY" {
		if time.Now().After(deadline) {
			t.Fatalf("the retry was not promoted: a is %s", a.State)
		}
		time.Sleep(5 * time.Millisecond) // poll interval (the retry's 1 ms backoff)
		r.pass()
		a = r.task(run, "a")
	}
	if a.FencingToken <= c.FencingToken {
		t.Fatalf("the retry's token %d is not past the reaped attempt's %d", a.FencingToken, c.FencingToken)
	}
	if st, ok := storetest.Finish(t, r.st, store.FinishRequest{ID: c.ID, Token: c.FencingToken, WorkerID: "w1", Outcome: store.OutcomeSucceeded}); ok {
		t.Fatalf("the reaped attempt's finish: %s ok=%v, want rejected", st, ok)
	}
}

// TestRunPassesWhenNotifiedAndStopsWithItsContext: with a sweep far in the
// future, Run still passes at once, again when its LISTEN connection is up,
// and whenever a task changes (a finish's NOTIFY): the downstream task is
// promoted without waiting for the sweep. Cancelling the context ends Run
// with nil.
func TestRunPassesWhenNotifiedAndStopsWithItsContext(t *testing.T) {
	r := newPassRig(t, func(c *Config) { c.SweepInterval = SweepIntervalMax })
	r.s.signals.passed = make(chan error, 64)
	run := storetest.Trigger(t, r.st, "chain", "")
	a := r.claim(run, "a", time.Minute)
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.s.Run(ctx) }()
	t.Cleanup(func() {
		stop()
		<-done
	})
	awaitPass := func(what string) {
		t.Helper()
		select {
		case err := <-r.s.signals.passed:
			if err != nil {
				t.Fatalf("%s: %v", what, err)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("no pass %s", what)
		}
	}
	awaitPass("at start")
	awaitPass("once listening") // the listener's "may have missed some"
	r.succeed(a)
	deadline := time.Now().Add(10 * time.Second)
	for r.task(run, "b").State != "READY" {
		if time.Now().After(deadline) {
			t.Fatalf("b was not promoted after a's finish: %s", r.task(run, "b").State)
		}
		awaitPass("after a's finish")
	}
	stop()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run returned %v, want nil", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after its context ended")
	}
	done <- nil // for the cleanup
}
