package e2e

import (
	"context"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/flowforge/flowforge/core/broker"
	"github.com/flowforge/flowforge/daemon/supervisor"
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
	s.ControlPlane(t, "--sweep-interval", "200ms")
	old := s.Daemon(t, "worker-old", "worker", "--id", "old", "--concurrency", "1", "--slot-wait", "1m", "--lease", "1s")
	s.Apply(t, "name: shutdown-inflight\ntasks:\n  - {name: work, handler: sleep, params: {duration: 6s}}\n")
	s.Apply(t, "name: shutdown-waiting\ntasks:\n  - {name: work, handler: noop}\n")
	inflight := s.Trigger(t, "shutdown-inflight")
	crashWaitTask(t, db, inflight, "work", 30*time.Second, "RUNNING on the old worker", func(c crashTask) bool {
		return c.State == "RUNNING" && c.Worker.String == "old"
	})
	waiting := s.Trigger(t, "shutdown-waiting")
	cancelHeldByWorker(t, s, waiting)
	if c := crashTaskOf(t, db, inflight, "work"); c.State != "RUNNING" {
		t.Fatalf("the task is %s before SIGTERM; the test needs it in flight", c.State)
	}
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
	if n := harness.QueryInt(t, db, `SELECT count(*) FROM task_runs WHERE state = 'RUNNING' AND lease_expires_at > now()`); n != 0 {
		t.Fatalf("%d RUNNING rows keep a live lease after a clean exit", n)
	}
	held := crashTaskOf(t, db, waiting, "work")
	if held.State != "READY" || crashClaims(t, db, held.ID) != 0 {
		t.Fatalf("unclaimed task %+v; want still READY, never claimed", held)
	}
	// Routing by handler (mode 115): the delivery waits in the noop
	// handler's own queue, which the old worker bound.
	noopQueue, ok := broker.HandlerQueue(s.Queue, "noop")
	if !ok {
		t.Fatalf("no queue of its own for handler noop under %s", s.Queue)
	}
	bcfg := broker.Config{URLs: s.AMQPURLs, Queue: noopQueue}
	harness.Eventually(t, 10*time.Second, "the unclaimed delivery to be back in the noop handler's queue", func() (bool, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		ready, consumers, err := broker.QueueDepth(ctx, bcfg)
		return err == nil && ready == 1 && consumers == 0, err
	})
	s.Daemon(t, "worker-new", "worker", "--id", "new")
	s.WaitRuns(t, "SUCCEEDED", 30*time.Second, waiting)
	if c := crashTaskOf(t, db, waiting, "work"); c.Worker.String != "new" || c.Attempt != 1 || crashClaims(t, db, c.ID) != 1 {
		t.Fatalf("handed-back task %+v; want SUCCEEDED once by the new worker", c)
	}
	if st := crashRunState(t, db, inflight); st != "SUCCEEDED" {
		t.Fatalf("in-flight run %s", st)
	}
}

// TestSecondSignalAbortsInFlightHandlers: a first SIGTERM waits for the
// in-flight handler; a second one cancels it, records the attempt as failed
// with the reason, and the worker exits at once.
func TestSecondSignalAbortsInFlightHandlers(t *testing.T) {
	t.Parallel()
	s := harness.NewStack(t, harness.StackOptions{})
	db := s.DB(t)
	s.ControlPlane(t, "--sweep-interval", "200ms")
	w := s.Daemon(t, "worker", "worker", "--id", "aborted", "--lease", "5s")
	s.Apply(t, "name: shutdown-abort\ntasks:\n  - {name: work, handler: sleep, params: {duration: 60s}, retry: {max_attempts: 3, initial_backoff: 1s, max_backoff: 1s}}\n")
	run := s.Trigger(t, "shutdown-abort")
	crashWaitTask(t, db, run, "work", 30*time.Second, "RUNNING", func(c crashTask) bool { return c.State == "RUNNING" })
	if err := w.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	w.WaitForLog(t, "stopping gracefully", 10*time.Second)
	// A signal within SecondSignalAfter of the first is taken as the same
	// one delivered twice (process and group) and does not abort. The
	// daemon dates the first before it logs, so SecondSignalAfter from the
	// log's sight is late enough however slowly the signal was delivered
	// (counted from the send, a loaded CI once lost the second signal).
	time.Sleep(supervisor.SecondSignalAfter + 50*time.Millisecond)
	if c := crashTaskOf(t, db, run, "work"); c.State != "RUNNING" {
		t.Fatalf("after one SIGTERM the task is %s, want still RUNNING (graceful)", c.State)
	}
	start := time.Now()
	if err := w.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := crashWaitExit(t, w, 20*time.Second); code != 0 {
		t.Fatalf("worker exited %d after the second SIGTERM, want 0", code)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Fatalf("the second SIGTERM took %s to stop a 60 s handler", d)
	}
	c := crashTaskOf(t, db, run, "work")
	if c.State != "RETRYING" || c.Attempt != 1 || !strings.Contains(c.Error.String, "aborted") {
		t.Fatalf("aborted task %+v; want RETRYING after attempt 1 with the abort as its error", c)
	}
}

