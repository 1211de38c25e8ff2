package cli_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/google/uuid"
)

const deleteOne = "name: one\ntasks:\n  - {name: a, handler: noop}\n"

// settledAgo backdates a settled run's finish by days on the database clock.
func (h *harness) settledAgo(id uuid.UUID, days int) {
	h.t.Helper()
	if _, err := h.db.ExecContext(h.ctx, `UPDATE workflow_runs SET finished_at = now() - $2::int * interval '1 day' WHERE id = $1`, id, days); err != nil {
		h.t.Fatal(err)
	}
}

func (h *harness) deletions() int {
	h.t.Helper()
	var n int
	if err := h.db.QueryRowContext(h.ctx, `SELECT count(*) FROM run_deletions`).Scan(&n); err != nil {
		h.t.Fatal(err)
	}
	return n
}

// TestRunDeleteBadInputIsRefusedAndDeletesNothing: every bad input is a
// clear error with its exit code; no row changes and nothing is audited.
func TestRunDeleteBadInputIsRefusedAndDeletesNothing(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	failed, _ := h.deadRun()
	h.apply(deleteOne)
	open := h.trigger("one")
	unknown := uuid.NewString()
	del := func(args ...string) []string { return append([]string{"run", "delete"}, args...) }
	before := h.snapshot()
	for _, tc := range []struct {
		name string
		args []string
		code int
		want []string
	}{
		{"nothing selected", del("--reason", "r"), 2, []string{"run delete needs at least one run id, or --older-than D with --state S"}},
		{"ids and a filter", del(failed.String(), "--older-than", "1d", "--state", "FAILED", "--reason", "r"), 2, []string{"give run ids or --older-than with --state, not both"}},
		{"--older-than without --state", del("--older-than", "1d", "--reason", "r"), 2, []string{"--older-than needs --state"}},
		{"--state without --older-than", del("--state", "FAILED", "--reason", "r"), 2, []string{"--state needs --older-than"}},
		{"a state that is not final", del("--older-than", "1d", "--state", "RUNNING", "--reason", "r", "--yes"), 2, []string{`--state "RUNNING": only runs in a final state can be deleted: want SUCCEEDED, FAILED or CANCELLED`}},
		{"a malformed age", del("--older-than", "soon", "--state", "FAILED", "--include-dead", "--reason", "r", "--yes"), 2, []string{`--older-than: "soon": want a duration such as 3d`}},
		{"an empty age", del("--older-than", "", "--state", "FAILED", "--reason", "r", "--yes"), 2, []string{"--older-than is empty: give a value (run delete needs both --older-than and --state, or run ids)"}},
		{"an empty state", del("--older-than", "1d", "--state", " ", "--reason", "r", "--yes"), 2, []string{"--state is empty: give a value (run delete needs both --older-than and --state, or run ids)"}},
		{"FAILED runs without --include-dead", del("--older-than", "1d", "--state", "FAILED", "--reason", "r", "--yes"), 2, []string{"--state FAILED: every FAILED run holds a DEAD task that a requeue could still retry; add --include-dead to delete them anyway"}},
		{"a filter without --yes off a terminal", del("--older-than", "1d", "--state", "SUCCEEDED", "--reason", "r"), 2, []string{"needs --yes when not run on a terminal"}},
		{"a run holding a DEAD task by id, without --include-dead", del(failed.String(), "--reason", "r"), 1, []string{"run " + failed.String() + " (FAILED, 1 DEAD): run holds DEAD tasks that a requeue could still retry: deleting it needs the opt-in (ffctl run delete --include-dead) (nothing was deleted)"}},
		{"the same, dry run", del(failed.String(), "--dry-run"), 1, []string{"run holds DEAD tasks"}},
		{"--yes with ids", del(failed.String(), "--reason", "r", "--yes"), 2, []string{"--yes only applies with --older-than"}},
		{"no reason", del(failed.String()), 2, []string{"--reason is required: say why the runs are deleted"}},
		{"malformed id", del("not-a-uuid", "--reason", "r"), 2, []string{`malformed run id "not-a-uuid"`}},
		{"nil id", del(uuid.Nil.String(), "--reason", "r"), 2, []string{"nil UUID"}},
		{"bad output format", del(failed.String(), "--reason", "r", "-o", "yaml"), 2, []string{"yaml"}},
		{"unknown id beside a good one", del(failed.String(), unknown, "--reason", "r"), 1, []string{"run " + unknown + ": not found (nothing was deleted)"}},
		{"open run beside a settled one", del(failed.String(), open.String(), "--reason", "r"), 1, []string{"run " + open.String() + " (RUNNING): run is not settled", "(nothing was deleted)"}},
		{"open run, dry run", del(open.String(), "--dry-run"), 1, []string{"run is not settled"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := h.ff(tc.args...)
			expect(t, r, tc.code, tc.want...)
			if r.stdout != "" {
				t.Fatalf("printed on stdout: %q", r.stdout)
			}
			h.assertUnchanged(before)
			if n := h.deletions(); n != 0 {
				t.Fatalf("%d run_deletions rows written", n)
			}
		})
	}
}

