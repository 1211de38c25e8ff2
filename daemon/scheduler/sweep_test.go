package scheduler

import (
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/flowforge/flowforge/core"

	"github.com/flowforge/flowforge/core/store/storetest"
)

// failFastPairYAML is a fail_fast workflow whose x can fail while y waits
// READY.
const failFastPairYAML = `
name: ffpair
fail_fast: true
tasks:
  - {name: x, handler: noop, retry: {max_attempts: 1}}
  - {name: y, handler: noop}
`

// loseOutcome makes the run's RUNNING task name state (RETRYING, due at
// once on the database clock, or DEAD) the way a finish would, but without
// its notification: from then on only the sweep (or the full pass) can
// see what it changed.
func (r *passRig) loseOutcome(run uuid.UUID, name, state string) {
	r.t.Helper()
	res, err := r.db.Exec(`UPDATE task_runs
	    SET state = $3, lease_expires_at = NULL, worker_id = NULL,
	        next_attempt_at = CASE WHEN $3 = 'RETRYING' THEN now() END,
	        finished_at = CASE WHEN $3 = 'DEAD' THEN now() END
	  WHERE run_id = $1 AND task_name = $2 AND state = 'RUNNING'`, run, name, state)
	if err != nil {
		r.t.Fatal(err)
	}
	if n, err := res.RowsAffected(); err != nil || n != 1 {
		r.t.Fatalf("lose the outcome of %s: %d rows, %v", name, n, err)
	}
}

// waitState polls until the run's task name is in state, failing after
// within; it returns how long that took.
func (r *passRig) waitState(run uuid.UUID, name string, state core.TaskState, within time.Duration) time.Duration {
	r.t.Helper()
	start := time.Now()
	for r.task(run, name).State != state {
		if time.Since(start) > within {
			r.t.Fatalf("%s is %s after %s, want %s", name, r.task(run, name).State, within, state)
		}
		time.Sleep(5 * time.Millisecond) // poll interval, not a wait for state
	}
	return time.Since(start)
}

// TestADueRetryIsPromotedByTheSweepAlone: mode 57. A task's retry comes due
// after the finish that scheduled it (whose notification the scheduler
// served before the retry was due: here none at all), with the full pass an
// hour away: only the sweep's retries-due candidates can promote it, within
// 20 SweepIntervals (a generous bound on a loaded machine; one sweep is the
// design), under the scheduler's name.
func TestADueRetryIsPromotedByTheSweepAlone(t *testing.T) {
	const sweep = 200 * time.Millisecond
	r := newPassRig(t, func(c *Config) { c.SweepInterval, c.FullSweepInterval = sweep, time.Hour })
	run := storetest.Trigger(t, r.st, "chain", "")
	r.claim(run, "a", time.Minute)
	r.runUntilCleanup() // its first full pass is done: from here only sweeps
	r.loseOutcome(run, "a", "RETRYING")
	took := r.waitState(run, "a", core.TaskReady, 20*sweep)
	a := r.task(run, "a")
	last := a.Events[len(a.Events)-1]
	if last.ToState != "READY" || last.Actor != "test-scheduler" || last.Reason == nil || *last.Reason != "retry due" {
		t.Fatalf("a's last event %+v, want the scheduler's promotion of a retry due", last)
	}
	t.Logf("the retry was promoted %s after it fell due (sweep interval %s)", took.Round(time.Millisecond), sweep)
}

// TestAFailFastRunsSiblingIsCancelledWithinASweep: mode 88. A fail_fast
// run's x goes DEAD and the finish's notification is lost while its sibling
// y waits READY, with the full pass an hour away: the sweep's fail_fast
// candidates cancel y within 20 SweepIntervals (before that a worker could
// still claim and run it) and fail the run.
func TestAFailFastRunsSiblingIsCancelledWithinASweep(t *testing.T) {
	const sweep = 200 * time.Millisecond
	r := newPassRig(t, func(c *Config) { c.SweepInterval, c.FullSweepInterval = sweep, time.Hour })
	storetest.Apply(t, r.st, failFastPairYAML)
	run := storetest.Trigger(t, r.st, "ffpair", "")
	r.claim(run, "x", time.Minute)
	r.runUntilCleanup()
	r.loseOutcome(run, "x", "DEAD")
	took := r.waitState(run, "y", core.TaskCancelled, 20*sweep)
	got, err := r.st.GetRun(r.t.Context(), run)
	if err != nil || got.State != core.RunFailed {
		t.Fatalf("run %s (%v) after y was cancelled, want FAILED", got.State, err)
	}
	t.Logf("y was cancelled %s after x went DEAD (sweep interval %s)", took.Round(time.Millisecond), sweep)
}

// TestTheSweepReachesARunPastItsProbesWithinAFewSweeps: mode 57. The sweep
// probes at most store.SweepProbesPerCandidate × BatchSize open runs for
// runs with nothing active, from where the last sweep stopped: with a
// batch of 2 (8 probes), the full pass an hour away, and 12 older open runs
// whose first tasks are still READY, a run whose tasks all ended without a
// notification, the newest of 13, is settled by the sweeps alone, a few
// sweeps later (the probes move on; without that it would wait for the
// full pass).
func TestTheSweepReachesARunPastItsProbesWithinAFewSweeps(t *testing.T) {
	const sweep = 50 * time.Millisecond
	r := newPassRig(t, func(c *Config) { c.SweepInterval, c.FullSweepInterval, c.BatchSize = sweep, time.Hour, 2 })
	r.runUntilCleanup() // its first full pass is done: from here only sweeps
	var last uuid.UUID
	for range 13 {
		last = r.trigger()
	}
	if _, err := r.db.Exec(`UPDATE task_runs SET state = 'SUCCEEDED', finished_at = now() WHERE run_id = $1`, last); err != nil {
		t.Fatal(err)
	}
	r.waitFor("the newest run to be settled by the sweeps", 40*sweep+5*time.Second, func() bool {
		st, settled := r.runState(last)
		return settled && st == core.RunSucceeded
	})
}
