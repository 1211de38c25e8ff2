package e2e

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/flowforge/flowforge/daemon/failpoint"
	"github.com/flowforge/flowforge/e2e/harness"
)

// outboxCountWorkflow is a workflow whose root counts its executions in
// path and whose second task depends on it.
func outboxCountWorkflow(name, path string) string {
	return "name: " + name + "\ntasks:\n" +
		"  - {name: a, handler: shell, params: {command: " + dispatchCountCommand(path) + "}}\n" +
		"  - {name: b, handler: noop, depends_on: [a]}\n"
}

// outboxPublisher starts a publisher process with FLOWFORGE_FAILPOINTS set.
func outboxPublisher(t *testing.T, s *harness.Stack, name, failpoints string, args ...string) *harness.Process {
	t.Helper()
	return s.DaemonEnv(t, name, "publisher", []string{failpoint.EnvVar + "=" + failpoints}, args...)
}

// Mode 5: broker outage.

// TestBrokerOutageLeavesRowsPendingThenDrainsOnce stops a private RabbitMQ
// under a running stack (an orderly stop: the abrupt kill of a broker is
// mode 17's subject), triggers runs while it is down, and starts it
// again: the rows wait in the outbox (nothing is lost while the publisher
// cannot connect), then drain, each row stamped once, each task run once.
func TestBrokerOutageLeavesRowsPendingThenDrainsOnce(t *testing.T) {
	rabbit := harness.StartRabbit(t, harness.RabbitOptions{})
	s := harness.NewStack(t, harness.StackOptions{AMQPURLs: []string{rabbit.URL()}})
	db := s.DB(t)
	count := filepath.Join(t.TempDir(), "executions")
	s.Apply(t, outboxCountWorkflow("outage", count))
	s.Daemon(t, "scheduler", "scheduler")
	pub := s.Daemon(t, "publisher", "publisher")
	s.Daemon(t, "worker", "worker", "--allow-shell")
	pub.WaitForLog(t, "publisher: started", 30*time.Second)

	rabbit.Stop(t)
	ids := dispatchTriggerMany(t, s, "outage", 5)
	pub.WaitForLog(t, "publisher: connect to broker", 30*time.Second)
	// The publisher has failed at least one dial since the rows were
	// written; they are all still pending.
	if n := harness.QueryInt(t, db, `SELECT count(*) FROM outbox WHERE published_at IS NULL`); n != 5 {
		t.Fatalf("%d rows pending during the outage, want 5", n)
	}
	if n := harness.QueryInt(t, db, `SELECT count(*) FROM task_runs WHERE state <> 'READY' AND task_name = 'a'`); n != 0 {
		t.Fatalf("%d root tasks left READY during the outage", n)
	}

	rabbit.Start(t)
	s.WaitRuns(t, "SUCCEEDED", 90*time.Second, ids...)
	pub.WaitForLog(t, "publisher: recovered", 10*time.Second)
	if n := harness.QueryInt(t, db, `SELECT count(*) FROM outbox WHERE published_at IS NULL`); n != 0 {
		t.Fatalf("%d rows still pending", n)
	}
	// One row per task (nothing was re-dispatched), each stamped.
	if n := harness.QueryInt(t, db, `SELECT count(*) FROM (SELECT task_run_id FROM outbox GROUP BY task_run_id HAVING count(*) <> 1) x`); n != 0 {
		t.Fatalf("%d tasks have more than one outbox row", n)
	}
	dispatchAssertClaimedOnce(t, db)
	ex := dispatchExecutions(t, count)
	for _, id := range ids {
		if ex[id] != 1 {
			t.Errorf("run %s: handler ran %d times, want 1", id, ex[id])
		}
	}
}

