package store_test

import (
	"database/sql"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/flowforge/flowforge/core/store"
)

// qHotPathBacklog adds to historyChain's workflow $1 the live load the hot
// path's plans must not follow: $2 runs each with a READY, a RUNNING and a
// PENDING task (as many in each partial index of the live states).
const qHotPathBacklog = `
WITH r AS (
    INSERT INTO workflow_runs (id, workflow_id, workflow_name, workflow_version, state, created_at)
    SELECT gen_random_uuid(), w.id, w.name, w.version, 'RUNNING', now() FROM workflows w, generate_series(1, $2::int)
     WHERE w.id = $1
 RETURNING id
)
INSERT INTO task_runs (id, run_id, task_name, handler, state, max_attempts, fencing_token, ready_at, lease_expires_at, depends_on)
SELECT gen_random_uuid(), r.id, 't' || k, 'noop', (ARRAY['READY', 'RUNNING', 'PENDING'])[k], 3, 1,
       now(), CASE WHEN k = 2 THEN now() + interval '1 hour' END, CASE WHEN k = 3 THEN ARRAY['t1'] ELSE '{}' END
  FROM r, generate_series(1, 3) k`

// explainKeyPlan returns the plan query (params parameters) is cached
// with when sent with KeyPlan's settings: generic (made once, kept
// whatever the values) and of key lookups.
func explainKeyPlan(t *testing.T, conn *sql.Conn, query string, params int) planNode {
	t.Helper()
	ctx := t.Context()
	names, values := store.KeyPlanSettings()
	var set []string
	for i := range names {
		set = append(set, fmt.Sprintf("SET %s = %s", names[i], values[i]))
	}
	for _, q := range append(set, "PREPARE hot AS "+query) {
		if _, err := conn.ExecContext(ctx, q); err != nil {
			t.Fatalf("%.60s: %v", q, err)
		}
	}
	defer func() {
		if _, err := conn.ExecContext(ctx, "DEALLOCATE hot; RESET ALL"); err != nil {
			t.Fatal(err)
		}
	}()
	nulls := strings.TrimSuffix(strings.Repeat("NULL, ", params), ", ")
	var js string
	if err := conn.QueryRowContext(ctx, fmt.Sprintf("EXPLAIN (FORMAT JSON) EXECUTE hot(%s)", nulls)).Scan(&js); err != nil {
		t.Fatalf("explain: %v", err)
	}
	var plans []struct{ Plan planNode }
	if err := json.Unmarshal([]byte(js), &plans); err != nil || len(plans) != 1 {
		t.Fatalf("decode the plan (%v): %s", err, js)
	}
	return plans[0].Plan
}

// wholeReads returns the paths to the nodes under n that read a table of
// tables whole (a Seq Scan, or an index scan without a condition) or read
// one of the indexes backlogs (whose length is a backlog's).
func wholeReads(n planNode, path string, tables, backlogs map[string]bool) []string {
	here := n.String()
	if path != "" {
		here = path + " > " + here
	}
	var out []string
	switch {
	case strings.HasSuffix(n.NodeType, "Seq Scan") && tables[n.Relation]:
		out = append(out, here)
	case backlogs[n.Index]:
		out = append(out, here)
	case strings.Contains(n.NodeType, "Index") && n.Index != "" && n.Cond == "" && tables[n.Relation]:
		out = append(out, here+" (no condition)")
	}
	for _, c := range n.Plans {
		out = append(out, wholeReads(c, here, tables, backlogs)...)
	}
	return out
}

// TestTheHotPathsCachedPlansLookRowsUpByKey: issue 24. The claims, the
// renewal, the finishes and the trigger are prepared statements sent with
// KeyPlan: their plan is made once per connection and kept whatever the
// statistics say later, so it must be made of key lookups whatever they
// said then. For a database in each of three states — new and never
// analysed; analysed while empty; analysed with 20,000 settled task runs —
// to which a backlog of 3,000 live task runs (READY, RUNNING, PENDING) is
// then added that the statistics do not know of, no plan may read
// task_runs, workflow_runs or outbox whole, nor the partial index of the
// READY or RUNNING tasks or of the open runs. (Left to the statistics, the
// single claim's plan read every READY task, and the batches' read
// task_runs sequentially.)
func TestTheHotPathsCachedPlansLookRowsUpByKey(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name             string
		history, analyse bool
	}{
		{"never analysed", false, false},
		{"analysed empty", false, true},
		{"analysed with history", true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t)
			wf := f.apply(historyChain)
			if tc.history {
				if _, err := f.db.ExecContext(f.ctx, qSweepHistory, wf.ID, 4000, 0); err != nil {
					t.Fatalf("build the history: %v", err)
				}
			}
			if tc.analyse {
				if _, err := f.db.ExecContext(f.ctx, "ANALYZE workflow_runs, task_runs, outbox"); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := f.db.ExecContext(f.ctx, qHotPathBacklog, wf.ID, 1000); err != nil {
				t.Fatalf("build the backlog: %v", err)
			}
			conn, err := f.db.Conn(f.ctx)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { conn.Close() })
			tables := map[string]bool{"task_runs": true, "workflow_runs": true, "outbox": true}
			backlogs := map[string]bool{"task_runs_ready": true, "task_runs_running_lease": true, "workflow_runs_open": true}
			for _, st := range store.HotPathStatements() {
				plan := explainKeyPlan(t, conn, st.Query, st.Params)
				if bad := wholeReads(plan, "", tables, backlogs); len(bad) > 0 {
					t.Errorf("%s: the cached plan reads what grows with history or a backlog:\n  %s\nplan:\n%s", st.Name, strings.Join(bad, "\n  "), nodeTypes(plan, 1))
				} else if testing.Verbose() {
					t.Logf("%s:\n%s", st.Name, nodeTypes(plan, 1))
				}
			}
		})
	}
}
