package store_test

import (
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/flowforge/flowforge/core"
	"github.com/flowforge/flowforge/core/store"
)

// diedAgo sets task id's death (finished_at) to ago before the database's
// now.
func (f *fixture) diedAgo(id uuid.UUID, ago time.Duration) {
	f.t.Helper()
	f.sql(`UPDATE task_runs SET finished_at = now() - $2::bigint * interval '1 millisecond' WHERE id = $1`, id, ago.Milliseconds())
}

// deadOneShot returns a run of oneShot whose one task died at its first
// attempt, and that task.
func (f *fixture) deadOneShot() (runID, a uuid.UUID) {
	f.t.Helper()
	f.apply(oneShot)
	runID = f.trigger("oneshot", "")
	a = f.taskID(runID, "a")
	if st := f.finish(f.claim(a, "w1", time.Minute), store.FinishRequest{Outcome: store.OutcomeFailed, Error: "bad", Permanent: true}); st != core.TaskDead {
		f.t.Fatalf("a: %s", st)
	}
	f.advance()
	return runID, a
}

// TestListDeadTasksFiltersAndOrders: the DEAD tasks (and only those) each
// query selects, the most recent death first, each with its run and
// workflow.
func TestListDeadTasksFiltersAndOrders(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	r1, d1 := f.deadRun()     // twostep, died 3h ago
	r2, d2 := f.deadOneShot() // oneshot, died 1h ago
	r3, d3 := f.deadRun()     // twostep, died 2h ago, its run cancelled since
	if _, err := f.s.CancelRun(f.ctx, r3, "alice", "give up"); err != nil {
		t.Fatal(err)
	}
	f.diedAgo(d1, 3*time.Hour)
	f.diedAgo(d2, time.Hour)
	f.diedAgo(d3, 2*time.Hour)
	runOf := map[uuid.UUID]uuid.UUID{d1: r1, d2: r2, d3: r3}
	workflowOf := map[uuid.UUID]string{d1: "twostep", d2: "oneshot", d3: "twostep"}
	nameOf := map[uuid.UUID]string{d1: "b", d2: "a", d3: "b"}
	for _, tc := range []struct {
		name string
		q    store.DeadQuery
		want []uuid.UUID
	}{
		{"every DEAD task, the most recent death first", store.DeadQuery{}, []uuid.UUID{d2, d3, d1}},
		{"one workflow", store.DeadQuery{Workflow: "twostep"}, []uuid.UUID{d3, d1}},
		{"one run", store.DeadQuery{Run: r1}, []uuid.UUID{d1}},
		{"died at least 90m ago", store.DeadQuery{OlderThan: 90 * time.Minute}, []uuid.UUID{d3, d1}},
		{"requeueable: not of a cancelled run", store.DeadQuery{Requeueable: true}, []uuid.UUID{d2, d1}},
		{"at most two", store.DeadQuery{Limit: 2}, []uuid.UUID{d2, d3}},
		{"every filter at once", store.DeadQuery{Workflow: "twostep", OlderThan: time.Hour, Requeueable: true, Limit: 5}, []uuid.UUID{d1}},
		{"an unknown workflow", store.DeadQuery{Workflow: "nope"}, []uuid.UUID{}},
		{"older than every death", store.DeadQuery{OlderThan: 4 * time.Hour}, []uuid.UUID{}},
	} {
		got, err := f.s.ListDeadTasks(f.ctx, tc.q)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		ids := make([]uuid.UUID, 0, len(got))
		for _, tr := range got {
			ids = append(ids, tr.ID)
			if tr.State != core.TaskDead || tr.RunID != runOf[tr.ID] || tr.Workflow != workflowOf[tr.ID] || tr.Name != nameOf[tr.ID] {
				t.Errorf("%s: task %s: %s of run %s, workflow %q, name %q", tc.name, tr.ID, tr.State, tr.RunID, tr.Workflow, tr.Name)
			}
		}
		if !slices.Equal(ids, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, ids, tc.want)
		}
	}

	// Deaths at the same moment are ordered by task id.
	f.sql(`UPDATE task_runs SET finished_at = date_trunc('second', now()) - interval '1 hour' WHERE state = 'DEAD'`)
	byID := []uuid.UUID{d1, d2, d3}
	slices.SortFunc(byID, func(a, b uuid.UUID) int { return slices.Compare(a[:], b[:]) })
	got, err := f.s.ListDeadTasks(f.ctx, store.DeadQuery{})
	if err != nil {
		t.Fatal(err)
	}
	ids := make([]uuid.UUID, len(got))
	for i, tr := range got {
		ids[i] = tr.ID
	}
	if !slices.Equal(ids, byID) {
		t.Fatalf("ties: %v, want by id %v", ids, byID)
	}
}

// TestListDeadTasksReturnsAHundredByDefault: a Limit of 0 (or below) is
// 100, a larger one is kept.
func TestListDeadTasksReturnsAHundredByDefault(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	run, _ := f.deadOneShot()
	f.sql(`INSERT INTO task_runs (id, run_id, task_name, handler, state, max_attempts, finished_at)
SELECT gen_random_uuid(), $1, 'x' || g, 'noop', 'DEAD', 1, now() FROM generate_series(1, 150) g`, run)
	for _, tc := range []struct{ limit, want int }{{0, 100}, {-1, 100}, {120, 120}, {500, 151}} {
		got, err := f.s.ListDeadTasks(f.ctx, store.DeadQuery{Limit: tc.limit})
		if err != nil || len(got) != tc.want {
			t.Errorf("Limit %d: %d tasks, %v; want %d", tc.limit, len(got), err, tc.want)
		}
	}
}
