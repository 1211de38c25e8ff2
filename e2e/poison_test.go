package e2e

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/flowforge/flowforge/core/broker"
	"github.com/flowforge/flowforge/e2e/harness"
)

// Mode 26: garbage on the dispatch queue.

// TestGarbageOnTheDispatchQueueIsSettledAndTheWorkerCarriesOn queues, ahead
// of a real dispatch, messages that are not dispatches (not JSON, empty,
// binary, wrong types, an unknown field without the required ones, missing
// id, non-positive token) and two well-formed ones that must not run (an
// unknown task, and a real task with a stale fencing token). The worker (one slot)
// dead-letters the first kind with a log line and
// flowforge_poison_messages_total, acks the second with
// flowforge_claims_lost_total{reason}, stays up, and then runs the real
// dispatch and a later run once each.
func TestGarbageOnTheDispatchQueueIsSettledAndTheWorkerCarriesOn(t *testing.T) {
	s := harness.NewStack(t, harness.StackOptions{})
	db := s.DB(t)
	count := filepath.Join(t.TempDir(), "executions")
	s.Apply(t, "name: victim\ntasks:\n  - {name: a, handler: shell, params: {command: "+dispatchCountCommand(count)+"}}\n")
	first := s.Trigger(t, "victim") // READY with its outbox row; no publisher yet
	payloads := dispatchPayloads(t, db)
	if len(payloads) != 1 {
		t.Fatalf("%d outbox rows, want 1", len(payloads))
	}
	var real struct {
		TaskRunID string `json:"task_run_id"`
		RunID     string `json:"run_id"`
		Token     int64  `json:"fencing_token"`
		Task      string `json:"task"`
	}
	if err := json.Unmarshal(payloads[0], &real); err != nil {
		t.Fatal(err)
	}

	poison := [][]byte{
		[]byte("not json at all"),
		{},
		{0xff, 0xfe, 0x00, 0x01},
		[]byte(`[1, 2, 3]`),
		[]byte(`{"task_run_id": 5, "fencing_token": "x"}`),
		[]byte(fmt.Sprintf(`{"task_run_id": %q, "fencing_token": 1, "surprise": true}`, uuid.NewString())),
		[]byte(`{"fencing_token": 1}`),
		[]byte(fmt.Sprintf(`{"task_run_id": %q, "fencing_token": 0}`, real.TaskRunID)),
		[]byte(fmt.Sprintf(`{"task_run_id": %q, "fencing_token": 1}{}`, real.TaskRunID)),
	}
	unknown := []byte(fmt.Sprintf(`{"task_run_id": %q, "run_id": %q, "fencing_token": 1, "task": "a"}`, uuid.NewString(), real.RunID))
	stale := []byte(fmt.Sprintf(`{"task_run_id": %q, "run_id": %q, "fencing_token": %d, "task": "a"}`, real.TaskRunID, real.RunID, real.Token+5))
	dispatchPublish(t, s, append(append([][]byte{}, poison...), unknown, stale)...)

	s.Daemon(t, "scheduler", "scheduler")
	w := s.DaemonWithHealth(t, "worker", "worker", "--allow-shell", "--concurrency", "1")
	addr := w.Health
	// The real dispatch goes out only once the worker has settled the
	// garbage: the publisher routes it to its handler's queue, which the
	// worker reads beside the shared one, so queue order alone would not
	// put it last (run first, it turned the stale message into a
	// duplicate's).
	harness.WaitMetricAtLeast(t, addr, float64(len(poison)), "flowforge_poison_messages_total")
	harness.WaitMetricAtLeast(t, addr, 2, "flowforge_claims_lost_total")
	s.Daemon(t, "publisher", "publisher")

	if r := s.WaitRunTerminal(t, first, 30*time.Second); r.State != "SUCCEEDED" {
		t.Fatalf("run after the garbage: %s", r.State)
	}
	second := s.Trigger(t, "victim")
	if r := s.WaitRunTerminal(t, second, 30*time.Second); r.State != "SUCCEEDED" {
		t.Fatalf("later run: %s", r.State)
	}
	if w.Exited() {
		t.Fatalf("the worker exited:\n%s", w.Logs())
	}
	if v := harness.Metric(t, addr, "flowforge_poison_messages_total"); v != float64(len(poison)) {
		t.Fatalf("flowforge_poison_messages_total = %v, want %d", v, len(poison))
	}
	for _, reason := range []string{"unknown_task", "stale"} {
		if v := harness.Metric(t, addr, "flowforge_claims_lost_total", `reason="`+reason+`"`); v != 1 {
			t.Errorf("flowforge_claims_lost_total{reason=%q} = %v, want 1", reason, v)
		}
	}
	if v := harness.Metric(t, addr, "flowforge_claims_lost_total"); v != 2 {
		t.Errorf("flowforge_claims_lost_total = %v, want 2", v)
	}
	logs := w.Logs()
	if n := strings.Count(logs, "rejected a message that is not a dispatch"); n != len(poison) {
		t.Errorf("%d poison log lines, want %d", n, len(poison))
	}
	if n := strings.Count(logs, "claim lost; acking without running"); n != 2 {
		t.Errorf("%d lost-claim log lines, want 2", n)
	}
	if n := s.Messages(t, broker.DeadLetterQueue(s.Queue)); n != len(poison) {
		t.Errorf("dead-letter queue holds %d messages, want %d", n, len(poison))
	}
	if n := s.Messages(t, s.Queue); n != 0 {
		t.Errorf("dispatch queue holds %d messages, want 0", n)
	}
	ex := dispatchExecutions(t, count)
	if ex[first] != 1 || ex[second] != 1 || len(ex) != 2 {
		t.Fatalf("executions %v, want one per run", ex)
	}
}
