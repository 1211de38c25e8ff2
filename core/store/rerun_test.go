package store_test

import (
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/flowforge/flowforge/core"
	"github.com/flowforge/flowforge/core/store"
)

// rerunV1 and rerunV2 are two versions of one workflow: a rerun of a run
// of version 1 must get version 1's tasks after version 2 was applied.
const (
	rerunV1 = `
name: rerun-me
tasks:
  - {name: a, handler: noop}
  - {name: b, handler: fail, depends_on: [a], retry: {max_attempts: 1}}
`
	rerunV2 = `
name: rerun-me
tasks:
  - {name: only, handler: noop}
`
)

// rerun reruns run with actor "alice", failing the test on an error.
func (f *fixture) rerun(run uuid.UUID, reason string) uuid.UUID {
	f.t.Helper()
	id, err := f.s.Rerun(f.ctx, store.RerunRequest{RunID: run, Actor: "alice", Reason: reason})
	if err != nil {
		f.t.Fatalf("rerun %s: %v", run, err)
	}
	return id
}

// failedRerunMe returns a settled FAILED run of rerunV1 triggered with
// params and idempotency key "k1".
func (f *fixture) failedRerunMe(params string) uuid.UUID {
	f.t.Helper()
	f.apply(rerunV1)
	res, err := f.s.Trigger(f.ctx, store.TriggerRequest{Workflow: "rerun-me", Params: json.RawMessage(params), IdempotencyKey: "k1", Actor: "test"})
	if err != nil {
		f.t.Fatal(err)
	}
	id := res.RunID
	f.runTask(f.taskID(id, "a"))
	f.advance()
	c := f.claim(f.taskID(id, "b"), "w1", time.Minute)
	f.finish(c, store.FinishRequest{Outcome: store.OutcomeFailed, Error: "boom", Permanent: true})
	f.advance()
	if r := f.run(id); r.State != core.RunFailed || r.FinishedAt == nil {
		f.t.Fatalf("run %s settled %v, want FAILED", r.State, r.FinishedAt)
	}
	return id
}

// TestARerunRepeatsTheStoredVersionAndParamsAndIsAudited: the new run has
// the old run's version (not the newest) and stored params, the old
// version's tasks created as a trigger creates them (roots READY with
// their outbox row), no idempotency key, and its audit; the old run lists
// it; a second rerun is a second run, both listed, newest first.
func TestARerunRepeatsTheStoredVersionAndParamsAndIsAudited(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	old := f.failedRerunMe(`{"date": "2026-11-30", "n": 3}`)
	f.apply(rerunV2)
	newID := f.rerun(old, "upstream fixed")
	run := f.run(newID)
	var params map[string]any
	if err := json.Unmarshal(run.Params, &params); err != nil {
		t.Fatal(err)
	}
	if run.Workflow != "rerun-me" || run.WorkflowVersion != 1 || params["date"] != "2026-11-30" || params["n"] != float64(3) || len(params) != 2 {
		t.Fatalf("rerun: workflow %s version %d params %s, want rerun-me version 1 with the old params", run.Workflow, run.WorkflowVersion, run.Params)
	}
	if run.IdempotencyKey != nil {
		t.Fatalf("rerun has idempotency key %q, want none (k1 is the old run's)", *run.IdempotencyKey)
	}
	tasks := f.tasks(newID)
	if len(tasks) != 2 || tasks["a"].State != core.TaskReady || tasks["b"].State != core.TaskPending || f.outboxRows(tasks["a"].ID) != 1 {
		t.Fatalf("rerun's tasks: %+v, want a READY (with its outbox row) and b PENDING", tasks)
	}
	o := run.RerunOf
	if o == nil || o.RunID != old || o.By != "alice" || o.Reason != "upstream fixed" || !o.At.Equal(run.CreatedAt) ||
		o.State == nil || *o.State != core.RunFailed || o.Deleted {
		t.Fatalf("rerun_of: %+v, want run %s FAILED by alice, upstream fixed, at %v", o, old, run.CreatedAt)
	}
	if k := f.run(old).IdempotencyKey; k == nil || *k != "k1" {
		t.Fatalf("the old run's key is %v, want k1 kept", k)
	}

	second := f.rerun(old, "typed it twice")
	if second == newID {
		t.Fatal("a second rerun returned the first")
	}
	got := f.run(old)
	if got.RerunOf != nil || got.RerunsTotal != 2 || len(got.Reruns) != 2 ||
		got.Reruns[0].RunID != second || got.Reruns[0].Reason != "typed it twice" || got.Reruns[1].RunID != newID ||
		got.Reruns[1].By != "alice" || *got.Reruns[1].State != core.RunRunning {
		t.Fatalf("old run's reruns: %+v (total %d), want %s then %s", got.Reruns, got.RerunsTotal, second, newID)
	}
	// A rerun of a rerun (forced: second is still open) names its own
	// origin.
	third, err := f.s.Rerun(f.ctx, store.RerunRequest{RunID: second, Actor: "bob", Reason: "once more", Force: true})
	if err != nil {
		t.Fatal(err)
	}
	if again := f.run(third); again.RerunOf == nil || again.RerunOf.RunID != second || again.RerunOf.By != "bob" {
		t.Fatalf("rerun of a rerun: %+v", again.RerunOf)
	}
}

