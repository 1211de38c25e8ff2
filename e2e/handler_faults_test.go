package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/flowforge/flowforge/core/store"
	"github.com/flowforge/flowforge/e2e/harness"
)

// The handlers these tests need beyond the built-ins ("boom", which panics
// on its first attempt, and "special") live in the testbin binary
// (e2e/harness/testbin: ffctl built with cli.Main and a registry of its
// own); the daemons run as processes like every other e2e test's.

// TestAPanickingHandlerFailsItsAttemptAndTheWorkerCarriesOn: mode 33. A
// testbin worker runs a handler that panics on its first attempt: the
// attempt fails with "handler panicked" in its history and is retried, the
// panic is counted, and the same worker process carries on and runs the
// retry and the downstream task (which panics once too).
func TestAPanickingHandlerFailsItsAttemptAndTheWorkerCarriesOn(t *testing.T) {
	s := harness.NewStack(t, harness.StackOptions{})
	s.ControlPlane(t)
	w := s.WithBin(harness.BuildTestBin(t)).DaemonWithHealth(t, "testbin-worker", "worker", "--concurrency", "2", "--lease", "5s")
	s.Apply(t, `
name: panics
tasks:
  - name: boom
    handler: boom
    retry: {max_attempts: 3, initial_backoff: 100ms, max_backoff: 100ms}
  - {name: after, handler: boom, depends_on: [boom]}
`)
	id := s.Trigger(t, "panics")
	r := s.WaitRunTerminal(t, id, 30*time.Second)
	if r.State != "SUCCEEDED" {
		t.Fatalf("run %s, want SUCCEEDED", r.State)
	}
	taskID, _, attempt := r.Task(t, "boom")
	if attempt != 2 {
		t.Fatalf("boom attempts = %d, want 2 (the first panicked)", attempt)
	}
	if n := harness.Metric(t, w.Health, "flowforge_handler_panics_total"); n != 2 {
		// "after" panics on its own first attempt too.
		t.Fatalf("flowforge_handler_panics_total = %v, want 2", n)
	}
	if w.Exited() {
		t.Fatalf("the worker exited:\n%s", w.Logs())
	}
	d, err := s.Store.GetTask(context.Background(), mustUUID(t, taskID))
	if err != nil {
		t.Fatal(err)
	}
	var found bool
	for _, e := range d.Events {
		if e.ToState == "RETRYING" && e.Reason != nil && strings.Contains(*e.Reason, "handler panicked: assignment to entry in nil map") {
			found = true
		}
	}
	if !found {
		t.Fatalf("no RETRYING event saying the handler panicked: %+v", d.Events)
	}
}

// TestAnUnknownHandlerIsDeadAtOnceWithAClearError: mode 32, past the
// grace. With --unknown-handler-grace 1s, a task whose handler no worker
// registers is handed back for a second, then claimed and DEAD after one
// attempt, with an error naming the handler.
func TestAnUnknownHandlerIsDeadAtOnceWithAClearError(t *testing.T) {
	s := harness.NewStack(t, harness.StackOptions{})
	s.ControlPlane(t)
	w := s.DaemonWithHealth(t, "worker", "worker", "--concurrency", "2", "--lease", "5s", "--unknown-handler-grace", "1s")
	s.ApplyUnservedHandlers(t, `
name: typo
tasks:
  - name: t
    handler: no-such-handler
    retry: {max_attempts: 5, initial_backoff: 50ms, max_backoff: 50ms}
`)
	id := s.Trigger(t, "typo")
	r := s.WaitRunTerminal(t, id, 30*time.Second)
	if r.State != "FAILED" {
		t.Fatalf("run %s, want FAILED", r.State)
	}
	for _, task := range r.Tasks {
		if task.State != "DEAD" || task.Attempt != 1 {
			t.Fatalf("task %s: %s after %d attempts, want DEAD after 1 (no retry can fix it)", task.Name, task.State, task.Attempt)
		}
		if task.Error == nil || !strings.Contains(*task.Error, `unknown handler "no-such-handler"`) {
			t.Fatalf("error %v does not name the unknown handler", task.Error)
		}
	}
	if n := harness.Metric(t, w.Health, "flowforge_tasks_finished_total", `state="DEAD"`); n != 1 {
		t.Fatalf("flowforge_tasks_finished_total{state=DEAD} = %v, want 1", n)
	}
}

// TestWorkersWithDifferentHandlerSetsShareAQueue: mode 32, within the
// grace. A worker that does not register a task's handler (plain ffctl)
// hands the delivery back instead of failing it, so the worker that does
// (testbin, with "special") runs it, on its first attempt. The plain
// worker runs alone until it has handed back every "special" task (each
// hand-back is noted in the task's history), so every one of them reaches
// it whatever the broker's share of deliveries between two consumers
// would have been.
func TestWorkersWithDifferentHandlerSetsShareAQueue(t *testing.T) {
	s := harness.NewStack(t, harness.StackOptions{})
	testbin := harness.BuildTestBin(t) // before the trigger: the grace runs from it
	s.ControlPlane(t)
	s.Daemon(t, "plain-worker", "worker", "--concurrency", "4") // built-ins only
	yaml := "name: mixed\ntasks:\n"
	for i := 0; i < 8; i++ {
		yaml += "  - {name: s" + string(rune('a'+i)) + ", handler: special}\n"
		yaml += "  - {name: n" + string(rune('a'+i)) + ", handler: noop}\n"
	}
	s.ApplyUnservedHandlers(t, yaml)
	id := s.Trigger(t, "mixed")
	db := s.DB(t)
	harness.Eventually(t, 30*time.Second, "the plain worker to hand back all 8 special tasks", func() (bool, error) {
		var n int
		err := db.QueryRow(`SELECT count(DISTINCT e.task_run_id) FROM task_events e JOIN task_runs t ON t.id = e.task_run_id
		  WHERE t.run_id = $1 AND t.handler = 'special' AND e.reason LIKE $2 || '%'`, id, store.WaitingReasonPrefix).Scan(&n)
		return n == 8, err
	})
	s.WithBin(testbin).Daemon(t, "testbin-worker", "worker", "--concurrency", "2") // the built-ins and "special"
	r := s.WaitRunTerminal(t, id, 60*time.Second)
	if r.State != "SUCCEEDED" {
		t.Fatalf("run %s, want SUCCEEDED: %+v", r.State, r.Tasks)
	}
	for _, task := range r.Tasks {
		if task.Attempt != 1 {
			t.Errorf("task %s took %d attempts, want 1", task.Name, task.Attempt)
		}
		if strings.HasPrefix(task.Name, "s") && !strings.Contains(string(task.Result), "testbin") {
			t.Errorf("task %s result %s: not run by the worker that registers its handler", task.Name, task.Result)
		}
	}
}
