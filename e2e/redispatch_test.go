package e2e

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/flowforge/flowforge/e2e/harness"
)

// TestAConfirmedDispatchThatIsLostIsRedispatched: the broker confirmed a
// dispatch, then the message vanished (here: the queue is purged, as an
// operator or a lost broker node would do). No worker can ever claim the
// READY task from that message; the scheduler dispatches it again after
// --redispatch-after and the run completes, the task running once.
func TestAConfirmedDispatchThatIsLostIsRedispatched(t *testing.T) {
	s := harness.NewStack(t, harness.StackOptions{})
	s.Daemon(t, "scheduler", "scheduler", "--redispatch-after", "2s")
	s.Daemon(t, "publisher", "publisher")
	s.Apply(t, "name: lost\ntasks:\n  - {name: only, handler: noop}\n")
	id := s.Trigger(t, "lost")
	ctx := context.Background()
	harness.Eventually(t, 20*time.Second, "the dispatch to be confirmed", func() (bool, error) {
		st, err := s.Store.OutboxStatus(ctx)
		return err == nil && st.Pending == 0 && st.PublishedLastMinute >= 1, err
	})
	ch := s.BrokerChannel(t)
	purged, err := ch.QueuePurge(s.Queue, false)
	if err != nil || purged != 1 {
		t.Fatalf("purge: %d messages, err %v; want the one dispatch", purged, err)
	}
	w := s.Daemon(t, "worker", "worker")
	r := s.WaitRunTerminal(t, id, 30*time.Second)
	if r.State != "SUCCEEDED" {
		t.Fatalf("run %s, want SUCCEEDED", r.State)
	}
	taskID, _, attempt := r.Task(t, "only")
	if attempt != 1 {
		t.Fatalf("attempt %d, want 1", attempt)
	}
	d, err := s.Store.GetTask(ctx, mustUUID(t, taskID))
	if err != nil {
		t.Fatal(err)
	}
	var redispatches, claims int
	for _, e := range d.Events {
		if e.FromState != nil && *e.FromState == "READY" && e.ToState == "READY" {
			redispatches++
		}
		if e.ToState == "RUNNING" {
			claims++
		}
	}
	if redispatches < 1 || claims != 1 {
		t.Fatalf("history: %d redispatches, %d claims; want at least 1 and exactly 1\nworker log:\n%s", redispatches, claims, w.Logs())
	}
}

func mustUUID(t *testing.T, s string) uuid.UUID {
	t.Helper()
	id, err := uuid.Parse(s)
	if err != nil {
		t.Fatalf("parse id %q: %v", s, err)
	}
	return id
}
