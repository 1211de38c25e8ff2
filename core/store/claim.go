package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/flowforge/flowforge/core"
)

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
	// Item is the element a for_each task's task run was made for (JSON);
	// empty for any other task run.
	Item JSON `db:"item"`
	// ReadyAt is when the task last became READY, ClaimedAt when this
	// claim started (its started_at) and RunCreatedAt when its run was
	// triggered, all on the database's clock: the latency histograms'
	// queue wait (ClaimedAt - ReadyAt) and trigger to READY (ReadyAt -
	// RunCreatedAt). ReadyAt is invalid for a row an older binary made
	// READY without it.
	ReadyAt      sql.NullTime `db:"ready_at"`
	ClaimedAt    time.Time    `db:"started_at"`
	RunCreatedAt time.Time    `db:"run_created_at"`
	// Suspect says the task was reaped from a crashed worker together with
	// other tasks (store.Reap's crash rule): the worker runs its handler
	// alone, and records that it did (MarkAlone) before it starts it.
	Suspect bool `db:"suspect"`
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

// The claim: READY -> RUNNING in one conditional statement, for one task
// (qClaimOne) or a batch (qClaim). Both are built from the same fragments,
// so that one row and many keep the same rules: each row is fenced by its
// own request's token (each form says so itself), and by state READY, its
// run (not cancelled, not a failed fail_fast run) and its workflow (not
// paused: the pause's fence, see PauseWorkflow) — claimFence; it bumps the token, counts the
// attempt, and sets the lease on the database clock — claimSet; each row
// gets its history row in the same statement and returns what the worker
// runs — claimTail. $3 is the worker, $4 the lease in milliseconds. The
// lease is measured from clock_timestamp(), the moment the row is written
// (after any lock wait), not from now(), the start of the statement: a
// claim that waited behind a lock must not commit a lease already partly
// or wholly spent.
//
// The state a row must be in comes with the request (q.from_state, always
// READY: ClaimMany sends it), not as a literal: a literal 'READY' lets the
// planner read the task through the partial index of READY tasks, which
// statistics taken when few tasks were READY make look cheapest and which
// a backlog makes as long as the backlog (a claim that scanned it whole);
// compared with a request's column it can only look the task up by its
// primary key. The same holds for every statement on the hot path (see
// finishFence).
//
// The rules (each with its test and mutant, see e2e/FAILURE_MODEL.md modes
// 50, 54 and 86):
//   - a row is claimed only with its own request's token and state READY:
//     one row never stands for another (mode 50);
//   - one request per (task, token): ClaimMany drops an exact repeat, and
//     two requests for one task with different tokens can both be sent,
//     since at most one of them matches the row's token (mode 86);
//   - a batch's rows are locked in id order before any is written (lk,
//     mode 54); one row needs no order;
//   - a held row delays the statement at most LockWaitFor(lease), then it
//     fails with ErrLockTimeout having written nothing.
const (
	claimSet = `state = 'RUNNING', fencing_token = t.fencing_token + 1, attempt = t.attempt + 1,
           lease_expires_at = clock_timestamp() + $4::bigint * interval '1 millisecond', heartbeat_at = clock_timestamp(),
           worker_id = $3, started_at = now(), finished_at = NULL, next_attempt_at = NULL`
	claimFence = `t.id = q.id AND t.state = q.from_state AND r.id = t.run_id
       AND r.cancel_requested_at IS NULL AND NOT (r.fail_fast AND r.state = 'FAILED' AND NOT t.on_failure)
       AND NOT EXISTS (SELECT 1 FROM workflow_pauses p WHERE p.workflow_name = r.workflow_name)`
	claimTail = `
 RETURNING t.id, t.run_id, r.workflow_name, t.task_name, t.handler, t.params, r.params AS run_params,
           t.depends_on, t.attempt, t.max_attempts, t.initial_backoff_ms, t.max_backoff_ms, t.timeout_ms,
           t.fencing_token, t.idempotency_key, t.lease_expires_at, t.item, t.ready_at, t.started_at, r.created_at AS run_created_at,
           t.suspect
), ev AS (
    INSERT INTO task_events (task_run_id, run_id, from_state, to_state, attempt, fencing_token, worker_id, actor, reason)
    SELECT id, run_id, 'READY', 'RUNNING', attempt, fencing_token, $3, $3, 'claimed' FROM claimed
)
SELECT c.id, c.run_id, c.workflow_name, c.task_name, c.handler, c.params, c.run_params,
       coalesce((SELECT jsonb_object_agg(p.task_name, coalesce(p.result, 'null'::jsonb))
                   FROM task_runs p WHERE p.run_id = c.run_id AND p.task_name = ANY (c.depends_on)), '{}'::jsonb) AS upstream,
       c.attempt, c.max_attempts, c.initial_backoff_ms, c.max_backoff_ms, c.timeout_ms, c.fencing_token,
       c.idempotency_key, c.lease_expires_at, c.item, c.ready_at, c.started_at, c.run_created_at, c.suspect
  FROM claimed c`
)

