package e2e

import (
	"context"
	"database/sql"
	"fmt"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/flowforge/flowforge/core/broker"
	"github.com/flowforge/flowforge/e2e/harness"
)

// leaseNoReap fails the test if any task of the run was reaped or retried
// (a RETRYING or DEAD transition, or an attempt past 1).
func leaseNoReap(t *testing.T, db *sql.DB, runID string) error {
	t.Helper()
	if n := harness.QueryInt(t, db, `SELECT count(*) FROM task_events WHERE run_id = $1 AND to_state IN ('RETRYING', 'DEAD')`, runID); n != 0 {
		return fmt.Errorf("%d tasks of run %s were reaped or failed", n, runID)
	}
	if n := harness.QueryInt(t, db, `SELECT count(*) FROM task_runs WHERE run_id = $1 AND attempt > 1`, runID); n != 0 {
		return fmt.Errorf("%d tasks of run %s are past attempt 1", n, runID)
	}
	return nil
}

// leaseHold polls check for d (a fault held for that long, checked the
// whole time) and fails the test as soon as check reports an error.
func leaseHold(t *testing.T, d time.Duration, check func() error) {
	t.Helper()
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		if err := check(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(50 * time.Millisecond) // polling interval of the check
	}
}

// TestHeartbeatKeepsALiveLeasePastThreeLeases: mode 7, the live side. A
// task running 3.5 times its worker's --lease is renewed by the heartbeat
// (the lease expiry moves forward on the database clock) and never reaped:
// no RETRYING transition, attempt 1, one claim.
func TestHeartbeatKeepsALiveLeasePastThreeLeases(t *testing.T) {
	t.Parallel()
	s := harness.NewStack(t, harness.StackOptions{})
	db := s.DB(t)
	s.ControlPlane(t, "--sweep-interval", "200ms")
	s.Daemon(t, "worker", "worker", "--lease", "2s")
	s.Apply(t, `
name: lease-live
tasks:
  - name: long
    handler: sleep
    params: {duration: 7s}
    retry: {max_attempts: 3, initial_backoff: 100ms, max_backoff: 100ms}
`)
	run := s.Trigger(t, "lease-live")
	first := crashWaitTask(t, db, run, "long", 30*time.Second, "RUNNING", func(c crashTask) bool { return c.State == "RUNNING" })
	renewals := 0
	last := first.Lease.Time
	harness.Eventually(t, 30*time.Second, "the run to succeed", func() (bool, error) {
		if err := leaseNoReap(t, db, run); err != nil {
			t.Fatal(err)
		}
		c := crashTaskOf(t, db, run, "long")
		if c.State == "RUNNING" && c.Lease.Valid && c.Lease.Time.After(last) {
			renewals++
			last = c.Lease.Time
		}
		return crashRunState(t, db, run) == "SUCCEEDED", nil
	})
	c := crashTaskOf(t, db, run, "long")
	if c.Attempt != 1 || c.Token != first.Token {
		t.Fatalf("task %+v; want attempt 1 with the claim's token %d", c, first.Token)
	}
	if n := crashClaims(t, db, c.ID); n != 1 {
		t.Fatalf("claims = %d, want 1", n)
	}
	if renewals < 5 {
		t.Fatalf("the lease was seen renewed %d times over 7s with a 2s lease; want at least 5", renewals)
	}
}

