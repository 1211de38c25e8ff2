package e2e

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/flowforge/flowforge/core"
	"github.com/flowforge/flowforge/daemon/failpoint"
	"github.com/flowforge/flowforge/e2e/harness"
)

// Mode 37: one row the broker refuses permanently.

// quarantineBigWorkflow is a one-task workflow whose dispatch message is
// larger than quarantineSmallWorkflow's: its task name has the longest
// length allowed.
var quarantineBigWorkflow = "name: big\ntasks:\n  - {name: " + strings.Repeat("b", core.MaxNameLength) + ", handler: noop}\n"

const quarantineSmallWorkflow = "name: small\ntasks:\n  - {name: a, handler: noop}\n"

// quarantineSetup applies both workflows and triggers 100 small runs, one
// big run and 100 more small ones (the big row sits among them, in the
// first batch). It returns the small run ids, the big run id and a byte
// limit between the two payload sizes (the jsonb text the publisher
// sends).
func quarantineSetup(t *testing.T, s *harness.Stack) (small []string, big string, limit int) {
	t.Helper()
	s.Apply(t, quarantineSmallWorkflow)
	s.Apply(t, quarantineBigWorkflow)
	small = dispatchTriggerMany(t, s, "small", 100)
	big = s.Trigger(t, "big")
	small = append(small, dispatchTriggerMany(t, s, "small", 100)...)
	return small, big, quarantineLimit(t, s, big)
}

// quarantineLimit returns a byte limit between the size of the small
// dispatches and the big run's (the jsonb text the publisher sends).
func quarantineLimit(t *testing.T, s *harness.Stack, big string) int {
	t.Helper()
	db := s.DB(t)
	lo := harness.QueryInt(t, db, `SELECT max(length(payload::text)) FROM outbox o JOIN task_runs t ON t.id = o.task_run_id WHERE t.task_name = 'a'`)
	hi := harness.QueryInt(t, db, `SELECT length(payload::text) FROM outbox o JOIN task_runs t ON t.id = o.task_run_id WHERE t.run_id = $1`, big)
	if hi <= lo {
		t.Fatalf("the big payload (%d bytes) is not larger than the small ones (%d)", hi, lo)
	}
	return (lo + hi) / 2
}

// quarantineRow is one element of `ffctl outbox quarantined -o json`.
type quarantineRow struct {
	ID        int64  `json:"id"`
	RunID     string `json:"run_id"`
	TaskState string `json:"task_state"`
	Reason    string `json:"reason"`
}

// quarantineAssertIsolated checks, once the small runs succeeded, that the
// big run's row is the one quarantined row with a reason containing want,
// visible in `outbox status`, `outbox quarantined` and the publisher's
// metrics, while the publisher stays ready. It returns the row id.
func quarantineAssertIsolated(t *testing.T, s *harness.Stack, pubAddr, big, want string) int64 {
	t.Helper()
	var st map[string]float64
	if err := json.Unmarshal([]byte(s.MustCLI(t, "outbox", "status", "-o", "json")), &st); err != nil {
		t.Fatal(err)
	}
	if st["quarantined"] != 1 || st["pending"] != 0 {
		t.Fatalf("outbox status %v, want 1 quarantined and nothing pending", st)
	}
	var rows []quarantineRow
	if err := json.Unmarshal([]byte(s.MustCLI(t, "outbox", "quarantined", "-o", "json")), &rows); err != nil {
		t.Fatal(err)
	}
	if len(rows) != 1 || rows[0].RunID != big || rows[0].TaskState != "READY" || !strings.Contains(rows[0].Reason, want) {
		t.Fatalf("quarantined rows %+v, want the big run's READY task with a reason containing %q", rows, want)
	}
	harness.WaitMetric(t, pubAddr, 1, "flowforge_outbox_quarantined")
	if v := harness.Metric(t, pubAddr, "flowforge_outbox_quarantined_total"); v != 1 {
		t.Fatalf("flowforge_outbox_quarantined_total = %v, want 1", v)
	}
	// Readiness stays green: one bad row is an alert, not a reason for an
	// orchestrator to restart a publisher that publishes everything else.
	r, err := recoveryReady(pubAddr)
	if err != nil || r.Code != 200 {
		t.Fatalf("publisher readiness %+v (%v), want 200", r, err)
	}
	return rows[0].ID
}

