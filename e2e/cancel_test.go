package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/flowforge/flowforge/core/broker"
	"github.com/flowforge/flowforge/e2e/harness"
)

// cancelHeldByWorker waits until the run's task has been published and the
// dispatch queue is empty: a worker holds the delivery, unclaimed.
func cancelHeldByWorker(t *testing.T, s *harness.Stack, runID string) {
	t.Helper()
	db := s.DB(t)
	bcfg := broker.Config{URLs: s.AMQPURLs, Queue: s.Queue}
	harness.Eventually(t, 30*time.Second, "a worker to hold the delivery of run "+runID, func() (bool, error) {
		if n := harness.QueryInt(t, db, `SELECT count(*) FROM outbox o JOIN task_runs t ON t.id = o.task_run_id
		                          WHERE t.run_id = $1 AND o.published_at IS NULL`, runID); n != 0 {
			return false, fmt.Errorf("%d dispatches not published yet", n)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		ready, _, err := broker.QueueDepth(ctx, bcfg)
		return err == nil && ready == 0, fmt.Errorf("%d ready messages (err %v)", ready, err)
	})
}

// TestRunCancelStopsInFlightTaskAndCancelsUnstarted: mode 11, operator
// cancellation. `ffctl run cancel` persists the request and cancels the
// tasks that have not started (a PENDING child, and a READY root whose
// delivery the single-slot worker holds unclaimed); the running task's
// heartbeat sees the request and cancels the handler's context, so a 30 s
// sleep ends CANCELLED within a few heartbeats; the run is CANCELLED.
func TestRunCancelStopsInFlightTaskAndCancelsUnstarted(t *testing.T) {
	t.Parallel()
	s := harness.NewStack(t, harness.StackOptions{})
	db := s.DB(t)
	s.ControlPlane(t, "--sweep-interval", "200ms")
	w := s.Daemon(t, "worker", "worker", "--concurrency", "1", "--lease", "1s")
	s.Apply(t, `
name: cancel-run
tasks:
  - {name: first, handler: sleep, params: {duration: 30s}}
  - {name: second, handler: sleep, params: {duration: 30s}}
  - {name: child, handler: noop, depends_on: [first, second]}
`)
	run := s.Trigger(t, "cancel-run")
	var running, waiting string
	harness.Eventually(t, 30*time.Second, "one root to run", func() (bool, error) {
		a, b := crashTaskOf(t, db, run, "first"), crashTaskOf(t, db, run, "second")
		switch {
		case a.State == "RUNNING":
			running, waiting = "first", "second"
		case b.State == "RUNNING":
			running, waiting = "second", "first"
		}
		return running != "", nil
	})
	cancelHeldByWorker(t, s, run)
	if st := crashTaskOf(t, db, run, waiting).State; st != "READY" {
		t.Fatalf("%s is %s, want READY (held by the busy worker)", waiting, st)
	}
	start := time.Now()
	out := s.MustCLI(t, "run", "cancel", run, "--reason", "operator says stop")
	if !strings.Contains(out, "1 unstarted") && !strings.Contains(out, "2 unstarted") {
		t.Logf("run cancel said: %s", out)
	}
	s.WaitRuns(t, "CANCELLED", 20*time.Second, run)
	harness.Eventually(t, 20*time.Second, running+" to end", func() (bool, error) {
		return crashTaskOf(t, db, run, running).State != "RUNNING", nil
	})
	if el := time.Since(start); el > 10*time.Second {
		t.Fatalf("the running task took %v to stop; its handler was not cancelled", el)
	}
	r := crashTaskOf(t, db, run, running)
	if r.State != "CANCELLED" || !strings.Contains(r.Error.String, "cancelled") || r.Lease.Valid {
		t.Fatalf("%s: %+v; want CANCELLED through its context, lease cleared", running, r)
	}
	w.WaitForLog(t, "run cancelled; cancelling the handler", 10*time.Second)
	for _, name := range []string{waiting, "child"} {
		c := crashTaskOf(t, db, run, name)
		if c.State != "CANCELLED" || crashClaims(t, db, c.ID) != 0 {
			t.Fatalf("%s: %+v (claims %d); want CANCELLED without ever running", name, c, crashClaims(t, db, c.ID))
		}
		var audited bool
		for _, e := range crashEvents(t, db, c.ID) {
			if e.To == "CANCELLED" && strings.Contains(e.Reason.String, "operator says stop") {
				audited = true
			}
		}
		if !audited {
			t.Fatalf("%s: no audited cancellation: %+v", name, crashEvents(t, db, c.ID))
		}
	}
	// The held delivery of the cancelled task is settled, not lost in the
	// worker: once the slot frees, its claim loses and it is acked.
	w.WaitForLog(t, `"reason":"cancelled"`, 20*time.Second)
}

// TestFailFastRunCancelsRunningAndPendingSiblingsWhenATaskDies: mode 11,
// fail_fast. A task goes DEAD while a sibling runs a 30 s sleep: the run is
// FAILED at once, the running sibling's handler is cancelled through its
// context (its heartbeat sees the failed fail_fast run), the task downstream
// of the dead one is UPSTREAM_FAILED (mode 46) and the other tasks that had
// not started are cancelled by the scheduler.
func TestFailFastRunCancelsRunningAndPendingSiblingsWhenATaskDies(t *testing.T) {
	t.Parallel()
	s := harness.NewStack(t, harness.StackOptions{})
	db := s.DB(t)
	s.ControlPlane(t, "--sweep-interval", "200ms")
	s.Daemon(t, "worker", "worker", "--concurrency", "3", "--lease", "1s")
	s.Apply(t, `
name: cancel-failfast
fail_fast: true
tasks:
  - {name: long, handler: sleep, params: {duration: 30s}}
  - {name: after-long, handler: noop, depends_on: [long]}
  - {name: gate, handler: sleep, params: {duration: 1s}}
  - {name: doomed, handler: fail, params: {permanent: true, message: cannot work}, depends_on: [gate]}
  - {name: after-doomed, handler: noop, depends_on: [doomed]}
`)
	run := s.Trigger(t, "cancel-failfast")
	crashWaitTask(t, db, run, "long", 30*time.Second, "RUNNING", func(c crashTask) bool { return c.State == "RUNNING" })
	crashWaitTask(t, db, run, "doomed", 30*time.Second, "DEAD", func(c crashTask) bool { return c.State == "DEAD" })
	dead := time.Now()
	crashWaitTask(t, db, run, "long", 20*time.Second, "stopped", func(c crashTask) bool { return c.State != "RUNNING" })
	if el := time.Since(dead); el > 10*time.Second {
		t.Fatalf("long took %v to stop after doomed died", el)
	}
	harness.Eventually(t, 20*time.Second, "the run to settle FAILED", func() (bool, error) {
		var settled bool
		if err := db.QueryRow(`SELECT state = 'FAILED' AND finished_at IS NOT NULL FROM workflow_runs WHERE id = $1`, run).Scan(&settled); err != nil {
			return false, err
		}
		return settled, nil
	})
	want := map[string]struct {
		state  string
		claims int
	}{
		"long":         {"CANCELLED", 1},
		"after-long":   {"CANCELLED", 0},
		"gate":         {"SUCCEEDED", 1},
		"doomed":       {"DEAD", 1},
		"after-doomed": {"UPSTREAM_FAILED", 0},
	}
	for name, w := range want {
		c := crashTaskOf(t, db, run, name)
		if c.State != w.state || crashClaims(t, db, c.ID) != w.claims {
			t.Errorf("%s: %s with %d claims, want %s with %d", name, c.State, crashClaims(t, db, c.ID), w.state, w.claims)
		}
	}
	if st := crashRunState(t, db, run); st != "FAILED" {
		t.Fatalf("run %s, want FAILED (not CANCELLED: nobody asked)", st)
	}
}