// TestTwoPublishersPublishEachRowOnce runs two publisher processes over one
// outbox while 30 runs (150 rows) are triggered concurrently. SKIP LOCKED
// divides the rows: the publishers' confirmed publishes add up to exactly
// the number of rows, no worker ever sees a duplicate dispatch, and every
// task is claimed once.
func TestTwoPublishersPublishEachRowOnce(t *testing.T) {
	s := harness.NewStack(t, harness.StackOptions{})
	db := s.DB(t)
	s.Apply(t, `
name: fan
tasks:
  - {name: a, handler: noop}
  - {name: b, handler: noop, depends_on: [a]}
  - {name: c, handler: noop, depends_on: [a]}
  - {name: d, handler: noop, depends_on: [a]}
  - {name: e, handler: noop, depends_on: [b, c, d]}
`)
	s.Daemon(t, "scheduler", "scheduler")
	var pubs, workers []string
	for i := range 2 {
		pubs = append(pubs, s.DaemonWithHealth(t, fmt.Sprintf("publisher-%d", i), "publisher", "--poll-interval", "50ms").Health)
	}
	for i := range 2 {
		workers = append(workers, s.DaemonWithHealth(t, fmt.Sprintf("worker-%d", i), "worker", "--concurrency", "8").Health)
	}
	ids := dispatchTriggerMany(t, s, "fan", 30)
	s.WaitRuns(t, "SUCCEEDED", 60*time.Second, ids...)

	rows := harness.QueryInt(t, db, `SELECT count(*) FROM outbox`)
	if rows != 150 {
		t.Fatalf("%d outbox rows, want 150", rows)
	}
	if n := harness.QueryInt(t, db, `SELECT count(*) FROM outbox WHERE published_at IS NULL OR publish_attempts <> 1`); n != 0 {
		t.Fatalf("%d rows unpublished or published more than once", n)
	}
	confirmed := 0.0
	for _, a := range pubs {
		v := harness.Metric(t, a, "flowforge_publish_total", `outcome="confirmed"`)
		t.Logf("publisher %s confirmed %v rows", a, v)
		if v == 0 {
			t.Fatalf("publisher %s published nothing: the test did not make the two publishers compete", a)
		}
		confirmed += v
	}
	if confirmed != float64(rows) {
		t.Fatalf("the publishers confirmed %v messages for %d rows", confirmed, rows)
	}
	for _, a := range workers {
		if v := harness.Metric(t, a, "flowforge_claims_lost_total"); v != 0 {
			t.Fatalf("worker %s lost %v claims: a row was delivered twice", a, v)
		}
	}
	dispatchAssertClaimedOnce(t, db)
}

// Modes 5 and 24: an unroutable publish.

// TestADeletedDispatchQueueUnderARunningPublisherLosesNothing deletes the
// dispatch queue while a publisher runs and no worker is up. The broker
// returns the mandatory publish (and acks it): the row is not stamped.
// The publisher re-dials, re-declaring the queue, and publishes the row
// again; a worker started afterwards runs the task once.
func TestADeletedDispatchQueueUnderARunningPublisherLosesNothing(t *testing.T) {
	s := harness.NewStack(t, harness.StackOptions{})
	db := s.DB(t)
	count := filepath.Join(t.TempDir(), "executions")
	s.Apply(t, outboxCountWorkflow("unroutable", count))
	s.Daemon(t, "scheduler", "scheduler")
	pub := s.DaemonWithHealth(t, "publisher", "publisher", "--poll-interval", "100ms")
	pubAddr := pub.Health
	pub.WaitForLog(t, "publisher: started", 30*time.Second)

	ch := s.BrokerChannel(t)
	if _, err := ch.QueueDelete(s.Queue, false, false, false); err != nil {
		t.Fatal(err)
	}
	id := s.Trigger(t, "unroutable")
	// Each of the publisher's lanes (--batches-in-flight) that publishes
	// the row before one of them has re-declared the queue gets it back.
	harness.WaitMetricAtLeast(t, pubAddr, 1, "flowforge_publish_total", `outcome="returned"`)
	pub.WaitForLog(t, "re-declare the dispatch queue", 10*time.Second)
	dispatchWaitPublished(t, db, 1)
	if n := harness.QueryInt(t, db, `SELECT publish_attempts FROM outbox`); n < 2 {
		t.Fatalf("publish_attempts = %d, want >= 2: the returned publish must not have stamped the row", n)
	}
	if v := harness.Metric(t, pubAddr, "flowforge_publish_total", `outcome="confirmed"`); v != 1 {
		t.Fatalf("confirmed publishes = %v, want 1", v)
	}
	if n := s.Messages(t, s.Queue); n != 1 {
		t.Fatalf("re-declared dispatch queue holds %d messages, want 1", n)
	}
	s.Daemon(t, "worker", "worker", "--allow-shell")
	r := s.WaitRunTerminal(t, id, 30*time.Second)
	if r.State != "SUCCEEDED" {
		t.Fatalf("run: %s", r.State)
	}
	if got := dispatchExecutions(t, count)[id]; got != 1 {
		t.Fatalf("handler ran %d times, want 1", got)
	}
}

