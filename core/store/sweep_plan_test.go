package store_test

import (
	"database/sql"
	"encoding/json"
	"fmt"
	"github.com/google/uuid"
	"strings"
	"testing"

	"github.com/flowforge/flowforge/core/store"
)

// historyChain is the workflow of qSweepHistory's runs: five tasks in a
// chain.
const historyChain = `
name: history
tasks:
  - {name: t1, handler: noop}
  - {name: t2, handler: noop, depends_on: [t1]}
  - {name: t3, handler: noop, depends_on: [t2]}
  - {name: t4, handler: noop, depends_on: [t3]}
  - {name: t5, handler: noop, depends_on: [t4]}
`

// qSweepHistory fills a database with the history and the live work a
// scheduler's sweep meets, in one statement (generate_series, not row by
// row): $2 settled runs of historyChain's workflow $1 (every twentieth
// FAILED, its t1 DEAD and the rest UPSTREAM_FAILED; every twentieth
// CANCELLED; the others SUCCEEDED; a third fail_fast) and $3 open runs, an
// equal share of each shape a sweep kind looks for and of one none wants
// (params.shape): 0 a task running and more waiting, 1 a retry due, 2 a
// retry not yet due, 3 a failed fail_fast run with a task still to start,
// 4 a cancelled run with a task running, 5 a PENDING run with a task
// running, 6 a run with nothing active.
const qSweepHistory = `
WITH r AS (
    INSERT INTO workflow_runs (id, workflow_id, workflow_name, workflow_version, state, params, fail_fast,
                               cancel_requested_at, created_at, started_at, finished_at)
    SELECT gen_random_uuid(), w.id, w.name, w.version, x.state, jsonb_build_object('shape', x.shape),
           x.g % 3 = 0 OR coalesce(x.shape = 3, false), CASE WHEN x.shape = 4 OR x.state = 'CANCELLED' THEN x.ts END,
           x.ts, CASE WHEN x.state <> 'PENDING' THEN x.ts END, CASE WHEN x.shape IS NULL THEN x.ts END
      FROM workflows w,
           LATERAL (SELECT g, s.shape, now() - ($2::int + $3::int - g) * interval '1 second' AS ts,
                           CASE s.shape WHEN 5 THEN 'PENDING' WHEN 4 THEN 'CANCELLED' WHEN 3 THEN 'FAILED'
                                ELSE CASE WHEN s.shape IS NOT NULL THEN 'RUNNING'
                                          WHEN g % 20 = 0 THEN 'FAILED' WHEN g % 20 = 1 THEN 'CANCELLED'
                                          ELSE 'SUCCEEDED' END END AS state
                      FROM generate_series(1, $2::int + $3::int) g,
                           LATERAL (SELECT CASE WHEN g > $2::int THEN (g - $2::int) % 7 END AS shape) s) x
     WHERE w.id = $1
 RETURNING id, state, (params->>'shape')::int AS shape, created_at
)
INSERT INTO task_runs (id, run_id, task_name, handler, depends_on, state, attempt, max_attempts,
                       fencing_token, lease_expires_at, ready_at, next_attempt_at, started_at, finished_at)
SELECT gen_random_uuid(), r.id, 't' || k, 'noop', CASE WHEN k > 1 THEN ARRAY['t' || (k - 1)] ELSE '{}' END, s.state,
       1, 3, 1, CASE WHEN s.state = 'RUNNING' THEN now() + interval '1 minute' END,
       CASE WHEN s.state = 'READY' THEN now() END,
       CASE WHEN s.state = 'RETRYING' THEN now() + CASE WHEN r.shape = 2 THEN interval '1 hour' ELSE interval '-1 second' END END,
       r.created_at, CASE WHEN s.state IN ('SUCCEEDED', 'DEAD', 'CANCELLED', 'UPSTREAM_FAILED') THEN r.created_at END
  FROM r, generate_series(1, 5) k,
       LATERAL (SELECT CASE
           WHEN r.shape IS NULL THEN CASE r.state WHEN 'SUCCEEDED' THEN 'SUCCEEDED' WHEN 'CANCELLED' THEN 'CANCELLED'
                                     ELSE CASE WHEN k = 1 THEN 'DEAD' ELSE 'UPSTREAM_FAILED' END END
           WHEN r.shape = 0 THEN (ARRAY['SUCCEEDED', 'RUNNING', 'PENDING', 'PENDING', 'PENDING'])[k]
           WHEN r.shape IN (1, 2) THEN (ARRAY['SUCCEEDED', 'RETRYING', 'PENDING', 'PENDING', 'PENDING'])[k]
           WHEN r.shape = 3 THEN (ARRAY['SUCCEEDED', 'DEAD', 'UPSTREAM_FAILED', 'UPSTREAM_FAILED', 'READY'])[k]
           WHEN r.shape IN (4, 5) THEN (ARRAY['RUNNING', 'PENDING', 'PENDING', 'PENDING', 'PENDING'])[k]
           ELSE 'SUCCEEDED' END AS state) s`

