package store_test

import (
	"encoding/json"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/flowforge/flowforge/core/store"
)

// activeIndexes are the partial indexes of the active task states: the
// only ones qTaskGauges may read task_runs through.
var activeIndexes = map[string]bool{
	"task_runs_pending": true, "task_runs_ready": true, "task_runs_running_lease": true, "task_runs_retry_due": true,
	"task_runs_waiting_concurrency": true, "task_runs_waiting_rate": true,
	"task_runs_held_due": true, "task_runs_waiting": true, "task_runs_held_child": true,
}

// TestTaskGaugesReadOnlyThePartialIndexes: the task gauges are read at
// every scrape, so on a database with 100,000 settled task runs and 700
// open runs (ANALYZEd) the plan of qTaskGauges (EXPLAIN ANALYZE) reads
// task_runs only through the partial indexes of the active states, never a
// Seq Scan or another index (the primary key, the DEAD tasks', ...), and
// reads no more index entries than there are active rows.
func TestTaskGaugesReadOnlyThePartialIndexes(t *testing.T) {
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
	var active float64
	if err := f.db.QueryRowContext(f.ctx, `SELECT count(*) FROM task_runs WHERE state IN ('PENDING', 'READY', 'RUNNING', 'RETRYING')`).Scan(&active); err != nil {
		t.Fatal(err)
	}
	var js string
	if err := f.db.QueryRowContext(f.ctx, "EXPLAIN (ANALYZE, FORMAT JSON) "+store.QTaskGauges, store.TaskCountCap, 15000).Scan(&js); err != nil {
		t.Fatalf("explain: %v", err)
	}
	var plans []struct{ Plan planNode }
	if err := json.Unmarshal([]byte(js), &plans); err != nil || len(plans) != 1 {
		t.Fatalf("decode the plan (%v): %s", err, js)
	}
	plan := plans[0].Plan
	var bad []string
	used := map[string]bool{}
	var read float64
	walkPlan(plan, "", func(n planNode, path string) {
		// A Bitmap Heap Scan reads what its Bitmap Index Scan (checked
		// in its turn) found.
		if !strings.Contains(n.NodeType, "Scan") || n.NodeType == "Subquery Scan" || n.NodeType == "Bitmap Heap Scan" {
			return
		}
		switch {
		case activeIndexes[n.Index]:
			used[n.Index] = true
			read += n.Rows * n.Loops
		case n.Relation == "task_runs" || strings.HasPrefix(n.Index, "task_runs"):
			bad = append(bad, path+" > "+n.String())
		}
	})
	tree := nodeTypes(plan, 1)
	if len(bad) > 0 {
		t.Errorf("qTaskGauges reads task_runs outside the active states' partial indexes:\n  %s\nplan:\n%s", strings.Join(bad, "\n  "), tree)
	}
	if len(used) == 0 {
		t.Errorf("qTaskGauges reads no partial index; plan:\n%s", tree)
	}
	// Each active row is counted by at most its state's count, one held
	// kind and the oldest READY: at most three readings of it.
	if read > 3*active {
		t.Errorf("the scrape read %.0f index entries for %.0f active rows; plan:\n%s", read, active, tree)
	}
	if testing.Verbose() {
		names := make([]string, 0, len(used))
		for n := range used {
			names = append(names, n)
		}
		sort.Strings(names)
		t.Logf("indexes read %v, %.0f entries for %.0f active rows; plan:\n%s", names, read, active, tree)
	}
}

