package e2e

import (
	"database/sql"
	"fmt"
	"net/url"
	"testing"
	"time"

	"github.com/flowforge/flowforge/core/broker"
	"github.com/flowforge/flowforge/e2e/harness"
)

// Partitions made with network namespaces (modes 135-137): the daemon
// under test runs in a namespace of its own (harness.Netns), reaching the
// servers through a router namespace whose blackhole rules drop its
// packets silently, as a real partition does — no reset, no ICMP error,
// a connect that times out. The path that stays up goes through a harness
// proxy on the same host address (in pass mode: it only carries bytes to
// the shared server), the cut one straight to a private server listening
// on that address.

// netnsHost returns the host:port of rawURL.
func netnsHost(t *testing.T, rawURL string) string {
	t.Helper()
	u, err := url.Parse(rawURL)
	if err != nil {
		t.Fatal(err)
	}
	return u.Host
}

// netnsLogAt waits up to timeout for p to log msg at or after since, by
// the log line's own time, and returns that time.
func netnsLogAt(t *testing.T, p *harness.Process, msg string, since time.Time, timeout time.Duration) time.Time {
	t.Helper()
	var at time.Time
	harness.Eventually(t, timeout, fmt.Sprintf("%s to log %q", p.Name, msg), func() (bool, error) {
		for _, l := range recoveryLogs(p, msg) {
			ts, err := time.Parse(time.RFC3339Nano, l.str("time"))
			if err == nil && !ts.Before(since) {
				at = ts
				return true, nil
			}
		}
		return false, nil
	})
	return at
}

// netnsMs rounds d for the logs.
func netnsMs(d time.Duration) time.Duration { return d.Round(time.Millisecond) }

