package tui

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/flowforge/flowforge/core/store"
	"github.com/flowforge/flowforge/core/store/storetest"
)

// seed fills a throwaway database with history through one INSERT ...
// SELECT generate_series per table: runs of 5 tasks, mostly SUCCEEDED, the
// newest 100 runs live (one RUNNING task with a lease, the rest PENDING),
// every 500th run FAILED with a DEAD task, an outbox row per task (all
// published but 20), and three daemon processes. It returns a live run and
// a DEAD task.
func seed(tb testing.TB, url string, tasks int) (runID, deadID uuid.UUID) {
	tb.Helper()
	db := storetest.DB(tb, url)
	runs := tasks / 5
	live := runs - 100
	stmts := []string{
		`INSERT INTO workflows (name, version, definition) VALUES ('nightly-report', 1, '{"tasks": []}')`,
		fmt.Sprintf(`INSERT INTO workflow_runs (id, workflow_id, workflow_name, workflow_version, state, created_at, started_at, finished_at)
SELECT md5('run' || g)::uuid, (SELECT id FROM workflows LIMIT 1),
       CASE WHEN g %% 3 = 0 THEN 'nightly-report' ELSE 'wf-' || (g %% 7) END, 1,
       CASE WHEN g > %[2]d THEN 'RUNNING' WHEN g %% 500 = 0 THEN 'FAILED' ELSE 'SUCCEEDED' END,
       now() - (%[1]d - g) * interval '1 second',
       now() - (%[1]d - g) * interval '1 second',
       CASE WHEN g > %[2]d THEN NULL ELSE now() - (%[1]d - g) * interval '1 second' + interval '800 ms' END
  FROM generate_series(1, %[1]d) g`, runs, live),
		fmt.Sprintf(`INSERT INTO task_runs (id, run_id, task_name, handler, state, attempt, max_attempts, fencing_token, depends_on,
                       worker_id, lease_expires_at, heartbeat_at, created_at, started_at, finished_at, error)
SELECT md5('task' || g)::uuid, md5('run' || r)::uuid, 't' || k, 'noop', st,
       CASE WHEN st = 'PENDING' THEN 0 ELSE 1 END, 3, CASE WHEN st = 'PENDING' THEN 0 ELSE 2 END,
       CASE WHEN k = 0 THEN '{}'::text[] ELSE ARRAY['t' || (k - 1)] END,
       CASE WHEN st = 'RUNNING' THEN 'worker-bench-1' END,
       CASE WHEN st = 'RUNNING' THEN now() + interval '20 s' END,
       CASE WHEN st = 'RUNNING' THEN now() - interval '3 s' END,
       now() - (%[1]d - r) * interval '1 second', now() - (%[1]d - r) * interval '1 second',
       CASE WHEN st IN ('SUCCEEDED', 'DEAD') THEN now() - (%[1]d - r) * interval '1 second' + interval '500 ms' END,
       CASE WHEN st = 'DEAD' THEN 'boom: upstream said 503' END
  FROM (SELECT g, g / 5 + 1 AS r, g %% 5 AS k,
               CASE WHEN g / 5 + 1 > %[2]d THEN CASE WHEN g %% 5 = 0 THEN 'RUNNING' ELSE 'PENDING' END
                    WHEN (g / 5 + 1) %% 500 = 0 AND g %% 5 = 4 THEN 'DEAD'
                    ELSE 'SUCCEEDED' END AS st
          FROM generate_series(0, %[3]d - 1) g) s`, runs, live, tasks),
		`INSERT INTO outbox (task_run_id, fencing_token_snapshot, payload, created_at, published_at, publish_attempts)
SELECT id, 1, '{}', created_at, created_at + interval '5 ms', 1 FROM task_runs`,
		`INSERT INTO outbox (task_run_id, fencing_token_snapshot, payload, created_at)
SELECT id, 2, '{}', now() - interval '2 s' FROM task_runs WHERE state = 'PENDING' LIMIT 20`,
		`INSERT INTO task_events (task_run_id, run_id, from_state, to_state, attempt, fencing_token, actor)
SELECT id, run_id, 'RUNNING', state, attempt, fencing_token, 'worker-bench-1' FROM task_runs WHERE state IN ('DEAD', 'RUNNING')`,
		`INSERT INTO workers (id, role, hostname, pid) VALUES ('all-bench-1', 'all', 'bench', 1), ('worker-bench-1', 'worker', 'bench', 2), ('publisher-bench-1', 'publisher', 'bench', 3)`,
		`VACUUM ANALYZE workflow_runs, task_runs, outbox, task_events, workers`,
	}
	ctx := context.Background()
	for _, q := range stmts {
		if _, err := db.ExecContext(ctx, q); err != nil {
			tb.Fatalf("seed: %v\n%s", err, q)
		}
	}
	if err := db.QueryRowContext(ctx, `SELECT id FROM workflow_runs WHERE state = 'RUNNING' LIMIT 1`).Scan(&runID); err != nil {
		tb.Fatal(err)
	}
	if err := db.QueryRowContext(ctx, `SELECT id FROM task_runs WHERE state = 'DEAD' LIMIT 1`).Scan(&deadID); err != nil {
		tb.Fatal(err)
	}
	return runID, deadID
}

