package e2e

import (
	"database/sql"
	"slices"
	"testing"
	"time"

	"github.com/flowforge/flowforge/e2e/harness"
)

// cancelPromptBound is how soon a running handler must stop after its run
// is cancelled (or its fail_fast run fails): far below the Lease/3 = 10 s a
// heartbeat takes with the default 30 s lease.
const cancelPromptBound = 2 * time.Second

// cancelFinishedAfter is, on the database clock, how long after the
// instant at (a SQL expression over workflow_runs r) the task's finish
// committed.
func cancelFinishedAfter(t *testing.T, db *sql.DB, taskID, at string) time.Duration {
	t.Helper()
	var ms float64
	if err := db.QueryRow(`SELECT extract(epoch FROM t.finished_at - `+at+`) * 1000
	                         FROM task_runs t JOIN workflow_runs r ON r.id = t.run_id WHERE t.id = $1`, taskID).Scan(&ms); err != nil {
		t.Fatalf("read finish of task %s: %v", taskID, err)
	}
	return time.Duration(ms * float64(time.Millisecond))
}

// TestRunCancelStopsARunningHandlerPromptly: mode 47. With the default 30 s
// lease (heartbeats every 10 s), `ffctl run cancel` of a run whose task is
// sleeping stops the handler through the worker's LISTEN on the cancel
// channel, not at the next heartbeat: each task ends CANCELLED well within
// cancelPromptBound of the cancel. Three runs are cancelled one after the
// other; the test logs each latency (the cancel's commit to the task's
// CANCELLED finish, on the database clock, and `run cancel` started to
// CANCELLED seen, on the test's clock) and the median.
func TestRunCancelStopsARunningHandlerPromptly(t *testing.T) {
	t.Parallel()
	s := harness.NewStack(t, harness.StackOptions{})
	db := s.DB(t)
	s.ControlPlane(t, "--sweep-interval", "200ms")
	w := s.Daemon(t, "worker", "worker", "--concurrency", "3", "--lease", "30s")
	s.Apply(t, `
name: cancel-prompt
tasks:
  - {name: long, handler: sleep, params: {duration: 120s}}
`)
	const rounds = 3
	runs := make([]string, rounds)
	for i := range runs {
		runs[i] = s.Trigger(t, "cancel-prompt")
	}
	for _, run := range runs {
		crashWaitTask(t, db, run, "long", 30*time.Second, "RUNNING", func(c crashTask) bool { return c.State == "RUNNING" })
	}
	var dbLat, wallLat []time.Duration
	for _, run := range runs {
		start := time.Now()
		s.MustCLI(t, "run", "cancel", run, "--reason", "latency probe")
		c := crashWaitTask(t, db, run, "long", 30*time.Second, "stopped", func(c crashTask) bool { return c.State != "RUNNING" })
		wall := time.Since(start)
		if c.State != "CANCELLED" {
			t.Fatalf("run %s: long is %+v, want CANCELLED", run, c)
		}
		d := cancelFinishedAfter(t, db, c.ID, "r.cancel_requested_at")
		t.Logf("run %s: cancel committed -> task CANCELLED in %v (database clock); run cancel started -> CANCELLED seen in %v", run, d, wall)
		if d > cancelPromptBound || wall > cancelPromptBound+time.Second {
			t.Fatalf("run %s: the running handler stopped %v after the cancel committed (%v after run cancel started); want under %v: it waited for a heartbeat", run, d, wall, cancelPromptBound)
		}
		dbLat, wallLat = append(dbLat, d), append(wallLat, wall)
	}
	slices.Sort(dbLat)
	slices.Sort(wallLat)
	t.Logf("median over %d cancels: %v (database clock, commit -> CANCELLED), %v (run cancel started -> CANCELLED seen)", rounds, dbLat[rounds/2], wallLat[rounds/2])
	w.WaitForLog(t, "cancel notification; checking the run's running tasks", 10*time.Second)
}

// TestFailFastStopsARunningSiblingPromptly: mode 47, fail_fast. With the
// default 30 s lease, a task that goes DEAD in a fail_fast run stops its
// running sibling within cancelPromptBound (the scheduler's pass that fails
// the run notifies the cancel channel), not at the sibling's next
// heartbeat 10 s later.
func TestFailFastStopsARunningSiblingPromptly(t *testing.T) {
	t.Parallel()
	s := harness.NewStack(t, harness.StackOptions{})
	db := s.DB(t)
	s.ControlPlane(t, "--sweep-interval", "200ms")
	w := s.Daemon(t, "worker", "worker", "--concurrency", "2", "--lease", "30s")
	s.Apply(t, `
name: failfast-prompt
fail_fast: true
tasks:
  - {name: long, handler: sleep, params: {duration: 120s}}
  - {name: gate, handler: sleep, params: {duration: 1s}}
  - {name: doomed, handler: fail, params: {permanent: true, message: cannot work}, depends_on: [gate]}
`)
	run := s.Trigger(t, "failfast-prompt")
	crashWaitTask(t, db, run, "long", 30*time.Second, "RUNNING", func(c crashTask) bool { return c.State == "RUNNING" })
	doomed := crashWaitTask(t, db, run, "doomed", 30*time.Second, "DEAD", func(c crashTask) bool { return c.State == "DEAD" })
	long := crashWaitTask(t, db, run, "long", 30*time.Second, "stopped", func(c crashTask) bool { return c.State != "RUNNING" })
	if long.State != "CANCELLED" {
		t.Fatalf("long is %+v, want CANCELLED", long)
	}
	var d time.Duration
	{
		var ms float64
		if err := db.QueryRow(`SELECT extract(epoch FROM l.finished_at - d.finished_at) * 1000
		                         FROM task_runs l, task_runs d WHERE l.id = $1 AND d.id = $2`, long.ID, doomed.ID).Scan(&ms); err != nil {
			t.Fatal(err)
		}
		d = time.Duration(ms * float64(time.Millisecond))
	}
	t.Logf("doomed DEAD -> long CANCELLED in %v (database clock)", d)
	if d > cancelPromptBound {
		t.Fatalf("the running sibling stopped %v after its fail_fast run failed; want under %v: it waited for a heartbeat", d, cancelPromptBound)
	}
	// The notification, not a heartbeat that happened to come due (the
	// bound above is a margin of time, this is the mechanism).
	w.WaitForLog(t, "cancel notification; checking the run's running tasks", 10*time.Second)
}
