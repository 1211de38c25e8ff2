package store_test

import (
	"database/sql"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/flowforge/flowforge/core/store"
)

// qHeldHistory makes, among qSweepHistory's runs, every fiftieth run the
// child of the run created before it (its task t3), and every run's
// SUCCEEDED t2 a wait completed by an event of its own (events and
// event_deliveries grow with history too).
const qHeldHistory = `
WITH o AS (
    SELECT id, row_number() OVER (ORDER BY created_at, id) AS rn FROM workflow_runs
), kids AS (
    UPDATE workflow_runs c SET parent_run_id = p.id, depth = 1,
           parent_task_run_id = (SELECT t.id FROM task_runs t WHERE t.run_id = p.id AND t.task_name = 't3')
      FROM o oc JOIN o p ON p.rn = oc.rn - 1
     WHERE c.id = oc.id AND oc.rn % 50 = 0
), w AS (
    UPDATE task_runs t SET kind = 'wait', handler = '', wait_event = 'e', wait_key = t.run_id::text, on_timeout = 'fail'
     WHERE t.task_name = 't2' AND t.state = 'SUCCEEDED'
 RETURNING t.id, t.run_id
), e AS (
    INSERT INTO events (id, name, key, keep_until) SELECT 'ev-' || w.id, 'e', w.run_id::text, now() FROM w
)
INSERT INTO event_deliveries (event_id, task_run_id, run_id) SELECT 'ev-' || w.id, w.id, w.run_id FROM w`

// TestGetRunAndGetTaskReadHeldFieldsThroughIndexes: what run show and task
// show read of held tasks and child runs grows with history (child runs,
// event deliveries), so each of GetRun's and GetTask's statements, custom
// plan or generic (what a prepared statement may switch to), must find
// its rows by key: on 20,000 settled runs (100,000 task runs, 400 of the
// runs children, 19,000 waits each delivered an event; ANALYZEd) none
// holds a Seq Scan on workflow_runs, task_runs, events or
// event_deliveries, and a run's children are found through
// workflow_runs_parent.
func TestGetRunAndGetTaskReadHeldFieldsThroughIndexes(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	wf := f.apply(historyChain)
	for _, q := range []struct {
		sql  string
		args []any
	}{
		{qSweepHistory, []any{wf.ID, 20000, 0}},
		{qHeldHistory, nil},
		{"ANALYZE workflow_runs, task_runs, events, event_deliveries", nil},
	} {
		if _, err := f.db.ExecContext(f.ctx, q.sql, q.args...); err != nil {
			t.Fatalf("build the history: %.40s: %v", q.sql, err)
		}
	}
	var parent, wait, child string
	if err := f.db.QueryRowContext(f.ctx, `SELECT c.parent_run_id, t.id, c.id FROM workflow_runs c
	    JOIN task_runs t ON t.run_id = c.parent_run_id AND t.task_name = 't2' WHERE c.parent_run_id IS NOT NULL LIMIT 1`).Scan(&parent, &wait, &child); err != nil {
		t.Fatal(err)
	}
	args := map[string]string{
		"run": q(parent), "run tasks": q(parent), "children": q(parent) + ", " + fmt.Sprint(store.ChildRunsShown),
		"task": q(wait), "child run": q(child),
	}
	conn, err := f.db.Conn(f.ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	tables := map[string]bool{"workflow_runs": true, "task_runs": true, "events": true, "event_deliveries": true}
	for name, query := range store.ShowQueries() {
		for _, mode := range []string{"force_custom_plan", "force_generic_plan"} {
			plan := explainPrepared(t, conn, query, mode, args[name])
			walk := nodeTypes(plan, 1)
			scans := seqScans(plan, "", tables)
			if name == "children" && !strings.Contains(walk, "workflow_runs_parent") {
				scans = append(scans, "(workflow_runs_parent is not used)")
			}
			if len(scans) > 0 {
				t.Errorf("%s (%s) reads what grows with history:\n  %s\nplan:\n%s", name, mode, strings.Join(scans, "\n  "), walk)
			} else if testing.Verbose() {
				t.Logf("%s (%s):\n%s", name, mode, walk)
			}
		}
	}
}

// q is id as an SQL literal.
func q(id string) string { return "'" + id + "'" }

// explainPrepared returns the plan of query, prepared, executed with args
// (SQL literals) under plan_cache_mode mode, through conn.
func explainPrepared(t *testing.T, conn *sql.Conn, query, mode, args string) planNode {
	t.Helper()
	ctx := t.Context()
	for _, s := range []string{"SET plan_cache_mode = " + mode, "PREPARE shown AS " + query} {
		if _, err := conn.ExecContext(ctx, s); err != nil {
			t.Fatalf("%.60s: %v", s, err)
		}
	}
	defer func() {
		if _, err := conn.ExecContext(ctx, "DEALLOCATE shown; RESET plan_cache_mode"); err != nil {
			t.Fatal(err)
		}
	}()
	var js string
	if err := conn.QueryRowContext(ctx, fmt.Sprintf("EXPLAIN (FORMAT JSON) EXECUTE shown(%s)", args)).Scan(&js); err != nil {
		t.Fatalf("explain: %v", err)
	}
	var plans []struct{ Plan planNode }
	if err := json.Unmarshal([]byte(js), &plans); err != nil || len(plans) != 1 {
		t.Fatalf("decode the plan (%v): %s", err, js)
	}
	return plans[0].Plan
}
