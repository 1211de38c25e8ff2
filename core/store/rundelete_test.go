package store_test

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/flowforge/flowforge/core"
	"github.com/flowforge/flowforge/core/store"
)

// deletion is what a test checks of a store.RunDeletion: who the run was,
// and what went with it.
type deletion struct {
	run       uuid.UUID
	workflow  string
	version   int
	state     core.RunState
	taskRuns  int64
	deadTasks int64
}

// deletions are ds as a test compares them, in ds's order; each must have
// its run's times (created, and finished: only settled runs are deleted).
func deletions(t *testing.T, ds []store.RunDeletion) []deletion {
	t.Helper()
	out := make([]deletion, 0, len(ds))
	for _, d := range ds {
		if d.CreatedAt.IsZero() || d.FinishedAt == nil {
			t.Errorf("deletion of %s: created %v, finished %v; want both", d.RunID, d.CreatedAt, d.FinishedAt)
		}
		out = append(out, deletion{d.RunID, d.Workflow, d.WorkflowVersion, d.State, d.TaskRuns, d.DeadTasks})
	}
	return out
}

// audited returns the run_deletions rows of run as "state actor reason
// task_runs_deleted".
func (f *fixture) audited(run uuid.UUID) []string {
	f.t.Helper()
	rows, err := f.db.QueryContext(f.ctx, `SELECT state, actor, reason, task_runs_deleted FROM run_deletions WHERE run_id = $1 ORDER BY id`, run)
	if err != nil {
		f.t.Fatal(err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var state, actor, reason string
		var n int
		if err := rows.Scan(&state, &actor, &reason, &n); err != nil {
			f.t.Fatal(err)
		}
		out = append(out, fmt.Sprintf("%s %s %s %d", state, actor, reason, n))
	}
	if err := rows.Err(); err != nil {
		f.t.Fatal(err)
	}
	return out
}

// TestDeleteRunsByIDDeletesTheSettledRunsNamedAndAuditsEach: a dry run
// lists what would go and deletes nothing (its reason unchecked); the
// deletion returns the runs (each once, however often named) oldest
// finish first, deletes them with their task runs, and records each with
// the actor and reason; a run holding a DEAD task goes only with
// IncludeDead.
func TestDeleteRunsByIDDeletesTheSettledRunsNamedAndAuditsEach(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	succeeded, cancelled := f.succeededRun(), f.cancelledRun()
	failed, _ := f.deadRun()
	f.backdate(succeeded, 2*day)
	f.backdate(cancelled, day)
	untouched := f.succeededRun()
	want := []deletion{
		{succeeded, "prune-one", 1, core.RunSucceeded, 1, 0},
		{cancelled, "prune-one", 1, core.RunCancelled, 1, 0},
	}

	dry, err := f.s.DeleteRuns(f.ctx, store.DeleteRunsRequest{IDs: []uuid.UUID{cancelled, succeeded}, DryRun: true})
	if err != nil || !slices.Equal(deletions(t, dry), want) {
		t.Fatalf("dry run = %+v, %v; want %+v", deletions(t, dry), err, want)
	}
	if !f.runExists(succeeded) || !f.runExists(cancelled) || f.count(`SELECT count(*) FROM run_deletions`) != 0 {
		t.Fatal("the dry run deleted or recorded something")
	}

	got, err := f.s.DeleteRuns(f.ctx, store.DeleteRunsRequest{IDs: []uuid.UUID{cancelled, succeeded, cancelled}, Actor: "alice", Reason: "cleanup"})
	if err != nil || !slices.Equal(deletions(t, got), want) {
		t.Fatalf("DeleteRuns = %+v, %v; want %+v", deletions(t, got), err, want)
	}
	for _, run := range []uuid.UUID{succeeded, cancelled} {
		if f.runExists(run) || f.count(`SELECT count(*) FROM task_runs WHERE run_id = $1`, run) != 0 {
			t.Errorf("run %s or its task runs are still there", run)
		}
	}
	if a := f.audited(succeeded); !slices.Equal(a, []string{"SUCCEEDED alice cleanup 1"}) {
		t.Errorf("audit of the SUCCEEDED run: %q", a)
	}
	if a := f.audited(cancelled); !slices.Equal(a, []string{"CANCELLED alice cleanup 1"}) {
		t.Errorf("audit of the CANCELLED run: %q", a)
	}

	_, err = f.s.DeleteRuns(f.ctx, store.DeleteRunsRequest{IDs: []uuid.UUID{failed}, Actor: "alice", Reason: "cleanup"})
	var holds *store.RunHoldsDeadError
	if !errors.As(err, &holds) || !errors.Is(err, store.ErrRunHoldsDead) ||
		!slices.Equal(holds.Runs, []store.RunDeletion{{RunID: failed, State: core.RunFailed, DeadTasks: 1}}) {
		t.Fatalf("delete of a run holding a DEAD task without IncludeDead: %v; want a *RunHoldsDeadError naming it", err)
	}
	if !f.runExists(failed) {
		t.Fatal("the refused run was deleted")
	}
	got, err = f.s.DeleteRuns(f.ctx, store.DeleteRunsRequest{IDs: []uuid.UUID{failed}, IncludeDead: true, Actor: "bob", Reason: "gone"})
	if want := []deletion{{failed, "twostep", 1, core.RunFailed, 2, 1}}; err != nil || !slices.Equal(deletions(t, got), want) {
		t.Fatalf("delete with IncludeDead = %+v, %v; want %+v", deletions(t, got), err, want)
	}
	if f.runExists(failed) || !slices.Equal(f.audited(failed), []string{"FAILED bob gone 2"}) {
		t.Fatalf("run with IncludeDead: exists %v, audit %q", f.runExists(failed), f.audited(failed))
	}
	if !f.runExists(untouched) {
		t.Fatal("a run nobody named was deleted")
	}
}

// TestDeleteRunsByIDIsAllOrNothing: one id the deletion refuses (unknown,
// not settled, holding a DEAD task, or a reason core refuses) refuses the
// whole request, with an error naming every such run, and nothing named
// is deleted or recorded.
func TestDeleteRunsByIDIsAllOrNothing(t *testing.T) {
	t.Parallel()
	unknown := uuid.MustParse("0b7c6d2e-8f0a-4c7e-9d55-3f1f8e2b7a10")
	cases := []struct {
		name string
		// other makes the run named beside a settled SUCCEEDED one.
		other  func(f *fixture) uuid.UUID
		reason string
		is     error
		// want is the error's text, with <RUN> for the other run's id.
		want string
		runs []store.RunDeletion // the error's runs (RunID RUN: uuid.Nil)
	}{
		{"an unknown id", func(*fixture) uuid.UUID { return unknown }, "x", store.ErrNotFound,
			"delete runs: run <RUN>: not found", nil},
		{"a running run", func(f *fixture) uuid.UUID { return f.trigger("prune-one", "") }, "x", store.ErrRunNotSettled,
			"delete runs: run <RUN> (RUNNING): run is not settled: only a run that has ended (SUCCEEDED, FAILED or CANCELLED with nothing left running; a child run once its parent's task has taken its end) can be deleted; cancel it and wait for it to end first",
			[]store.RunDeletion{{State: core.RunRunning}}},
		{"a FAILED run with a task RUNNING", (*fixture).openFailedRun, "x", store.ErrRunNotSettled,
			"delete runs: run <RUN> (FAILED): run is not settled: only a run that has ended (SUCCEEDED, FAILED or CANCELLED with nothing left running; a child run once its parent's task has taken its end) can be deleted; cancel it and wait for it to end first",
			[]store.RunDeletion{{State: core.RunFailed}}},
		{"a run holding a DEAD task", func(f *fixture) uuid.UUID { id, _ := f.deadRun(); return id }, "x", store.ErrRunHoldsDead,
			"delete runs: run <RUN> (FAILED, 1 DEAD): run holds DEAD tasks that a requeue could still retry: deleting it needs the opt-in (ffctl run delete --include-dead)",
			[]store.RunDeletion{{State: core.RunFailed, DeadTasks: 1}}},
		{"a blank reason", func(f *fixture) uuid.UUID { return f.succeededRun() }, " ", core.ErrBadReason, "", nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t)
			settled := f.succeededRun()
			other := tc.other(f)
			got, err := f.s.DeleteRuns(f.ctx, store.DeleteRunsRequest{IDs: []uuid.UUID{settled, other}, Actor: "alice", Reason: tc.reason})
			if !errors.Is(err, tc.is) || got != nil {
				t.Fatalf("DeleteRuns = %v, %v; want an error wrapping %v", got, err, tc.is)
			}
			if want := strings.ReplaceAll(tc.want, "<RUN>", other.String()); tc.want != "" && err.Error() != want {
				t.Errorf("error %q, want %q", err, want)
			}
			var runs []store.RunDeletion
			var open *store.RunNotSettledError
			var holds *store.RunHoldsDeadError
			switch {
			case errors.As(err, &open):
				runs = open.Runs
			case errors.As(err, &holds):
				runs = holds.Runs
			}
			for i := range tc.runs {
				tc.runs[i].RunID = other
			}
			if !slices.Equal(runs, tc.runs) {
				t.Errorf("the error's runs %+v, want %+v", runs, tc.runs)
			}
			if !f.runExists(settled) || (other != unknown && !f.runExists(other)) || f.count(`SELECT count(*) FROM run_deletions`) != 0 {
				t.Fatal("a refused request deleted or recorded something")
			}
		})
	}
}