// Modes 9 and 25: a confirm that never reaches the outbox.

// outboxAssertDuplicateIsHarmless starts the rest of the stack once the
// dispatch sits twice in the queue and checks that the task runs once.
func outboxAssertDuplicateIsHarmless(t *testing.T, s *harness.Stack, id, count string) {
	t.Helper()
	db := s.DB(t)
	if n := s.Messages(t, s.Queue); n != 2 {
		t.Fatalf("dispatch queue holds %d messages, want 2 (the first publish was delivered too)", n)
	}
	s.Daemon(t, "scheduler", "scheduler")
	addr := s.DaemonWithHealth(t, "worker", "worker", "--allow-shell").Health
	r := s.WaitRunTerminal(t, id, 30*time.Second)
	if r.State != "SUCCEEDED" {
		t.Fatalf("run: %s", r.State)
	}
	harness.WaitMetric(t, addr, 1, "flowforge_claims_lost_total", `reason="duplicate"`)
	if got := dispatchExecutions(t, count)[id]; got != 1 {
		t.Fatalf("handler ran %d times, want 1", got)
	}
	dispatchAssertClaimedOnce(t, db)
}

// TestALostPublisherConfirmIsRepublishedAndTheDuplicateIsHarmless arms
// publisher.discard-confirms=1 on a real publisher process: the first batch
// reaches the queue but its confirm is dropped, so the row stays pending
// ("confirm lost"); the next cycle publishes it again and stamps it. The
// task then runs once: the second copy loses its claim.
func TestALostPublisherConfirmIsRepublishedAndTheDuplicateIsHarmless(t *testing.T) {
	s := harness.NewStack(t, harness.StackOptions{})
	db := s.DB(t)
	count := filepath.Join(t.TempDir(), "executions")
	s.Apply(t, outboxCountWorkflow("lostconfirm", count))
	pub := outboxPublisher(t, s, "publisher", string(failpoint.PublisherDiscardConfirms)+"=1", "--poll-interval", "200ms")
	id := s.Trigger(t, "lostconfirm")
	pub.WaitForLog(t, "failpoint discards the confirms", 30*time.Second)
	dispatchWaitPublished(t, db, 1)
	if n := harness.QueryInt(t, db, `SELECT publish_attempts FROM outbox`); n != 2 {
		t.Fatalf("publish_attempts = %d, want 2 (confirm lost, then confirmed)", n)
	}
	if !strings.Contains(pub.Logs(), "confirm lost") {
		t.Fatalf("the publisher did not record the lost confirm:\n%s", pub.Logs())
	}
	outboxAssertDuplicateIsHarmless(t, s, id, count)
}

// TestAPublisherKilledBetweenConfirmAndStampIsRepublished arms
// publisher.exit-after-confirm=1: the publisher process exits (status 3)
// after the broker confirmed the batch and before it stamped the rows, so
// its transaction dies with it. The row is still pending; a fresh publisher
// process publishes it again and stamps it, and the task runs once.
func TestAPublisherKilledBetweenConfirmAndStampIsRepublished(t *testing.T) {
	s := harness.NewStack(t, harness.StackOptions{})
	db := s.DB(t)
	count := filepath.Join(t.TempDir(), "executions")
	s.Apply(t, outboxCountWorkflow("diesbeforestamp", count))
	first := outboxPublisher(t, s, "publisher-1", string(failpoint.PublisherExitAfterConfirm)+"=1")
	id := s.Trigger(t, "diesbeforestamp")
	code, err := first.Wait(30 * time.Second)
	if err != nil {
		t.Fatalf("the publisher did not exit: %v", err)
	}
	if code != failpoint.ExitCode {
		t.Fatalf("publisher exit code %d, want %d:\n%s", code, failpoint.ExitCode, first.Logs())
	}
	if n := harness.QueryInt(t, db, `SELECT count(*) FROM outbox WHERE published_at IS NULL AND publish_attempts = 0`); n != 1 {
		t.Fatalf("%d untouched pending rows after the crash, want 1", n)
	}
	if n := s.Messages(t, s.Queue); n != 1 {
		t.Fatalf("dispatch queue holds %d messages, want 1 (confirmed before the crash)", n)
	}
	s.Daemon(t, "publisher-2", "publisher")
	dispatchWaitPublished(t, db, 1)
	if n := harness.QueryInt(t, db, `SELECT publish_attempts FROM outbox`); n != 1 {
		t.Fatalf("publish_attempts = %d, want 1 (the crashed attempt left no trace)", n)
	}
	outboxAssertDuplicateIsHarmless(t, s, id, count)
}

