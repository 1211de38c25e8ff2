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

// FinishResult is the answer to one FinishRequest of a FinishMany batch:
// OK with the task's new State, OK false (nil Err) when the fencing token
// or state rejected it (the lease was lost), or Err when that row alone
// could not be recorded (see FinishMany).
type FinishResult struct {
	State core.TaskState
	OK    bool
	Err   error
}

// finishNotifyRunsMax is the most runs a finish names in its one
// TasksChannel payload: 200 ids of 36 characters and their commas stay
// under PostgreSQL's 8000-byte payload limit (the worker's batches are
// smaller still).
const finishNotifyRunsMax = "200"

// qFinish records a batch of outcomes in one statement: $1..$12 are
// parallel arrays, one entry per attempt (id, token, outcome, result text,
// error, permanent, retry delay in ms, idempotency key, worker, reused
// task run, reused run, reuse note). Each row is fenced by its own token
// and state RUNNING; the rows are locked in id order first (lk). It writes each
// row's history, stores the results of the keys the attempts own, buries
// in the same statement the descendants of the tasks it makes DEAD
// (buryDownstream), and notifies at most once (n): the schedulers, on
// TasksChannel, with the ids of the runs it changed (AnyRun beyond
// finishNotifyRunsMax runs, whose ids would not fit in one payload).
const qFinish = `
WITH RECURSIVE fin AS (
    UPDATE task_runs t
       SET state = CASE WHEN q.outcome = 'SUCCEEDED' THEN 'SUCCEEDED'
                        WHEN q.outcome = 'CANCELLED' THEN 'CANCELLED'
                        WHEN q.permanent OR t.attempt >= t.max_attempts THEN 'DEAD'
                        ELSE 'RETRYING' END,
           result = CASE WHEN q.outcome = 'SUCCEEDED' THEN q.result::jsonb ELSE NULL END,
           error = CASE WHEN q.outcome = 'SUCCEEDED' THEN NULL ELSE q.error END,
           reused_from = CASE WHEN q.outcome = 'SUCCEEDED' THEN q.reused_from END,
           reused_from_run = CASE WHEN q.outcome = 'SUCCEEDED' THEN q.reused_run END,
           lease_expires_at = NULL,
           finished_at = CASE WHEN q.outcome <> 'FAILED' OR q.permanent OR t.attempt >= t.max_attempts THEN now() END,
           next_attempt_at = CASE WHEN q.outcome = 'FAILED' AND NOT q.permanent AND t.attempt < t.max_attempts
                                  THEN now() + q.delay_ms * interval '1 millisecond' END
      FROM unnest($1::uuid[], $2::bigint[], $3::text[], $4::text[], $5::text[], $6::bool[], $7::bigint[],
                  $8::text[], $9::text[], $10::uuid[], $11::uuid[], $12::text[])
               AS q(id, tok, outcome, result, error, permanent, delay_ms, key, worker, reused_from, reused_run, note),
           (SELECT l.id FROM task_runs l WHERE l.id = ANY ($1::uuid[]) ORDER BY l.id FOR UPDATE) lk
     WHERE t.id = q.id AND lk.id = q.id AND t.state = 'RUNNING' AND t.fencing_token = q.tok
 RETURNING t.id, t.run_id, t.state, t.attempt, t.fencing_token, t.result, q.key, q.worker, q.error, q.reused_from, q.note
), ik AS (
    UPDATE idempotency_keys k SET result = fin.result, completed_at = now()
      FROM fin
     WHERE fin.state = 'SUCCEEDED' AND fin.key <> '' AND k.key = fin.key
       AND k.task_run_id = fin.id AND k.fencing_token = fin.fencing_token
), ev AS (
    INSERT INTO task_events (task_run_id, run_id, from_state, to_state, attempt, fencing_token, worker_id, actor, reason)
    SELECT id, run_id, 'RUNNING', state, attempt, fencing_token, worker, worker,
           CASE WHEN state = 'SUCCEEDED' AND reused_from IS NOT NULL THEN note ELSE error END FROM fin
), buried (id, actor) AS (
    SELECT id, worker FROM fin WHERE state = 'DEAD'
), ` + buryDownstream + `, n AS (
    SELECT pg_notify('` + TasksChannel + `', CASE WHEN count(DISTINCT run_id) <= ` + finishNotifyRunsMax + `
                                           THEN string_agg(DISTINCT run_id::text, ',') ELSE '` + AnyRun + `' END)
      FROM fin HAVING count(*) > 0
)
SELECT fin.id, fin.state, (SELECT count(*) FROM n) AS notified FROM fin`

