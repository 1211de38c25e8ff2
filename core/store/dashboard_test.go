package store_test

import (
	"context"
	"strings"
	"testing"

	"github.com/flowforge/flowforge/core/store"
	"github.com/flowforge/flowforge/core/store/storetest"
)

// TestDashboardQueriesUseIndexes seeds history, then EXPLAINs the
// dashboard's own queries: none may scan a table sequentially (but the
// pauses, one row per paused workflow).
func TestDashboardQueriesUseIndexes(t *testing.T) {
	t.Parallel()
	s, db, _ := storetest.NewWithDB(t)
	ctx := context.Background()
	for _, q := range []string{
		`INSERT INTO workflows (name, version, definition) VALUES ('w', 1, '{}')`,
		`INSERT INTO workflow_runs (id, workflow_id, workflow_name, workflow_version, state, created_at)
SELECT md5('run' || g)::uuid, (SELECT id FROM workflows LIMIT 1), 'w', 1,
       CASE WHEN g % 100 = 0 THEN 'FAILED' WHEN g % 7 = 0 THEN 'RUNNING' ELSE 'SUCCEEDED' END,
       now() - g * interval '1 second'
  FROM generate_series(1, 20000) g`,
		`INSERT INTO task_runs (id, run_id, task_name, handler, state, max_attempts)
SELECT md5('task' || g)::uuid, md5('run' || g)::uuid, 't', 'noop', 'SUCCEEDED', 3 FROM generate_series(1, 20000) g`,
		`INSERT INTO outbox (task_run_id, fencing_token_snapshot, payload, published_at)
SELECT id, 1, '{}', CASE WHEN random() < 0.999 THEN now() END FROM task_runs`,
		`INSERT INTO workflow_pauses (workflow_name, mode, actor, reason) VALUES ('other', 'queue', 'test', 'a pause of another workflow')`,
		`ANALYZE workflows, workflow_runs, task_runs, outbox, workflow_pauses`, // this schema's tables only: other tests' schemas come and go
	} {
		if _, err := db.ExecContext(ctx, q); err != nil {
			t.Fatalf("seed: %v", err)
		}
	}
	for name, q := range map[string]string{
		"RunStateCountsBounded":   strings.ReplaceAll(store.QRunStateCountsBounded, "$1", "10000"),
		"OldestPendingDispatches": strings.ReplaceAll(store.QOldestPending, "$1", "20"),
	} {
		text := explainText(t, ctx, db, name, q)
		// workflow_pauses holds one row per paused workflow, never
		// history: reading it whole costs the same at any age.
		if strings.Contains(strings.ReplaceAll(text, "Seq Scan on workflow_pauses", ""), "Seq Scan") {
			t.Errorf("%s scans sequentially:\n%s", name, text)
		}
	}
	counts, err := s.RunStateCountsBounded(ctx, 1000)
	if err != nil {
		t.Fatal(err)
	}
	if counts["SUCCEEDED"] != 1000 || counts["FAILED"] != 200 || counts["CANCELLED"] != 0 {
		t.Errorf("counts = %v", counts)
	}
	rows, err := s.OldestPendingDispatches(ctx, 5)
	if err != nil {
		t.Fatal(err)
	}
	for i := 1; i < len(rows); i++ {
		if rows[i].ID <= rows[i-1].ID {
			t.Errorf("pending rows not oldest first: %d after %d", rows[i].ID, rows[i-1].ID)
		}
	}
	if len(rows) > 0 && (rows[0].Workflow != "w" || rows[0].TaskName != "t") {
		t.Errorf("pending row %+v", rows[0])
	}
}
