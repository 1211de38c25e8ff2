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
//
// The same holds with statistics that know the backlog (an ANALYZE after
// the trigger, as autovacuum gives a long drain), and the waiters are
// read through the waiting index only: with those statistics (every
// waiter at priority 2) the planner read each level through READY's own
// index instead, filtering, so that the three empty levels walked every
// READY row (W1 with a concurrency key: 50 of a round's 62 ms). The UPDATE reads
// task_runs by the picked rows' ctids only (a Tid Scan). Before, it joined
// the picked rows to a sequential scan of every waiter (a hash join): in
// W1 with a concurrency key, 6 ms of a 9 ms round that admitted 67.
func TestAnAdmissionRoundReadsOnlyTheWaitersItAdmits(t *testing.T) {
	t.Parallel()
	const waiters, room = 3000, 50
	type kindCase struct {
		kind, block, index string
		args               []any
	}
	type statsCase struct {
		kindCase
		analyzeAfter bool // ANALYZE after the backlog, not before it
	}
	var cases []statsCase
	for _, kc := range []kindCase{
		{"concurrency", fmt.Sprintf("concurrency: {key: k, limit: %d}", room), "task_runs_waiting_concurrency",
			[]any{"{k}", fmt.Sprintf("{%d}", room), store.AdmitBatchMax}},
		{"rate", fmt.Sprintf("rate_limit: {key: k, limit: %d, per: 1m}", room), "task_runs_waiting_rate",
			[]any{"{k}", fmt.Sprintf("{%d}", room), "{60000}", store.AdmitBatchMax}},
	} {
		cases = append(cases, statsCase{kc, false}, statsCase{kc, true})
	}
	for _, tc := range cases {
		name := tc.kind + "/statistics before the backlog"
		if tc.analyzeAfter {
			name = tc.kind + "/statistics after the backlog"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t)
			f.apply(fmt.Sprintf("name: w\ntasks:\n  - {name: t, handler: noop, %s}\n", tc.block))
			analyze := func() {
				if _, err := f.db.ExecContext(f.ctx, `ANALYZE task_runs`); err != nil {
					t.Fatal(err)
				}
			}
			if !tc.analyzeAfter {
				analyze()
			}
			if _, err := f.s.TriggerMany(f.ctx, store.TriggerManyRequest{Workflow: "w", Params: make([]json.RawMessage, waiters), Actor: "test"}); err != nil {
				t.Fatal(err)
			}
			if tc.analyzeAfter {
				analyze()
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
			var updateScans, otherScans []string
			walkPlan(plan, "", func(n planNode, path string) {
				if n.Index == tc.index {
					read += n.Rows * n.Loops
				}
				if n.Relation == "task_runs" && n.NodeType != "ModifyTable" && !strings.Contains(path, "ModifyTable") && n.Index != tc.index && n.Index != "task_runs_slots" {
					otherScans = append(otherScans, path+" > "+n.String())
				}
				if n.Index == "task_runs_slots" {
					slotCounts += n.Loops
				}
				if strings.Contains(path, "ModifyTable") && n.Relation == "task_runs" && n.NodeType != "Tid Scan" {
					updateScans = append(updateScans, path+" > "+n.String())
				}
			})
			tree := nodeTypes(plan, 1)
			if read > 4*room {
				t.Errorf("the round read %.0f entries of %s for %d admissions (at most %d: four levels of %d); plan:\n%s", read, tc.index, room, 4*room, room, tree)
			}
			if len(otherScans) > 0 {
				t.Errorf("the round picks its waiters other than through %s: %v; plan:\n%s", tc.index, otherScans, tree)
			}
			if slotCounts > 1 {
				t.Errorf("the key's slots were counted %.0f times (once is enough); plan:\n%s", slotCounts, tree)
			}
			if len(updateScans) > 0 {
				t.Errorf("the UPDATE reads task_runs other than by the picked rows' ctids: %v; plan:\n%s", updateScans, tree)
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

// TestARunAdmissionUpdatesOnlyTheRunsItPicked (qAdmitRuns's plan, in
// admit_runs.go): with statistics that know a backlog of 3,000 runs
// waiting for a run-level slot, the UPDATEs that admit waiting runs and
// refuse them (cancel-newest) read workflow_runs by the picked rows'
// ctids only (a Tid Scan), never by a scan of the table, which holds
// every run ever kept. (The cancel-in-progress UPDATE reaches its runs
// through the key's running ones by primary key; their picking, under a
// LockRows, is not the UPDATE's read.)
func TestARunAdmissionUpdatesOnlyTheRunsItPicked(t *testing.T) {
	t.Parallel()
	const waiters, room = 3000, 50
	for _, strategy := range []string{"queue", "cancel-newest"} {
		t.Run(strategy, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t)
			f.apply(fmt.Sprintf("name: w\nconcurrency: {key: k, limit: %d, strategy: %s}\ntasks:\n  - {name: t, handler: noop}\n", room, strategy))
			if _, err := f.s.TriggerMany(f.ctx, store.TriggerManyRequest{Workflow: "w", Params: make([]json.RawMessage, waiters), Actor: "test"}); err != nil {
				t.Fatal(err)
			}
			if _, err := f.db.ExecContext(f.ctx, `ANALYZE workflow_runs`); err != nil {
				t.Fatal(err)
			}
			tx, err := f.db.BeginTx(f.ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = tx.Rollback() })
			var js string
			q := store.AdmitQueries()["run"]
			if err := tx.QueryRowContext(f.ctx, "EXPLAIN (ANALYZE, FORMAT JSON) "+q, "{w/k}", fmt.Sprintf("{%d}", room), store.AdmitRunsPerKey).Scan(&js); err != nil {
				t.Fatalf("explain: %v", err)
			}
			var plans []struct{ Plan planNode }
			if err := json.Unmarshal([]byte(js), &plans); err != nil || len(plans) != 1 {
				t.Fatalf("decode the plan (%v): %s", err, js)
			}
			var scans []string
			walkPlan(plans[0].Plan, "", func(n planNode, path string) {
				if strings.Contains(path, "ModifyTable") && !strings.Contains(path, "LockRows") && n.Relation == "workflow_runs" &&
					n.NodeType != "Tid Scan" && n.Index != "workflow_runs_pkey" {
					scans = append(scans, path+" > "+n.String())
				}
			})
			if len(scans) > 0 {
				t.Errorf("an UPDATE reads workflow_runs other than by the picked rows' ctids: %v; plan:\n%s", scans, nodeTypes(plans[0].Plan, 1))
			}
			var waiting int
			if err := tx.QueryRowContext(f.ctx, `SELECT count(*) FROM workflow_runs WHERE run_wait AND cancel_requested_at IS NULL`).Scan(&waiting); err != nil {
				t.Fatal(err)
			}
			want := waiters - room // queue: the rest wait
			if strategy == "cancel-newest" {
				want = waiters - store.AdmitRunsPerKey // the round's others are refused
			}
			if waiting != want {
				t.Errorf("%d runs still wait, want %d", waiting, want)
			}
		})
	}
}
