package e2e

import (
	"database/sql"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/flowforge/flowforge/e2e/harness"
)

// outageProxy starts a fault-injecting proxy in front of the stack's
// database.
func outageProxy(t *testing.T, s *harness.Stack) *harness.Proxy {
	t.Helper()
	u, err := url.Parse(s.DatabaseURL)
	if err != nil {
		t.Fatal(err)
	}
	return harness.StartProxy(t, u.Host)
}

// outageDaemon starts `ffctl daemon ROLE args...` with its database URL
// pointed at p.
func outageDaemon(t *testing.T, s *harness.Stack, p *harness.Proxy, name, role string, args ...string) *harness.Process {
	t.Helper()
	return s.DaemonEnv(t, name, role, []string{"FLOWFORGE_DATABASE_URL=" + p.URL(s.DatabaseURL)}, args...)
}

// outageWorkflow is n tasks that each run the sleep handler for d.
func outageWorkflow(name string, n int, d time.Duration, maxAttempts int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "name: %s\ntasks:\n", name)
	for i := 1; i <= n; i++ {
		fmt.Fprintf(&b, "  - name: t%d\n    handler: sleep\n    params: {duration: %s}\n    retry: {max_attempts: %d, initial_backoff: 100ms, max_backoff: 100ms}\n", i, d, maxAttempts)
	}
	return b.String()
}

// outageWaitRunning waits until n tasks of the run are RUNNING.
func outageWaitRunning(t *testing.T, db *sql.DB, run string, n int) {
	t.Helper()
	harness.Eventually(t, 60*time.Second, "every task to be RUNNING", func() (bool, error) {
		got := harness.QueryInt(t, db, `SELECT count(*) FROM task_runs WHERE run_id = $1 AND state = 'RUNNING'`, run)
		return got == n, fmt.Errorf("%d of %d RUNNING", got, n)
	})
}

// outageWaitRenewed waits until every RUNNING task of the run was last
// renewed (or claimed) at least age ago on the database clock, so that an
// outage that starts now and lasts lease-age lets every lease lapse.
func outageWaitRenewed(t *testing.T, db *sql.DB, run string, age time.Duration) {
	t.Helper()
	harness.Eventually(t, 20*time.Second, "the renewals to age", func() (bool, error) {
		var ms float64
		if err := db.QueryRow(`SELECT coalesce(min(extract(epoch FROM now() - heartbeat_at)), 0) * 1000
		                         FROM task_runs WHERE run_id = $1 AND state = 'RUNNING'`, run).Scan(&ms); err != nil {
			return false, err
		}
		got := time.Duration(ms * float64(time.Millisecond))
		return got >= age, fmt.Errorf("youngest renewal %v old", got)
	})
}

