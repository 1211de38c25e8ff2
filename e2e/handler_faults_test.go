package e2e

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/flowforge/flowforge/core"
	"github.com/flowforge/flowforge/daemon/handlers"
	"github.com/flowforge/flowforge/daemon/metrics"
	"github.com/flowforge/flowforge/daemon/worker"
	"github.com/flowforge/flowforge/e2e/harness"
)

// handlerFaultsWorker runs the real worker in this process with reg, so a
// test can register handlers that misbehave; scheduler and publisher run as
// ffctl processes.
func handlerFaultsWorker(t *testing.T, s *harness.Stack, reg *core.Registry, unknownHandlerGrace time.Duration) *metrics.Metrics {
	t.Helper()
	s.Daemon(t, "scheduler", "scheduler")
	s.Daemon(t, "publisher", "publisher")
	m := metrics.New()
	w, err := worker.New(worker.Config{Store: s.Store, Broker: dispatchBrokerConfig(s), Registry: reg,
		Concurrency: 2, Lease: 5 * time.Second, ID: "in-process-worker", Metrics: m, UnknownHandlerGrace: unknownHandlerGrace})
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = w.Run(ctx)
	}()
	t.Cleanup(func() {
		stop()
		<-done
	})
	return m
}

func TestAPanickingHandlerFailsItsAttemptAndTheWorkerCarriesOn(t *testing.T) {
	s := harness.NewStack(t, harness.StackOptions{})
	reg := core.NewRegistry()
	reg.MustRegister("boom", func(ctx context.Context, task core.Task) (json.RawMessage, error) {
		if task.Attempt == 1 {
			var m map[string]int
			m["nil map"] = 1 // panics: assignment to entry in nil map
		}
		return json.RawMessage(`{"survived": true}`), nil
	})
	m := handlerFaultsWorker(t, s, reg, 0)
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
	if n := testutil.ToFloat64(m.HandlerPanics); n != 2 {
		// "after" panics on its own first attempt too.
		t.Fatalf("flowforge_handler_panics_total = %v, want 2", n)
	}
	d, err := s.Store.GetTask(context.Background(), mustUUID(t, taskID))
	if err != nil {
		t.Fatal(err)
	}
	var found bool
	for _, e := range d.Events {
		if e.ToState == "RETRYING" && e.Reason != nil && strings.Contains(*e.Reason, "handler panicked") {
			found = true
		}
	}
	if !found {
		t.Fatalf("no RETRYING event saying the handler panicked: %+v", d.Events)
	}
}

func TestAnUnknownHandlerIsDeadAtOnceWithAClearError(t *testing.T) {
	s := harness.NewStack(t, harness.StackOptions{})
	m := handlerFaultsWorker(t, s, core.NewRegistry(), time.Second) // hand back for a second, then fail
	s.Apply(t, `
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
	if n := testutil.ToFloat64(m.TasksFinished.WithLabelValues("DEAD")); n != 1 {
		t.Fatalf("flowforge_tasks_finished_total{state=DEAD} = %v, want 1", n)
	}
}

// TestWorkersWithDifferentHandlerSetsShareAQueue: a worker that does not
// register a task's handler hands the delivery back instead of failing it,
// so a worker that does runs it, on its first attempt.
func TestWorkersWithDifferentHandlerSetsShareAQueue(t *testing.T) {
	s := harness.NewStack(t, harness.StackOptions{})
	reg := core.NewRegistry()
	reg.MustRegister("special", func(ctx context.Context, task core.Task) (json.RawMessage, error) {
		return json.RawMessage(`{"ran": "in-process"}`), nil
	})
	// Like a program built with cli.Main: the built-ins plus its own.
	handlers.Register(reg, handlers.Options{})
	handlerFaultsWorker(t, s, reg, 0)                           // the built-ins and "special"
	s.Daemon(t, "plain-worker", "worker", "--concurrency", "4") // built-ins only
	yaml := "name: mixed\ntasks:\n"
	for i := 0; i < 8; i++ {
		yaml += "  - {name: s" + string(rune('a'+i)) + ", handler: special}\n"
		yaml += "  - {name: n" + string(rune('a'+i)) + ", handler: noop}\n"
	}
	s.Apply(t, yaml)
	id := s.Trigger(t, "mixed")
	r := s.WaitRunTerminal(t, id, 60*time.Second)
	if r.State != "SUCCEEDED" {
		t.Fatalf("run %s, want SUCCEEDED: %+v", r.State, r.Tasks)
	}
	for _, task := range r.Tasks {
		if task.Attempt != 1 {
			t.Errorf("task %s took %d attempts, want 1", task.Name, task.Attempt)
		}
		if strings.HasPrefix(task.Name, "s") && !strings.Contains(string(task.Result), "in-process") {
			t.Errorf("task %s result %s: not run by the worker that registers its handler", task.Name, task.Result)
		}
	}
}
