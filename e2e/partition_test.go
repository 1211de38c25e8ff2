package e2e

import (
	"fmt"
	"net/url"
	"testing"
	"time"

	"github.com/flowforge/flowforge/core/broker"
	"github.com/flowforge/flowforge/e2e/harness"
)

// TestAWorkerCutFromPostgresOnlyLosesItsTasksToAnotherOnce: mode 133. A
// worker's database connections are black-holed (packets go nowhere, no
// reset: a partition, not a dead server) while its broker connection and
// every other daemon's connections are fine. The worker notices within a
// renewal interval (its renewal times out: "heartbeat failed"); the
// scheduler, which sees no outage itself, reaps its leases after one
// lease; a second worker runs each task once (attempt 2) and the run
// SUCCEEDED. The cut worker's handlers (attempt 1 sleeps two minutes)
// run on while it cannot reach the database (it cannot tell a partition
// from an outage every daemon sees, mode 35); when the partition heals,
// its heartbeats are rejected by the fencing token and both handlers
// cancelled, and nothing it writes lands: no history row of it after its
// claims. The times to detection, to the reap, to the run's end and to
// the cancellations are logged.
func TestAWorkerCutFromPostgresOnlyLosesItsTasksToAnotherOnce(t *testing.T) {
	t.Parallel()
	const lease = 2 * time.Second
	const tasks = 2
	s := harness.NewStack(t, harness.StackOptions{})
	db := s.DB(t)
	s.ControlPlane(t, "--sweep-interval", "200ms")
	wp := outageProxy(t, s)
	cut := outageDaemon(t, s, wp, "worker-cut", "worker", "--id", "cut", "--lease", lease.String(), "--concurrency", "4", "--allow-shell")
	// Attempt 1 (the cut worker's) runs until it is cancelled; attempt 2
	// (the other worker's) ends at once.
	s.Apply(t, `
name: partition
tasks:
  - {name: t1, handler: shell, params: {command: ["sh", "-c", "if [ \"$FLOWFORGE_ATTEMPT\" = 1 ]; then sleep 120; fi"]}, retry: {max_attempts: 3, initial_backoff: 100ms, max_backoff: 100ms}}
  - {name: t2, handler: shell, params: {command: ["sh", "-c", "if [ \"$FLOWFORGE_ATTEMPT\" = 1 ]; then sleep 120; fi"]}, retry: {max_attempts: 3, initial_backoff: 100ms, max_backoff: 100ms}}
`)
	run := s.Trigger(t, "partition")
	outageWaitRunning(t, db, run, tasks)
	outageWaitRenewed(t, db, run, lease*2/15)
	failedBefore := len(recoveryLogs(cut, "worker: heartbeat failed; retrying"))
	wp.SetMode(harness.ProxyBlackhole)
	start := time.Now()
	other := s.Daemon(t, "worker-other", "worker", "--id", "other", "--lease", lease.String(), "--concurrency", "4", "--allow-shell")
	harness.Eventually(t, 2*lease, "the cut worker to notice", func() (bool, error) {
		n := len(recoveryLogs(cut, "worker: heartbeat failed; retrying"))
		return n > failedBefore, fmt.Errorf("%d heartbeat failures logged", n-failedBefore)
	})
	noticed := time.Since(start)
	harness.Eventually(t, 2*lease+5*time.Second, "the cut worker's tasks to be reaped", func() (bool, error) {
		n := harness.QueryInt(t, db, `SELECT count(*) FROM task_events WHERE run_id = $1 AND to_state = 'RETRYING' AND reason LIKE 'lease expired: worker cut stopped renewing it%'`, run)
		return n == tasks, fmt.Errorf("%d of %d reaped", n, tasks)
	})
	reaped := time.Since(start)
	s.WaitRuns(t, "SUCCEEDED", 40*time.Second, run)
	ended := time.Since(start)
	t.Logf("partition: the cut worker noticed after %v, its tasks were reaped after %v, the run SUCCEEDED on the other worker after %v",
		noticed.Round(time.Millisecond), reaped.Round(time.Millisecond), ended.Round(time.Millisecond))
	wp.SetMode(harness.ProxyPass)
	healed := time.Now()
	harness.Eventually(t, 30*time.Second, "the cut worker to cancel both handlers", func() (bool, error) {
		n := len(recoveryLogs(cut, "worker: heartbeat rejected by fencing token: lease lost; cancelling the handler"))
		return n == tasks, fmt.Errorf("%d of %d handlers cancelled", n, tasks)
	})
	t.Logf("partition healed: the cut worker cancelled its handlers %v later", time.Since(healed).Round(time.Millisecond))
	checkFencedOut(t, s, db, run, cut, other, tasks)
}