// TestANamespacedWorkerCutFromPostgresLosesItsTasksToAnotherOnce: mode
// 135. A worker in a network namespace reaches a private PostgreSQL
// straight on the host's address and RabbitMQ through a proxy on the same
// address; its two shell tasks' first attempts sleep two minutes. The
// router black-holes the PostgreSQL port only (both ways). The worker
// notices at its next renewal (the renewal's deadline, lease/3); the
// scheduler reaps both leases after one lease; another worker runs each
// task once (attempt 2), the run SUCCEEDED. The server notices too: with
// tcp_keepalives 2 s + 2 x 1 s and tcp_user_timeout 5 s it ends the cut
// worker's sessions (pg_stat_activity has none from its address). After
// the heal the cut worker's renewals reach the server and are rejected by
// the fencing token: both handlers cancelled, and no history row written
// by it after its claims. Each time is logged and bounded.
func TestANamespacedWorkerCutFromPostgresLosesItsTasksToAnotherOnce(t *testing.T) {
	t.Parallel()
	const lease = 2 * time.Second
	const tasks = 2
	ns := harness.NewNetns(t)
	pg := harness.StartPostgresWith(t, harness.PostgresOptions{Listen: []string{ns.HostAddr},
		Settings: []string{"tcp_keepalives_idle=2", "tcp_keepalives_interval=1", "tcp_keepalives_count=2", "tcp_user_timeout=5000"}})
	s := harness.NewStack(t, harness.StackOptions{DatabaseURL: pg.CreateDatabase(t, "flowforge")})
	db := s.DB(t)
	bp := harness.StartProxyOn(t, ns.HostAddr, netnsHost(t, s.AMQPURLs[0]))
	s.ControlPlane(t, "--sweep-interval", "200ms")
	cut := s.DaemonIn(t, ns, "worker-cut", "worker",
		[]string{"FLOWFORGE_DATABASE_URL=" + ns.URL(s.DatabaseURL), "FLOWFORGE_AMQP_URL=" + bp.URL(s.AMQPURLs[0])},
		"--id", "cut", "--lease", lease.String(), "--concurrency", "4", "--allow-shell")
	s.Apply(t, `
name: nspartition
tasks:
  - {name: t1, handler: shell, params: {command: ["sh", "-c", "if [ \"$FLOWFORGE_ATTEMPT\" = 1 ]; then sleep 120; fi"]}, retry: {max_attempts: 3, initial_backoff: 100ms, max_backoff: 100ms}}
  - {name: t2, handler: shell, params: {command: ["sh", "-c", "if [ \"$FLOWFORGE_ATTEMPT\" = 1 ]; then sleep 120; fi"]}, retry: {max_attempts: 3, initial_backoff: 100ms, max_backoff: 100ms}}
`)
	run := s.Trigger(t, "nspartition")
	outageWaitRunning(t, db, run, tasks)
	outageWaitRenewed(t, db, run, lease*2/15)
	sessions := `SELECT count(*) FROM pg_stat_activity WHERE client_addr = '` + ns.Addr + `'::inet`
	if n := harness.QueryInt(t, db, sessions); n == 0 {
		t.Fatalf("no session of the cut worker from %s before the cut", ns.Addr)
	}
	ns.Cut(t, pg.Port)
	cutAt := time.Now()
	other := s.Daemon(t, "worker-other", "worker", "--id", "other", "--lease", lease.String(), "--concurrency", "4", "--allow-shell")
	noticed := netnsLogAt(t, cut, "worker: heartbeat failed; retrying", cutAt, 2*lease).Sub(cutAt)
	harness.Eventually(t, 2*lease+5*time.Second, "the cut worker's tasks to be reaped", func() (bool, error) {
		n := harness.QueryInt(t, db, `SELECT count(*) FROM task_events WHERE run_id = $1 AND to_state = 'RETRYING' AND reason LIKE 'lease expired: worker cut stopped renewing it%'`, run)
		return n == tasks, fmt.Errorf("%d of %d reaped", n, tasks)
	})
	reaped := time.Since(cutAt)
	harness.Eventually(t, 20*time.Second, "the server to end the cut worker's sessions", func() (bool, error) {
		n := harness.QueryInt(t, db, sessions)
		return n == 0, fmt.Errorf("%d sessions from %s", n, ns.Addr)
	})
	serverNoticed := time.Since(cutAt)
	s.WaitRuns(t, "SUCCEEDED", 40*time.Second, run)
	ended := time.Since(cutAt)
	ns.Heal(t)
	healed := time.Now()
	harness.Eventually(t, 30*time.Second, "the cut worker to cancel both handlers", func() (bool, error) {
		n := len(recoveryLogs(cut, "worker: heartbeat rejected by fencing token: lease lost; cancelling the handler"))
		return n == tasks, fmt.Errorf("%d of %d handlers cancelled", n, tasks)
	})
	cancelled := time.Since(healed)
	// Each time the cut worker took a retry's dispatch while cut, it held
	// it for its claim's deadline (a lease), a read-back (up to a lease)
	// and a second before it requeued it.
	held := len(recoveryLogs(cut, "worker: claim failed and could not be read back; requeueing the delivery")) +
		len(recoveryLogs(cut, "worker: claim failed; requeueing the delivery"))
	t.Logf("netns partition from PostgreSQL (lease %v): the worker noticed after %v, its tasks were reaped after %v, the server ended its sessions after %v, the run SUCCEEDED on the other worker after %v (the cut worker took and held a retry's dispatch %d times); healed: both handlers cancelled %v later",
		lease, netnsMs(noticed), netnsMs(reaped), netnsMs(serverNoticed), netnsMs(ended), held, netnsMs(cancelled))
	if noticed > 2*lease/3+2*time.Second {
		t.Errorf("the worker noticed %v after the cut; a renewal every %v with a deadline of as much bounds it at %v", noticed, lease/3, 2*lease/3)
	}
	if serverNoticed > 5*time.Second+10*time.Second {
		t.Errorf("the server ended the sessions %v after the cut; keepalives (4 s) and tcp_user_timeout (5 s) bound it", serverNoticed)
	}
	checkFencedOut(t, s, db, run, cut, other, tasks)
}