// Finish records an attempt's outcome if the task is still RUNNING with
// token: a FinishMany of one, through the same statement. ok=false (nil
// error) means the lease was lost to the reaper or a newer claim: the
// outcome is discarded, and the caller acks and counts a stale write. On
// success it returns the task's new state.
func (s *Store) Finish(ctx context.Context, req FinishRequest) (core.TaskState, bool, error) {
	res, err := s.FinishMany(ctx, []FinishRequest{req})
	if err != nil {
		return "", false, fmt.Errorf("finish task %s: %w", req.ID, err)
	}
	return res[0].State, res[0].OK, res[0].Err
}

// FinishMany records a batch of attempts' outcomes in one transaction of
// one statement (qFinish), each row only if its task is still RUNNING with
// its token; a task it makes DEAD takes its PENDING descendants to
// UPSTREAM_FAILED in the same statement. When a request is FAILED, the
// run rows of the FAILED requests' tasks are locked first, in id order
// (waiting out a scheduler pass over those runs). The result has one entry
// per request, in order. A request that repeats an earlier request's id is
// not OK. The error is non-nil only when no row's fate is known (the
// statement or its COMMIT got no answer: any row may have committed, see
// OwnershipOf). A statement the database refused (an SQLSTATE: one row's
// result it cannot store, say) is retried row by row, so the other rows
// commit and only the row that caused it carries the error in its Err.
// At most ClaimMaxBatch requests.
func (s *Store) FinishMany(ctx context.Context, reqs []FinishRequest) ([]FinishResult, error) {
	if err := mustEdge(core.TaskRunning, core.TaskSucceeded, core.TaskRetrying, core.TaskDead, core.TaskCancelled); err != nil {
		return nil, err
	}
	if err := mustEdge(core.TaskPending, core.TaskUpstreamFailed); err != nil {
		return nil, err
	}
	if len(reqs) == 0 || len(reqs) > ClaimMaxBatch {
		return nil, fmt.Errorf("finish %d tasks: a batch holds 1 to %d requests", len(reqs), ClaimMaxBatch)
	}
	out := make([]FinishResult, len(reqs))
	args, idx, failed := finishArgs(reqs, out)
	if len(idx) == 0 {
		return out, nil
	}
	rows, err := s.finishStatement(ctx, args, failed)
	if err != nil && len(idx) > 1 && pgCode(err) != "" {
		// A refused statement wrote nothing: finish the rows one by one so
		// that one poisoned row cannot sink the batch.
		for _, i := range idx {
			res, err := s.FinishMany(ctx, reqs[i:i+1])
			if err != nil {
				res = []FinishResult{{Err: err}}
			}
			out[i] = res[0]
		}
		return out, nil
	}
	if err != nil {
		if len(idx) == 1 && pgCode(err) != "" {
			out[idx[0]].Err = fmt.Errorf("finish task %s: %w", reqs[idx[0]].ID, err)
			return out, nil
		}
		return nil, fmt.Errorf("finish %d tasks: %w", len(idx), err)
	}
	for _, i := range idx {
		if st, ok := rows[reqs[i].ID]; ok {
			out[i] = FinishResult{State: st, OK: true}
			delete(rows, reqs[i].ID) // a repeated id is not OK twice
		}
	}
	return out, nil
}

