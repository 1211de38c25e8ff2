package store

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"
)

// The sweep's candidate kinds. Each finds, without a notification, the
// open runs of one shape a scheduler's sweep must advance (AdvanceRuns),
// and returns them as (id, rn): rn numbers them 1, 2, ... in the part's
// own order, which is also the index's, so the part stops at $1 rows.
//
// Rules every part keeps:
//   - It is bounded on its own (LIMIT $1) and ranked (rn), so that
//     qSweepCandidates can share its cap among the kinds in turn.
//   - It is index-backed: it is driven by a partial index on live rows
//     (task_runs_retry_due, task_runs_pending, task_runs_running_lease, or
//     workflow_runs_open: open runs only), and every per-run check it makes
//     is a probe by run id (the unique task_runs_run_id_task_name_key, or
//     the partial task_runs_dead_run of migration 10) written as a scalar
//     subquery with LIMIT 1, which PostgreSQL never turns into a hash, never a
//     hash built over task_runs or workflow_runs. Its cost follows the
//     live work, never the history: TestEverySweepPartIsIndexBacked
//     EXPLAINs each part (custom and generic plans) over 100,000 settled
//     task runs and fails on a Seq Scan of either table.
//   - It names a run only while the pass it asks for has work to do
//     there, so that a run is not named sweep after sweep for nothing
//     (except the cancelled runs whose tasks still run, which the pass
//     settles once they end).
//
// A per-run check that must not become a hash over the history is written
// as a scalar subquery (one probe per row, never hashed); a NOT EXISTS or
// EXISTS the planner may turn into a join is kept only where each side it
// could hash is a live partial index.
const (
	// qSweepRetriesDue: RETRYING tasks whose backoff elapsed (database
	// clock), oldest due first: no write happens when a retry falls due,
	// so nothing else names its run.
	qSweepRetriesDue = `
SELECT t.run_id AS id, row_number() OVER (ORDER BY t.next_attempt_at) AS rn
  FROM task_runs t
 WHERE t.state = 'RETRYING' AND t.next_attempt_at <= now()
 ORDER BY t.next_attempt_at
 LIMIT $1`

	// qSweepPromotable: PENDING tasks whose dependencies all SUCCEEDED
	// (qPromote's test, probed per task through the unique (run_id,
	// task_name) index): a finish whose notification was lost. An
	// on_failure task (no upstream at all) waits for its run to fail or
	// end, which the writes that do so name; it is not named here, or its
	// run would be named sweep after sweep for nothing.
	qSweepPromotable = `
SELECT t.run_id AS id, row_number() OVER (ORDER BY t.run_id) AS rn
  FROM task_runs t
 WHERE t.state = 'PENDING' AND NOT t.on_failure
   AND (SELECT true FROM task_runs p
         WHERE p.run_id = t.run_id AND p.task_name = ANY (t.depends_on) AND p.state <> 'SUCCEEDED'
         LIMIT 1) IS NULL
 ORDER BY t.run_id
 LIMIT $1`

	// qSweepCancelled: open runs whose cancellation was requested, oldest
	// first: the pass cancels what could still start and settles the run
	// once nothing runs (a cancel's notification lost, or its tasks ended
	// since).
	qSweepCancelled = `
SELECT r.id, row_number() OVER (ORDER BY r.created_at) AS rn
  FROM workflow_runs r
 WHERE r.finished_at IS NULL AND r.cancel_requested_at IS NOT NULL
 ORDER BY r.created_at
 LIMIT $1`

	// qSweepNothingActive: open runs with no task READY, RUNNING or
	// RETRYING, in creation order: to settle them, or to bury behind a
	// DEAD task an older binary left. It probes at most $4 open runs, those
	// after the cursor ($2, $3: created_at, id; SweepCandidates moves it on
	// each sweep and wraps it at the end), so a sweep's cost does not grow
	// with a backlog of open runs whose tasks are still to run (30,000
	// probed every second took 0.8 s); a sweep covers every open run within
	// ceil(open runs / $4) sweeps, and the full pass every
	// --full-sweep-interval. The check is a scalar probe of the run's
	// tasks through the unique (run_id, task_name) index: a NOT EXISTS
	// here was planned as a hashed subplan over a sequential scan of
	// task_runs (seen at 202,000 rows), and an index of its own would cost
	// an entry on every transition of every task.
	qSweepNothingActive = `
SELECT r.id, row_number() OVER (ORDER BY r.created_at, r.id) AS rn
  FROM (SELECT o.id, o.created_at FROM workflow_runs o
         WHERE o.finished_at IS NULL AND (o.created_at, o.id) > ($2::timestamptz, $3::uuid)
         ORDER BY o.created_at, o.id
         LIMIT $4) r
 WHERE (SELECT true FROM task_runs t
         WHERE t.run_id = r.id AND t.state IN ('READY', 'RUNNING', 'RETRYING') LIMIT 1) IS NULL
 ORDER BY r.created_at, r.id
 LIMIT $1`

	// qSweepPendingRunning: PENDING runs with a task RUNNING (a claim
	// notifies nobody, and a trigger only the publishers: without this a
	// run showed PENDING, started_at unset, while its tasks ran for up to
	// a full sweep; found by a new user's trial), through the RUNNING
	// tasks' index, which holds at most the workers' slots.
	qSweepPendingRunning = `
SELECT t.run_id AS id, row_number() OVER (ORDER BY t.lease_expires_at) AS rn
  FROM task_runs t JOIN workflow_runs r ON r.id = t.run_id
 WHERE t.state = 'RUNNING' AND r.state = 'PENDING' AND r.finished_at IS NULL
 ORDER BY t.lease_expires_at
 LIMIT $1`

	// qSweepFailFast: open, uncancelled fail_fast runs with a DEAD task
	// and a task still to start (PENDING, READY or RETRYING), oldest
	// first: the finish that wrote DEAD notified the run, and if that
	// notification is lost the run is not FAILED, so its READY tasks are
	// still claimed and run (mode 88) until the pass cancels them
	// (qFailFast). Both checks are per-run probes of the DEAD and the
	// run's tasks (the unique (run_id, task_name) index) and of
	// task_runs_dead_run; once the pass cancelled the run's
	// unstarted tasks it no longer matches.
	// qSweepHeldDue: held tasks (a sleep, a wait) RUNNING past their due
	// time (database clock), earliest first: nothing writes when a sleep
	// falls due or a wait times out, so nothing else names their runs.
	// Through task_runs_held_due, which holds only the RUNNING held tasks.
	qSweepHeldDue = `
SELECT t.run_id AS id, row_number() OVER (ORDER BY t.due_at) AS rn
  FROM task_runs t
 WHERE t.state = 'RUNNING' AND t.due_at IS NOT NULL AND t.due_at <= now()
 ORDER BY t.due_at
 LIMIT $1`

	// qSweepChildEnded: RUNNING child-run tasks whose child run ended
	// (the child settles in its own run's transaction, which does not name
	// the parent's run), through task_runs_held_child and a probe of the
	// child by its primary key.
	qSweepChildEnded = `
SELECT t.run_id AS id, row_number() OVER (ORDER BY t.child_run_id) AS rn
  FROM task_runs t
 WHERE t.state = 'RUNNING' AND t.child_run_id IS NOT NULL
   AND (SELECT c.finished_at FROM workflow_runs c WHERE c.id = t.child_run_id) IS NOT NULL
 ORDER BY t.child_run_id
 LIMIT $1`

	qSweepFailFast = `
SELECT r.id, row_number() OVER (ORDER BY r.created_at) AS rn
  FROM workflow_runs r
 WHERE r.finished_at IS NULL AND r.fail_fast AND r.cancel_requested_at IS NULL
   AND (SELECT true FROM task_runs d WHERE d.run_id = r.id AND d.state = 'DEAD' LIMIT 1)
   AND (SELECT true FROM task_runs a
         WHERE a.run_id = r.id AND a.state IN ('PENDING', 'READY', 'RETRYING') LIMIT 1)
 ORDER BY r.created_at
 LIMIT $1`
)

