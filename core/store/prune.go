package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/flowforge/flowforge/core"
)

// Bounds of one retention batch (PruneRuns, PruneOutbox, DeleteRuns): each
// batch is its own short transaction whose statements give up after
// PruneStatementTimeout, and after PruneLockTimeout waiting for a lock, so
// a prune never holds a snapshot (and so VACUUM's horizon) for long nor
// queues behind a busy row.
const (
	PruneStatementTimeout = 30 * time.Second
	PruneLockTimeout      = 2 * time.Second
	// PruneBatchDefault is the runs (or outbox rows) one batch deletes.
	PruneBatchDefault = 500
)

// settledOlder is the condition, on the run row r, that r is settled and
// settled longer than $2 milliseconds ago (database clock): the scheduler
// set finished_at (nothing READY, RUNNING or RETRYING is left), its state is
// final, and no task of it is active now. A requeue of a DEAD task clears
// finished_at in the transaction that moves the task, so a requeued run
// fails it from that commit on. Candidates are locked (FOR UPDATE) with it
// re-checked on the row's newest version, so a requeue that locked the run
// first wins, and one that comes after the lock finds no task.
const settledOlder = `r.finished_at IS NOT NULL AND r.finished_at < now() - $2::bigint * interval '1 millisecond'
       AND r.state IN ` + finalRunStatesSQL + `
       AND (SELECT count(*) FROM task_runs a WHERE a.run_id = r.id AND a.state IN ('READY', 'RUNNING', 'RETRYING')) = 0
       AND ` + parentTookItsEnd

// parentTookItsEnd is the condition, on the run row r, that r is no child
// run whose parent's task is still RUNNING on it: that task takes its end
// from r at its run's next pass (qEndHeld), and would wait for ever for a
// child deleted before (a pass delayed, a scheduler down). A look-up by
// primary key.
const parentTookItsEnd = `(r.parent_task_run_id IS NULL
            OR (SELECT count(*) FROM task_runs p
                 WHERE p.id = r.parent_task_run_id AND p.state = 'RUNNING' AND p.child_run_id = r.id) = 0)`

// holdsDead is the condition that the run r holds a DEAD task (every FAILED
// run does; a CANCELLED run may). $4 true selects only such runs, false
// only the others: the pruner deletes a DEAD-holding run only under the
// operator's opt-in age (--retain-dead).
const holdsDead = `(r.state = 'FAILED' OR (SELECT count(*) FROM task_runs d WHERE d.run_id = r.id AND d.state = 'DEAD') > 0) = $4::bool`

// qPruneRuns deletes up to $3 settled runs in state $1 older than $2 ms
// (holding a DEAD task or not as $4 says), oldest first, skipping runs
// another transaction holds (a requeue, a cancel, another pruner): their
// task runs, outbox rows, outbox events and task events go with them (ON
// DELETE CASCADE), and their log lines and stream rows (deleteCandRows). It
// walks workflow_runs_settled (state, finished_at). It returns how many runs, task runs, outbox rows and task events it
// deleted (the counts read the rows before the delete removed them).
// Every look-up is by the batch's run ids (ARRAY, and per-run scalar
// subqueries rather than EXISTS, which the planner may turn into a hash
// over every DEAD or active task), so a batch reads its own rows only.
const qPruneRuns = `
WITH cand AS (
    SELECT r.id FROM workflow_runs r
     WHERE r.state = $1 AND ` + settledOlder + ` AND ` + holdsDead + `
     ORDER BY r.finished_at
     LIMIT $3
       FOR UPDATE SKIP LOCKED
), ` + deleteCandRows + `, gone AS (
    DELETE FROM workflow_runs r WHERE r.id = ANY (ARRAY (SELECT id FROM cand)) RETURNING r.id
)
SELECT (SELECT count(*) FROM gone) AS runs,
       (SELECT count(*) FROM task_runs t WHERE t.run_id = ANY (ARRAY (SELECT id FROM gone))) AS task_runs,
       (SELECT count(*) FROM outbox o JOIN task_runs t ON t.id = o.task_run_id WHERE t.run_id = ANY (ARRAY (SELECT id FROM gone))) AS outbox,
       (SELECT count(*) FROM task_events e WHERE e.run_id = ANY (ARRAY (SELECT id FROM gone))) AS task_events`