// TestAnOversizedOutboxRowIsQuarantinedAndTheOthersArePublished starts a
// publisher whose --max-message-bytes lies between the size of 200 small
// dispatches and one big one. The 200 runs succeed, the big row is
// quarantined with its size in the reason, shown by `ffctl outbox status`,
// `outbox quarantined` and flowforge_outbox_quarantined. `outbox drop`
// then buries its task DEAD (the run fails); a second big row, retried
// after the publisher was restarted with a larger limit, runs.
func TestAnOversizedOutboxRowIsQuarantinedAndTheOthersArePublished(t *testing.T) {
	s := harness.NewStack(t, harness.StackOptions{})
	small, big, limit := quarantineSetup(t, s)
	s.Daemon(t, "scheduler", "scheduler")
	pub := s.DaemonWithHealth(t, "publisher", "publisher", "--poll-interval", "100ms", "--max-message-bytes", strconv.Itoa(limit))
	pubAddr := pub.Health
	s.Daemon(t, "worker", "worker", "--concurrency", "16")
	s.WaitRuns(t, "SUCCEEDED", 120*time.Second, small...)
	id := quarantineAssertIsolated(t, s, pubAddr, big, fmt.Sprintf("larger than the max message size of %d bytes", limit))
	pub.WaitForLog(t, "quarantined an outbox row", 10*time.Second)

	// Drop: the task is buried DEAD with the reason; the run fails.
	out := s.MustCLI(t, "outbox", "drop", strconv.FormatInt(id, 10), "--reason", "e2e: cannot be sent")
	if !strings.Contains(out, "is DEAD") {
		t.Fatalf("outbox drop: %s", out)
	}
	if r := s.WaitRunTerminal(t, big, 30*time.Second); r.State != "FAILED" {
		t.Fatalf("big run after the drop: %s, want FAILED", r.State)
	}
	db := s.DB(t)
	if n := harness.QueryInt(t, db, `SELECT count(*) FROM task_events e JOIN task_runs t ON t.id = e.task_run_id WHERE t.run_id = $1 AND e.from_state = 'READY' AND e.to_state = 'DEAD' AND e.actor LIKE 'cli:%@%' AND e.reason LIKE '%e2e: cannot be sent'`, big); n != 1 {
		t.Fatalf("%d audited READY -> DEAD transitions for the dropped dispatch, want 1", n)
	}

	// Retry: a second big row, quarantined again, then retried once the
	// publisher allows it.
	big2 := s.Trigger(t, "big")
	harness.WaitMetric(t, pubAddr, 2, "flowforge_outbox_quarantined_total")
	id2 := harness.QueryInt(t, db, `SELECT o.id FROM outbox o JOIN task_runs t ON t.id = o.task_run_id WHERE t.run_id = $1`, big2)
	pub.Signal(syscall.SIGTERM)
	if _, err := pub.Wait(30 * time.Second); err != nil {
		t.Fatal(err)
	}
	s.Daemon(t, "publisher-2", "publisher", "--poll-interval", "100ms")
	s.MustCLI(t, "outbox", "retry", strconv.Itoa(id2), "--reason", "e2e: limit raised")
	if r := s.WaitRunTerminal(t, big2, 30*time.Second); r.State != "SUCCEEDED" {
		t.Fatalf("retried big run: %s, want SUCCEEDED", r.State)
	}
	if n := harness.QueryInt(t, db, `SELECT count(*) FROM outbox_events WHERE outbox_id = $1 AND action = 'retry' AND actor LIKE 'cli:%@%' AND reason = 'e2e: limit raised'`, id2); n != 1 {
		t.Fatalf("%d audited retries, want 1", n)
	}
	quarantineAssertClaimedOnceExcept(t, s, big)
}

// quarantineAssertClaimedOnceExcept fails unless every task outside run
// except was claimed exactly once.
func quarantineAssertClaimedOnceExcept(t *testing.T, s *harness.Stack, except string) {
	t.Helper()
	if n := harness.QueryInt(t, s.DB(t), `
SELECT count(*) FROM task_runs t
 WHERE t.run_id <> $1
   AND (SELECT count(*) FROM task_events e WHERE e.task_run_id = t.id AND e.from_state = 'READY' AND e.to_state = 'RUNNING') <> 1`, except); n != 0 {
		t.Fatalf("%d tasks were not claimed exactly once", n)
	}
}

