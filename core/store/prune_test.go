package store_test

import (
	"errors"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jmoiron/sqlx"

	"github.com/flowforge/flowforge/core"
	"github.com/flowforge/flowforge/core/store"
)

const (
	pruneOne = `
name: prune-one
tasks:
  - {name: a, handler: noop}
`
	// pruneTwo has two independent tasks: one can go DEAD while the
	// other still runs (an open FAILED run).
	pruneTwo = `
name: prune-two
tasks:
  - {name: a, handler: fail, retry: {max_attempts: 1}}
  - {name: b, handler: noop}
`
	day = 24 * time.Hour
)

// backdate moves the run's finish (and creation) age into the past on the
// database clock, as if it had settled ago ago.
func (f *fixture) backdate(runID uuid.UUID, ago time.Duration) {
	f.t.Helper()
	if _, err := f.db.ExecContext(f.ctx, `
UPDATE workflow_runs SET created_at = now() - $2::bigint * interval '1 millisecond' - interval '1 minute',
       finished_at = CASE WHEN finished_at IS NOT NULL THEN now() - $2::bigint * interval '1 millisecond' END
 WHERE id = $1`, runID, ago.Milliseconds()); err != nil {
		f.t.Fatalf("backdate: %v", err)
	}
}

// succeededRun returns a settled SUCCEEDED run of pruneOne.
func (f *fixture) succeededRun() uuid.UUID {
	f.t.Helper()
	f.apply(pruneOne)
	id := f.trigger("prune-one", "")
	f.runTask(f.taskID(id, "a"))
	f.advance()
	if r := f.run(id); r.State != core.RunSucceeded || r.FinishedAt == nil {
		f.t.Fatalf("run %s settled %v, want SUCCEEDED", r.State, r.FinishedAt)
	}
	return id
}

// cancelledRun returns a settled CANCELLED run of pruneOne (its task never
// started).
func (f *fixture) cancelledRun() uuid.UUID {
	f.t.Helper()
	f.apply(pruneOne)
	id := f.trigger("prune-one", "")
	if _, err := f.s.CancelRun(f.ctx, id, "alice", "not needed"); err != nil {
		f.t.Fatalf("cancel: %v", err)
	}
	f.advance()
	if r := f.run(id); r.State != core.RunCancelled || r.FinishedAt == nil {
		f.t.Fatalf("run %s settled %v, want CANCELLED", r.State, r.FinishedAt)
	}
	return id
}

// openFailedRun returns a run of pruneTwo whose a is DEAD while b is
// RUNNING: FAILED, not settled.
func (f *fixture) openFailedRun() uuid.UUID {
	f.t.Helper()
	f.apply(pruneTwo)
	id := f.trigger("prune-two", "")
	ca := f.claim(f.taskID(id, "a"), "w1", time.Minute)
	f.claim(f.taskID(id, "b"), "w1", time.Minute)
	if st := f.finish(ca, store.FinishRequest{Outcome: store.OutcomeFailed, Error: "bad", Permanent: true}); st != core.TaskDead {
		f.t.Fatalf("a: %s", st)
	}
	f.advance()
	if r := f.run(id); r.State != core.RunFailed || r.FinishedAt != nil {
		f.t.Fatalf("run %s settled %v, want FAILED and open", r.State, r.FinishedAt)
	}
	return id
}

// policy is a pruner's retention ages (dead 0: off), applied class by class
// as package daemon/pruner does.
type policy struct{ succeeded, cancelled, dead time.Duration }

// prune runs PruneRuns for every class of p until nothing more is due and
// returns the runs deleted.
func (f *fixture) prune(p policy) int64 {
	f.t.Helper()
	reqs := []store.PruneRequest{
		{State: core.RunSucceeded, Age: p.succeeded},
		{State: core.RunCancelled, Age: p.cancelled},
	}
	if p.dead > 0 {
		reqs = append(reqs, store.PruneRequest{State: core.RunFailed, HoldingDead: true, Age: p.dead},
			store.PruneRequest{State: core.RunCancelled, HoldingDead: true, Age: p.dead})
	}
	var n int64
	for _, r := range reqs {
		c, err := f.s.PruneRuns(f.ctx, r)
		if err != nil {
			f.t.Fatalf("prune %+v: %v", r, err)
		}
		n += c.Runs
	}
	return n
}