// TestADatabaseBlipShorterThanALeaseReapsNothing: mode 35. With a 2 s
// lease, every daemon loses PostgreSQL (connections reset, or black-holed)
// for 0.9 of a lease, started at least 0.4 of a renewal interval after the
// last renewal so that every lease lapses during it, and in another case
// for 2.5 leases: no task is reaped and no handler runs twice, because a failed renewal is retried as soon as
// the database answers and the scheduler, having seen the outage itself,
// grants one lease of grace after it. A worker cut off alone (its own
// connections reset for 3 leases while the scheduler's are fine) is still
// reaped after its lease; with eight tasks in flight, each is given its
// attempt back as a crash suspect (mode 128), never refunded for an
// outage.
func TestADatabaseBlipShorterThanALeaseReapsNothing(t *testing.T) {
	t.Parallel()
	const lease = 2 * time.Second
	const tasks = 8
	cases := []struct {
		name string
		// sched and worker are what the scheduler's and the worker's
		// connections suffer: one outage reaches each daemon its own way
		// (a reset, or packets that go nowhere).
		sched, worker harness.ProxyMode
		outage        time.Duration
	}{
		{"scheduler black-holed, worker reset, 0.9 lease", harness.ProxyBlackhole, harness.ProxyReset, 1800 * time.Millisecond},
		{"every daemon reset, 0.9 lease", harness.ProxyReset, harness.ProxyReset, 1800 * time.Millisecond},
		{"every daemon black-holed, 0.9 lease", harness.ProxyBlackhole, harness.ProxyBlackhole, 1800 * time.Millisecond},
		{"scheduler black-holed, worker reset, 2.5 leases", harness.ProxyBlackhole, harness.ProxyReset, 5 * time.Second},
		{"the worker alone, reset, 3 leases", harness.ProxyPass, harness.ProxyReset, 6 * time.Second},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			workerOnly := tc.sched == harness.ProxyPass
			s := harness.NewStack(t, harness.StackOptions{})
			db := s.DB(t)
			ctl, wp := outageProxy(t, s), outageProxy(t, s)
			outageDaemon(t, s, ctl, "scheduler", "scheduler", "--sweep-interval", "200ms")
			outageDaemon(t, s, ctl, "publisher", "publisher")
			w := outageDaemon(t, s, wp, "worker", "worker", "--lease", lease.String(), "--concurrency", strconv.Itoa(tasks))
			sleep := 3*time.Second + tc.outage
			s.Apply(t, outageWorkflow("blip", tasks, sleep, 3))
			run := s.Trigger(t, "blip")
			outageWaitRunning(t, db, run, tasks)
			// Start the outage well after the last renewal (renewals run every
			// lease/3), so that even the 0.9-lease outage outlives every lease.
			outageWaitRenewed(t, db, run, lease*2/15)
			ctl.SetMode(tc.sched)
			wp.SetMode(tc.worker)
			start := time.Now()
			if workerOnly {
				// Cut off alone, the worker may be dead: its leases are
				// reaped after one lease.
				harness.Eventually(t, 2*lease+2*time.Second, "the cut-off worker's tasks to be reaped", func() (bool, error) {
					n := harness.QueryInt(t, db, `SELECT count(*) FROM task_events WHERE run_id = $1 AND to_state = 'RETRYING' AND reason LIKE 'lease expired: worker % stopped renewing it%'`, run)
					return n == tasks, fmt.Errorf("%d of %d reaped", n, tasks)
				})
				t.Logf("reaped %v after the worker was cut off", time.Since(start).Round(time.Millisecond))
				// No outage refund (mode 35): the scheduler saw none. The
				// attempts are given back for another reason: the worker
				// had eight tasks in flight, and which one stopped it is
				// not known (crash attribution, mode 128).
				if n := harness.QueryInt(t, db, `SELECT count(*) FROM task_events WHERE run_id = $1 AND reason LIKE 'lease expired during a database outage%'`, run); n != 0 {
					t.Fatalf("%d attempts were refunded for an outage although the scheduler saw none", n)
				}
				if n := harness.QueryInt(t, db, `SELECT count(*) FROM task_events WHERE run_id = $1 AND to_state = 'RETRYING' AND reason LIKE '%given back: reaped with 7 other tasks of worker %'`, run); n != tasks {
					t.Fatalf("%d of %d reaps gave the attempt back as reaped with 7 other tasks (mode 128)", n, tasks)
				}
				wp.SetMode(harness.ProxyPass)
				w.WaitForLog(t, "heartbeat rejected by fencing token", 20*time.Second)
				return
			}
			leaseHold(t, tc.outage, func() error { return nil })
			ctl.SetMode(harness.ProxyPass)
			wp.SetMode(harness.ProxyPass)
			harness.Eventually(t, sleep+30*time.Second, "the run to succeed", func() (bool, error) {
				if err := leaseNoReap(t, db, run); err != nil {
					t.Fatal(err)
				}
				st := crashRunState(t, db, run)
				return st == "SUCCEEDED", fmt.Errorf("run is %s", st)
			})
			if n := harness.QueryInt(t, db, `SELECT count(*) FROM task_events WHERE run_id = $1 AND reason = 'claimed'`, run); n != tasks {
				t.Fatalf("claims = %d, want %d: a handler ran twice", n, tasks)
			}
		})
	}
}

