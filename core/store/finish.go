package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jmoiron/sqlx"

	"github.com/flowforge/flowforge/core"
)

// TaskOwnership is a task's state, fencing token and lease holder, as read
// back after a write whose reply was lost.
type TaskOwnership struct {
	State    core.TaskState
	Token    int64
	WorkerID string // empty when no worker holds or held it
}

// OwnershipOf returns the task's state, fencing token and worker, or
// ErrNotFound. Workers read it back after an ambiguous error from a write
// (the connection was lost after the statement was sent) to act on what
// committed.
func (s *Store) OwnershipOf(ctx context.Context, id uuid.UUID) (TaskOwnership, error) {
	var row struct {
		State    core.TaskState `db:"state"`
		Token    int64          `db:"fencing_token"`
		WorkerID sql.NullString `db:"worker_id"`
	}
	err := s.db.GetContext(ctx, &row, `SELECT state, fencing_token, worker_id FROM task_runs WHERE id = $1`, id)
	if errors.Is(err, sql.ErrNoRows) {
		return TaskOwnership{}, fmt.Errorf("task %s: %w", id, ErrNotFound)
	}
	if err != nil {
		return TaskOwnership{}, fmt.Errorf("read task %s: %w", id, err)
	}
	return TaskOwnership{State: row.State, Token: row.Token, WorkerID: row.WorkerID.String}, nil
}

// Outcome is how an attempt ended, as reported to Finish.
type Outcome string

// Attempt outcomes.
const (
	OutcomeSucceeded Outcome = "SUCCEEDED"
	OutcomeFailed    Outcome = "FAILED"
	OutcomeCancelled Outcome = "CANCELLED"
)

// FinishRequest reports the end of one attempt.
type FinishRequest struct {
	ID    uuid.UUID
	Token int64
	// Outcome decides the next state: SUCCEEDED; CANCELLED; FAILED becomes
	// DEAD when Permanent or the attempts are used up, RETRYING otherwise,
	// due after RetryDelay (measured from the database's now()).
	Outcome    Outcome
	Result     json.RawMessage // stored on success; must be valid jsonb (see core.SanitizeResult)
	Error      string          // stored on failure; sanitised by the caller
	Permanent  bool
	RetryDelay time.Duration
	WorkerID   string
	// IdempotencyKey, when set, records Result as the key's result in the
	// same statement (only if this attempt owns the key).
	IdempotencyKey string
	// ReusedFrom, on success, says Result is the one another task run
	// recorded for IdempotencyKey (KeyClaim.From): the same statement
	// stores it on the task run (reused_from) and in the history's reason.
	ReusedFrom *KeySource
}

// qLockRunOfTask locks the run row of task $1: writers of several task rows
// of one run take it first, so their row locks cannot deadlock.
const qLockRunOfTask = `SELECT 1 FROM workflow_runs r JOIN task_runs t ON t.run_id = r.id WHERE t.id = $1 FOR UPDATE OF r`

// qFinish also buries, in the same statement, the descendants of a task it
// makes DEAD (buryDownstream).
const qFinish = `
WITH RECURSIVE fin AS (
    UPDATE task_runs t
       SET state = CASE WHEN $3 = 'SUCCEEDED' THEN 'SUCCEEDED'
                        WHEN $3 = 'CANCELLED' THEN 'CANCELLED'
                        WHEN $6 OR t.attempt >= t.max_attempts THEN 'DEAD'
                        ELSE 'RETRYING' END,
           result = CASE WHEN $3 = 'SUCCEEDED' THEN $4::jsonb ELSE NULL END,
           error = CASE WHEN $3 = 'SUCCEEDED' THEN NULL ELSE $5 END,
           reused_from = CASE WHEN $3 = 'SUCCEEDED' THEN $10::uuid END,
           reused_from_run = CASE WHEN $3 = 'SUCCEEDED' THEN $11::uuid END,
           lease_expires_at = NULL,
           finished_at = CASE WHEN $3 <> 'FAILED' OR $6 OR t.attempt >= t.max_attempts THEN now() END,
           next_attempt_at = CASE WHEN $3 = 'FAILED' AND NOT $6 AND t.attempt < t.max_attempts
                                  THEN now() + $7::bigint * interval '1 millisecond' END
     WHERE t.id = $1 AND t.state = 'RUNNING' AND t.fencing_token = $2
 RETURNING t.id, t.run_id, t.state, t.attempt, t.fencing_token
), ik AS (
    UPDATE idempotency_keys k SET result = $4::jsonb, completed_at = now()
      FROM fin
     WHERE fin.state = 'SUCCEEDED' AND $8 <> '' AND k.key = $8
       AND k.task_run_id = fin.id AND k.fencing_token = fin.fencing_token
), ev AS (
    INSERT INTO task_events (task_run_id, run_id, from_state, to_state, attempt, fencing_token, worker_id, actor, reason)
    SELECT id, run_id, 'RUNNING', state, attempt, fencing_token, $9, $9,
           CASE WHEN state = 'SUCCEEDED' AND $10::uuid IS NOT NULL THEN $12 ELSE $5 END FROM fin
), buried (id, actor) AS (
    SELECT id, $9::text FROM fin WHERE state = 'DEAD'
), ` + buryDownstream + `, n AS (
    SELECT pg_notify('` + TasksChannel + `', run_id::text) FROM fin
)
SELECT fin.state, (SELECT count(*) FROM n) AS notified FROM fin`