// TestFrozenWorkerThawedAfterReapHasItsWritesRejected: modes 7 and 23. A
// worker is frozen with SIGSTOP past its lease; the reaper retries the task
// and another worker completes it. Thawed with SIGCONT, the frozen worker's
// heartbeat and finish are rejected by the fencing token, logged and
// counted on its /metrics, and the retry's outcome stands. The frozen worker
// was made to hold a second, unclaimed delivery (concurrency 1), so the
// retry cannot be handed to it while it is frozen; that delivery is run
// after the thaw, so nothing is lost either.
func TestFrozenWorkerThawedAfterReapHasItsWritesRejected(t *testing.T) {
	t.Parallel()
	s := harness.NewStack(t, harness.StackOptions{})
	db := s.DB(t)
	s.ControlPlane(t, "--sweep-interval", "200ms")
	port := harness.FreePort(t)
	frozen := s.Daemon(t, "worker-frozen", "worker", "--id", "frozen", "--lease", "1s", "--allow-shell",
		"--concurrency", "1", "--slot-wait", "1m", "--health-addr", fmt.Sprintf("127.0.0.1:%d", port))
	s.Apply(t, `
name: lease-freeze
tasks:
  - name: long
    handler: shell
    params: {command: ["sh", "-c", "if [ \"$FLOWFORGE_ATTEMPT\" = 1 ]; then sleep 30; else sleep 4; fi; echo done by attempt $FLOWFORGE_ATTEMPT"]}
    retry: {max_attempts: 3, initial_backoff: 100ms, max_backoff: 100ms}
`)
	s.Apply(t, "name: lease-filler\ntasks:\n  - {name: filler, handler: noop}\n")
	run := s.Trigger(t, "lease-freeze")
	claimed := crashWaitTask(t, db, run, "long", 30*time.Second, "RUNNING on the frozen worker", func(c crashTask) bool {
		return c.State == "RUNNING" && c.Worker.String == "frozen"
	})
	filler := s.Trigger(t, "lease-filler")
	bcfg := broker.Config{URLs: s.AMQPURLs, Queue: s.Queue}
	harness.Eventually(t, 30*time.Second, "the frozen worker to hold the filler delivery", func() (bool, error) {
		if n := harness.QueryInt(t, db, `SELECT count(*) FROM outbox o JOIN task_runs t ON t.id = o.task_run_id
		                          WHERE t.run_id = $1 AND o.published_at IS NOT NULL`, filler); n != 1 {
			return false, fmt.Errorf("filler not published yet")
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		ready, _, err := broker.QueueDepth(ctx, bcfg)
		return err == nil && ready == 0, err
	})
	if err := frozen.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	thawed := false
	t.Cleanup(func() {
		if !thawed {
			_ = frozen.Signal(syscall.SIGCONT)
		}
	})
	crashWaitTask(t, db, run, "long", 20*time.Second, "reaped", func(c crashTask) bool { return c.Token > claimed.Token })
	s.Daemon(t, "worker-rescuer", "worker", "--id", "rescuer", "--lease", "1s", "--allow-shell")
	// Thaw while the rescuer's attempt 2 is RUNNING (it sleeps 4 s): the
	// frozen worker's writes are then refused by the fencing token, not by
	// the state.
	rescue := crashWaitTask(t, db, run, "long", 30*time.Second, "RUNNING on the rescuer", func(c crashTask) bool {
		return c.State == "RUNNING" && c.Worker.String == "rescuer"
	})
	if err := frozen.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	thawed = true
	thawedAt := time.Now()
	frozen.WaitForLog(t, "heartbeat rejected", 20*time.Second)
	frozen.WaitForLog(t, "stale finish rejected", 20*time.Second)
	// Its handler (sleep 30, started before the freeze) still had well over
	// ten seconds to go: finishing this soon means the rejected heartbeat
	// cancelled it.
	if d := time.Since(thawedAt); d > 8*time.Second {
		t.Fatalf("the thawed worker finished %s after SIGCONT: its handler was not cancelled by the lost lease", d)
	}
	if mid := crashTaskOf(t, db, run, "long"); mid.State == "RUNNING" && (mid.Worker.String != "rescuer" || mid.Token != rescue.Token) {
		t.Fatalf("the thawed worker's writes changed the running attempt: %+v, was %+v", mid, rescue)
	}
	s.WaitRuns(t, "SUCCEEDED", 30*time.Second, run)
	won := crashTaskOf(t, db, run, "long")
	if won.Worker.String != "rescuer" || won.Attempt != 2 || won.Token != rescue.Token || !strings.Contains(won.Result.String, "done by attempt 2") {
		t.Fatalf("task %+v; want SUCCEEDED by the rescuer on attempt 2", won)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	harness.Eventually(t, 10*time.Second, "the stale writes to be counted", func() (bool, error) {
		renew := harness.Metric(t, addr, "flowforge_stale_writes_rejected_total", `op="renew"`)
		finish := harness.Metric(t, addr, "flowforge_stale_writes_rejected_total", `op="finish"`)
		return renew == 1 && finish == 1, fmt.Errorf("renew=%v finish=%v", renew, finish)
	})
	after := crashTaskOf(t, db, run, "long")
	if after.State != "SUCCEEDED" || after.Worker.String != "rescuer" || after.Token != won.Token || after.Result.String != won.Result.String {
		t.Fatalf("the thawed worker changed the task: %+v, was %+v", after, won)
	}
	s.WaitRuns(t, "SUCCEEDED", 30*time.Second, filler)
	if f := crashTaskOf(t, db, filler, "filler"); f.Worker.String != "frozen" {
		t.Logf("filler ran on %s", f.Worker.String)
	}
}

// TestStalledDatabaseCallsDoNotStarveHeartbeats: mode 27. Every slot of a
// worker is stuck inside the database for three leases: its tasks' calls
// (the idempotency-key claim before the handler, or the finish after it)
// wait on a lock the test holds on idempotency_keys. The heartbeats renew
// through the worker's separate pool and keep running while the finish is
// stuck, so no lease lapses: nothing is reaped, every task succeeds on its
// first attempt. The worker's main pool is cut to one connection per slot,
// so the stall exhausts it: without the renewals' own pool every lease
// would lapse.
func TestStalledDatabaseCallsDoNotStarveHeartbeats(t *testing.T) {
	t.Parallel()
	const tasks = 6
	var wf strings.Builder
	wf.WriteString("name: lease-pool\ntasks:\n")
	for i := 1; i <= tasks; i++ {
		fmt.Fprintf(&wf, "  - name: t%d\n    handler: sleep\n    params: {duration: 1500ms}\n    idempotency_key: \"t%d-{{ .Params.n }}\"\n    retry: {max_attempts: 3, initial_backoff: 100ms, max_backoff: 100ms}\n", i, i)
	}
	cases := []struct {
		name string
		// stuck is the statement the slots must be waiting in, and
		// stuckWant how many of them: every slot for the key claims (one
		// statement per slot), one for the finishes, which the worker
		// records in batches of one statement at a time (issue 14): the
		// other attempts queue behind it in the worker, their heartbeats
		// renewing all the while.
		stuck     string
		stuckWant int
		// lockFirst takes the lock before the trigger (the key claims
		// stall); otherwise once every task owns its key (the finishes
		// stall).
		lockFirst bool
	}{
		{"key claims stall", "%INSERT INTO idempotency_keys%", tasks, true},
		{"finishes stall", "%fin AS (%", 1, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := harness.NewStack(t, harness.StackOptions{})
			db := s.DB(t)
			s.ControlPlane(t, "--sweep-interval", "200ms")
			const lease = 1500 * time.Millisecond
			// The main pool holds exactly one connection per slot, so the
			// stall exhausts it: only the renewals' own pool keeps leases.
			s.Daemon(t, "worker", "worker", "--concurrency", strconv.Itoa(tasks), "--lease", lease.String(), "--db-max-conns", strconv.Itoa(tasks))
			s.Apply(t, wf.String())
			lockDB := s.DB(t)
			var tx *sql.Tx
			lock := func() {
				var err error
				if tx, err = lockDB.Begin(); err != nil {
					t.Fatal(err)
				}
				if _, err := tx.Exec(`LOCK TABLE idempotency_keys IN ACCESS EXCLUSIVE MODE`); err != nil {
					t.Fatal(err)
				}
			}
			if tc.lockFirst {
				lock()
			}
			run := s.Trigger(t, "lease-pool", "n=1")
			if !tc.lockFirst {
				harness.Eventually(t, 30*time.Second, "every task to own its key", func() (bool, error) {
					n := harness.QueryInt(t, db, `SELECT count(*) FROM idempotency_keys k JOIN task_runs t
					                        ON t.id = k.task_run_id AND t.fencing_token = k.fencing_token
					                       WHERE t.run_id = $1 AND t.state = 'RUNNING'`, run)
					return n == tasks, fmt.Errorf("%d own their key", n)
				})
				lock()
			}
			stuck := func() int {
				return harness.QueryInt(t, db, `SELECT count(*) FROM pg_stat_activity
				                         WHERE datname = current_database() AND application_name = current_setting('application_name')
				                           AND wait_event_type = 'Lock' AND query LIKE $1`, tc.stuck)
			}
			harness.Eventually(t, 30*time.Second, "the slots to be stuck in the database", func() (bool, error) {
				return stuck() == tc.stuckWant, fmt.Errorf("%d stuck, want %d", stuck(), tc.stuckWant)
			})
			var before time.Time
			if err := db.QueryRow(`SELECT max(lease_expires_at) FROM task_runs WHERE run_id = $1`, run).Scan(&before); err != nil {
				t.Fatal(err)
			}
			leaseHold(t, 3*lease, func() error {
				if err := leaseNoReap(t, db, run); err != nil {
					return err
				}
				if n := harness.QueryInt(t, db, `SELECT count(*) FROM task_runs WHERE run_id = $1 AND state <> 'RUNNING'`, run); n != 0 {
					return fmt.Errorf("%d tasks left RUNNING while stuck", n)
				}
				return nil
			})
			if n := stuck(); n != tc.stuckWant {
				t.Fatalf("%d statements were still stuck at the end of the stall, want %d", n, tc.stuckWant)
			}
			// Every lease was renewed past its value at the start of the stall.
			if n := harness.QueryInt(t, db, `SELECT count(*) FROM task_runs WHERE run_id = $1 AND lease_expires_at <= $2`, run, before); n != 0 {
				t.Fatalf("%d leases were not renewed during the stall", n)
			}
			if err := tx.Rollback(); err != nil {
				t.Fatal(err)
			}
			s.WaitRuns(t, "SUCCEEDED", 30*time.Second, run)
			if err := leaseNoReap(t, db, run); err != nil {
				t.Fatal(err)
			}
			if n := harness.QueryInt(t, db, `SELECT count(*) FROM task_events WHERE run_id = $1 AND reason = 'claimed'`, run); n != tasks {
				t.Fatalf("claims = %d, want %d", n, tasks)
			}
		})
	}
}