// TestALongerDatabaseOutageNeverBuriesATaskOnItsLastAttempt: mode 35.
// PostgreSQL is lost by every daemon for 3 leases while a max_attempts 1
// task runs, and its worker dies during the outage. The lease lapsed while
// the database was unreachable, so the reap does not use up the attempt:
// the task is retried (max_attempts raised to 2, the cause recorded) and a
// new worker completes it, instead of it going DEAD because of the
// database.
func TestALongerDatabaseOutageNeverBuriesATaskOnItsLastAttempt(t *testing.T) {
	t.Parallel()
	const lease = 2 * time.Second
	s := harness.NewStack(t, harness.StackOptions{})
	db := s.DB(t)
	ctl, wp := outageProxy(t, s), outageProxy(t, s)
	outageDaemon(t, s, ctl, "scheduler", "scheduler", "--sweep-interval", "200ms")
	outageDaemon(t, s, ctl, "publisher", "publisher")
	first := outageDaemon(t, s, wp, "worker-1", "worker", "--id", "first", "--lease", lease.String(), "--allow-shell")
	s.Apply(t, `
name: last-attempt
tasks:
  - name: once
    handler: shell
    params: {command: ["sh", "-c", "if [ \"$FLOWFORGE_ATTEMPT\" = 1 ]; then sleep 60; fi; echo done by attempt $FLOWFORGE_ATTEMPT"]}
    retry: {max_attempts: 1}
`)
	run := s.Trigger(t, "last-attempt")
	crashWaitTask(t, db, run, "once", 30*time.Second, "RUNNING on the first worker", func(c crashTask) bool {
		return c.State == "RUNNING" && c.Worker.String == "first"
	})
	ctl.SetMode(harness.ProxyReset)
	wp.SetMode(harness.ProxyReset)
	first.Kill()
	leaseHold(t, 3*lease, func() error { return nil })
	ctl.SetMode(harness.ProxyPass)
	wp.SetMode(harness.ProxyPass)
	s.Daemon(t, "worker-2", "worker", "--id", "second", "--lease", lease.String(), "--allow-shell")
	harness.Eventually(t, 60*time.Second, "the run to settle", func() (bool, error) {
		st := crashRunState(t, db, run)
		if st == "FAILED" {
			c := crashTaskOf(t, db, run, "once")
			t.Fatalf("the run FAILED: task %s attempt %d error %q: buried because of the database", c.State, c.Attempt, c.Error.String)
		}
		return st == "SUCCEEDED", fmt.Errorf("run is %s", st)
	})
	c := crashTaskOf(t, db, run, "once")
	if c.Worker.String != "second" || c.Attempt != 2 || !strings.Contains(c.Result.String, "done by attempt 2") {
		t.Fatalf("task %+v; want SUCCEEDED by the second worker on attempt 2", c)
	}
	if n := harness.QueryInt(t, db, `SELECT count(*) FROM task_events WHERE task_run_id = $1 AND to_state = 'RETRYING' AND reason LIKE 'lease expired during a database outage%'`, c.ID); n != 1 {
		t.Fatalf("%d reaps recorded as caused by the outage, want 1", n)
	}
	if n := harness.QueryInt(t, db, `SELECT max_attempts FROM task_runs WHERE id = $1`, c.ID); n != 2 {
		t.Fatalf("max_attempts = %d, want 2 (the lost attempt refunded)", n)
	}
}