// qSweepCandidates is every kind of sweep candidate under one cap ($1):
// each kind is bounded and ranked on its own (see the parts' rules), and
// the kinds share the cap in turn, every kind's first run, then every
// kind's second, and so on (ORDER BY min(rn)); a run several kinds name
// counts once, at its best rank. So no kind, however many runs it has
// (hundreds of cancelled runs whose tasks still run, a burst of retries
// coming due), can crowd the others out of a capped sweep (mode 88), and
// a kind alone can still fill the whole cap.
const qSweepCandidates = `
WITH c (kind, id, rn) AS (
    SELECT 1, id, rn FROM (` + qSweepRetriesDue + `) k
    UNION ALL
    SELECT 2, id, rn FROM (` + qSweepPromotable + `) k
    UNION ALL
    SELECT 3, id, rn FROM (` + qSweepCancelled + `) k
    UNION ALL
    SELECT 4, id, rn FROM (` + qSweepNothingActive + `) k
    UNION ALL
    SELECT 5, id, rn FROM (` + qSweepPendingRunning + `) k
    UNION ALL
    SELECT 6, id, rn FROM (` + qSweepFailFast + `) k
    UNION ALL
    SELECT 7, id, rn FROM (` + qSweepHeldDue + `) k
    UNION ALL
    SELECT 8, id, rn FROM (` + qSweepChildEnded + `) k
)
SELECT id FROM c GROUP BY id ORDER BY min(rn), min(kind) LIMIT $1`

