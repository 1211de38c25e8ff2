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

// mustEdge refuses, before any SQL runs, a transition the state machine does
// not have. Each store method that moves a task names its edges here.
func mustEdge(from core.TaskState, to ...core.TaskState) error {
	for _, t := range to {
		if err := core.CheckTransition(from, t); err != nil {
			return err
		}
	}
	return nil
}

// ClaimedTask is what a successful claim returns: everything the worker
// needs to run the attempt, and the fencing token that guards every later
// write of this attempt.
type ClaimedTask struct {
	ID             uuid.UUID      `db:"id"`
	RunID          uuid.UUID      `db:"run_id"`
	Workflow       string         `db:"workflow_name"`
	TaskName       string         `db:"task_name"`
	Handler        string         `db:"handler"`
	Params         JSON           `db:"params"`
	RunParams      JSON           `db:"run_params"`
	Upstream       JSON           `db:"upstream"`
	Attempt        int            `db:"attempt"`
	MaxAttempts    int            `db:"max_attempts"`
	InitialBackoff int64          `db:"initial_backoff_ms"`
	MaxBackoff     int64          `db:"max_backoff_ms"`
	TimeoutMS      int64          `db:"timeout_ms"`
	FencingToken   int64          `db:"fencing_token"`
	IdempotencyKey sql.NullString `db:"idempotency_key"`
	LeaseExpiresAt time.Time      `db:"lease_expires_at"`
}

// Policy returns the claimed task's retry policy.
func (c ClaimedTask) Policy() core.RetryPolicy {
	return core.RetryPolicy{
		MaxAttempts:    c.MaxAttempts,
		InitialBackoff: time.Duration(c.InitialBackoff) * time.Millisecond,
		MaxBackoff:     time.Duration(c.MaxBackoff) * time.Millisecond,
	}
}

// Timeout returns the handler's deadline, 0 meaning none.
func (c ClaimedTask) Timeout() time.Duration { return time.Duration(c.TimeoutMS) * time.Millisecond }

// UpstreamResults decodes Upstream into a map by task name.
func (c ClaimedTask) UpstreamResults() map[string]json.RawMessage {
	out := map[string]json.RawMessage{}
	if len(c.Upstream) > 0 {
		_ = json.Unmarshal(c.Upstream, &out)
	}
	return out
}

// qClaim is READY -> RUNNING in one statement: it requires the fencing token
// the dispatch message carries (so a message of an older generation can
// never claim a newer one), bumps the token, counts the attempt, and sets the
// lease on the database clock. The lease is measured from clock_timestamp(),
// the moment the row is written (after any lock wait), not from now(), the
// start of the transaction: a claim that waited behind a lock must not
// commit a lease already partly or wholly spent.
const qClaim = `
WITH claimed AS (
    UPDATE task_runs t
       SET state = 'RUNNING', fencing_token = t.fencing_token + 1, attempt = t.attempt + 1,
           lease_expires_at = clock_timestamp() + $4::bigint * interval '1 millisecond', heartbeat_at = clock_timestamp(),
           worker_id = $3, started_at = now(), finished_at = NULL, next_attempt_at = NULL
      FROM workflow_runs r
     WHERE t.id = $1 AND t.state = 'READY' AND t.fencing_token = $2 AND r.id = t.run_id
       AND r.cancel_requested_at IS NULL AND NOT (r.fail_fast AND r.state = 'FAILED')
 RETURNING t.id, t.run_id, r.workflow_name, t.task_name, t.handler, t.params, r.params AS run_params,
           t.depends_on, t.attempt, t.max_attempts, t.initial_backoff_ms, t.max_backoff_ms, t.timeout_ms,
           t.fencing_token, t.idempotency_key, t.lease_expires_at
), ev AS (
    INSERT INTO task_events (task_run_id, run_id, from_state, to_state, attempt, fencing_token, worker_id, actor, reason)
    SELECT id, run_id, 'READY', 'RUNNING', attempt, fencing_token, $3, $3, 'claimed' FROM claimed
)
SELECT c.id, c.run_id, c.workflow_name, c.task_name, c.handler, c.params, c.run_params,
       coalesce((SELECT jsonb_object_agg(p.task_name, coalesce(p.result, 'null'::jsonb))
                   FROM task_runs p WHERE p.run_id = c.run_id AND p.task_name = ANY (c.depends_on)), '{}'::jsonb) AS upstream,
       c.attempt, c.max_attempts, c.initial_backoff_ms, c.max_backoff_ms, c.timeout_ms, c.fencing_token,
       c.idempotency_key, c.lease_expires_at
  FROM claimed c`