// TestALeaseQueuedBehindATableLockIsNeitherStaleNorBackwards: mode 36. A
// test transaction holds an ACCESS EXCLUSIVE lock on task_runs (what a
// migration takes) while tasks run with a 2 s lease: first for 0.9 of a
// lease while the worker's claims queue behind it, then for 1.5 and 3
// leases while its renewals do. Claims and renewals wait at most a quarter
// lease for the lock and fail (lock_timeout) instead of committing late,
// are retried, and once the lock is released commit a lease measured from
// their write: no lease is written already spent or moves backwards,
// nothing is reaped, every task runs once.
func TestALeaseQueuedBehindATableLockIsNeitherStaleNorBackwards(t *testing.T) {
	t.Parallel()
	const lease = 2 * time.Second
	const tasks = 8
	holds := []time.Duration{3 * lease / 2, 3 * lease}
	s := harness.NewStack(t, harness.StackOptions{})
	db := s.DB(t)
	lockDB := s.DB(t)
	s.ControlPlane(t, "--sweep-interval", "200ms")
	s.Apply(t, outageWorkflow("locked", tasks, 5*time.Second+holds[0]+holds[1]+2*time.Second, 3))
	run := s.Trigger(t, "locked")
	harness.Eventually(t, 30*time.Second, "every dispatch to be published", func() (bool, error) {
		n := harness.QueryInt(t, db, `SELECT count(*) FROM outbox o JOIN task_runs t ON t.id = o.task_run_id
		                       WHERE t.run_id = $1 AND o.published_at IS NOT NULL`, run)
		return n == tasks, fmt.Errorf("%d of %d published", n, tasks)
	})
	lock := func() *sql.Tx {
		tx, err := lockDB.Begin()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tx.Exec(`LOCK TABLE task_runs IN ACCESS EXCLUSIVE MODE`); err != nil {
			t.Fatal(err)
		}
		return tx
	}
	unlock := func(tx *sql.Tx) {
		if err := tx.Rollback(); err != nil {
			t.Fatal(err)
		}
	}
	// Claims queued behind the lock.
	tx := lock()
	w := s.Daemon(t, "worker", "worker", "--lease", lease.String(), "--concurrency", strconv.Itoa(tasks))
	harness.Eventually(t, 30*time.Second, "claims to wait for the lock", func() (bool, error) {
		n := harness.QueryInt(t, db, `SELECT count(*) FROM pg_stat_activity
		                       WHERE datname = current_database() AND wait_event_type = 'Lock' AND query LIKE '%WITH claimed AS%'`)
		return n > 0, fmt.Errorf("%d claims waiting", n)
	})
	leaseHold(t, lease*9/10, func() error { return nil })
	unlock(tx)
	outageWaitRunning(t, db, run, tasks)
	if err := leaseNoReap(t, db, run); err != nil {
		t.Fatal(err)
	}
	seen := map[string]time.Time{}
	monotonic := func() error {
		rows, err := db.Query(`SELECT id::text, lease_expires_at FROM task_runs WHERE run_id = $1 AND state = 'RUNNING'`, run)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var id string
			var at time.Time
			if err := rows.Scan(&id, &at); err != nil {
				return err
			}
			if prev, ok := seen[id]; ok && at.Before(prev) {
				return fmt.Errorf("the lease of task %s moved backwards: %v -> %v", id, prev, at)
			}
			seen[id] = at
		}
		return rows.Err()
	}
	leaseHold(t, lease, func() error {
		if err := leaseNoReap(t, db, run); err != nil {
			return fmt.Errorf("after the claims waited for the lock: %w", err)
		}
		return monotonic()
	})
	// Renewals queued behind the lock.
	for _, hold := range holds {
		tx := lock()
		leaseHold(t, hold, func() error { return nil })
		unlock(tx)
		leaseHold(t, 2*lease, func() error {
			if err := leaseNoReap(t, db, run); err != nil {
				return fmt.Errorf("after a %v lock: %w", hold, err)
			}
			return monotonic()
		})
	}
	harness.Eventually(t, 60*time.Second, "the run to succeed", func() (bool, error) {
		if err := leaseNoReap(t, db, run); err != nil {
			t.Fatal(err)
		}
		st := crashRunState(t, db, run)
		return st == "SUCCEEDED", fmt.Errorf("run is %s", st)
	})
	if n := harness.QueryInt(t, db, `SELECT count(*) FROM task_events WHERE run_id = $1 AND reason = 'claimed'`, run); n != tasks {
		t.Fatalf("claims = %d, want %d", n, tasks)
	}
	bounded := 0
	for _, line := range strings.Split(w.Logs(), "\n") {
		if strings.Contains(line, "heartbeat failed") && strings.Contains(line, "lock timeout") {
			bounded++
		}
	}
	if bounded == 0 {
		t.Fatal("no renewal gave up waiting for the lock: renewals wait unbounded behind a lock")
	}
}