// checkFencedOut checks the end of a partition of cut from the database
// (modes 133 and 135): nothing cut wrote after its claims landed, other
// ran each task's second attempt once, every task SUCCEEDED on attempt 2,
// and cut still runs.
func checkFencedOut(t *testing.T, s *harness.Stack, db *sql.DB, run string, cut, other *harness.Process, tasks int) {
	t.Helper()
	if n := harness.QueryInt(t, db, `SELECT count(*) FROM task_events WHERE run_id = $1 AND actor = 'cut' AND to_state <> 'RUNNING'`, run); n != 0 {
		t.Fatalf("%d history rows written by the cut worker after its claims: a fenced write landed", n)
	}
	byOther := 0
	for _, l := range recoveryLogs(other, "worker: running task") {
		if fmt.Sprint(l["attempt"]) == "2" {
			byOther++
		}
	}
	if byOther != tasks {
		t.Fatalf("the other worker ran %d attempt-2 tasks, want %d (each task once elsewhere)", byOther, tasks)
	}
	for _, task := range s.ShowRun(t, run).Tasks {
		if task.State != "SUCCEEDED" || task.Attempt != 2 {
			t.Errorf("task %s: %s attempt %d, want SUCCEEDED on attempt 2", task.Name, task.State, task.Attempt)
		}
	}
	if cut.Exited() {
		t.Fatalf("the cut worker exited:\n%s", cut.Logs())
	}
}

// TestANamespacedPublisherCutFromTheBrokerMidConfirmLosesNothing: mode
// 136. A publisher in a network namespace reaches a private RabbitMQ
// straight on the host's address and PostgreSQL through a proxy; the
// router black-holes the broker's port (both ways) and five runs are
// triggered: their batch is published into the black hole and waits for
// confirms that never come. The publisher gives the batch up after its
// confirm timeout (10 s; the AMQP heartbeat, 10 s, would drop the
// connection after 15 s of silence at the latest), the rows stay pending;
// after the heal it re-dials and publishes them; every run SUCCEEDED, each
// task ran once (a copy TCP delivered late loses its claim). The times to
// detection and to recovery are logged and bounded.
func TestANamespacedPublisherCutFromTheBrokerMidConfirmLosesNothing(t *testing.T) {
	t.Parallel()
	ns := harness.NewNetns(t)
	rabbit := harness.StartRabbit(t, harness.RabbitOptions{Listen: []string{ns.HostAddr}})
	s := harness.NewStack(t, harness.StackOptions{AMQPURLs: []string{rabbit.URL()}})
	db := s.DB(t)
	dp := harness.StartProxyOn(t, ns.HostAddr, netnsHost(t, s.DatabaseURL))
	count := t.TempDir() + "/executions"
	s.Apply(t, outboxCountWorkflow("nspublisher", count))
	s.Daemon(t, "scheduler", "scheduler")
	s.Daemon(t, "worker", "worker", "--allow-shell")
	pub := s.DaemonIn(t, ns, "publisher", "publisher",
		[]string{"FLOWFORGE_DATABASE_URL=" + dp.URL(s.DatabaseURL), "FLOWFORGE_AMQP_URL=" + ns.URL(rabbit.URL())})
	pub.WaitForLog(t, "publisher: started", 30*time.Second)
	warm := s.Trigger(t, "nspublisher")
	s.WaitRuns(t, "SUCCEEDED", 30*time.Second, warm)
	ns.Cut(t, rabbit.Port)
	cutAt := time.Now()
	var runs []string
	for range 5 {
		runs = append(runs, s.Trigger(t, "nspublisher"))
	}
	detected := netnsLogAt(t, pub, "publisher: broker connection lost; rows stay pending", cutAt, 30*time.Second).Sub(cutAt)
	if n := harness.QueryInt(t, db, `SELECT count(*) FROM outbox WHERE published_at IS NULL`); n == 0 {
		t.Fatal("no outbox row pending after the publisher lost the broker: a row was stamped without its confirm")
	}
	ns.Heal(t)
	healed := time.Now()
	s.WaitRuns(t, "SUCCEEDED", 60*time.Second, runs...)
	settled := time.Since(healed)
	redialled := netnsLogAt(t, pub, "publisher: recovered", healed, 30*time.Second).Sub(healed)
	t.Logf("netns partition from RabbitMQ mid-confirm: the publisher gave the batch up %v after the cut (confirm timeout %v, heartbeat %v); healed: re-dialled %v later, every run SUCCEEDED %v later",
		netnsMs(detected), broker.ConfirmTimeoutDefault, broker.HeartbeatDefault, netnsMs(redialled), netnsMs(settled))
	if detected > broker.ConfirmTimeoutDefault+10*time.Second {
		t.Errorf("the publisher noticed %v after the cut; its confirm timeout is %v", detected, broker.ConfirmTimeoutDefault)
	}
	execs := dispatchExecutions(t, count)
	for _, id := range append(runs, warm) {
		if execs[id] != 1 {
			t.Errorf("run %s: its shell task ran %d times, want 1", id, execs[id])
		}
	}
}