// PruneRequest is one batch of PruneRuns: the settled runs in State (one of
// SUCCEEDED, FAILED, CANCELLED) whose finished_at is older than Age
// (database clock), holding a DEAD task when HoldingDead, else holding none
// (FAILED runs always hold one: with HoldingDead false none is selected).
// Limit bounds the runs deleted (0: PruneBatchDefault).
type PruneRequest struct {
	State       core.RunState
	HoldingDead bool
	Age         time.Duration
	Limit       int
}

// PruneCounts is what a prune batch deleted: runs, and what went with them.
type PruneCounts struct {
	Runs       int64 `db:"runs" json:"runs"`
	TaskRuns   int64 `db:"task_runs" json:"task_runs"`
	Outbox     int64 `db:"outbox" json:"outbox"`
	TaskEvents int64 `db:"task_events" json:"task_events"`
}

// Add returns the sum of c and o.
func (c PruneCounts) Add(o PruneCounts) PruneCounts {
	return PruneCounts{Runs: c.Runs + o.Runs, TaskRuns: c.TaskRuns + o.TaskRuns, Outbox: c.Outbox + o.Outbox, TaskEvents: c.TaskEvents + o.TaskEvents}
}

// ErrBadPrune is wrapped by the refusal of a PruneRequest (or DeleteRuns
// filter) that names no final state or a negative age or limit; nothing
// is deleted.
var ErrBadPrune = errors.New("bad retention request")

// PruneRuns deletes one batch of settled runs (see PruneRequest and
// qPruneRuns) in one short transaction (PruneStatementTimeout,
// PruneLockTimeout) and returns what it deleted; Runs below the limit means
// nothing more is due. It is safe beside any number of other pruners (they
// skip each other's locked runs) and beside requeues: a run a requeue
// reopened is never deleted, and a requeue that comes after the delete
// reports the task not found. Errors: ErrBadPrune, or the database's.
func (s *Store) PruneRuns(ctx context.Context, req PruneRequest) (PruneCounts, error) {
	if !req.State.Terminal() || req.Age < 0 || req.Limit < 0 {
		return PruneCounts{}, fmt.Errorf("prune runs: %w: state %q, age %v, limit %d", ErrBadPrune, req.State, req.Age, req.Limit)
	}
	limit := req.Limit
	if limit == 0 {
		limit = PruneBatchDefault
	}
	var c PruneCounts
	err := s.inPruneTx(ctx, func(tx *sqlx.Tx) error {
		return tx.GetContext(ctx, &c, qPruneRuns, string(req.State), req.Age.Milliseconds(), limit, req.HoldingDead)
	})
	if err != nil {
		return PruneCounts{}, fmt.Errorf("prune %s runs: %w", req.State, err)
	}
	return c, nil
}

// qPruneOutbox deletes up to $2 published outbox rows older than $1 ms
// (published_at, database clock), oldest first, over outbox_published_at;
// their outbox_events go with them. It keeps the dispatches of a READY
// task's current fencing token (the redispatch reads when the last one was
// confirmed), and skips rows another transaction holds.
const qPruneOutbox = `
WITH cand AS (
    SELECT o.id FROM outbox o
     WHERE o.published_at IS NOT NULL AND o.published_at < now() - $1::bigint * interval '1 millisecond'
       AND (SELECT count(*) FROM task_runs t WHERE t.id = o.task_run_id AND t.state = 'READY' AND t.fencing_token = o.fencing_token_snapshot) = 0
     ORDER BY o.published_at
     LIMIT $2
       FOR UPDATE SKIP LOCKED
)
DELETE FROM outbox o WHERE o.id = ANY (ARRAY (SELECT id FROM cand))`

// PruneOutbox deletes one batch of at most limit (0: PruneBatchDefault)
// published outbox rows whose published_at is older than age (see
// qPruneOutbox) in one short transaction, and returns how many it deleted.
// Pending and quarantined rows are never deleted. Errors: ErrBadPrune for a
// negative age or limit, or the database's.
func (s *Store) PruneOutbox(ctx context.Context, age time.Duration, limit int) (int64, error) {
	n, err := s.pruneBatch(ctx, qPruneOutbox, age, limit)
	if err != nil {
		return 0, fmt.Errorf("prune outbox: %w", err)
	}
	return n, nil
}