// refreshAll reads what every screen shows, as one refresh of each would.
func refreshAll(ctx context.Context, src Source, runID, taskID uuid.UUID) error {
	if _, err := src.Runs(ctx, RunFilter{}); err != nil {
		return err
	}
	if _, err := src.Runs(ctx, RunFilter{Workflow: "nightly-report", State: "FAILED"}); err != nil {
		return err
	}
	if _, err := src.Run(ctx, runID); err != nil {
		return err
	}
	if _, err := src.Task(ctx, taskID); err != nil {
		return err
	}
	if _, err := src.Leases(ctx); err != nil {
		return err
	}
	if _, err := src.Outbox(ctx); err != nil {
		return err
	}
	if _, err := src.Dead(ctx); err != nil {
		return err
	}
	if _, err := src.Workflows(ctx); err != nil {
		return err
	}
	_, err := src.Workers(ctx)
	return err
}

// BenchmarkRefresh measures one refresh of every screen through StoreSource
// against a history of 1,000,000 task runs (200,000 runs). Seeding takes
// about a minute; it only runs with -bench.
func BenchmarkRefresh(b *testing.B) {
	s, url := storetest.New(b)
	runID, deadID := seed(b, url, 1_000_000)
	src := NewStoreSource(s, "bench")
	ctx := context.Background()
	if err := refreshAll(ctx, src, runID, deadID); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for b.Loop() {
		if err := refreshAll(ctx, src, runID, deadID); err != nil {
			b.Fatal(err)
		}
	}
}

// TestStoreSourceReadsSeededHistory reads every screen through StoreSource
// from a seeded history (the benchmark's seeding, smaller) and checks what
// the screens get. (Index use is checked by core/store's
// TestDashboardQueriesUseIndexes and the EXPLAINs in README-tui.md.)
func TestStoreSourceReadsSeededHistory(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("seeds a database")
	}
	s, url := storetest.New(t)
	runID, deadID := seed(t, url, 50_000)
	src := NewStoreSource(s, "test")
	ctx := context.Background()
	if err := refreshAll(ctx, src, runID, deadID); err != nil {
		t.Fatal(err)
	}
	// And the data is what the screens expect.
	rd, err := src.Runs(ctx, RunFilter{})
	if err != nil || len(rd.Runs) != RunsLimit || rd.Counts["SUCCEEDED"] != RunCountCap || rd.Counts["RUNNING"] != 100 || rd.Counts["FAILED"] != 19 {
		t.Errorf("runs: %d rows, counts %v, err %v", len(rd.Runs), rd.Counts, err)
	}
	dd, err := src.Dead(ctx)
	if err != nil || len(dd.Tasks) != 19 {
		t.Errorf("dead: %d, err %v", len(dd.Tasks), err)
	}
	od, err := src.Outbox(ctx)
	if err != nil || od.Status.Pending != 20 || len(od.Oldest) != OutboxRowsLimit {
		t.Errorf("outbox: %+v, %d rows, err %v", od.Status, len(od.Oldest), err)
	}
	ld, err := src.Leases(ctx)
	if err != nil || len(ld.Leases) != 100 {
		t.Errorf("leases: %d, err %v", len(ld.Leases), err)
	}
	if _, err := src.Run(ctx, uuid.New()); !errors.Is(err, store.ErrNotFound) || errors.Is(err, ErrDisconnected) {
		t.Errorf("unknown run: %v", err)
	}
}