func (f *fixture) runExists(id uuid.UUID) bool {
	f.t.Helper()
	return f.count(`SELECT count(*) FROM workflow_runs WHERE id = $1`, id) == 1
}

// TestPrunerDeletesOnlySettledRunsPastTheirAge: table-driven, each case a
// run in one situation and whether a pruner with the policy deletes it.
func TestPrunerDeletesOnlySettledRunsPastTheirAge(t *testing.T) {
	t.Parallel()
	week := policy{succeeded: 7 * day, cancelled: 7 * day}
	withDead := policy{succeeded: 7 * day, cancelled: 7 * day, dead: 30 * day}
	cases := []struct {
		name   string
		make   func(f *fixture) uuid.UUID
		ago    time.Duration
		policy policy
		pruned bool
	}{
		{"SUCCEEDED older than its age", (*fixture).succeededRun, 8 * day, week, true},
		{"SUCCEEDED newer than its age", (*fixture).succeededRun, 6 * day, week, false},
		{"CANCELLED older than its age", (*fixture).cancelledRun, 8 * day, week, true},
		{"CANCELLED newer than its age", (*fixture).cancelledRun, time.Hour, week, false},
		{"FAILED (holds a DEAD task), retain-dead off", func(f *fixture) uuid.UUID { id, _ := f.deadRun(); return id }, 400 * day, week, false},
		{"FAILED, older than retain-dead", func(f *fixture) uuid.UUID { id, _ := f.deadRun(); return id }, 31 * day, withDead, true},
		{"FAILED, newer than retain-dead", func(f *fixture) uuid.UUID { id, _ := f.deadRun(); return id }, 8 * day, withDead, false},
		{"CANCELLED holding a DEAD task, retain-dead off", func(f *fixture) uuid.UUID {
			id, _ := f.deadRun()
			f.sql(`UPDATE workflow_runs SET state = 'CANCELLED', cancel_requested_at = now() WHERE id = $1`, id)
			return id
		}, 400 * day, week, false},
		{"CANCELLED holding a DEAD task, older than retain-dead", func(f *fixture) uuid.UUID {
			id, _ := f.deadRun()
			f.sql(`UPDATE workflow_runs SET state = 'CANCELLED', cancel_requested_at = now() WHERE id = $1`, id)
			return id
		}, 31 * day, withDead, true},
		{"open run, task PENDING", func(f *fixture) uuid.UUID { f.apply(pruneOne); return f.trigger("prune-one", "") }, 400 * day, withDead, false},
		{"open run, task RUNNING", func(f *fixture) uuid.UUID {
			f.apply(pruneOne)
			id := f.trigger("prune-one", "")
			f.claim(f.taskID(id, "a"), "w1", time.Minute)
			return id
		}, 400 * day, withDead, false},
		{"open FAILED run (a DEAD task, a sibling RUNNING)", (*fixture).openFailedRun, 400 * day, withDead, false},
		{"finished_at set but a task RUNNING", func(f *fixture) uuid.UUID {
			id := f.openFailedRun()
			f.sql(`UPDATE workflow_runs SET finished_at = now() WHERE id = $1`, id)
			return id
		}, 400 * day, withDead, false},
		{"requeued FAILED run (reopened, state not yet derived)", func(f *fixture) uuid.UUID {
			id, b := f.deadRun()
			if err := f.s.Requeue(f.ctx, b, "alice", "retry"); err != nil {
				f.t.Fatal(err)
			}
			return id
		}, 400 * day, withDead, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t)
			id := tc.make(f)
			f.backdate(id, tc.ago)
			n := f.prune(tc.policy)
			if got := !f.runExists(id); got != tc.pruned || n != map[bool]int64{true: 1, false: 0}[tc.pruned] {
				t.Fatalf("pruned %v (%d runs deleted), want %v", got, n, tc.pruned)
			}
			if tc.pruned {
				for table, q := range map[string]string{
					"task_runs":   `SELECT count(*) FROM task_runs WHERE run_id = $1`,
					"task_events": `SELECT count(*) FROM task_events WHERE run_id = $1`,
					"outbox":      `SELECT count(*) FROM outbox o JOIN task_runs t ON t.id = o.task_run_id WHERE t.run_id = $1`,
				} {
					if n := f.count(q, id); n != 0 {
						t.Errorf("%s: %d rows of the pruned run left", table, n)
					}
				}
			}
		})
	}
}

