package e2e

import (
	"context"
	"syscall"
	"testing"
	"time"

	"github.com/flowforge/flowforge/core/broker"
	"github.com/flowforge/flowforge/e2e/harness"
)

// TestSIGTERMWorkerFinishesInFlightTaskAndHandsBackUnclaimed: mode 12. A
// single-slot worker runs a 2 s task and holds a second delivery it has not
// claimed. On SIGTERM it stops consuming, hands the unclaimed delivery back
// to the queue, lets the in-flight task finish (SUCCEEDED, lease cleared)
// and exits 0, leaving no RUNNING row with a live lease; another worker
// then completes the handed-back task.
func TestSIGTERMWorkerFinishesInFlightTaskAndHandsBackUnclaimed(t *testing.T) {
	t.Parallel()
	s := harness.NewStack(t, harness.StackOptions{})
	db := s.DB(t)
	crashControlPlane(t, s)
	old := s.Daemon(t, "worker-old", "worker", "--id", "old", "--concurrency", "1", "--slot-wait", "1m", "--lease", "1s")
	s.Apply(t, "name: shutdown-inflight\ntasks:\n  - {name: work, handler: sleep, params: {duration: 2s}}\n")
	s.Apply(t, "name: shutdown-waiting\ntasks:\n  - {name: work, handler: noop}\n")
	inflight := s.Trigger(t, "shutdown-inflight")
	crashWaitTask(t, db, inflight, "work", 30*time.Second, "RUNNING on the old worker", func(c crashTask) bool {
		return c.State == "RUNNING" && c.Worker.String == "old"
	})
	waiting := s.Trigger(t, "shutdown-waiting")
	cancelHeldByWorker(t, s, waiting)
	if err := old.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := crashWaitExit(t, old, 20*time.Second); code != 0 {
		t.Fatalf("worker exited %d after SIGTERM, want 0", code)
	}
	done := crashTaskOf(t, db, inflight, "work")
	if done.State != "SUCCEEDED" || done.Worker.String != "old" || done.Lease.Valid || done.Attempt != 1 {
		t.Fatalf("in-flight task %+v; want SUCCEEDED by the old worker, lease cleared", done)
	}
	if n := crashInt(t, db, `SELECT count(*) FROM task_runs WHERE state = 'RUNNING' AND lease_expires_at > now()`); n != 0 {
		t.Fatalf("%d RUNNING rows keep a live lease after a clean exit", n)
	}
	held := crashTaskOf(t, db, waiting, "work")
	if held.State != "READY" || crashClaims(t, db, held.ID) != 0 {
		t.Fatalf("unclaimed task %+v; want still READY, never claimed", held)
	}
	bcfg := broker.Config{URLs: s.AMQPURLs, Queue: s.Queue}
	harness.Eventually(t, 10*time.Second, "the unclaimed delivery to be back in the queue", func() (bool, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		ready, consumers, err := broker.QueueDepth(ctx, bcfg)
		return err == nil && ready == 1 && consumers == 0, err
	})
	s.Daemon(t, "worker-new", "worker", "--id", "new")
	crashWaitRun(t, db, waiting, "SUCCEEDED", 30*time.Second)
	if c := crashTaskOf(t, db, waiting, "work"); c.Worker.String != "new" || c.Attempt != 1 || crashClaims(t, db, c.ID) != 1 {
		t.Fatalf("handed-back task %+v; want SUCCEEDED once by the new worker", c)
	}
	if st := crashRunState(t, db, inflight); st != "SUCCEEDED" {
		t.Fatalf("in-flight run %s", st)
	}
}