// qKnownTasks inserts, in run $1, the task runs of each state and kind
// in the counts of TestTaskGaugesCountTheActiveTasks (terminal ones too,
// which must not be counted); the oldest READY became READY 90 s ago.
const qKnownTasks = `
INSERT INTO task_runs (id, run_id, task_name, handler, state, max_attempts, kind, flow_wait, due_at, wait_event, wait_key,
                       child_run_id, ready_at, lease_expires_at, next_attempt_at, finished_at)
SELECT gen_random_uuid(), $1, x.label || i, 'noop', x.state, 3, x.kind, x.flow_wait,
       CASE WHEN x.kind IN ('sleep', 'wait') THEN now() + interval '1 hour' END,
       CASE WHEN x.kind = 'wait' THEN 'ev' END, CASE WHEN x.kind = 'wait' THEN 'k' END,
       CASE WHEN x.kind = 'workflow' THEN gen_random_uuid() END,
       CASE WHEN x.state = 'READY' THEN now() - x.age * interval '1 second' END,
       CASE WHEN x.state = 'RUNNING' AND x.kind = 'task' THEN now() + interval '1 minute' END,
       CASE WHEN x.state = 'RETRYING' THEN now() + interval '1 minute' END,
       CASE WHEN x.state IN ('SUCCEEDED', 'DEAD', 'CANCELLED', 'SKIPPED') THEN now() END
  FROM (VALUES ('p', 'PENDING', 'task', NULL, 3, 0), ('r', 'READY', 'task', NULL, 2, 90), ('rc', 'READY', 'task', 'concurrency', 4, 10),
               ('rr', 'READY', 'task', 'rate', 1, 5), ('run', 'RUNNING', 'task', NULL, 5, 0), ('sl', 'RUNNING', 'sleep', NULL, 2, 0),
               ('wa', 'RUNNING', 'wait', NULL, 3, 0), ('ch', 'RUNNING', 'workflow', NULL, 1, 0), ('re', 'RETRYING', 'task', NULL, 6, 0),
               ('s', 'SUCCEEDED', 'task', NULL, 40, 0), ('d', 'DEAD', 'task', NULL, 7, 0), ('c', 'CANCELLED', 'task', NULL, 2, 0),
               ('sk', 'SKIPPED', 'task', NULL, 2, 0))
       AS x(label, state, kind, flow_wait, n, age),
       generate_series(1, x.n) i`

// TestTaskGaugesCountTheActiveTasks: on a database with known rows, the
// gauges count each active state (READY with its flow-control waiters,
// RUNNING with its held tasks), each held or waiting kind, no terminal
// state, and the oldest READY task's age; of the workers, those of role
// worker or all seen within 15 s (not one seen 60 s ago, nor a scheduler).
func TestTaskGaugesCountTheActiveTasks(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.apply(historyChain)
	run := f.trigger("history", `{}`)
	if _, err := f.db.ExecContext(f.ctx, `DELETE FROM task_runs WHERE run_id = $1`, run); err != nil {
		t.Fatal(err)
	}
	if _, err := f.db.ExecContext(f.ctx, qKnownTasks, run); err != nil {
		t.Fatalf("insert the known tasks: %v", err)
	}
	for _, w := range []struct {
		id, role string
		ago      int
	}{{"w-fresh", "worker", 1}, {"all-fresh", "all", 2}, {"w-gone", "worker", 60}, {"s-fresh", "scheduler", 1}} {
		if _, err := f.db.ExecContext(f.ctx, `INSERT INTO workers (id, role, hostname, pid, last_seen_at) VALUES ($1, $2, 'h', 1, now() - $3 * interval '1 second')`, w.id, w.role, w.ago); err != nil {
			t.Fatal(err)
		}
	}
	g, err := f.s.TaskGauges(f.ctx, 15*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	oldest := g.OldestReadySeconds
	g.OldestReadySeconds = 0
	want := store.TaskGauges{Pending: 3, Ready: 2 + 4 + 1, Running: 5 + 2 + 3 + 1, Retrying: 6,
		WaitConcurrency: 4, WaitRate: 1, Sleeping: 2, Waiting: 3, Children: 1, WorkersSeen: 2}
	if g != want {
		t.Errorf("gauges %+v,\nwant   %+v", g, want)
	}
	if oldest < 90 || oldest > 120 {
		t.Errorf("oldest READY %.1f s, want 90 s (the oldest ready_at) or a little more", oldest)
	}
}