// pruneBatch runs query, a delete with parameters $1 the age in
// milliseconds and $2 the limit (0: PruneBatchDefault), in one short
// transaction (inPruneTx), and returns how many rows it deleted. Errors:
// ErrBadPrune for a negative age or limit, or the database's.
func (s *Store) pruneBatch(ctx context.Context, query string, age time.Duration, limit int) (int64, error) {
	if age < 0 || limit < 0 {
		return 0, fmt.Errorf("%w: age %v, limit %d", ErrBadPrune, age, limit)
	}
	if limit == 0 {
		limit = PruneBatchDefault
	}
	var n int64
	err := s.inPruneTx(ctx, func(tx *sqlx.Tx) error {
		res, err := tx.ExecContext(ctx, query, age.Milliseconds(), limit)
		if err != nil {
			return err
		}
		n, err = res.RowsAffected()
		return err
	})
	return n, err
}

// EventIDMemoryDefault is how long past the end of its lookback an event
// is kept by the pruner (PruneEvents' after): its id is remembered that
// long, so the same id sent again within it is still a duplicate,
// delivered to nothing; the lookback alone decides what a wait that
// starts matches.
const EventIDMemoryDefault = 7 * 24 * time.Hour

// qPruneEvents deletes up to $2 events whose lookback ended more than $1
// ms ago (keep_until, database clock), oldest first, with their delivery
// rows (ON DELETE CASCADE). Through events_keep_until.
const qPruneEvents = `
DELETE FROM events WHERE id IN (
    SELECT id FROM events WHERE keep_until < now() - $1::bigint * interval '1 millisecond'
     ORDER BY keep_until LIMIT $2 FOR UPDATE SKIP LOCKED)`

// PruneEvents deletes one batch of at most limit (0: PruneBatchDefault)
// events whose lookback ended more than after ago (qPruneEvents; the
// pruner passes EventIDMemoryDefault) in one short transaction, and
// returns how many it deleted. A pruned event's id is forgotten: sent
// again, it is a new event. Errors: ErrBadPrune for a negative after or
// limit, or the database's.
func (s *Store) PruneEvents(ctx context.Context, after time.Duration, limit int) (int64, error) {
	if after < 0 || limit < 0 {
		return 0, fmt.Errorf("prune events: %w: after %v, limit %d", ErrBadPrune, after, limit)
	}
	if limit == 0 {
		limit = PruneBatchDefault
	}
	var n int64
	err := s.inPruneTx(ctx, func(tx *sqlx.Tx) error {
		res, err := tx.ExecContext(ctx, qPruneEvents, after.Milliseconds(), limit)
		if err != nil {
			return err
		}
		n, err = res.RowsAffected()
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("prune events: %w", err)
	}
	return n, nil
}

// qPruneBounds sets the retention batch's own statement and lock timeouts
// for its transaction only, and turns JIT compilation off in it: on a
// history of millions of runs the planner's cost estimate of a batch
// passes jit_above_cost, and compiling took 630 of a batch's 710 ms
// (EXPLAIN ANALYZE on the benchmark's 2,000,000 runs: 79 ms without), so
// the pruner deleted 825 runs/s instead of about 6,000.
const qPruneBounds = `SELECT set_config('statement_timeout', $1, true), set_config('lock_timeout', $2, true), set_config('jit', 'off', true)`

// inPruneTx runs fn in a transaction bounded by PruneStatementTimeout and
// PruneLockTimeout.
func (s *Store) inPruneTx(ctx context.Context, fn func(tx *sqlx.Tx) error) error {
	return s.inTx(ctx, func(tx *sqlx.Tx) error {
		if _, err := tx.ExecContext(ctx, qPruneBounds,
			fmt.Sprintf("%dms", PruneStatementTimeout.Milliseconds()), fmt.Sprintf("%dms", PruneLockTimeout.Milliseconds())); err != nil {
			return fmt.Errorf("bound the batch: %w", err)
		}
		return fn(tx)
	})
}