// TestALostClaimReplyIsReadBackAndTheTaskRuns: mode 38. The reply to the
// COMMIT of a claim is lost (the claim committed; the worker's connection
// then breaks). The worker reads the row back, finds the task RUNNING under
// its own id with the token the claim made, and runs it: a max_attempts 1
// task succeeds on attempt 1 instead of going DEAD with "stopped renewing
// it" although its handler never ran.
func TestALostClaimReplyIsReadBackAndTheTaskRuns(t *testing.T) {
	t.Parallel()
	s := harness.NewStack(t, harness.StackOptions{})
	db := s.DB(t)
	s.ControlPlane(t, "--sweep-interval", "200ms")
	wp := outageProxy(t, s)
	port := harness.FreePort(t)
	w := outageDaemon(t, s, wp, "worker", "worker", "--id", "lossy", "--lease", "2s", "--health-addr", fmt.Sprintf("127.0.0.1:%d", port))
	s.Apply(t, "name: lost-claim\ntasks:\n  - {name: once, handler: sleep, params: {duration: 300ms}, retry: {max_attempts: 1}}\n")
	wp.DropCommitReply("WITH claimed AS")
	run := s.Trigger(t, "lost-claim")
	harness.Eventually(t, 30*time.Second, "the claim's reply to be lost", func() (bool, error) { return wp.Fired(), nil })
	crashWaitTask(t, db, run, "once", 10*time.Second, "RUNNING (the claim committed)", func(c crashTask) bool {
		return c.State == "RUNNING" && c.Worker.String == "lossy"
	})
	wp.ResetConns()
	s.WaitRuns(t, "SUCCEEDED", 30*time.Second, run)
	c := crashTaskOf(t, db, run, "once")
	if c.Attempt != 1 || c.Worker.String != "lossy" {
		t.Fatalf("task %+v; want SUCCEEDED on attempt 1 by the worker whose claim reply was lost", c)
	}
	if n := crashClaims(t, db, c.ID); n != 1 {
		t.Fatalf("claims = %d, want 1", n)
	}
	w.WaitForLog(t, "the claim committed although its reply was lost", 10*time.Second)
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	if v := harness.Metric(t, addr, "flowforge_ambiguous_writes_total", `op="claim"`, `outcome="committed"`); v != 1 {
		t.Fatalf("ambiguous committed claims counted = %v, want 1", v)
	}
}

// TestALostFinishReplyIsReportedAsFinishedNotAsAFencingRejection: mode 38.
// The reply to a committed finish is lost; the worker's retry matches
// nothing. The worker reads the row back (it left RUNNING with this
// attempt's token and worker), reports the task finished, and neither logs
// nor counts a stale-write (fencing) rejection.
func TestALostFinishReplyIsReportedAsFinishedNotAsAFencingRejection(t *testing.T) {
	t.Parallel()
	s := harness.NewStack(t, harness.StackOptions{})
	db := s.DB(t)
	s.ControlPlane(t, "--sweep-interval", "200ms")
	wp := outageProxy(t, s)
	port := harness.FreePort(t)
	w := outageDaemon(t, s, wp, "worker", "worker", "--id", "lossy", "--lease", "2s", "--health-addr", fmt.Sprintf("127.0.0.1:%d", port))
	s.Apply(t, "name: lost-finish\ntasks:\n  - {name: once, handler: sleep, params: {duration: 300ms}, retry: {max_attempts: 1}}\n")
	wp.DropCommitReply("fin AS (")
	run := s.Trigger(t, "lost-finish")
	harness.Eventually(t, 30*time.Second, "the finish's reply to be lost", func() (bool, error) { return wp.Fired(), nil })
	s.WaitRuns(t, "SUCCEEDED", 10*time.Second, run)
	wp.ResetConns()
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	harness.Eventually(t, 20*time.Second, "the worker to report the finish", func() (bool, error) {
		done := harness.Metric(t, addr, "flowforge_tasks_finished_total", `state="SUCCEEDED"`)
		stale := harness.Metric(t, addr, "flowforge_stale_writes_rejected_total", `op="finish"`)
		return done+stale > 0, fmt.Errorf("finished %v, stale %v", done, stale)
	})
	if v := harness.Metric(t, addr, "flowforge_stale_writes_rejected_total", `op="finish"`); v != 0 {
		t.Fatalf("stale finishes counted = %v, want 0: a committed finish was reported as a fencing rejection", v)
	}
	if v := harness.Metric(t, addr, "flowforge_tasks_finished_total", `state="SUCCEEDED"`); v != 1 {
		t.Fatalf("finished SUCCEEDED counted = %v, want 1", v)
	}
	if strings.Contains(w.Logs(), "stale finish rejected") {
		t.Fatal("the worker logged a committed finish as a stale finish rejected by fencing token")
	}
	w.WaitForLog(t, "the finish committed although its reply was lost", 10*time.Second)
	if c := crashTaskOf(t, db, run, "once"); c.Attempt != 1 {
		t.Fatalf("task %+v; want attempt 1", c)
	}
}