// TestANamespacedWorkersBlackHoledBrokerConnectionIsDroppedByHeartbeats:
// mode 137. A worker in a network namespace (--concurrency 2,
// --amqp-heartbeat 2s) reaches a private RabbitMQ straight on the host's
// address and PostgreSQL through a proxy. It runs two of a run's four
// shell tasks (sleeping 12 s there: acked at their claim) and holds the
// other two deliveries unacknowledged, waiting for a slot. The router
// black-holes the broker's port (both ways). The worker notices by its
// heartbeat (nothing read for 1.5 intervals) and re-dials; the broker
// notices by its own (about 2 intervals) and requeues the two deliveries,
// which a second worker runs. The two running tasks are untouched (their
// leases are renewed through PostgreSQL) and finish on the cut worker;
// after the heal it re-dials. Every task ran once, on attempt 1, and the
// run SUCCEEDED. Both detection times and the recovery are logged and
// bounded.
func TestANamespacedWorkersBlackHoledBrokerConnectionIsDroppedByHeartbeats(t *testing.T) {
	t.Parallel()
	const heartbeat = 2 * time.Second
	ns := harness.NewNetns(t)
	rabbit := harness.StartRabbit(t, harness.RabbitOptions{Listen: []string{ns.HostAddr}})
	s := harness.NewStack(t, harness.StackOptions{AMQPURLs: []string{rabbit.URL()}})
	db := s.DB(t)
	dp := harness.StartProxyOn(t, ns.HostAddr, netnsHost(t, s.DatabaseURL))
	shellQueue, _ := broker.HandlerQueue(s.Queue, "shell")
	count := t.TempDir() + "/executions"
	task := `{handler: shell, params: {command: ["sh", "-c", "echo $FLOWFORGE_TASK_NAME >> ` + count + `; sleep ${NSHOLD:-0}"]}}`
	s.Apply(t, "name: nsbroker\ntasks:\n  - {name: a, "+task[1:]+"\n  - {name: b, "+task[1:]+"\n  - {name: c, "+task[1:]+"\n  - {name: d, "+task[1:]+"\n")
	s.ControlPlane(t)
	cut := s.DaemonIn(t, ns, "worker-cut", "worker",
		[]string{"FLOWFORGE_DATABASE_URL=" + dp.URL(s.DatabaseURL), "FLOWFORGE_AMQP_URL=" + ns.URL(rabbit.URL()), "NSHOLD=12"},
		"--id", "cut", "--concurrency", "2", "--allow-shell", "--shell-env-pass", "NSHOLD", "--amqp-heartbeat", heartbeat.String())
	cut.WaitForLog(t, "worker: started", 30*time.Second)
	run := s.Trigger(t, "nsbroker")
	outageWaitRunning(t, db, run, 2)
	harness.Eventually(t, 20*time.Second, "the cut worker to hold the other two deliveries", func() (bool, error) {
		pending := harness.QueryInt(t, db, `SELECT count(*) FROM outbox WHERE published_at IS NULL`)
		ready, consumers, err := s.QueueDepth(shellQueue)
		return err == nil && pending == 0 && ready == 0 && consumers == 1, fmt.Errorf("%d rows pending, %d ready, %d consumers, %v", pending, ready, consumers, err)
	})
	ns.Cut(t, rabbit.Port)
	cutAt := time.Now()
	noticed := netnsLogAt(t, cut, "worker: broker connection lost; reconnecting", cutAt, 6*heartbeat).Sub(cutAt)
	harness.Eventually(t, 6*heartbeat, "the broker to requeue the two deliveries", func() (bool, error) {
		ready, consumers, err := s.QueueDepth(shellQueue)
		return err == nil && ready == 2 && consumers == 0, fmt.Errorf("%d ready, %d consumers, %v", ready, consumers, err)
	})
	requeued := time.Since(cutAt)
	other := s.Daemon(t, "worker-other", "worker", "--id", "other", "--allow-shell")
	harness.Eventually(t, 20*time.Second, "the other worker to run the requeued tasks", func() (bool, error) {
		n := len(recoveryLogs(other, "worker: running task"))
		return n == 2, fmt.Errorf("%d tasks run", n)
	})
	ns.Heal(t)
	healed := time.Now()
	redialled := netnsLogAt(t, cut, "worker: recovered", healed, 30*time.Second).Sub(healed)
	s.WaitRuns(t, "SUCCEEDED", 30*time.Second, run)
	t.Logf("netns partition of a worker from RabbitMQ (heartbeat %v): the worker dropped the connection %v after the cut, the broker requeued its two unacknowledged deliveries %v after it; healed: re-dialled %v later",
		heartbeat, netnsMs(noticed), netnsMs(requeued), netnsMs(redialled))
	if noticed > 3*heartbeat/2+2*time.Second {
		t.Errorf("the worker noticed %v after the cut; reading nothing for 1.5 heartbeats (%v) bounds it", noticed, 3*heartbeat/2)
	}
	if requeued > 3*heartbeat+2*time.Second {
		t.Errorf("the broker requeued %v after the cut; its heartbeat timeout (about 2 x %v) bounds it", requeued, heartbeat)
	}
	netnsCheckOnceEach(t, s, run, count, cut, other)
	// The two deliveries it held waited in the cut worker for a slot: once
	// its tasks finished they lost their claims (the other worker's
	// attempts came first) and their acks failed on the dead channel.
	harness.Eventually(t, 10*time.Second, "the cut worker's stale deliveries to lose their claims", func() (bool, error) {
		n := len(recoveryLogs(cut, "worker: claim lost; acking without running"))
		return n == 2, fmt.Errorf("%d claims lost", n)
	})
}

// netnsCheckOnceEach checks that every task of run ran once (the count
// file holds one line per execution), on attempt 1, two on each worker.
func netnsCheckOnceEach(t *testing.T, s *harness.Stack, run, count string, cut, other *harness.Process) {
	t.Helper()
	execs := dispatchExecutions(t, count)
	for _, task := range s.ShowRun(t, run).Tasks {
		if execs[task.Name] != 1 || task.State != "SUCCEEDED" || task.Attempt != 1 {
			t.Errorf("task %s: ran %d times, %s on attempt %d; want once, SUCCEEDED on attempt 1", task.Name, execs[task.Name], task.State, task.Attempt)
		}
	}
	if n := len(recoveryLogs(cut, "worker: running task")); n != 2 {
		t.Errorf("the cut worker ran %d tasks, want the 2 it had claimed before the cut", n)
	}
	if n := len(recoveryLogs(other, "worker: running task")); n != 2 {
		t.Errorf("the other worker ran %d tasks, want the 2 requeued", n)
	}
}