// TestARunShowsOnlyItsNewestRerunsAndCountsThemAll: Reruns is bounded by
// RerunsShown, RerunsTotal is not.
func TestARunShowsOnlyItsNewestRerunsAndCountsThemAll(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	old := f.succeededRun()
	var last uuid.UUID
	for range store.RerunsShown + 2 {
		last = f.rerun(old, "again")
	}
	got := f.run(old)
	if len(got.Reruns) != store.RerunsShown || got.RerunsTotal != store.RerunsShown+2 || got.Reruns[0].RunID != last {
		t.Fatalf("%d reruns shown of %d, first %s; want %d of %d, first %s", len(got.Reruns), got.RerunsTotal, got.Reruns[0].RunID, store.RerunsShown, store.RerunsShown+2, last)
	}
}

// TestARerunIsRefusedAndWritesNothing: a blank reason, an unknown run, and
// a run that has not ended (without Force) are refused with their own
// errors; with Force the open run is rerun.
func TestARerunIsRefusedAndWritesNothing(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.apply(pruneOne)
	open := f.trigger("prune-one", "")
	const runs = `SELECT count(*) FROM workflow_runs`
	cases := []struct {
		name string
		req  store.RerunRequest
		want error
	}{
		{"blank reason", store.RerunRequest{RunID: open, Actor: "a", Reason: "  ", Force: true}, core.ErrBadReason},
		{"unknown run", store.RerunRequest{RunID: uuid.New(), Actor: "a", Reason: "r"}, store.ErrNotFound},
		{"open run", store.RerunRequest{RunID: open, Actor: "a", Reason: "r"}, store.ErrRunNotEnded},
	}
	for _, tc := range cases {
		before := f.count(runs)
		id, err := f.s.Rerun(f.ctx, tc.req)
		if !errors.Is(err, tc.want) || id != uuid.Nil {
			t.Fatalf("%s: %v, %s; want %v", tc.name, err, id, tc.want)
		}
		if n := f.count(runs); n != before {
			t.Fatalf("%s: %d runs, want %d", tc.name, n, before)
		}
	}
	id, err := f.s.Rerun(f.ctx, store.RerunRequest{RunID: open, Actor: "a", Reason: "r", Force: true})
	if err != nil || f.run(id).RerunOf.RunID != open {
		t.Fatalf("forced rerun of an open run: %v", err)
	}
}

