package store_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/flowforge/flowforge/core"
	"github.com/flowforge/flowforge/core/store"
	"github.com/flowforge/flowforge/core/store/storetest"
)

// TestResolveIDUsesPrimaryKey seeds 20000 runs and tasks, then EXPLAINs the
// prefix look-ups (each must be an (index-only) scan of its table's
// primary key whose index condition is the uuid range, never a sequential
// scan nor an index walk with a filter) and resolves unique, ambiguous, unknown and
// wrong-kind prefixes.
func TestResolveIDUsesPrimaryKey(t *testing.T) {
	t.Parallel()
	s, db, _ := storetest.NewWithDB(t)
	ctx := context.Background()
	for _, q := range []string{
		`INSERT INTO workflows (name, version, definition) VALUES ('w', 1, '{}')`,
		`INSERT INTO workflow_runs (id, workflow_id, workflow_name, workflow_version, state)
SELECT md5('run' || g)::uuid, (SELECT id FROM workflows LIMIT 1), 'w', 1, 'SUCCEEDED' FROM generate_series(1, 20000) g`,
		`INSERT INTO task_runs (id, run_id, task_name, handler, state, max_attempts)
SELECT md5('task' || g)::uuid, md5('run' || g)::uuid, 't', 'noop', 'SUCCEEDED', 3 FROM generate_series(1, 20000) g`,
		// Two runs sharing the prefix abcdef01, one task alone under 12345678.
		`INSERT INTO workflow_runs (id, workflow_id, workflow_name, workflow_version, state) VALUES
 ('abcdef01-0000-4000-8000-000000000001', (SELECT id FROM workflows LIMIT 1), 'w', 1, 'SUCCEEDED'),
 ('abcdef01-1000-4000-8000-000000000002', (SELECT id FROM workflows LIMIT 1), 'w', 1, 'SUCCEEDED')`,
		`INSERT INTO task_runs (id, run_id, task_name, handler, state, max_attempts) VALUES
 ('12345678-0000-4000-8000-000000000001', 'abcdef01-0000-4000-8000-000000000001', 't', 'noop', 'SUCCEEDED', 3)`,
		`ANALYZE workflows, workflow_runs, task_runs, outbox`, // this schema's tables only: other tests' schemas come and go
	} {
		if _, err := db.ExecContext(ctx, q); err != nil {
			t.Fatalf("seed: %v", err)
		}
	}
	p, err := core.ParseIDPrefix("abcdef01")
	if err != nil {
		t.Fatal(err)
	}
	for name, tc := range map[string]struct{ q, pkey string }{
		"runs":  {store.QMatchRunIDs, "workflow_runs_pkey"},
		"tasks": {store.QMatchTaskIDs, "task_runs_pkey"},
	} {
		q := strings.NewReplacer("$1", "'"+p.Lo.String()+"'::uuid", "$2", "'"+p.Hi.String()+"'::uuid").Replace(tc.q)
		text := explainText(t, ctx, db, name, q)
		// The range must be the index condition: an index scan that only
		// filters (a LIKE or a text comparison walking the whole index in
		// order) is a scan of the table in disguise.
		if strings.Contains(text, "Seq Scan") || !strings.Contains(text, "Scan using "+tc.pkey) ||
			!strings.Contains(text, "Index Cond: ((id >= ") || !strings.Contains(text, "AND (id <= ") || strings.Contains(text, "Filter:") {
			t.Errorf("%s look-up is not a range scan of %s:\n%s", name, tc.pkey, text)
		}
	}

	resolve := func(kind store.IDKind, prefix string) (uuid.UUID, error) {
		t.Helper()
		p, err := core.ParseIDPrefix(prefix)
		if err != nil {
			t.Fatal(err)
		}
		return s.ResolveID(ctx, kind, p)
	}
	if id, err := resolve(store.IDRun, "abcdef01-1000-4000-8000-000000000002"); err != nil || id.String() != "abcdef01-1000-4000-8000-000000000002" {
		t.Errorf("whole run id: %s, %v", id, err)
	}
	if id, err := resolve(store.IDRun, "abcdef01-1"); err != nil || id.String() != "abcdef01-1000-4000-8000-000000000002" {
		t.Errorf("unique run prefix: %s, %v", id, err)
	}
	var amb *store.AmbiguousIDError
	if _, err := resolve(store.IDRun, "abcdef01"); !errors.As(err, &amb) || len(amb.Candidates) != 2 {
		t.Errorf("ambiguous run prefix: %v", err)
	}
	var wrong *store.WrongKindError
	if _, err := resolve(store.IDRun, "12345678"); !errors.As(err, &wrong) || wrong.Got != store.IDTask || wrong.ID.String() != "12345678-0000-4000-8000-000000000001" {
		t.Errorf("task id as run id: %v", err)
	} else if !strings.Contains(err.Error(), "is a task id, not a run id (ffctl task show 12345678-0000-4000-8000-000000000001)") {
		t.Errorf("wrong-kind message: %v", err)
	}
	if _, err := resolve(store.IDTask, "abcdef01-0000-4000-8000-000000000001"); !errors.As(err, &wrong) || wrong.Got != store.IDRun {
		t.Errorf("run id as task id: %v", err)
	}
	if _, err := resolve(store.IDTask, "fedcba9876"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("unknown prefix: %v", err)
	}
}