// TestARowTheBrokerRefusesIsQuarantinedAndTheOthersArePublished runs a
// private RabbitMQ whose max_message_size lies between the small and the
// big dispatch, and a publisher with its default limit: the broker closes
// the channel (406) over the big message of the first batch. The publisher
// publishes the unconfirmed rows one at a time, quarantines the one the
// broker refuses with the broker's reason, and the 200 other runs succeed
// (before the fix the big row failed its batch on every cycle and nothing
// after it was published).
func TestARowTheBrokerRefusesIsQuarantinedAndTheOthersArePublished(t *testing.T) {
	// A throwaway stack measures the payload sizes the broker limit needs.
	s0 := harness.NewStack(t, harness.StackOptions{})
	s0.Apply(t, quarantineSmallWorkflow)
	s0.Apply(t, quarantineBigWorkflow)
	s0.Trigger(t, "small")
	limit := quarantineLimit(t, s0, s0.Trigger(t, "big"))
	rabbit := harness.StartRabbit(t, harness.RabbitOptions{ExtraConfig: fmt.Sprintf("max_message_size = %d", limit)})
	s := harness.NewStack(t, harness.StackOptions{AMQPURLs: []string{rabbit.URL()}})
	small, big, _ := quarantineSetup(t, s)
	s.Daemon(t, "scheduler", "scheduler")
	pub := s.DaemonWithHealth(t, "publisher", "publisher", "--poll-interval", "100ms")
	pubAddr := pub.Health
	s.Daemon(t, "worker", "worker", "--concurrency", "16")
	s.WaitRuns(t, "SUCCEEDED", 120*time.Second, small...)
	quarantineAssertIsolated(t, s, pubAddr, big, "the broker refused the message")
	pub.WaitForLog(t, "publishing the unconfirmed rows one at a time", 10*time.Second)
	quarantineAssertClaimedOnceExcept(t, s, big)
}

// Mode 44: a shutdown signal between confirm and stamp.

// TestASigtermBetweenConfirmAndStampKeepsTheStamp arms
// publisher.sigterm-after-confirm: once the broker confirmed the batch the
// publisher sends itself SIGTERM and waits for the signal to cancel its
// context before it stamps. The stamp must commit: the process exits 0
// with the row published once, and a restarted publisher does not publish
// it again (before the fix the cancelled context rolled the stamp back).
func TestASigtermBetweenConfirmAndStampKeepsTheStamp(t *testing.T) {
	s := harness.NewStack(t, harness.StackOptions{})
	db := s.DB(t)
	s.Apply(t, quarantineSmallWorkflow)
	first := outboxPublisher(t, s, "publisher-1", string(failpoint.PublisherSigtermAfterConfirm)+"=1")
	s.Trigger(t, "small")
	code, err := first.Wait(30 * time.Second)
	if err != nil {
		t.Fatalf("the publisher did not stop: %v", err)
	}
	if code != 0 {
		t.Fatalf("publisher exit code %d, want 0 (a graceful stop):\n%s", code, first.Logs())
	}
	if !strings.Contains(first.Logs(), "sigterm-after-confirm fired") {
		t.Fatalf("the failpoint did not fire:\n%s", first.Logs())
	}
	if n := harness.QueryInt(t, db, `SELECT count(*) FROM outbox WHERE published_at IS NOT NULL AND publish_attempts = 1`); n != 1 {
		t.Fatalf("%d rows stamped after the signal, want 1: the stamp was rolled back", n)
	}
	// A restarted publisher publishes a new row, and not the old one again
	// (rows go out oldest first, so the old one would have gone first).
	addr := s.DaemonWithHealth(t, "publisher-2", "publisher").Health
	s.Trigger(t, "small")
	dispatchWaitPublished(t, db, 2)
	if v := harness.Metric(t, addr, "flowforge_publish_total", `outcome="confirmed"`); v != 1 {
		t.Fatalf("the restarted publisher confirmed %v messages, want 1 (only the new row)", v)
	}
	if n := s.Messages(t, s.Queue); n != 2 {
		t.Fatalf("dispatch queue holds %d messages, want 2 (each row once)", n)
	}
}