// sweepPart names one kind of sweep candidate and its query.
type sweepPart struct{ kind, query string }

// sweepParts returns the parts qSweepCandidates is made of, in its order.
func sweepParts() []sweepPart {
	return []sweepPart{
		{"retries due", qSweepRetriesDue},
		{"promotable", qSweepPromotable},
		{"cancelled", qSweepCancelled},
		{"nothing active", qSweepNothingActive},
		{"pending run with a task running", qSweepPendingRunning},
		{"failed fail_fast run with tasks to start", qSweepFailFast},
		{"held task due", qSweepHeldDue},
		{"child run ended", qSweepChildEnded},
	}
}

// SweepCandidates returns up to limit open runs that a scheduler's sweep
// should advance (AdvanceRuns) although no notification may have named
// them (qSweepCandidates): retries due, promotable tasks (a lost
// notification), cancelled runs, runs with nothing active (to settle),
// PENDING runs with a task RUNNING, failed fail_fast runs whose other
// tasks could still start, held tasks due (a sleep, a wait's timeout) and
// child runs that ended. Each kind is found through indexes on the live
// states, and the kinds share limit in turn, so one kind cannot crowd out
// the others. It reads without locking; AdvanceRuns locks. The runs it
// cannot see (a run whose derived state changed while tasks still run,
// with its notification lost) wait for the scheduler's rarer full sweep
// (Advance).
//
// The "nothing active" kind probes at most SweepProbesPerCandidate × limit
// open runs, those after from (the zero Cursor: from the oldest); next is
// where the following sweep's probes start (the zero Cursor once they
// reached the newest open run).
func (s *Store) SweepCandidates(ctx context.Context, limit int, from Cursor) (ids []uuid.UUID, next Cursor, err error) {
	probes := SweepProbesPerCandidate * limit
	if err := s.db.SelectContext(ctx, &ids, qSweepCandidates, limit, from.CreatedAt, from.ID, probes); err != nil {
		return nil, Cursor{}, fmt.Errorf("find runs to sweep: %w", err)
	}
	var end struct {
		N         int        `db:"n"`
		CreatedAt *time.Time `db:"created_at"`
		ID        *uuid.UUID `db:"id"`
	}
	if err := s.db.GetContext(ctx, &end, qSweepProbeEnd, limit, from.CreatedAt, from.ID, probes); err != nil {
		return nil, Cursor{}, fmt.Errorf("find where the next sweep probes: %w", err)
	}
	if end.N < probes || end.CreatedAt == nil || end.ID == nil {
		return ids, Cursor{}, nil
	}
	return ids, Cursor{CreatedAt: *end.CreatedAt, ID: *end.ID}, nil
}

// SweepProbesPerCandidate is how many open runs the "nothing active" kind
// probes per candidate a sweep may return (SweepCandidates).
const SweepProbesPerCandidate = 4

// qSweepProbeEnd is the last of the ($4) open runs after the cursor ($2,
// $3) that qSweepNothingActive probes, and how many there are ($1 is the
// sweep's limit, unused: the parameters are numbered as the parts').
const qSweepProbeEnd = `SELECT e.* FROM (SELECT $1::int AS unused) u, (` + qSweepProbeEndParts + `) e`

// qSweepProbeEndParts is qSweepProbeEnd's body, numbered as the sweep's
// parts are: $2, $3 the cursor, $4 the probes ($1, the sweep's limit, is
// not its).
const qSweepProbeEndParts = `
SELECT count(*) AS n,
       (array_agg(s.created_at ORDER BY s.created_at DESC, s.id DESC))[1] AS created_at,
       (array_agg(s.id ORDER BY s.created_at DESC, s.id DESC))[1] AS id
  FROM (SELECT o.id, o.created_at FROM workflow_runs o
         WHERE o.finished_at IS NULL AND (o.created_at, o.id) > ($2::timestamptz, $3::uuid)
         ORDER BY o.created_at, o.id
         LIMIT $4) s`