func (f *fixture) sql(q string, args ...any) {
	f.t.Helper()
	if _, err := f.db.ExecContext(f.ctx, q, args...); err != nil {
		f.t.Fatalf("%s: %v", q, err)
	}
}

// TestPruneCountsWhatWentWithTheRuns: the counts PruneRuns returns are the
// rows of the runs' tasks, outbox and history that cascaded.
func TestPruneCountsWhatWentWithTheRuns(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	id := f.succeededRun()
	want := store.PruneCounts{Runs: 1,
		TaskRuns:   int64(f.count(`SELECT count(*) FROM task_runs WHERE run_id = $1`, id)),
		Outbox:     int64(f.count(`SELECT count(*) FROM outbox o JOIN task_runs t ON t.id = o.task_run_id WHERE t.run_id = $1`, id)),
		TaskEvents: int64(f.count(`SELECT count(*) FROM task_events WHERE run_id = $1`, id))}
	if want.TaskRuns != 1 || want.Outbox != 1 || want.TaskEvents < 2 {
		t.Fatalf("fixture: %+v", want)
	}
	f.backdate(id, 8*day)
	got, err := f.s.PruneRuns(f.ctx, store.PruneRequest{State: core.RunSucceeded, Age: 7 * day})
	if err != nil || got != want {
		t.Fatalf("PruneRuns = %+v, %v; want %+v", got, err, want)
	}
}

// TestPruneRefusesABadRequest: no final state, a negative age or limit.
func TestPruneRefusesABadRequest(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	for _, req := range []store.PruneRequest{
		{State: core.RunRunning, Age: day},
		{State: "", Age: day},
		{State: core.RunSucceeded, Age: -time.Second},
		{State: core.RunSucceeded, Age: day, Limit: -1},
	} {
		if _, err := f.s.PruneRuns(f.ctx, req); !errors.Is(err, store.ErrBadPrune) {
			t.Errorf("PruneRuns(%+v) = %v, want ErrBadPrune", req, err)
		}
	}
	if _, err := f.s.PruneOutbox(f.ctx, -time.Second, 0); !errors.Is(err, store.ErrBadPrune) {
		t.Errorf("PruneOutbox(-1s) = %v, want ErrBadPrune", err)
	}
}

// TestPrunerBesideARequeue: a requeue of a DEAD task racing the pruner
// over its FAILED run either wins (the run is kept, open, the task
// PENDING) or loses cleanly (the requeue reports not found, and nothing of
// the run is left). The orders first, then the race, many times.
func TestPrunerBesideARequeue(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	dead := policy{succeeded: 7 * day, cancelled: 7 * day, dead: day}
	check := func(runID, b uuid.UUID, requeueErr error, pruned int64) (won bool) {
		t.Helper()
		switch {
		case requeueErr == nil:
			if pruned != 0 || !f.runExists(runID) {
				t.Fatalf("requeue succeeded but the pruner deleted %d runs (run exists: %v)", pruned, f.runExists(runID))
			}
			f.wantState(b, core.TaskPending)
			if r := f.run(runID); r.FinishedAt != nil {
				t.Fatalf("requeued run is settled")
			}
			return true
		case errors.Is(requeueErr, store.ErrNotFound):
			if pruned != 1 || f.runExists(runID) || f.count(`SELECT count(*) FROM task_runs WHERE run_id = $1`, runID) != 0 {
				t.Fatalf("requeue: not found, but the pruner deleted %d runs", pruned)
			}
			return false
		}
		t.Fatalf("requeue: %v", requeueErr)
		return false
	}
	// Requeue first: the run is open again, the pruner keeps it.
	runID, b := f.deadRun()
	f.backdate(runID, 2*day)
	err := f.s.Requeue(f.ctx, b, "alice", "retry")
	if !check(runID, b, err, f.prune(dead)) {
		t.Fatal("requeue first: the pruner won")
	}
	// Prune first: the requeue finds nothing.
	runID, b = f.deadRun()
	f.backdate(runID, 2*day)
	n := f.prune(dead)
	if check(runID, b, f.s.Requeue(f.ctx, b, "alice", "retry"), n) {
		t.Fatal("prune first: the requeue won")
	}
	// Racing.
	wins := map[bool]int{}
	for range 15 {
		runID, b := f.deadRun()
		f.backdate(runID, 2*day)
		var reqErr, pruneErr error
		var c store.PruneCounts
		together(2, func(i int) {
			if i == 0 {
				reqErr = f.s.Requeue(f.ctx, b, "alice", "retry")
			} else {
				c, pruneErr = f.s.PruneRuns(f.ctx, store.PruneRequest{State: core.RunFailed, HoldingDead: true, Age: day})
			}
		})
		if pruneErr != nil {
			t.Fatalf("prune: %v", pruneErr)
		}
		wins[check(runID, b, reqErr, c.Runs)]++
	}
	t.Logf("requeue won %d, pruner won %d", wins[true], wins[false])
}