// finishArgs checks each request (an unknown outcome sets its out[i].Err)
// and returns qFinish's arrays for the others, their indexes in reqs (the
// first request of each id only) and the ids of the FAILED ones.
func finishArgs(reqs []FinishRequest, out []FinishResult) (args []any, idx []int, failed [][16]byte) {
	n := len(reqs)
	var (
		ids              = make([][16]byte, 0, n)
		toks, delays     = make([]int64, 0, n), make([]int64, 0, n)
		outcomes, errs   = make([]string, 0, n), make([]string, 0, n)
		results          = make([]*string, 0, n)
		perm             = make([]bool, 0, n)
		keys, workers    = make([]string, 0, n), make([]string, 0, n)
		reusedT, reusedR = make([]*[16]byte, 0, n), make([]*[16]byte, 0, n)
		notes            = make([]string, 0, n)
		seen             = make(map[uuid.UUID]bool, n)
	)
	for i, req := range reqs {
		switch req.Outcome {
		case OutcomeSucceeded, OutcomeFailed, OutcomeCancelled:
		default:
			out[i].Err = fmt.Errorf("finish task %s: unknown outcome %q", req.ID, req.Outcome)
			continue
		}
		if seen[req.ID] {
			continue
		}
		seen[req.ID] = true
		idx = append(idx, i)
		var result *string
		if req.Outcome == OutcomeSucceeded {
			r := "null"
			if len(req.Result) > 0 {
				r = string(req.Result)
			}
			result = &r
		}
		var rt, rr *[16]byte
		note := ""
		if req.ReusedFrom != nil && req.Outcome == OutcomeSucceeded {
			t := [16]byte(req.ReusedFrom.TaskRunID)
			rt = &t
			if req.ReusedFrom.RunID != uuid.Nil {
				r := [16]byte(req.ReusedFrom.RunID)
				rr = &r
			}
			note = ReuseNote(*req.ReusedFrom, req.IdempotencyKey)
		}
		if req.Outcome == OutcomeFailed {
			failed = append(failed, req.ID)
		}
		ids, toks, outcomes = append(ids, req.ID), append(toks, req.Token), append(outcomes, string(req.Outcome))
		results, errs, perm = append(results, result), append(errs, req.Error), append(perm, req.Permanent)
		delays, keys, workers = append(delays, req.RetryDelay.Milliseconds()), append(keys, req.IdempotencyKey), append(workers, req.WorkerID)
		reusedT, reusedR, notes = append(reusedT, rt), append(reusedR, rr), append(notes, note)
	}
	args = []any{ids, toks, outcomes, results, errs, perm, delays, keys, workers, reusedT, reusedR, notes}
	return args, idx, failed
}

// finishStatement runs qFinish with args, first locking the run rows of
// the tasks failed (a failure may bury the task and its descendants: the
// scheduler's pass, CancelRun and RequeueMany lock the run rows first too,
// so the writes to the descendants cannot deadlock with theirs). It
// returns the new state of each task it finished.
func (s *Store) finishStatement(ctx context.Context, args []any, failed [][16]byte) (map[uuid.UUID]core.TaskState, error) {
	var rows []struct {
		ID       uuid.UUID      `db:"id"`
		State    core.TaskState `db:"state"`
		Notified int            `db:"notified"`
	}
	var err error
	if len(failed) > 0 {
		err = s.inTx(ctx, func(tx *sqlx.Tx) error {
			if _, err := tx.ExecContext(ctx, qLockRunsOfTasks, failed); err != nil {
				return fmt.Errorf("lock runs: %w", err)
			}
			return tx.SelectContext(ctx, &rows, qFinish, args...)
		})
	} else {
		err = s.db.SelectContext(ctx, &rows, qFinish, args...)
	}
	if err != nil {
		return nil, err
	}
	m := make(map[uuid.UUID]core.TaskState, len(rows))
	for _, r := range rows {
		m[r.ID] = r.State
	}
	return m, nil
}
