package store_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/flowforge/flowforge/core/store"
)

// TestAnAdmissionRoundReadsOnlyTheWaitersItAdmits (qAdmitConcurrency's
// plan, in admit.go): the statistics of task_runs lag a backlog inserted since the
// last ANALYZE (the planner believes the waiting indexes empty), and an
// admission round must still cost what it admits, not what waits. On
// 3,000 waiters of one key, triggered in one statement (one ready_at)
// after an ANALYZE of the empty table, a round with room for 50 (a
// concurrency limit of 50, a rate of 50 per minute) reads at most 4 × 50
// entries of the waiting index (four priority levels, each in the index's
// order: no sort of a level's every waiter), counts the key's slots once,
// and its UPDATE reaches the rows picked without scanning a waiting index.
// Before: every waiter was read and sorted, the slot count ran once per
// waiter picked, and the UPDATE scanned the waiting index once per row.
func TestAnAdmissionRoundReadsOnlyTheWaitersItAdmits(t *testing.T) {
	t.Parallel()
	const waiters, room = 3000, 50
	for _, tc := range []struct {
		kind, block, index string
		args               []any
	}{
		{"concurrency", fmt.Sprintf("concurrency: {key: k, limit: %d}", room), "task_runs_waiting_concurrency",
			[]any{"{k}", fmt.Sprintf("{%d}", room)}},
		{"rate", fmt.Sprintf("rate_limit: {key: k, limit: %d, per: 1m}", room), "task_runs_waiting_rate",
			[]any{"{k}", fmt.Sprintf("{%d}", room), "{60000}"}},
	} {
		t.Run(tc.kind, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t)
			f.apply(fmt.Sprintf("name: w\ntasks:\n  - {name: t, handler: noop, %s}\n", tc.block))
			if _, err := f.db.ExecContext(f.ctx, `ANALYZE task_runs`); err != nil {
				t.Fatal(err)
			}
			if _, err := f.s.TriggerMany(f.ctx, store.TriggerManyRequest{Workflow: "w", Params: make([]json.RawMessage, waiters), Actor: "test"}); err != nil {
				t.Fatal(err)
			}
			if _, err := f.db.ExecContext(f.ctx, `INSERT INTO flow_limits (kind, key, lim, per_ms) VALUES ('rate', 'k', $1, 60000)`, room); err != nil {
				t.Fatal(err)
			}
			tx, err := f.db.BeginTx(f.ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = tx.Rollback() })
			var js string
			if err := tx.QueryRowContext(f.ctx, "EXPLAIN (ANALYZE, FORMAT JSON) "+store.AdmitQueries()[tc.kind], tc.args...).Scan(&js); err != nil {
				t.Fatalf("explain: %v", err)
			}
			var plans []struct{ Plan planNode }
			if err := json.Unmarshal([]byte(js), &plans); err != nil || len(plans) != 1 {
				t.Fatalf("decode the plan (%v): %s", err, js)
			}
			plan := plans[0].Plan
			var read, slotCounts float64
			var updateScans []string
			walkPlan(plan, "", func(n planNode, path string) {
				if n.Index == tc.index {
					read += n.Rows * n.Loops
				}
				if n.Index == "task_runs_slots" {
					slotCounts += n.Loops
				}
				if strings.Contains(path, "ModifyTable") && strings.HasPrefix(n.Index, "task_runs_waiting") {
					updateScans = append(updateScans, path)
				}
			})
			tree := nodeTypes(plan, 1)
			if read > 4*room {
				t.Errorf("the round read %.0f entries of %s for %d admissions (at most %d: four levels of %d); plan:\n%s", read, tc.index, room, 4*room, room, tree)
			}
			if slotCounts > 1 {
				t.Errorf("the key's slots were counted %.0f times (once is enough); plan:\n%s", slotCounts, tree)
			}
			if len(updateScans) > 0 {
				t.Errorf("the UPDATE scans a waiting index: %v; plan:\n%s", updateScans, tree)
			}
			var admitted int
			if err := tx.QueryRowContext(f.ctx, `SELECT count(*) FROM task_runs WHERE flow_wait IS DISTINCT FROM $1`, tc.kind).Scan(&admitted); err != nil {
				t.Fatal(err)
			}
			if admitted != room {
				t.Errorf("%d admitted, want %d", admitted, room)
			}
		})
	}
}

// walkPlan calls visit for n and every node under it, with the path of
// node types from the root to the node's parent.
func walkPlan(n planNode, path string, visit func(n planNode, path string)) {
	visit(n, path)
	for _, c := range n.Plans {
		walkPlan(c, path+" > "+n.NodeType, visit)
	}
}
