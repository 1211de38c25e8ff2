package scheduler

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/flowforge/flowforge/core"
	"github.com/flowforge/flowforge/core/store/storetest"
)

// TestTasksTheSchedulerMakesDeadAreCountedDead: flowforge_tasks_finished_total
// {state="DEAD"}, the DEAD alert's and dashboard's series, counts the tasks
// the scheduler itself makes DEAD: a reaped last attempt and a wait_for
// timed out on its last attempt (found by a new user's trial: only the
// worker counted DEAD, so neither moved it).
func TestTasksTheSchedulerMakesDeadAreCountedDead(t *testing.T) {
	r := newPassRig(t, nil)
	storetest.Apply(t, r.st, "name: once\ntasks:\n  - {name: a, handler: noop, retry: {max_attempts: 1}}\n")
	storetest.Apply(t, r.st, "name: waiter\ntasks:\n  - {name: w, wait_for: {event: never, timeout: 1s, on_timeout: fail}, retry: {max_attempts: 1}}\n")
	dead := func() float64 {
		return testutil.ToFloat64(r.metrics.TasksFinished.WithLabelValues(string(core.TaskDead)))
	}
	run := storetest.Trigger(t, r.st, "once", "")
	c := r.claim(run, "a", 300*time.Millisecond)
	r.waitFor("the lease to lapse", 10*time.Second, func() bool {
		var lapsed bool
		return r.db.QueryRow(`SELECT lease_expires_at < now() FROM task_runs WHERE id = $1`, c.ID).Scan(&lapsed) == nil && lapsed
	})
	r.pass()
	if a := r.task(run, "a"); a.State != core.TaskDead {
		t.Fatalf("the reaped task is %s, want DEAD (its only attempt)", a.State)
	}
	if n := dead(); n != 1 {
		t.Fatalf("after the reap of a last attempt: DEAD = %v, want 1", n)
	}
	wrun := storetest.Trigger(t, r.st, "waiter", "")
	r.waitFor("the wait to time out", 20*time.Second, func() bool {
		r.pass()
		return r.task(wrun, "w").State == core.TaskDead
	})
	if n := dead(); n != 2 {
		t.Fatalf("after a wait timed out on its last attempt: DEAD = %v, want 2", n)
	}
}
