package e2e

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/flowforge/flowforge/e2e/harness"
)

// TestATaskNoWorkerCanRunBacksOffAndSaysWhatItWaitsFor: a worker that does
// not register a task's handler hands it back with a growing, jittered wait
// (not every 50 ms: about 4s/50ms = 80 hand-backs over the grace before
// issue 11), and notes once that the task waits for a worker with that
// handler, which `run show` reports until the grace ends and the task is
// DEAD.
func TestATaskNoWorkerCanRunBacksOffAndSaysWhatItWaitsFor(t *testing.T) {
	s := harness.NewStack(t, harness.StackOptions{})
	const grace = 4 * time.Second
	s.ControlPlane(t)
	w := s.DaemonWithHealth(t, "worker", "worker", "--concurrency", "2", "--lease", "5s", "--unknown-handler-grace", grace.String())
	s.ApplyUnservedHandlers(t, "name: mail\ntasks:\n  - {name: send, handler: sendmail}\n")
	id := s.Trigger(t, "mail")
	runID := uuid.MustParse(id)
	harness.Eventually(t, 20*time.Second, "run show says the task waits for a worker with handler sendmail", func() (bool, error) {
		r, err := s.Store.GetRun(context.Background(), runID)
		if err != nil {
			return false, err
		}
		w := r.Tasks[0].WaitingForHandler
		return w != nil && *w == "sendmail", nil
	})
	r := s.WaitRunTerminal(t, id, 30*time.Second)
	if _, state, _ := r.Task(t, "send"); state != "DEAD" {
		t.Fatalf("task %s after the grace, want DEAD", state)
	}
	handedBack := harness.Metric(t, w.Health, "flowforge_deliveries_handed_back_total", `reason="unknown_handler"`)
	if handedBack < 1 || handedBack > 30 {
		t.Fatalf("the task was handed back %v times over a %s grace, want 1..30 (backed off)", handedBack, grace)
	}
	t.Logf("handed back %v times over a %s grace", handedBack, grace)
	done, err := s.Store.GetRun(context.Background(), runID)
	if err != nil {
		t.Fatal(err)
	}
	if done.Tasks[0].WaitingForHandler != nil {
		t.Fatalf("a DEAD task still shows waiting for handler %q", *done.Tasks[0].WaitingForHandler)
	}
}