// TestARerunOfAPausedWorkflowIsTreatedAsATrigger: mode queue creates the
// run (its tasks wait); mode drop creates nothing, counts the drop on the
// pause and returns ErrWorkflowPaused.
func TestARerunOfAPausedWorkflowIsTreatedAsATrigger(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	old := f.succeededRun()
	if _, err := f.s.PauseWorkflow(f.ctx, "prune-one", core.PauseQueue, "ops", "maintenance"); err != nil {
		t.Fatal(err)
	}
	queued := f.rerun(old, "while paused")
	if r := f.run(queued); r.Paused == nil || r.RerunOf == nil {
		t.Fatalf("queued rerun: paused %v, rerun_of %v", r.Paused, r.RerunOf)
	}
	if _, err := f.s.PauseWorkflow(f.ctx, "prune-one", core.PauseDrop, "ops", "maintenance"); err != nil {
		t.Fatal(err)
	}
	before := f.count(`SELECT count(*) FROM workflow_runs`)
	id, err := f.s.Rerun(f.ctx, store.RerunRequest{RunID: old, Actor: "a", Reason: "r"})
	if !errors.Is(err, store.ErrWorkflowPaused) || id != uuid.Nil {
		t.Fatalf("rerun under a drop pause: %v, %s; want ErrWorkflowPaused", err, id)
	}
	if n := f.count(`SELECT count(*) FROM workflow_runs`); n != before {
		t.Fatalf("%d runs, want %d", n, before)
	}
	if p, _, err := f.s.WorkflowPause(f.ctx, "prune-one"); err != nil || p.Dropped != 1 {
		t.Fatalf("pause: dropped %d (%v), want 1", p.Dropped, err)
	}
}

// TestDeletingARerunRunNeitherWaitsForNorBreaksItsReruns: the old run is
// deleted (by id, and by the pruner) while another transaction holds its
// rerun's row, as a scheduler pass would: nothing waits (a foreign key
// with ON DELETE SET NULL would wait for that row and fail on the prune's
// lock timeout), the rerun still names the run it repeated, marked
// deleted, and deleting the rerun leaves the old run's list without it.
func TestDeletingARerunRunNeitherWaitsForNorBreaksItsReruns(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	byID, pruned := f.succeededRun(), f.succeededRun()
	rerunOfByID, rerunOfPruned := f.rerun(byID, "r1"), f.rerun(pruned, "r2")
	held, err := f.db.BeginTx(f.ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = held.Rollback() })
	if _, err := held.ExecContext(f.ctx, `SELECT 1 FROM workflow_runs WHERE id = ANY ($1::uuid[]) FOR UPDATE`, []string{rerunOfByID.String(), rerunOfPruned.String()}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.s.DeleteRuns(f.ctx, store.DeleteRunsRequest{IDs: []uuid.UUID{byID}, Actor: "ops", Reason: "clean up"}); err != nil {
		t.Fatalf("delete the rerun run while its rerun is held: %v", err)
	}
	f.backdate(pruned, 2*day)
	if c, err := f.s.PruneRuns(f.ctx, store.PruneRequest{State: core.RunSucceeded, Age: day, Limit: 10}); err != nil || c.Runs != 1 {
		t.Fatalf("prune the rerun run while its rerun is held: %+v, %v; want 1 run", c, err)
	}
	if err := held.Rollback(); err != nil {
		t.Fatal(err)
	}
	for old, rerun := range map[uuid.UUID]uuid.UUID{byID: rerunOfByID, pruned: rerunOfPruned} {
		o := f.run(rerun).RerunOf
		if o == nil || o.RunID != old || !o.Deleted || o.State != nil {
			t.Fatalf("rerun %s after its run was deleted: rerun_of %+v, want %s deleted", rerun, o, old)
		}
	}
	// The other way round: a deleted rerun leaves the run's list.
	kept := f.succeededRun()
	gone := f.rerun(kept, "to be deleted")
	f.runTask(f.taskID(gone, "a"))
	f.advance()
	if _, err := f.s.DeleteRuns(f.ctx, store.DeleteRunsRequest{IDs: []uuid.UUID{gone}, Actor: "ops", Reason: "clean up"}); err != nil {
		t.Fatal(err)
	}
	if r := f.run(kept); len(r.Reruns) != 0 || r.RerunsTotal != 0 {
		t.Fatalf("reruns after the rerun was deleted: %+v", r.Reruns)
	}
}