// TestAPublisherBlackHoledMidConfirmRepublishesAndEachTaskRunsOnce: mode
// 134. The publisher's broker connection goes through a proxy that starts
// black-holing it (no reset: the bytes of the publishes and their
// confirms go nowhere) while five runs are triggered; the scheduler, the
// worker and the database are unaffected. The publisher's batch waits for
// confirms that never come until its confirm timeout (10 s by default,
// broker.ConfirmTimeoutDefault: the bound on the detection), logs the
// connection lost with the rows still pending, and re-dials; once the
// proxy passes again it publishes the rows again and stamps them. Every
// run SUCCEEDED, each task ran once (a copy the broker also got from the
// held bytes loses its claim). The time to detection is logged.
func TestAPublisherBlackHoledMidConfirmRepublishesAndEachTaskRunsOnce(t *testing.T) {
	t.Parallel()
	s := harness.NewStack(t, harness.StackOptions{})
	db := s.DB(t)
	count := t.TempDir() + "/executions"
	s.Apply(t, outboxCountWorkflow("blackholed", count))
	u, err := url.Parse(s.AMQPURLs[0])
	if err != nil {
		t.Fatal(err)
	}
	bp := harness.StartProxy(t, u.Host)
	s.Daemon(t, "scheduler", "scheduler")
	pub := s.DaemonEnv(t, "publisher", "publisher", []string{"FLOWFORGE_AMQP_URL=" + bp.URL(s.AMQPURLs[0])})
	s.Daemon(t, "worker", "worker", "--allow-shell")
	pub.WaitForLog(t, "publisher: started", 30*time.Second)
	warm := s.Trigger(t, "blackholed")
	s.WaitRuns(t, "SUCCEEDED", 30*time.Second, warm)
	bp.SetMode(harness.ProxyBlackhole)
	start := time.Now()
	var runs []string
	for range 5 {
		runs = append(runs, s.Trigger(t, "blackholed"))
	}
	pub.WaitForLog(t, "publisher: broker connection lost; rows stay pending", 30*time.Second)
	detected := time.Since(start)
	if n := harness.QueryInt(t, db, `SELECT count(*) FROM outbox WHERE published_at IS NULL`); n == 0 {
		t.Fatal("no outbox row pending after the publisher lost the broker: a row was stamped without its confirm")
	}
	bp.SetMode(harness.ProxyPass)
	s.WaitRuns(t, "SUCCEEDED", 60*time.Second, runs...)
	t.Logf("black hole: the publisher gave the batch up %v after the cut (confirm timeout %v); every run SUCCEEDED %v after the cut",
		detected.Round(time.Millisecond), broker.ConfirmTimeoutDefault, time.Since(start).Round(time.Millisecond))
	if detected > broker.ConfirmTimeoutDefault+10*time.Second {
		t.Fatalf("the publisher noticed %v after the cut; its confirm timeout is %v", detected, broker.ConfirmTimeoutDefault)
	}
	execs := dispatchExecutions(t, count)
	for _, id := range append(runs, warm) {
		if execs[id] != 1 {
			t.Errorf("run %s: its shell task ran %d times, want 1", id, execs[id])
		}
	}
}