// TestRunDeleteByIDAndByAgeIsAudited: a dry run lists and deletes nothing;
// deleting by id and by --older-than --state removes the runs with their
// tasks and history and writes one run_deletions row each (no foreign
// key: the record stays), JSON shape included.
func TestRunDeleteByIDAndByAgeIsAudited(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	failed, _ := h.deadRun()
	old1, _ := h.deadRun()
	old2, _ := h.deadRun()
	recent, _ := h.deadRun()
	for _, id := range []uuid.UUID{old1, old2} {
		h.settledAgo(id, 40)
	}
	h.settledAgo(recent, 2)

	before := h.snapshot()
	r := h.must("run", "delete", failed.String()[:8], "--include-dead", "--dry-run", "-o", "json")
	var dry struct {
		DryRun bool `json:"dry_run"`
		Runs   []struct {
			RunID    uuid.UUID `json:"run_id"`
			Workflow string    `json:"workflow"`
			State    string    `json:"state"`
			TaskRuns int       `json:"task_runs"`
			Dead     int       `json:"dead_tasks"`
		} `json:"runs"`
		TaskRuns int `json:"task_runs"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &dry); err != nil {
		t.Fatalf("json: %v\n%s", err, r.stdout)
	}
	if !dry.DryRun || len(dry.Runs) != 1 || dry.Runs[0].RunID != failed || dry.Runs[0].State != "FAILED" || dry.Runs[0].Workflow != "twostep" || dry.Runs[0].TaskRuns != 2 || dry.Runs[0].Dead != 1 || dry.TaskRuns != 2 {
		t.Fatalf("dry run: %+v", dry)
	}
	h.assertUnchanged(before)

	r = h.must("run", "delete", failed.String(), "--include-dead", "--reason", "test data")
	if !strings.Contains(r.stdout, failed.String()) || !strings.Contains(r.stderr, "deleted 1 run(s) and 2 task run(s)") {
		t.Fatalf("delete by id: %s", r)
	}
	r = h.must("run", "delete", "--older-than", "30d", "--state", "failed", "--include-dead", "--reason", "incident closed", "--yes", "-o", "json")
	var byAge struct {
		DryRun bool `json:"dry_run"`
		Runs   []struct {
			RunID uuid.UUID `json:"run_id"`
		} `json:"runs"`
		TaskRuns int `json:"task_runs"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &byAge); err != nil {
		t.Fatalf("json: %v\n%s", err, r.stdout)
	}
	if byAge.DryRun || len(byAge.Runs) != 2 || byAge.TaskRuns != 4 {
		t.Fatalf("delete by age: %+v", byAge)
	}
	for _, id := range []uuid.UUID{failed, old1, old2} {
		var runs, tasks, events int
		if err := h.db.QueryRowContext(h.ctx, `SELECT (SELECT count(*) FROM workflow_runs WHERE id = $1), (SELECT count(*) FROM task_runs WHERE run_id = $1), (SELECT count(*) FROM task_events WHERE run_id = $1)`, id).Scan(&runs, &tasks, &events); err != nil {
			t.Fatal(err)
		}
		if runs+tasks+events != 0 {
			t.Fatalf("run %s: %d runs, %d tasks, %d events left", id, runs, tasks, events)
		}
	}
	if h.run(recent).ID != recent {
		t.Fatal("the recent run is gone")
	}
	var actor, reason, state, wf string
	var tasks int
	if err := h.db.QueryRowContext(h.ctx, `SELECT actor, reason, state, workflow_name, task_runs_deleted FROM run_deletions WHERE run_id = $1`, failed).Scan(&actor, &reason, &state, &wf, &tasks); err != nil {
		t.Fatalf("audit row: %v", err)
	}
	if actor == "" || reason != "test data" || state != "FAILED" || wf != "twostep" || tasks != 2 || h.deletions() != 3 {
		t.Fatalf("audit: actor %q reason %q state %s workflow %s tasks %d; %d rows", actor, reason, state, wf, tasks, h.deletions())
	}
	r = h.ff("run", "delete", failed.String(), "--reason", "again")
	expect(t, r, 1, "not found (nothing was deleted)")

	// A CANCELLED run holding a DEAD task: the filter skips it without
	// --include-dead, as the pruner keeps it without --retain-dead.
	if _, err := h.db.ExecContext(h.ctx, `UPDATE workflow_runs SET state = 'CANCELLED', finished_at = now() - interval '40 days' WHERE id = $1`, recent); err != nil {
		t.Fatal(err)
	}
	r = h.must("run", "delete", "--older-than", "30d", "--state", "CANCELLED", "--reason", "cancelled", "--yes")
	if !strings.Contains(r.stderr, "deleted 0 run(s)") || h.run(recent).ID != recent {
		t.Fatalf("a CANCELLED run holding a DEAD task was deleted without --include-dead: %s", r)
	}
	r = h.must("run", "delete", "--older-than", "30d", "--state", "CANCELLED", "--include-dead", "--reason", "cancelled", "--yes")
	if !strings.Contains(r.stderr, "deleted 1 run(s) and 2 task run(s)") {
		t.Fatalf("with --include-dead: %s", r)
	}
}
