package store

import (
	"context"
	"fmt"

	"github.com/google/uuid"
	"github.com/jmoiron/sqlx"
)

// qLockNamedRuns locks the open runs among $1 that no other transaction
// holds, in id order (FOR UPDATE SKIP LOCKED). The rules of a targeted
// pass (AdvanceRuns), which it and qHeldNamedRuns keep:
//
//   - A run row held elsewhere (a forgotten BEGIN ... FOR UPDATE in psql,
//     a long dead requeue --all, a run delete, another scheduler's pass)
//     delays that run only, and only until a later pass: the pass neither
//     waits for it nor writes anything in it (its snapshot may predate
//     what the holder commits), and hands it back (AdvanceResult.Held).
//   - It never delays the other runs of the pass, nor the caller's sweep,
//     and is no error: nothing times out, nothing is rolled back, so the
//     scheduler has no failure to count as an outage of its own. (A held
//     task row is another matter: the pass's writes wait for it, up to the
//     session's lock_timeout, and the pass then fails, a refusal that the
//     scheduler retries later and does not count as an outage.)
//   - A run handed back must be passed again by a later transaction, and
//     the scheduler does (daemon/scheduler, heldRuns). The promotion rule
//     still holds: the pass a finish's notification starts, or the later
//     pass a held run is handed to, begins after that finish committed
//     (and, once it gets the lock, after the holder's commit too), so its
//     READ COMMITTED statements see the finish. A holder that was itself
//     a pass and read the run before the finish is covered by the pass
//     handed the run, never by the holder.
//
// Id order: two targeted passes, and the reaper and RequeueMany
// (qLockRunsOfTasks, which wait), take locks in the same order and cannot
// deadlock; a targeted pass, like a full sweep, never waits.
const qLockNamedRuns = `
SELECT id, created_at, state, cancel_requested_at IS NOT NULL AS cancel_requested, fail_fast, run_wait
  FROM workflow_runs
 WHERE id = ANY ($1::uuid[]) AND finished_at IS NULL
 ORDER BY id
   FOR UPDATE SKIP LOCKED`

// qHeldNamedRuns returns, in id order, the runs among $1 still open (as
// last committed) that are not among $2, the runs qLockNamedRuns locked:
// the ones another transaction held. It reads without locking, so it
// never waits either.
const qHeldNamedRuns = `
SELECT r.id FROM workflow_runs r
 WHERE r.id = ANY ($1::uuid[]) AND r.finished_at IS NULL AND r.id <> ALL ($2::uuid[])
 ORDER BY r.id`

// AdvanceRuns runs a targeted scheduler pass over the runs ids (those of
// them still open; at most a few hundred per call: the caller pages), in
// ONE transaction that begins after the writes that named them committed
// (the scheduler calls it on a TasksChannel notification, delivered after
// the commit): it locks the ones no other transaction holds, in id order,
// without waiting (qLockNamedRuns, whose doc has the rules), and advances
// them as Advance does (advanceLocked). Finished and unknown ids are
// ignored. Result.Runs is how many it locked and advanced; Result.Held the
// open runs it could not lock, which it did not touch and which the caller
// must pass again later (a held run is no error); Result.Next is always
// nil.
func (s *Store) AdvanceRuns(ctx context.Context, ids []uuid.UUID, actor string) (AdvanceResult, error) {
	if err := advanceEdges(); err != nil {
		return AdvanceResult{}, err
	}
	if len(ids) == 0 {
		return AdvanceResult{}, nil
	}
	var res AdvanceResult
	err := s.inTx(ctx, func(tx *sqlx.Tx) error {
		runs, err := lockNamedRuns(ctx, tx, ids, &res)
		if err != nil || len(runs) == 0 {
			return err
		}
		return s.advanceLocked(ctx, tx, runs, actor, &res)
	})
	if err != nil {
		return AdvanceResult{}, err
	}
	return res, nil
}

// lockNamedRuns locks the open runs among ids that nobody else holds
// (qLockNamedRuns) and records in res how many it locked and which open
// ones were held (qHeldNamedRuns, asked only when it locked fewer runs
// than it was named).
func lockNamedRuns(ctx context.Context, tx *sqlx.Tx, ids []uuid.UUID, res *AdvanceResult) ([]openRun, error) {
	var runs []openRun
	if err := tx.SelectContext(ctx, &runs, qLockNamedRuns, uuidArray(ids)); err != nil {
		return nil, fmt.Errorf("lock named runs: %w", err)
	}
	res.Runs = len(runs)
	if len(runs) == distinct(ids) {
		return runs, nil
	}
	locked := make([]uuid.UUID, len(runs))
	for i, r := range runs {
		locked[i] = r.ID
	}
	var held []uuid.UUID
	if err := tx.SelectContext(ctx, &held, qHeldNamedRuns, uuidArray(ids), uuidArray(locked)); err != nil {
		return nil, fmt.Errorf("find held runs: %w", err)
	}
	res.Held = held
	return runs, nil
}

// distinct returns how many different ids there are.
func distinct(ids []uuid.UUID) int {
	seen := make(map[uuid.UUID]struct{}, len(ids))
	for _, id := range ids {
		seen[id] = struct{}{}
	}
	return len(seen)
}