// qClaim claims a batch: $1, $2 and $5 are parallel arrays of task ids,
// the fencing tokens their dispatches carry ($1[i] is claimed only with
// $2[i], so a message of an older generation can never claim a newer
// one) and the state each must be in. The rows are locked in id order first (lk), so two workers'
// batches that share rows wait for each other instead of deadlocking.
const qClaim = `
WITH claimed AS (
    UPDATE task_runs t
       SET ` + claimSet + `
      FROM unnest($1::uuid[], $2::bigint[], $5::text[]) AS q(id, tok, from_state),
           (SELECT l.id FROM task_runs l WHERE l.id = ANY ($1::uuid[]) ORDER BY l.id FOR UPDATE) lk,
           workflow_runs r
     WHERE lk.id = q.id AND t.fencing_token = q.tok AND ` + claimFence + claimTail

// qClaimOne claims one task: $1 its id, $2 the token its dispatch
// carried, $5 the state it must be in. Its plan is a primary-key lookup whatever the statistics say,
// so the plan cached for the prepared statement stays right (the batch's
// array parameters make PostgreSQL plan it afresh on every call: about a
// millisecond of planning, more than the claim itself).
const qClaimOne = `
WITH claimed AS (
    UPDATE task_runs t
       SET ` + claimSet + `
      FROM (SELECT $1::uuid AS id, $2::bigint AS tok, $5::text AS from_state) q, workflow_runs r
     WHERE t.fencing_token = q.tok AND ` + claimFence + claimTail

// ClaimRequest asks for one task of a ClaimMany batch: its id and the
// fencing token its dispatch carried.
type ClaimRequest struct {
	ID    uuid.UUID
	Token int64
}

// ClaimResult is the answer to one ClaimRequest: OK with the claimed
// attempt (the task moved READY -> RUNNING for the worker), or OK false
// when that claim lost: a duplicate or stale delivery, a cancelled task or
// run (or a failed fail_fast run), a paused workflow (the task stays
// READY; ResumeWorkflow re-sends it), or an unknown id; the caller acks
// the message and runs nothing.
type ClaimResult struct {
	Task ClaimedTask
	OK   bool
}

// ClaimMaxBatch bounds the requests of one ClaimMany (and FinishMany):
// one statement's arrays, and the rows it locks at once.
const ClaimMaxBatch = 1000

// ClaimMany claims a batch of tasks for workerID in one conditional
// statement (qClaim, or qClaimOne for one request) that commits on its
// own, sent in one round trip (inOneTrip), each request fenced by its own
// token:
// the result has one entry per request, in order, OK for the winners only.
// The batch keeps one request per (task, token): a request that repeats an
// earlier one's id AND token loses (a duplicate delivery), while requests
// for one task with different tokens (a stale copy of its dispatch beside
// the fresh one, in either order) are each tried, and only the one
// carrying the task's current token can win: a stale copy never hides the
// fresh dispatch. lease is the lease duration (rounded to milliseconds),
// measured from each row's write. The claim waits at most
// LockWaitFor(lease) for a lock, then fails with an error wrapping
// ErrLockTimeout (nothing written, for every request). Any other error may
// have come after the claim committed: see ClaimedBy, per request. At most
// ClaimMaxBatch requests.
func (s *Store) ClaimMany(ctx context.Context, reqs []ClaimRequest, workerID string, lease time.Duration) ([]ClaimResult, error) {
	res, err := s.claimMany(ctx, reqs, workerID, lease)
	if err != nil {
		return nil, fmt.Errorf("claim %d tasks: %w", len(reqs), err)
	}
	return res, nil
}