// TestTwoPrunersDeleteEachRunOnce: pruners running at once (two
// schedulers) skip each other's locked batches: every run is deleted once,
// none is left, and neither fails.
func TestTwoPrunersDeleteEachRunOnce(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	const runs = 40
	for range runs {
		f.backdate(f.succeededRun(), 8*day)
	}
	var total [2]int64
	var errs [2]error
	together(2, func(i int) {
		for {
			c, err := f.s.PruneRuns(f.ctx, store.PruneRequest{State: core.RunSucceeded, Age: 7 * day, Limit: 3})
			if err != nil {
				errs[i] = err
				return
			}
			total[i] += c.Runs
			if c.Runs < 3 {
				return
			}
		}
	})
	if errs[0] != nil || errs[1] != nil {
		t.Fatalf("pruners failed: %v, %v", errs[0], errs[1])
	}
	if total[0]+total[1] != runs || f.count(`SELECT count(*) FROM workflow_runs`) != 0 {
		t.Fatalf("pruners deleted %d + %d runs of %d; %d left", total[0], total[1], runs, f.count(`SELECT count(*) FROM workflow_runs`))
	}
}

// TestPruneOutboxKeepsPendingQuarantinedAndLiveDispatches: only published
// rows older than the age go, and never the current dispatch of a READY
// task (the redispatch reads it).
func TestPruneOutboxKeepsPendingQuarantinedAndLiveDispatches(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.apply(pruneOne)
	done := f.succeededRun()
	ready := f.trigger("prune-one", "")
	pending := f.trigger("prune-one", "")
	quarantined := f.trigger("prune-one", "")
	rowOf := func(run uuid.UUID) string {
		return `(SELECT o.id FROM outbox o JOIN task_runs t ON t.id = o.task_run_id WHERE t.run_id = '` + run.String() + `')`
	}
	f.sql(`UPDATE outbox SET published_at = now() - interval '2 days' WHERE id IN (` + rowOf(done) + `, ` + rowOf(ready) + `)`)
	f.sql(`UPDATE outbox SET created_at = now() - interval '2 days' WHERE id = ` + rowOf(pending))
	f.sql(`UPDATE outbox SET quarantined_at = now() - interval '2 days', quarantine_reason = 'too big' WHERE id = ` + rowOf(quarantined))
	n, err := f.s.PruneOutbox(f.ctx, day, 0)
	if err != nil || n != 1 {
		t.Fatalf("PruneOutbox = %d, %v; want 1", n, err)
	}
	if f.count(`SELECT count(*) FROM outbox WHERE id = `+rowOf(done)) != 0 {
		t.Fatal("the published row of the finished task is left")
	}
	for name, run := range map[string]uuid.UUID{"READY task's dispatch": ready, "pending": pending, "quarantined": quarantined} {
		if f.count(`SELECT count(*) FROM outbox WHERE id = `+rowOf(run)) != 1 {
			t.Errorf("%s row was pruned", name)
		}
	}
	if n, err := f.s.PruneOutbox(f.ctx, 3*day, 0); err != nil || n != 0 {
		t.Fatalf("PruneOutbox(3d) = %d, %v; want 0", n, err)
	}
}

