package store_test

import (
	"encoding/json"
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/flowforge/flowforge/core"
	"github.com/flowforge/flowforge/core/store"
)

// failFastTrio is a fail_fast run whose x can fail while y is READY and z
// (after y) PENDING.
const failFastTrio = `
name: fftrio
fail_fast: true
tasks:
  - {name: x, handler: noop, retry: {max_attempts: 1}}
  - {name: y, handler: noop}
  - {name: z, handler: noop, depends_on: [y]}
`

// retryOne is a one-task workflow whose task can fail and retry.
const retryOne = `
name: retryone
tasks:
  - {name: a, handler: noop, retry: {max_attempts: 3}}
`

// sweepCandidates calls SweepCandidates(limit) from the oldest open run,
// failing the test on its error.
func (f *fixture) sweepCandidates(limit int) []uuid.UUID {
	f.t.Helper()
	ids, _, err := f.s.SweepCandidates(f.ctx, limit, store.Cursor{})
	if err != nil {
		f.t.Fatalf("sweep candidates: %v", err)
	}
	return ids
}

// failedFailFastRun triggers a failFastTrio run and fails its x DEAD the way
// a finish does, without any pass after it (the finish's notification
// lost): y stays READY, z PENDING, the run is not FAILED yet.
func (f *fixture) failedFailFastRun() (uuid.UUID, map[string]store.TaskRun) {
	f.t.Helper()
	run := f.trigger("fftrio", "")
	ts := f.tasks(run)
	x := f.claim(ts["x"].ID, "w1", time.Minute)
	if st := f.finish(x, store.FinishRequest{Outcome: store.OutcomeFailed, Error: "boom", Permanent: true}); st != core.TaskDead {
		f.t.Fatalf("x finished %s, want DEAD", st)
	}
	return run, ts
}

// dueRetryRun triggers a retryOne run and fails its task with a retry
// that is due by the time it returns (database clock); no pass ran since.
func (f *fixture) dueRetryRun() uuid.UUID {
	f.t.Helper()
	run := f.trigger("retryone", "")
	id := f.taskID(run, "a")
	if st := f.finish(f.claim(id, "w1", time.Minute), store.FinishRequest{Outcome: store.OutcomeFailed, Error: "flaky", RetryDelay: time.Millisecond}); st != core.TaskRetrying {
		f.t.Fatalf("a finished %s, want RETRYING", st)
	}
	f.waitRetryDue(id)
	return run
}

// TestTheSweepNamesAFailFastRunWithADeadTaskAndSiblingsToStart: mode 88. A
// fail_fast run's x went DEAD and the finish's notification was lost; its
// sibling y is READY (a worker may claim it) and z PENDING. No other kind
// of candidate covers the run (nothing is due, nothing promotable, y is
// active), so only the fail_fast kind can name it before the full pass.
// The targeted pass over the candidates then cancels y and z and fails the
// run, after which the sweep no longer names it (no churn).
func TestTheSweepNamesAFailFastRunWithADeadTaskAndSiblingsToStart(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.apply(failFastTrio)
	run, ts := f.failedFailFastRun()
	cands := f.sweepCandidates(500)
	if !slices.Contains(cands, run) {
		t.Fatalf("SweepCandidates = %v: the fail_fast run %s with x DEAD, y READY and z PENDING is not among them", cands, run)
	}
	res, err := f.s.AdvanceRuns(f.ctx, cands, "sweep")
	if err != nil {
		t.Fatal(err)
	}
	if res.FailFastCancelled != 2 {
		t.Fatalf("the pass over the candidates cancelled %d tasks, want y and z: %+v", res.FailFastCancelled, res)
	}
	f.wantState(ts["y"].ID, core.TaskCancelled)
	f.wantState(ts["z"].ID, core.TaskCancelled)
	if r := f.run(run); r.State != core.RunFailed {
		t.Fatalf("run is %s after the pass, want FAILED", r.State)
	}
	if again := f.sweepCandidates(500); slices.Contains(again, run) {
		t.Fatalf("the sweep still names the run after its pass: %v", again)
	}
}

// TestTheSweepNamesARunWithARetryDue: mode 57. A task failed with a retry
// that has since come due; no notification says so (the finish's came
// before the retry was due), so only the sweep's retries-due kind names
// the run (nothing else of it is promotable, active tasks remain), and the
// pass over the candidates promotes the retry.
func TestTheSweepNamesARunWithARetryDue(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.apply(retryOne)
	run := f.dueRetryRun()
	cands := f.sweepCandidates(500)
	if !slices.Contains(cands, run) {
		t.Fatalf("SweepCandidates = %v: the run %s with a retry due is not among them", cands, run)
	}
	res, err := f.s.AdvanceRuns(f.ctx, cands, "sweep")
	if err != nil || res.RetriesDue != 1 {
		t.Fatalf("the pass over the candidates: %+v, %v; want the retry promoted", res, err)
	}
}