// TestStoreSourceFindTriggerAndWorkerPresence: against real PostgreSQL,
// the Workflows screen lists and triggers, ":" resolves a run prefix and a
// task id (and refuses short, malformed and unknown ones), and the Workers
// screen gets a worker's handler set, queue and broker connection.
func TestStoreSourceFindTriggerAndWorkerPresence(t *testing.T) {
	t.Parallel()
	s, _ := storetest.New(t)
	ctx := context.Background()
	storetest.Apply(t, s, "name: mail\ntasks:\n  - {name: send, handler: noop}\n")
	src := NewStoreSource(s, "test")
	wd, err := src.Workflows(ctx)
	if err != nil || len(wd.Workflows) != 1 || wd.Workflows[0].Name != "mail" {
		t.Fatalf("workflows: %+v, %v", wd.Workflows, err)
	}
	runID, err := src.Trigger(ctx, "mail", json.RawMessage(`{"to":"ops"}`))
	if err != nil {
		t.Fatal(err)
	}
	run, err := s.GetRun(ctx, runID)
	if err != nil || string(run.Params) != `{"to": "ops"}` {
		t.Fatalf("triggered run: params %s, %v", run.Params, err)
	}
	taskID := run.Tasks[0].ID
	for _, c := range []struct {
		ref  string
		kind string
		id   uuid.UUID
	}{
		{runID.String()[:8], "run", runID},
		{strings.ToUpper(runID.String()), "run", runID},
		{taskID.String(), "task", taskID},
		{strings.ReplaceAll(taskID.String(), "-", "")[:12], "task", taskID},
	} {
		m, err := src.Find(ctx, c.ref)
		if err != nil || m.Kind != c.kind || m.ID != c.id {
			t.Errorf("find %q = %+v, %v; want %s %s", c.ref, m, err, c.kind, c.id)
		}
	}
	for _, ref := range []string{runID.String()[:5], "zzzzzzzz", runID.String() + "0"} {
		if _, err := src.Find(ctx, ref); err == nil || errors.Is(err, store.ErrNotFound) {
			t.Errorf("find %q: %v, want a malformed-id error", ref, err)
		}
	}
	missing := "000000"
	if strings.HasPrefix(runID.String(), missing) || strings.HasPrefix(taskID.String(), missing) {
		missing = "ffffff"
	}
	if _, err := src.Find(ctx, missing); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("find %q: %v, want not found", missing, err)
	}

	up := true
	if err := s.RecordPresence(ctx, store.Presence{ID: "worker-a", Role: "worker", Hostname: "h", PID: 7, Handlers: []string{"noop", "sleep"}, Queue: "gpu", BrokerConnected: &up}); err != nil {
		t.Fatal(err)
	}
	if err := s.TouchWorker(ctx, "scheduler-a", "scheduler", "h", 8); err != nil {
		t.Fatal(err)
	}
	wk, err := src.Workers(ctx)
	if err != nil || len(wk.Workers) != 2 {
		t.Fatalf("workers: %+v, %v", wk.Workers, err)
	}
	for _, w := range wk.Workers {
		switch w.ID {
		case "worker-a":
			if fmt.Sprint(w.Handlers) != "[noop sleep]" || w.Queue == nil || *w.Queue != "gpu" || w.BrokerConnected == nil || !*w.BrokerConnected {
				t.Errorf("worker presence: %+v", w)
			}
		case "scheduler-a":
			if w.Handlers != nil || w.Queue != nil || w.BrokerConnected != nil {
				t.Errorf("a scheduler has worker fields: %+v", w)
			}
		}
	}
}

// TestStoreSourceRequeueFailsWholeWhenTheDatabaseDoes: against real
// PostgreSQL, the DEAD screen's requeue reports each task (one requeued,
// one unknown) through store.RequeueMany; through a store whose database is
// gone it returns the error, marked ErrDisconnected, instead of reporting
// the tasks refused (it used to show "requeued 0 of 1" with the driver's
// error as if the task had been refused).
func TestStoreSourceRequeueFailsWholeWhenTheDatabaseDoes(t *testing.T) {
	s, url := storetest.New(t)
	_, deadID := seed(t, url, 5_000)
	ctx := context.Background()
	unknown := uuid.New()
	res, err := NewStoreSource(s, "test").Requeue(ctx, []uuid.UUID{deadID, unknown}, "fixed")
	if err != nil || len(res) != 2 || !res[0].Requeued() || res[1].Outcome != store.RequeueNotFound {
		t.Fatalf("requeue: %+v, %v; want %s requeued and %s not found", res, err, deadID, unknown)
	}
	gone, err := store.Open(ctx, url, store.Options{MaxConns: 1})
	if err != nil {
		t.Fatal(err)
	}
	gone.Close()
	res, err = NewStoreSource(gone, "test").Requeue(ctx, []uuid.UUID{deadID}, "again")
	if !errors.Is(err, ErrDisconnected) || errors.Is(err, store.ErrNotFound) || res != nil {
		t.Fatalf("requeue through a closed store: %+v, %v; want no result and ErrDisconnected", res, err)
	}
}