// TestDeleteRunsByFilterTakesTheSettledRunsOfAStatePastTheAge: a filter
// takes the runs of its state settled longer than its age, skipping those
// holding a DEAD task unless IncludeDead, oldest first; a dry run takes
// nothing; a filter without a final state or a positive age is refused.
func TestDeleteRunsByFilterTakesTheSettledRunsOfAStatePastTheAge(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	older, old, recent := f.succeededRun(), f.succeededRun(), f.succeededRun()
	f.backdate(older, 4*day)
	f.backdate(old, 3*day)
	f.backdate(recent, time.Hour)
	cancelled := f.cancelledRun()
	f.backdate(cancelled, 3*day)
	failed, _ := f.deadRun()
	f.backdate(failed, 3*day)
	succeededOld := []deletion{
		{older, "prune-one", 1, core.RunSucceeded, 1, 0},
		{old, "prune-one", 1, core.RunSucceeded, 1, 0},
	}
	for _, tc := range []struct {
		name string
		req  store.DeleteRunsRequest
		want []deletion
		gone []uuid.UUID
	}{
		{"a dry run", store.DeleteRunsRequest{State: core.RunSucceeded, OlderThan: 2 * day, DryRun: true}, succeededOld, nil},
		{"FAILED holding DEAD, without IncludeDead", store.DeleteRunsRequest{State: core.RunFailed, OlderThan: 2 * day, Actor: "a", Reason: "r"}, []deletion{}, nil},
		{"FAILED younger than the age", store.DeleteRunsRequest{State: core.RunFailed, OlderThan: 4 * day, IncludeDead: true, Actor: "a", Reason: "r"}, []deletion{}, nil},
		{"SUCCEEDED past the age", store.DeleteRunsRequest{State: core.RunSucceeded, OlderThan: 2 * day, Actor: "alice", Reason: "tidy"}, succeededOld, []uuid.UUID{older, old}},
		{"FAILED with IncludeDead", store.DeleteRunsRequest{State: core.RunFailed, OlderThan: 2 * day, IncludeDead: true, Actor: "alice", Reason: "tidy"},
			[]deletion{{failed, "twostep", 1, core.RunFailed, 2, 1}}, []uuid.UUID{failed}},
	} {
		got, err := f.s.DeleteRuns(f.ctx, tc.req)
		if err != nil || !slices.Equal(deletions(t, got), tc.want) {
			t.Fatalf("%s: DeleteRuns = %+v, %v; want %+v", tc.name, deletions(t, got), err, tc.want)
		}
		for _, run := range tc.gone {
			if f.runExists(run) || len(f.audited(run)) != 1 {
				t.Fatalf("%s: run %s exists %v, audited %q; want gone and audited once", tc.name, run, f.runExists(run), f.audited(run))
			}
		}
	}
	for _, run := range []uuid.UUID{recent, cancelled} {
		if !f.runExists(run) {
			t.Fatalf("run %s, outside every filter, was deleted", run)
		}
	}
	for _, req := range []store.DeleteRunsRequest{
		{State: core.RunRunning, OlderThan: day, Reason: "r"},
		{State: "", OlderThan: day, Reason: "r"},
		{State: core.RunSucceeded, OlderThan: 0, Reason: "r"},
		{State: core.RunSucceeded, OlderThan: -time.Hour, Reason: "r"},
	} {
		if got, err := f.s.DeleteRuns(f.ctx, req); !errors.Is(err, store.ErrBadPrune) || got != nil {
			t.Errorf("DeleteRuns(%+v) = %v, %v; want ErrBadPrune", req, got, err)
		}
	}
	if _, err := f.s.DeleteRuns(f.ctx, store.DeleteRunsRequest{State: core.RunSucceeded, OlderThan: time.Minute, Reason: ""}); !errors.Is(err, core.ErrBadReason) {
		t.Errorf("a filter without a reason: %v, want core.ErrBadReason", err)
	}
	if !f.runExists(recent) {
		t.Fatal("a refused filter deleted a run")
	}
}