// Mode 6: transaction boundaries.

// outboxReadyWithoutRow counts READY tasks that have no outbox row for
// their current fencing token: a lost dispatch.
func outboxReadyWithoutRow(t *testing.T, s *harness.Stack) int {
	t.Helper()
	return harness.QueryInt(t, s.DB(t), `
SELECT count(*) FROM task_runs t
 WHERE t.state = 'READY'
   AND NOT EXISTS (SELECT 1 FROM outbox o WHERE o.task_run_id = t.id AND o.fencing_token_snapshot = t.fencing_token)`)
}

// TestKilledSchedulersNeverLeaveAReadyTaskWithoutItsOutboxRow SIGKILLs the
// scheduler process again and again while 20 runs of a wide DAG advance.
// Each kill lands while it is promoting (it is killed as soon as the number
// of promotions grows). After every kill, every READY task has an outbox
// row for its current fencing token (promotion and outbox row are one
// transaction); a last scheduler then finishes every run with each task
// dispatched and claimed exactly once.
func TestKilledSchedulersNeverLeaveAReadyTaskWithoutItsOutboxRow(t *testing.T) {
	s := harness.NewStack(t, harness.StackOptions{})
	db := s.DB(t)
	s.Apply(t, `
name: wide
tasks:
  - {name: a, handler: noop}
  - {name: b1, handler: noop, depends_on: [a]}
  - {name: b2, handler: noop, depends_on: [a]}
  - {name: b3, handler: noop, depends_on: [a]}
  - {name: b4, handler: noop, depends_on: [a]}
  - {name: b5, handler: noop, depends_on: [a]}
  - {name: b6, handler: noop, depends_on: [a]}
  - {name: c, handler: noop, depends_on: [b1, b2, b3, b4, b5, b6]}
  - {name: d1, handler: noop, depends_on: [c]}
  - {name: d2, handler: noop, depends_on: [c]}
  - {name: e, handler: noop, depends_on: [d1, d2]}
`)
	s.Daemon(t, "publisher", "publisher")
	s.Daemon(t, "worker-a", "worker", "--concurrency", "8")
	s.Daemon(t, "worker-b", "worker", "--concurrency", "8")
	ids := dispatchTriggerMany(t, s, "wide", 20)
	promotions := func() int {
		return harness.QueryInt(t, db, `SELECT count(*) FROM task_events WHERE to_state = 'READY' AND from_state = 'PENDING'`)
	}
	kills := 0
	for i := 0; i < 8; i++ {
		before := promotions()
		if before == 20*10 {
			break // everything promoted already
		}
		p := s.Daemon(t, fmt.Sprintf("scheduler-%d", i), "scheduler")
		harness.Eventually(t, 30*time.Second, "the scheduler to promote something", func() (bool, error) {
			return promotions() > before, nil
		})
		p.Kill()
		kills++
		if n := outboxReadyWithoutRow(t, s); n != 0 {
			t.Fatalf("after kill %d: %d READY tasks have no outbox row for their token", kills, n)
		}
	}
	t.Logf("killed the scheduler %d times; %d of %d promotions done before the last one", kills, promotions(), 20*10)
	s.Daemon(t, "scheduler-last", "scheduler")
	s.WaitRuns(t, "SUCCEEDED", 60*time.Second, ids...)
	if n := outboxReadyWithoutRow(t, s); n != 0 {
		t.Fatalf("%d READY tasks have no outbox row", n)
	}
	if n := harness.QueryInt(t, db, `SELECT count(*) FROM (SELECT task_run_id FROM outbox GROUP BY task_run_id HAVING count(*) <> 1) x`); n != 0 {
		t.Fatalf("%d tasks were dispatched more than once", n)
	}
	if n := harness.QueryInt(t, db, `SELECT count(*) FROM outbox`); n != 20*11 {
		t.Fatalf("%d outbox rows, want %d", n, 20*11)
	}
	dispatchAssertClaimedOnce(t, db)
}