// Claim moves the task READY -> RUNNING for workerID if it is still READY
// with the fencing token the dispatch carried. ok=false (nil error) means the
// claim lost: a duplicate or stale delivery, a cancelled task or run (or a
// failed fail_fast run), or an unknown id; the caller acks the message and runs nothing. lease is the lease
// duration (rounded to milliseconds), measured from the write. The claim
// waits at most LockWaitFor(lease) for a lock, then fails with an error
// wrapping ErrLockTimeout (nothing written). Any other error may have come
// after the claim committed: see ClaimedBy.
func (s *Store) Claim(ctx context.Context, id uuid.UUID, token int64, workerID string, lease time.Duration) (ClaimedTask, bool, error) {
	if err := mustEdge(core.TaskReady, core.TaskRunning); err != nil {
		return ClaimedTask{}, false, err
	}
	var c ClaimedTask
	err := s.inTx(ctx, func(tx *sqlx.Tx) error {
		if err := setLockTimeout(ctx, tx, LockWaitFor(lease)); err != nil {
			return err
		}
		return tx.GetContext(ctx, &c, qClaim, id, token, workerID, lease.Milliseconds())
	})
	if errors.Is(err, sql.ErrNoRows) {
		return ClaimedTask{}, false, nil
	}
	if err != nil {
		return ClaimedTask{}, false, fmt.Errorf("claim task %s: %w", id, asLockTimeout(err))
	}
	return c, true, nil
}

// qClaimedBy reads back what qClaim returns, for the attempt holding token
// on workerID: the claim committed when this matches.
const qClaimedBy = `
SELECT t.id, t.run_id, r.workflow_name, t.task_name, t.handler, t.params, r.params AS run_params,
       coalesce((SELECT jsonb_object_agg(p.task_name, coalesce(p.result, 'null'::jsonb))
                   FROM task_runs p WHERE p.run_id = t.run_id AND p.task_name = ANY (t.depends_on)), '{}'::jsonb) AS upstream,
       t.attempt, t.max_attempts, t.initial_backoff_ms, t.max_backoff_ms, t.timeout_ms, t.fencing_token,
       t.idempotency_key, t.lease_expires_at
  FROM task_runs t JOIN workflow_runs r ON r.id = t.run_id
 WHERE t.id = $1 AND t.state = 'RUNNING' AND t.fencing_token = $2 AND t.worker_id = $3`

// ClaimedBy reads back a claim whose reply was lost (an error after the
// statement was sent: it may have committed). ok=true means the task is
// RUNNING for workerID with token, the token the claim of a dispatch
// carrying token-1 produces: the claim committed and the caller owns the
// attempt, exactly as if Claim had returned it. ok=false (nil error) means
// it did not commit (or was since lost). The error is the read's own.
func (s *Store) ClaimedBy(ctx context.Context, id uuid.UUID, token int64, workerID string) (ClaimedTask, bool, error) {
	var c ClaimedTask
	err := s.db.GetContext(ctx, &c, qClaimedBy, id, token, workerID)
	if errors.Is(err, sql.ErrNoRows) {
		return ClaimedTask{}, false, nil
	}
	if err != nil {
		return ClaimedTask{}, false, fmt.Errorf("read back the claim of task %s: %w", id, err)
	}
	return c, true, nil
}

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

// ErrLockTimeout wraps the error of a claim or renewal that waited longer
// than LockWaitFor for a lock: it was rolled back and wrote nothing (the
// error is not ambiguous).
var ErrLockTimeout = errors.New("lock wait exceeded its bound; nothing was written")

// asLockTimeout marks a lock_timeout error (SQLSTATE 55P03) with
// ErrLockTimeout.
func asLockTimeout(err error) error {
	if pgCode(err) == "55P03" {
		return fmt.Errorf("%w: %w", ErrLockTimeout, err)
	}
	return err
}

// LockWaitMin is the least lock wait LockWaitFor allows.
const LockWaitMin = 50 * time.Millisecond

// LockWaitFor is how long a claim or a renewal of a lease of length lease
// may wait for a row or table lock before it fails (lock_timeout, SQLSTATE
// 55P03) instead of committing late: a quarter of the lease, at least
// LockWaitMin. A renewal that fails so is retried at once by the worker's
// heartbeat, well within the lease.
func LockWaitFor(lease time.Duration) time.Duration {
	return max(lease/4, LockWaitMin)
}