// TestOneKindOfSweepCandidateCannotCrowdOutTheOthers: mode 88. More open
// cancelled runs (their tasks still running, so every sweep names them
// again) than the sweep's cap, plus one run of each other kind: a retry
// due, a PENDING task whose parent SUCCEEDED, a run with nothing active, a
// PENDING run with a task running, a failed fail_fast run with tasks still
// to start. Each kind is bounded on its own and the kinds share the cap in
// turn, so every single run is among the capped candidates, with as many
// cancelled runs as fit.
func TestOneKindOfSweepCandidateCannotCrowdOutTheOthers(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	for _, wf := range []string{oneTask, retryOne, failFastTrio, diamond} {
		f.apply(wf)
	}
	const limit, crowd = 8, 20
	cancelled := make([]uuid.UUID, crowd)
	for i := range cancelled {
		cancelled[i] = f.trigger("one", "")
		f.claim(f.taskID(cancelled[i], "a"), "w1", time.Minute)
	}
	f.advance() // the runs are RUNNING: not PENDING runs with a task running
	for _, id := range cancelled {
		if _, err := f.s.CancelRun(f.ctx, id, "alice", "crowd"); err != nil {
			t.Fatal(err)
		}
	}
	promotable := f.trigger("diamond", "")
	f.runTaskUncounted(f.taskID(promotable, "a")) // b and c PENDING, promotable
	idle := f.trigger("one", "")
	f.runTaskUncounted(f.taskID(idle, "a")) // nothing active, not settled
	running := f.trigger("one", "")
	f.pendingAsOfOld(running)
	f.claim(f.taskID(running, "a"), "w1", time.Minute) // a PENDING run with a task RUNNING
	failed, _ := f.failedFailFastRun()
	singles := []struct {
		what string
		id   uuid.UUID
	}{
		{"the run with a retry due", f.dueRetryRun()},
		{"the run with a promotable task", promotable},
		{"the run with nothing active", idle},
		{"the PENDING run with a task running", running},
		{"the failed fail_fast run", failed},
	}
	cands := f.sweepCandidates(limit)
	if len(cands) != limit {
		t.Fatalf("SweepCandidates(%d) returned %d runs, want the cap: %v", limit, len(cands), cands)
	}
	for _, want := range singles {
		if !slices.Contains(cands, want.id) {
			t.Errorf("%s (%s) is not among the %d candidates: %d cancelled runs crowded it out: %v", want.what, want.id, limit, crowd, cands)
		}
	}
	n := 0
	for _, id := range cands {
		if slices.Contains(cancelled, id) {
			n++
		}
	}
	if n != limit-len(singles) {
		t.Fatalf("%d cancelled runs among the candidates, want the rest of the cap (%d)", n, limit-len(singles))
	}
}

// TestTheNothingActiveProbesRotateThroughABacklog: the "nothing active"
// kind probes at most SweepProbesPerCandidate × limit open runs a sweep,
// from a cursor each sweep moves on, so a backlog of open runs with tasks
// still to run costs a sweep a bounded number of probes, and a run at its
// far end is found a few sweeps later, never missed: the first sweep from
// the oldest open run does not reach it and hands back a cursor; the sweep
// from that cursor finds it and, having reached the newest open run, hands
// back the zero cursor (the next sweep starts from the oldest again).
func TestTheNothingActiveProbesRotateThroughABacklog(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.apply(oneTask)
	const limit = 2
	probes := store.SweepProbesPerCandidate * limit
	if _, err := f.s.TriggerMany(f.ctx, store.TriggerManyRequest{Workflow: "one", Params: make([]json.RawMessage, probes+5), Actor: "test"}); err != nil {
		t.Fatal(err)
	}
	var last uuid.UUID
	if err := f.db.QueryRowContext(f.ctx, `SELECT id FROM workflow_runs ORDER BY created_at DESC, id DESC LIMIT 1`).Scan(&last); err != nil {
		t.Fatal(err)
	}
	// Its only task ended without its run being settled (the finish's
	// notification lost): nothing active is left in it.
	if _, err := f.db.ExecContext(f.ctx, `UPDATE task_runs SET state = 'SUCCEEDED', finished_at = now() WHERE run_id = $1`, last); err != nil {
		t.Fatal(err)
	}
	first, next, err := f.s.SweepCandidates(f.ctx, limit, store.Cursor{})
	if err != nil {
		t.Fatal(err)
	}
	if slices.Contains(first, last) || next == (store.Cursor{}) {
		t.Fatalf("the first sweep probed past %d open runs (found the last: %v) or handed back no cursor (%+v)", probes, slices.Contains(first, last), next)
	}
	second, after, err := f.s.SweepCandidates(f.ctx, limit, next)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(second, last) || after != (store.Cursor{}) {
		t.Fatalf("the sweep from %+v: %v (want the last run %s) and cursor %+v (want the zero cursor: it reached the newest)", next, second, last, after)
	}
}