// TestAFilteredDeleteGoesInBatchesAndTakesEveryMatch: more matches than
// one batch (store.PruneBatchDefault) are all deleted, batch after batch,
// and returned oldest first; the dry run before lists every one of them in
// one statement.
func TestAFilteredDeleteGoesInBatchesAndTakesEveryMatch(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.apply(pruneOne)
	n := 2*store.PruneBatchDefault + 1
	// Settled SUCCEEDED runs, one task run each, run i finished i minutes
	// before the oldest-but-one: the last inserted is the oldest.
	f.sql(`
WITH runs AS (
    INSERT INTO workflow_runs (id, workflow_id, workflow_name, workflow_version, state, created_at, finished_at)
    SELECT gen_random_uuid(), (SELECT id FROM workflows WHERE name = 'prune-one'), 'prune-one', 1, 'SUCCEEDED',
           now() - interval '30 days', now() - interval '2 days' - g * interval '1 minute'
      FROM generate_series(1, $1::int) g
    RETURNING id
)
INSERT INTO task_runs (id, run_id, task_name, handler, state, max_attempts)
SELECT gen_random_uuid(), id, 'a', 'noop', 'SUCCEEDED', 3 FROM runs`, n)
	var wantOrder []uuid.UUID
	rows, err := f.db.QueryContext(f.ctx, `SELECT id FROM workflow_runs ORDER BY finished_at`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var id uuid.UUID
		if err := rows.Scan(&id); err != nil {
			t.Fatal(err)
		}
		wantOrder = append(wantOrder, id)
	}
	rows.Close()
	if len(wantOrder) != n {
		t.Fatalf("seeded %d runs, want %d", len(wantOrder), n)
	}
	ids := func(ds []store.RunDeletion) []uuid.UUID {
		out := make([]uuid.UUID, len(ds))
		for i, d := range ds {
			out[i] = d.RunID
		}
		return out
	}
	req := store.DeleteRunsRequest{State: core.RunSucceeded, OlderThan: day, DryRun: true}
	dry, err := f.s.DeleteRuns(f.ctx, req)
	if err != nil || !slices.Equal(ids(dry), wantOrder) {
		t.Fatalf("dry run: %d runs, %v; want all %d oldest first", len(dry), err, n)
	}
	req.DryRun, req.Actor, req.Reason = false, "alice", "tidy"
	got, err := f.s.DeleteRuns(f.ctx, req)
	if err != nil || !slices.Equal(ids(got), wantOrder) {
		t.Fatalf("DeleteRuns: %d runs, %v; want all %d oldest first", len(got), err, n)
	}
	if left := f.count(`SELECT count(*) FROM workflow_runs`); left != 0 {
		t.Fatalf("%d runs left", left)
	}
	if rec := f.count(`SELECT count(*) FROM run_deletions WHERE actor = 'alice' AND reason = 'tidy' AND task_runs_deleted = 1`); rec != n {
		t.Fatalf("%d deletions recorded, want %d", rec, n)
	}
}
