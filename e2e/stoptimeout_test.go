package e2e

import (
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/flowforge/flowforge/e2e/harness"
)

// TestStopTimeoutAbortsALongHandlerAsTheSecondSignalDoes: a worker with
// --stop-timeout 1s running a 60 s handler gets one SIGTERM and no second:
// it waits the second for the handler, then aborts it as a second signal
// does (TestSecondSignalAbortsInFlightHandlers): the attempt is recorded
// failed with the abort as its error (RETRYING after attempt 1), and the
// worker exits 0 within a few seconds. Before, it waited for the handler
// until a supervisor's SIGKILL.
func TestStopTimeoutAbortsALongHandlerAsTheSecondSignalDoes(t *testing.T) {
	t.Parallel()
	s := harness.NewStack(t, harness.StackOptions{})
	db := s.DB(t)
	s.ControlPlane(t, "--sweep-interval", "200ms")
	w := s.Daemon(t, "worker", "worker", "--id", "timed-out", "--lease", "5s", "--stop-timeout", "1s")
	s.Apply(t, "name: stop-timeout\ntasks:\n  - {name: work, handler: sleep, params: {duration: 60s}, retry: {max_attempts: 3, initial_backoff: 1s, max_backoff: 1s}}\n")
	run := s.Trigger(t, "stop-timeout")
	crashWaitTask(t, db, run, "work", 30*time.Second, "RUNNING", func(c crashTask) bool { return c.State == "RUNNING" })
	start := time.Now()
	if err := w.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := crashWaitExit(t, w, 20*time.Second); code != 0 {
		t.Fatalf("worker exited %d after SIGTERM and its stop timeout, want 0\n%s", code, w.Logs())
	}
	if d := time.Since(start); d < time.Second || d > 10*time.Second {
		t.Fatalf("the worker stopped %s after SIGTERM with --stop-timeout 1s running a 60 s handler; want after the second, within 10 s", d)
	}
	if !strings.Contains(w.Logs(), "daemon: stop timeout passed; aborting in-flight tasks (as on a second signal)") {
		t.Fatalf("the stop timeout is not logged:\n%s", w.Logs())
	}
	c := crashTaskOf(t, db, run, "work")
	if c.State != "RETRYING" || c.Attempt != 1 || !strings.Contains(c.Error.String, "aborted") {
		t.Fatalf("aborted task %+v; want RETRYING after attempt 1 with the abort as its error, as on a second signal", c)
	}
}