// Finish records an attempt's outcome if the task is still RUNNING with
// token; a task it makes DEAD takes its PENDING descendants to
// UPSTREAM_FAILED in the same statement. A FAILED outcome first locks the
// task's run row (waiting out a scheduler pass over the run). ok=false (nil error) means the lease was lost to the reaper or a
// newer claim: the outcome is discarded, and the caller acks and counts a
// stale write. On success it returns the task's new state.
func (s *Store) Finish(ctx context.Context, req FinishRequest) (core.TaskState, bool, error) {
	if err := mustEdge(core.TaskRunning, core.TaskSucceeded, core.TaskRetrying, core.TaskDead, core.TaskCancelled); err != nil {
		return "", false, err
	}
	if err := mustEdge(core.TaskPending, core.TaskUpstreamFailed); err != nil {
		return "", false, err
	}
	switch req.Outcome {
	case OutcomeSucceeded, OutcomeFailed, OutcomeCancelled:
	default:
		return "", false, fmt.Errorf("finish task %s: unknown outcome %q", req.ID, req.Outcome)
	}
	result := req.Result
	if req.Outcome != OutcomeSucceeded {
		result = nil
	} else if len(result) == 0 {
		result = json.RawMessage("null")
	}
	var resultArg any
	if result != nil {
		resultArg = string(result)
	}
	var reusedTask, reusedRun any
	reuseNote := ""
	if req.ReusedFrom != nil && req.Outcome == OutcomeSucceeded {
		reusedTask = req.ReusedFrom.TaskRunID
		if req.ReusedFrom.RunID != uuid.Nil {
			reusedRun = req.ReusedFrom.RunID
		}
		reuseNote = ReuseNote(*req.ReusedFrom, req.IdempotencyKey)
	}
	var row struct {
		State    core.TaskState `db:"state"`
		Notified int            `db:"notified"`
	}
	args := []any{req.ID, req.Token, string(req.Outcome), resultArg, req.Error,
		req.Permanent, req.RetryDelay.Milliseconds(), req.IdempotencyKey, req.WorkerID, reusedTask, reusedRun, reuseNote}
	var err error
	if req.Outcome == OutcomeFailed {
		// A failure may bury the task and its descendants: lock the run row
		// first, as the scheduler's pass, CancelRun and RequeueMany do, so
		// the writes to the descendants cannot deadlock with theirs.
		err = s.inTx(ctx, func(tx *sqlx.Tx) error {
			if _, err := tx.ExecContext(ctx, qLockRunOfTask, req.ID); err != nil {
				return fmt.Errorf("lock run: %w", err)
			}
			return tx.GetContext(ctx, &row, qFinish, args...)
		})
	} else {
		err = s.db.GetContext(ctx, &row, qFinish, args...)
	}
	if errors.Is(err, sql.ErrNoRows) {
		return "", false, nil
	}
	if err != nil {
		return "", false, fmt.Errorf("finish task %s: %w", req.ID, err)
	}
	return row.State, true, nil
}