// claimMany is ClaimMany with its errors unwrapped.
func (s *Store) claimMany(ctx context.Context, reqs []ClaimRequest, workerID string, lease time.Duration) ([]ClaimResult, error) {
	if err := mustEdge(core.TaskReady, core.TaskRunning); err != nil {
		return nil, err
	}
	if len(reqs) == 0 || len(reqs) > ClaimMaxBatch {
		return nil, fmt.Errorf("a batch holds 1 to %d requests", ClaimMaxBatch)
	}
	ids := make([][16]byte, 0, len(reqs))
	toks := make([]int64, 0, len(reqs))
	first := make(map[ClaimRequest]int, len(reqs))
	for i, r := range reqs {
		if _, dup := first[r]; dup {
			continue // the same (task, token) again: one request claims
		}
		first[r] = i
		ids = append(ids, r.ID)
		toks = append(toks, r.Token)
	}
	from := make([]string, len(ids))
	for i := range from {
		from[i] = string(core.TaskReady)
	}
	query, args := qClaim, []any{ids, toks, workerID, lease.Milliseconds(), from}
	set := tripSettings{LockWait: LockWaitFor(lease), KeyPlan: true}
	if len(ids) == 1 {
		query, args = qClaimOne, []any{ids[0], toks[0], workerID, lease.Milliseconds(), from[0]}
	}
	var rows []ClaimedTask
	err := s.inOneTrip(ctx, set, query, args, func(r pgx.Rows) error {
		var err error
		rows, err = pgx.CollectRows(r, pgx.RowToStructByName[ClaimedTask])
		return err
	})
	if err != nil {
		return nil, unanswered("claim", asLockTimeout(err))
	}
	out := make([]ClaimResult, len(reqs))
	for _, c := range rows {
		// A claim bumps the token by one: the row answers the request
		// that carried the token before it.
		if i, ok := first[ClaimRequest{ID: c.ID, Token: c.FencingToken - 1}]; ok {
			out[i] = ClaimResult{Task: c, OK: true}
		}
	}
	return out, nil
}

// qClaimedBy reads back what qClaim returns, for the attempt holding token
// on workerID: the claim committed when this matches.
const qClaimedBy = `
SELECT t.id, t.run_id, r.workflow_name, t.task_name, t.handler, t.params, r.params AS run_params,
       coalesce((SELECT jsonb_object_agg(p.task_name, coalesce(p.result, 'null'::jsonb))
                   FROM task_runs p WHERE p.run_id = t.run_id AND p.task_name = ANY (t.depends_on)), '{}'::jsonb) AS upstream,
       t.attempt, t.max_attempts, t.initial_backoff_ms, t.max_backoff_ms, t.timeout_ms, t.fencing_token,
       t.idempotency_key, t.lease_expires_at, t.item, t.ready_at, t.started_at, r.created_at AS run_created_at, t.suspect
  FROM task_runs t JOIN workflow_runs r ON r.id = t.run_id
 WHERE t.id = $1 AND t.state = 'RUNNING' AND t.fencing_token = $2 AND t.worker_id = $3`

// ClaimedBy reads back a claim whose reply was lost (an error after the
// statement was sent: it may have committed). ok=true means the task is
// RUNNING for workerID with token, the token the claim of a dispatch
// carrying token-1 produces: the claim committed and the caller owns the
// attempt, exactly as if ClaimMany had returned it. ok=false (nil error) means
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