// TestAHandlerIgnoringItsCancellationIsAbandonedAfterTheAbortGrace: mode
// 127. A testbin worker runs "stubborn", which blocks for 120 s ignoring
// its context (a call that takes none). One SIGTERM with --stop-timeout 1s
// aborts it a second later; with --abort-grace 2s the worker then records
// the attempt failed, naming the grace, stops renewing its lease and exits
// 0 within seconds — not after the 120 s the handler would hold it — and
// a second worker runs attempt 2 to SUCCEEDED.
func TestAHandlerIgnoringItsCancellationIsAbandonedAfterTheAbortGrace(t *testing.T) {
	t.Parallel()
	s := harness.NewStack(t, harness.StackOptions{})
	db := s.DB(t)
	s.ControlPlane(t, "--sweep-interval", "200ms")
	bin := s.WithBin(harness.BuildTestBin(t))
	w := bin.Daemon(t, "stuck-worker", "worker", "--id", "stuck", "--lease", "5s", "--stop-timeout", "1s", "--abort-grace", "2s")
	s.Apply(t, "name: abort-grace\ntasks:\n  - {name: work, handler: stubborn, params: {seconds: 120}, retry: {max_attempts: 3, initial_backoff: 100ms, max_backoff: 100ms}}\n")
	run := s.Trigger(t, "abort-grace")
	crashWaitTask(t, db, run, "work", 30*time.Second, "RUNNING on the stuck worker", func(c crashTask) bool {
		return c.State == "RUNNING" && c.Worker.String == "stuck"
	})
	start := time.Now()
	if err := w.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := crashWaitExit(t, w, 30*time.Second); code != 0 {
		t.Fatalf("worker exited %d, want 0:\n%s", code, w.Logs())
	}
	took := time.Since(start)
	if took < 3*time.Second || took > 20*time.Second {
		t.Fatalf("the worker exited %s after SIGTERM; want after the stop timeout (1 s) and the abort grace (2 s), long before the handler's 120 s", took)
	}
	if !strings.Contains(w.Logs(), "did not return within the abort grace") {
		t.Fatalf("the worker's log does not say it left the handler behind:\n%s", w.Logs())
	}
	c := crashTaskOf(t, db, run, "work")
	if c.Attempt != 1 || !strings.Contains(c.Error.String, "did not return within 2s of its cancellation") {
		t.Fatalf("after the exit the task is %+v; want attempt 1 failed, naming the 2s grace", c)
	}
	bin.Daemon(t, "worker-2", "worker", "--id", "second", "--lease", "5s")
	r := s.WaitRunTerminal(t, run, 30*time.Second)
	if r.State != "SUCCEEDED" {
		t.Fatalf("run %s, want SUCCEEDED by the second worker", r.State)
	}
	if _, _, attempt := r.Task(t, "work"); attempt != 2 {
		t.Fatalf("work took %d attempts, want 2 (the abandoned one, then the second worker's)", attempt)
	}
}