// planNode is the part of an EXPLAIN (FORMAT JSON) node the plan checks
// read.
type planNode struct {
	NodeType string `json:"Node Type"`
	JoinType string `json:"Join Type"`
	Relation string `json:"Relation Name"`
	Index    string `json:"Index Name"`
	Cond     string `json:"Index Cond"`
	Subplan  string `json:"Subplan Name"`
	// Rows and Loops are EXPLAIN ANALYZE's actual rows (per loop) and
	// loops (0 without ANALYZE).
	Rows  float64    `json:"Actual Rows"`
	Loops float64    `json:"Actual Loops"`
	Plans []planNode `json:"Plans"`
}

// String is n's node type, with its join type, relation, index and
// subplan name when it has them ("Hash Join (Anti)", "Seq Scan on
// task_runs [SubPlan 2]").
func (n planNode) String() string {
	s := n.NodeType
	if n.JoinType != "" && n.JoinType != "Inner" {
		s += " (" + n.JoinType + ")"
	}
	if n.Relation != "" {
		s += " on " + n.Relation
	}
	if n.Index != "" {
		s += " using " + n.Index
	}
	if n.Subplan != "" {
		s += " [" + n.Subplan + "]"
	}
	return s
}

// seqScans returns, for every Seq Scan (parallel or not) on one of
// tables in the tree under n, the path of node types from the root to it.
func seqScans(n planNode, path string, tables map[string]bool) []string {
	here := n.String()
	if path != "" {
		here = path + " > " + here
	}
	var out []string
	if strings.HasSuffix(n.NodeType, "Seq Scan") && tables[n.Relation] {
		out = append(out, here)
	}
	for _, c := range n.Plans {
		out = append(out, seqScans(c, here, tables)...)
	}
	return out
}

// nodeTypes is the plan tree under n, one node a line, indented by depth.
func nodeTypes(n planNode, depth int) string {
	s := strings.Repeat("  ", depth) + n.String() + "\n"
	for _, c := range n.Plans {
		s += nodeTypes(c, depth+1)
	}
	return s
}

// explainSweepPart returns the plan PostgreSQL chooses for p's query with
// $1 = limit (and the cursor from the oldest open run, 4 × limit probes,
// for a part that takes them) under plan_cache_mode mode (force_custom_plan: the plan for this
// value; force_generic_plan: the one a prepared statement may switch to
// after five executions, pgx's statement cache being on), through conn.
func explainSweepPart(t *testing.T, conn *sql.Conn, p store.SweepPart, mode string, limit int) planNode {
	t.Helper()
	ctx := t.Context()
	for _, q := range []string{"SET plan_cache_mode = " + mode, "PREPARE sweep_part AS " + p.Query} {
		if _, err := conn.ExecContext(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	defer func() {
		if _, err := conn.ExecContext(ctx, "DEALLOCATE sweep_part; RESET plan_cache_mode"); err != nil {
			t.Fatal(err)
		}
	}()
	var js string
	args := fmt.Sprint(limit)
	if p.Cursor {
		args += fmt.Sprintf(", '0001-01-01T00:00:00Z', '%s', %d", uuid.Nil, store.SweepProbesPerCandidate*limit)
	}
	if err := conn.QueryRowContext(ctx, fmt.Sprintf("EXPLAIN (FORMAT JSON) EXECUTE sweep_part(%s)", args)).Scan(&js); err != nil {
		t.Fatalf("explain: %v", err)
	}
	var plans []struct{ Plan planNode }
	if err := json.Unmarshal([]byte(js), &plans); err != nil || len(plans) != 1 {
		t.Fatalf("decode the plan (%v): %s", err, js)
	}
	return plans[0].Plan
}

// TestEverySweepPartIsIndexBacked: the sweep runs every SweepInterval, so
// each part of its query (each candidate kind, and the whole) must find its
// runs through an index on the live states, its cost following the live
// work and never the history. On a database with 100,000 settled task runs
// and 700 open runs of every shape (ANALYZEd), no plan of any part, custom
// (for the scheduler's limit) or generic (what a prepared statement may
// switch to), may hold a Seq Scan on task_runs or workflow_runs; a failure
// names the part, the plan and the path to the node.
func TestEverySweepPartIsIndexBacked(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	wf := f.apply(historyChain)
	const settled, open = 20000, 700
	if _, err := f.db.ExecContext(f.ctx, qSweepHistory, wf.ID, settled, open); err != nil {
		t.Fatalf("build the history: %v", err)
	}
	if _, err := f.db.ExecContext(f.ctx, "ANALYZE workflow_runs, task_runs"); err != nil {
		t.Fatal(err)
	}
	conn, err := f.db.Conn(f.ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	tables := map[string]bool{"task_runs": true, "workflow_runs": true}
	for _, p := range store.SweepParts() {
		for _, mode := range []string{"force_custom_plan", "force_generic_plan"} {
			plan := explainSweepPart(t, conn, p, mode, 500)
			if scans := seqScans(plan, "", tables); len(scans) > 0 {
				t.Errorf("sweep part %q (%s) scans history:\n  %s\nplan:\n%s", p.Kind, mode, strings.Join(scans, "\n  "), nodeTypes(plan, 1))
			} else if testing.Verbose() {
				t.Logf("sweep part %q (%s):\n%s", p.Kind, mode, nodeTypes(plan, 1))
			}
		}
	}
}