// setLockTimeout bounds the lock waits of the rest of tx (SET LOCAL: the
// setting ends with the transaction, the pooled session keeps its own).
func setLockTimeout(ctx context.Context, tx *sqlx.Tx, d time.Duration) error {
	if _, err := tx.ExecContext(ctx, `SELECT set_config('lock_timeout', $1, true)`, fmt.Sprintf("%dms", d.Milliseconds())); err != nil {
		return fmt.Errorf("set lock_timeout: %w", err)
	}
	return nil
}

// TaskStateOf returns a task's current state and fencing token, or
// ErrNotFound. Workers use it to explain a lost claim in their logs.
func (s *Store) TaskStateOf(ctx context.Context, id uuid.UUID) (core.TaskState, int64, error) {
	var row struct {
		State core.TaskState `db:"state"`
		Token int64          `db:"fencing_token"`
	}
	err := s.db.GetContext(ctx, &row, `SELECT state, fencing_token FROM task_runs WHERE id = $1`, id)
	if errors.Is(err, sql.ErrNoRows) {
		return "", 0, fmt.Errorf("task %s: %w", id, ErrNotFound)
	}
	if err != nil {
		return "", 0, fmt.Errorf("read task %s: %w", id, err)
	}
	return row.State, row.Token, nil
}

// RenewResult is the outcome of a heartbeat.
type RenewResult struct {
	// OK is false when the lease was lost: the task is no longer RUNNING
	// with this token. The handler's context must be cancelled and its
	// outcome discarded.
	OK bool
	// Stop is true when the run was cancelled (or failed under fail_fast):
	// the handler's context should be cancelled with core.ErrRunCancelled.
	Stop bool
}

// qRenew extends a lease, measured from clock_timestamp() (the moment the
// row is written, after any lock wait: a renewal that waited behind a lock
// does not commit a lease already spent), and never backwards: of two
// renewals queued behind one lock, the one computed earlier may commit
// last, and GREATEST keeps the later expiry.
const qRenew = `
UPDATE task_runs t
   SET lease_expires_at = GREATEST(t.lease_expires_at, clock_timestamp() + $3::bigint * interval '1 millisecond'),
       heartbeat_at = GREATEST(t.heartbeat_at, clock_timestamp())
  FROM workflow_runs r
 WHERE t.id = $1 AND t.state = 'RUNNING' AND t.fencing_token = $2 AND r.id = t.run_id
RETURNING (r.cancel_requested_at IS NOT NULL OR (r.fail_fast AND r.state = 'FAILED')) AS stop`

// Renew extends the lease of a RUNNING task held with token to lease past
// the database's clock_timestamp() at the write (never moving it
// backwards). It waits at most LockWaitFor(lease) for a lock, then fails
// with an error rather than commit late; an error may also mean the renewal
// committed and its reply was lost, which the next renewal makes harmless.
func (s *Store) Renew(ctx context.Context, id uuid.UUID, token int64, lease time.Duration) (RenewResult, error) {
	var stop bool
	err := s.inTx(ctx, func(tx *sqlx.Tx) error {
		if err := setLockTimeout(ctx, tx, LockWaitFor(lease)); err != nil {
			return err
		}
		return tx.GetContext(ctx, &stop, qRenew, id, token, lease.Milliseconds())
	})
	if errors.Is(err, sql.ErrNoRows) {
		return RenewResult{}, nil
	}
	if err != nil {
		return RenewResult{}, fmt.Errorf("renew lease of task %s: %w", id, asLockTimeout(err))
	}
	return RenewResult{OK: true, Stop: stop}, nil
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
    SELECT pg_notify('` + NotifyChannel + `', '` + TopicTasks + `') FROM fin
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

// ReuseNote is the history's reason for a finish that reused src's result
// for key: "result reused from task run X of run Y (idempotency key K)",
// the key cut to 200 bytes.
func ReuseNote(src KeySource, key string) string {
	return fmt.Sprintf("result reused from %s (idempotency key %s)", src, core.SanitizeText(key, 200))
}

// ReadyFor returns how long the task has been READY (database clock). ok is
// false when it is not READY (or does not exist).
func (s *Store) ReadyFor(ctx context.Context, id uuid.UUID) (time.Duration, bool, error) {
	var ms float64
	err := s.db.GetContext(ctx, &ms, `SELECT extract(epoch FROM now() - ready_at) * 1000 FROM task_runs WHERE id = $1 AND state = 'READY'`, id)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, fmt.Errorf("read task %s: %w", id, err)
	}
	return time.Duration(ms * float64(time.Millisecond)), true, nil
}