// TestAKeyWhoseOwnerWasPrunedStillWorks: idempotency_keys has no foreign
// key and the pruner leaves it alone. A completed key whose owner's run
// was pruned is still reused (its source named as a task run whose run no
// longer exists); an uncompleted key whose owner was pruned (its run
// settled without completing it) is taken over by the next claimer.
func TestAKeyWhoseOwnerWasPrunedStillWorks(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.apply(keyed)
	const key = "k-d"
	owner := f.claimKeyed("keyed", "w1")
	if kc, err := f.s.ClaimIdempotencyKey(f.ctx, key, owner.ID, owner.FencingToken); err != nil || !kc.Owned {
		t.Fatalf("owner's key claim: %+v %v", kc, err)
	}
	f.finish(owner, store.FinishRequest{Outcome: store.OutcomeSucceeded, Result: []byte(`{"rows":1}`), IdempotencyKey: key})
	f.advance()
	f.backdate(owner.RunID, 8*day)
	if n := f.prune(policy{succeeded: 7 * day, cancelled: 7 * day}); n != 1 || f.runExists(owner.RunID) {
		t.Fatalf("pruned %d runs; the owner's run exists: %v", n, f.runExists(owner.RunID))
	}
	reuser := f.claimKeyed("keyed", "w2")
	kc := f.reuse(reuser, key)
	if kc.From.TaskRunID != owner.ID || kc.From.RunID != uuid.Nil || string(kc.Result) != `{"rows": 1}` {
		t.Fatalf("reuse after the owner was pruned: %+v (result %s)", kc.From, kc.Result)
	}

	// An uncompleted key: its owner went DEAD, its run was pruned.
	const key2 = "k-e"
	dead := f.claim(f.taskID(f.trigger("keyed", `{"day":"e"}`), "report"), "w1", time.Minute)
	if kc, err := f.s.ClaimIdempotencyKey(f.ctx, key2, dead.ID, dead.FencingToken); err != nil || !kc.Owned {
		t.Fatalf("key claim: %+v %v", kc, err)
	}
	f.finish(dead, store.FinishRequest{Outcome: store.OutcomeFailed, Error: "bad", Permanent: true})
	f.advance()
	f.backdate(dead.RunID, 40*day)
	if n := f.prune(policy{succeeded: 7 * day, cancelled: 7 * day, dead: 30 * day}); n != 1 {
		t.Fatalf("pruned %d runs, want the FAILED one", n)
	}
	next := f.claim(f.taskID(f.trigger("keyed", `{"day":"e"}`), "report"), "w2", time.Minute)
	if kc, err := f.s.ClaimIdempotencyKey(f.ctx, key2, next.ID, next.FencingToken); err != nil || !kc.Owned {
		t.Fatalf("claim of a key whose owner was pruned: %+v %v; want Owned", kc, err)
	}
}

// TestARetentionBatchRunsBoundedAndWithoutJIT: a batch's transaction has
// its own statement and lock timeouts and JIT compilation off (on a long
// history the batch's estimated cost passes jit_above_cost, and compiling
// cost nine times the batch's work); the session outside keeps its own.
func TestARetentionBatchRunsBoundedAndWithoutJIT(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	var jit, stmt, lock string
	err := f.s.InPruneTx(f.ctx, func(tx *sqlx.Tx) error {
		return tx.QueryRowContext(f.ctx, `SELECT current_setting('jit'), current_setting('statement_timeout'), current_setting('lock_timeout')`).Scan(&jit, &stmt, &lock)
	})
	if err != nil {
		t.Fatal(err)
	}
	if jit != "off" || stmt != "30s" || lock != "2s" {
		t.Fatalf("a batch runs with jit %s, statement_timeout %s, lock_timeout %s; want off, 30s, 2s", jit, stmt, lock)
	}
}
