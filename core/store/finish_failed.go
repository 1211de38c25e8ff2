package store

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/google/uuid"
	"github.com/jmoiron/sqlx"

	"github.com/flowforge/flowforge/core"
)

// FinishRunLockWait bounds each lock wait of the transaction that records
// a batch's FAILED rows, first of all the wait for their runs' rows (a
// failure may bury the task's descendants, so it locks the run first; see
// FinishMany). A scheduler pass, CancelRun, a reap or a requeue holds a
// run row for milliseconds; a run held longer (a long requeue, a slow
// pass, a forgotten BEGIN … FOR UPDATE in psql) then costs only its own
// FAILED rows an Err wrapping ErrLockTimeout, and the batch one such wait,
// well within the worker's 10 s bound on a finish call.
const FinishRunLockWait = 500 * time.Millisecond

// finishFailed records the FAILED requests idx behind their runs' locks
// (finishBehindRunLocks). When a run stays held past FinishRunLockWait it
// records them behind the runs free at once instead
// (finishBesideHeldRuns), and answers the rows of the runs still held with
// an error wrapping ErrLockTimeout.
func (s *Store) finishFailed(ctx context.Context, b *finishBatch, idx []int) {
	if len(idx) == 0 {
		return
	}
	b.tried += len(idx)
	rows, err := s.finishBehindRunLocks(ctx, b.reqs, idx)
	if errors.Is(err, ErrLockTimeout) {
		var held []int
		idx, held, rows, err = s.finishBesideHeldRuns(ctx, b.reqs, idx)
		for _, i := range held {
			b.out[i].Err = fmt.Errorf("finish task %s: its run stayed held by another transaction past %s: %w",
				b.reqs[i].ID, FinishRunLockWait, ErrLockTimeout)
		}
	}
	s.settle(ctx, b, idx, rows, err)
}

// finishTx runs fn in a transaction whose every lock wait is bounded by
// FinishRunLockWait: the transactions of the FAILED rows, whose run locks
// must not hold a batch up for longer.
func (s *Store) finishTx(ctx context.Context, fn func(tx *sqlx.Tx) error) error {
	return s.inTx(ctx, func(tx *sqlx.Tx) error {
		if err := setLockTimeout(ctx, tx, FinishRunLockWait); err != nil {
			return err
		}
		return fn(tx)
	})
}

// finishBehindRunLocks runs qFinish for the FAILED requests idx after
// locking their runs' rows in id order (qLockRunsOfTasks: a failure may
// bury the task and its descendants, and the scheduler's pass, CancelRun,
// the reaper and RequeueMany lock the run rows first too, so the writes to
// the descendants cannot deadlock with theirs). A run lock not granted
// within FinishRunLockWait returns an error wrapping ErrLockTimeout (rolled
// back, nothing written).
func (s *Store) finishBehindRunLocks(ctx context.Context, reqs []FinishRequest, idx []int) (map[finishKey]core.TaskState, error) {
	var rows []finishRow
	err := s.finishTx(ctx, func(tx *sqlx.Tx) error {
		if _, err := tx.ExecContext(ctx, qLockRunsOfTasks, taskIDs(reqs, idx)); err != nil {
			return fmt.Errorf("lock runs: %w", asLockTimeout(err))
		}
		return tx.SelectContext(ctx, &rows, qFinish, finishArgs(reqs, idx)...)
	})
	return byKey(rows), err
}

// qLockFreeRunsOfTasks locks, in id order, the run rows of the tasks $1
// that no other transaction holds (SKIP LOCKED: it never waits, so it
// cannot deadlock whatever it holds) and returns the tasks whose runs it
// skipped. An unknown task is not returned (its request matches nothing).
const qLockFreeRunsOfTasks = `
WITH mine AS MATERIALIZED (
    SELECT r.id FROM workflow_runs r
     WHERE r.id IN (SELECT t.run_id FROM task_runs t WHERE t.id = ANY ($1::uuid[]))
     ORDER BY r.id
       FOR UPDATE SKIP LOCKED
)
SELECT t.id FROM task_runs t WHERE t.id = ANY ($1::uuid[]) AND t.run_id NOT IN (SELECT id FROM mine)`

// finishBesideHeldRuns is the fallback after a run lock timed out: in one
// transaction it locks the runs of the FAILED requests idx that are free
// now (qLockFreeRunsOfTasks) and runs qFinish for their requests (free),
// which the held runs' requests (held, nothing written for them) cannot
// hold up. Its error is the transaction's, for the free requests.
func (s *Store) finishBesideHeldRuns(ctx context.Context, reqs []FinishRequest, idx []int) (free, held []int, _ map[finishKey]core.TaskState, _ error) {
	free = idx
	var rows []finishRow
	err := s.finishTx(ctx, func(tx *sqlx.Tx) error {
		var busy []uuid.UUID
		if err := tx.SelectContext(ctx, &busy, qLockFreeRunsOfTasks, taskIDs(reqs, idx)); err != nil {
			return fmt.Errorf("lock free runs: %w", err)
		}
		free, held = partitionHeld(reqs, idx, busy)
		if len(free) == 0 {
			return nil
		}
		return tx.SelectContext(ctx, &rows, qFinish, finishArgs(reqs, free)...)
	})
	return free, held, byKey(rows), err
}

// partitionHeld splits the requests idx into those whose task is not in
// busy and those whose task is.
func partitionHeld(reqs []FinishRequest, idx []int, busy []uuid.UUID) (free, held []int) {
	for _, i := range idx {
		if slices.Contains(busy, reqs[i].ID) {
			held = append(held, i)
		} else {
			free = append(free, i)
		}
	}
	return free, held
}
