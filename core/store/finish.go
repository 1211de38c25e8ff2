package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/flowforge/flowforge/core"
)

// Outcome is how an attempt ended, as reported to FinishMany.
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
	// ResultNote, on success, says how the worker rewrote Result to store
	// it (core.SanitizeResultNoted: not JSON, U+FFFD, truncated); it is
	// the history's reason for the SUCCEEDED row (after the reuse note, if
	// any). "" for a result stored as returned.
	ResultNote string
}

// FinishResult is the answer to one FinishRequest of a FinishMany batch:
// OK with the task's new State; OK false with a nil Err when the state or
// fencing token rejected it (the lease was lost, the task already
// finished) or the request repeats an earlier request's task and token;
// or Err when that row alone could not be recorded. An Err wrapping
// ErrLockTimeout means nothing was written for the row: a lock it needed
// stayed held by another transaction past its bound (a FAILED row's run
// row or task row: FinishRunLockWait; another row's task row: the
// session's lock_timeout); retry it. Another Err is a refusal of the row
// (an SQLSTATE: nothing written) or, without one, an error after which the
// row may have committed (see FinishRecorded).
type FinishResult struct {
	State core.TaskState
	OK    bool
	Err   error
	// Run is the run this finish settled (a run whose only task
	// succeeded settles in the finish's statement), nil otherwise: every
	// other run is settled by a scheduler's pass (AdvanceResult.Settled).
	Run *SettledRun
}

// The finish: one conditional statement records an attempt's outcome,
// built from fragments shared by its three forms (qFinish for a batch's
// FAILED rows, qFinishDone and qFinishDoneOne for its SUCCEEDED and
// CANCELLED rows, many or one), so that each form keeps the same rules:
//   - Each row is fenced by its own request's token (each form says so
//     itself) and state RUNNING (finishFence), so of the requests for one
//     task with different tokens
//     only the one holding the task's token matches; the result names each
//     row by id and token. One request per (task, token): FinishMany drops
//     repeats.
//   - A batch's task rows are locked in id order first (lk): two batches
//     over the same rows queue instead of deadlocking.
//   - Each row's history and the result of the idempotency key its attempt
//     owns are written by the same statement (finishRecords).
//   - The statement notifies, itself, in one statement: the schedulers, on
//     TasksChannel only, naming the runs it leaves them to advance in the
//     payloads RunWake.Encode would send for them (runWakeSQL: a batch of
//     ClaimMaxBatch rows over as many runs needs five, so it never sends
//     AnyRun); nothing when it changed no row.
//
// A finish of an attempt whose handler ran alone (MarkAlone) clears the
// task's crash suspicion: it ended without taking its worker down.
//
// The request's columns q, by number in the batch's arrays and the single
// row's parameters alike: $1 id, $2 token, $3 outcome, $4 result text, $5
// error, $6 permanent, $7 retry delay in ms, $8 idempotency key, $9
// worker, $10 reused task run, $11 reused run, $12 history note on success (reuse, result rewrite), $15 the
// state the task must be in (RUNNING: a request's column rather than a
// literal, for the reason claimFence gives), $16 the state a child must be
// in to be counted (PENDING; qFinishDone and qFinishDoneOne only, likewise
// a parameter); $13 and $14 are runWakeBounds.
const (
	finishSet = `state = CASE WHEN q.outcome = 'SUCCEEDED' THEN 'SUCCEEDED'
                        WHEN q.outcome = 'CANCELLED' THEN 'CANCELLED'
                        WHEN q.permanent OR t.attempt >= t.max_attempts THEN 'DEAD'
                        ELSE 'RETRYING' END,
           result = CASE WHEN q.outcome = 'SUCCEEDED' THEN q.result::jsonb ELSE NULL END,
           error = CASE WHEN q.outcome = 'SUCCEEDED' THEN NULL ELSE q.error END,
           reused_from = CASE WHEN q.outcome = 'SUCCEEDED' THEN q.reused_from END,
           reused_from_run = CASE WHEN q.outcome = 'SUCCEEDED' THEN q.reused_run END,
           lease_expires_at = NULL,
           suspect = t.suspect AND t.alone_token IS DISTINCT FROM t.fencing_token,
           finished_at = CASE WHEN q.outcome <> 'FAILED' OR q.permanent OR t.attempt >= t.max_attempts THEN now() END,
           next_attempt_at = CASE WHEN q.outcome = 'FAILED' AND NOT q.permanent AND t.attempt < t.max_attempts
                                  THEN now() + q.delay_ms * interval '1 millisecond' END`
	finishFence = `t.id = q.id AND t.state = q.from_state`
	// finishBatchFrom: the batch's requests, as parallel arrays, and its
	// rows locked in id order.
	finishBatchFrom = `unnest($1::uuid[], $2::bigint[], $3::text[], $4::text[], $5::text[], $6::bool[], $7::bigint[],
                  $8::text[], $9::text[], $10::uuid[], $11::uuid[], $12::text[], $15::text[])
               AS q(id, tok, outcome, result, error, permanent, delay_ms, key, worker, reused_from, reused_run, note, from_state),
           (SELECT l.id FROM task_runs l WHERE l.id = ANY ($1::uuid[]) ORDER BY l.id FOR UPDATE) lk
     WHERE lk.id = q.id AND t.fencing_token = q.tok AND `
	// finishOneFrom: one request; its plan is a primary-key lookup whatever
	// the statistics say, so the plan cached for it stays right.
	finishOneFrom = `(SELECT $1::uuid AS id, $2::bigint AS tok, $3::text AS outcome, $4::text AS result, $5::text AS error,
                 $6::bool AS permanent, $7::bigint AS delay_ms, $8::text AS key, $9::text AS worker,
                 $10::uuid AS reused_from, $11::uuid AS reused_run, $12::text AS note, $15::text AS from_state) q
     WHERE t.fencing_token = q.tok AND `
	finishReturning = `
 RETURNING t.id, t.run_id, t.task_name, t.state, t.attempt, t.fencing_token, t.result, t.started_at,
           q.key, q.worker, q.error, q.reused_from, q.note, t.concurrency_key IS NOT NULL AS slot
)`
	finishRecords = `, ik AS (
    UPDATE idempotency_keys k SET result = fin.result, completed_at = now()
      FROM fin
     WHERE fin.state = 'SUCCEEDED' AND fin.key <> '' AND k.key = fin.key
       AND k.task_run_id = fin.id AND k.fencing_token = fin.fencing_token
), ev AS (
    INSERT INTO task_events (task_run_id, run_id, from_state, to_state, attempt, fencing_token, worker_id, actor, reason)
    SELECT id, run_id, 'RUNNING', state, attempt, fencing_token, worker, worker,
           CASE WHEN state = 'SUCCEEDED' THEN nullif(note, '') ELSE error END FROM fin
)`
	finishNotify = `, wake_bounds (per_payload, payloads_max) AS (
    SELECT $13::bigint, $14::bigint
), ` + runWakeSQL + `, n AS (
    SELECT pg_notify('` + TasksChannel + `', payload) FROM run_wake
)`
)

// qFinish records a batch of FAILED outcomes (and serves FinishMany's
// row-by-row retry of any outcome): a task it makes DEAD takes its
// PENDING descendants to UPSTREAM_FAILED in the same statement
// (buryDownstream). It takes no run lock itself: FinishMany runs it for
// the FAILED rows only once their runs are locked, in a transaction whose
// lock waits are bounded (finishTx). It names every run it changed to the
// schedulers.
const qFinish = `
WITH RECURSIVE fin AS (
    UPDATE task_runs t
       SET ` + finishSet + `
      FROM ` + finishBatchFrom + finishFence + finishReturning + finishRecords + `, buried (id, actor) AS (
    SELECT id, worker FROM fin WHERE state = 'DEAD'
), ` + buryDownstream + `, woken AS (
    SELECT run_id FROM fin
)` + finishNotify + `
SELECT fin.id, fin.fencing_token AS token, fin.state, (SELECT count(*) FROM n) AS notified, 0 AS promoted FROM fin`

// FinishMany records a batch of attempts' outcomes, each row only if its
// task is still RUNNING with its request's token; a task it makes DEAD
// takes its PENDING descendants to UPSTREAM_FAILED in the same statement
// (qFinish). The result has one entry per request, in order (see
// FinishResult). At most ClaimMaxBatch requests. The rules it keeps:
//   - A row's outcome never waits on another row's lock. The SUCCEEDED and
//     CANCELLED rows are one statement of their own, which takes no run
//     lock. The FAILED rows are one transaction that first locks their
//     runs' rows in id order (the scheduler's pass, CancelRun, the reaper
//     and RequeueMany lock the run before its tasks too, so the burial of
//     descendants cannot deadlock with them), each lock wait bounded by
//     FinishRunLockWait. When a run stays held past it, the FAILED rows are
//     recorded in a second transaction behind the runs it can lock at once
//     (SKIP LOCKED): each FAILED row whose own run is still held comes back
//     with an Err wrapping ErrLockTimeout (nothing written; retry it), every
//     other row commits, and the batch has waited FinishRunLockWait once.
//     (The SUCCEEDED and CANCELLED rows' statement still waits, up to the
//     session's lock_timeout, for a task row of the batch another
//     transaction holds: no daemon holds a RUNNING task's row for long.)
//   - Two requests for one task: a request that repeats an earlier
//     request's task and token is not OK; requests with different tokens
//     are each tried, and only the one holding the task's token can win (a
//     stale attempt's outcome ahead of the live one's never costs the live
//     one its record).
//   - A statement the database refused (an SQLSTATE: one row's result it
//     cannot store, a task row held past the bound) wrote nothing and is
//     retried row by row, so only the row that caused it carries the error.
//   - Each transaction notifies once, naming the runs it changed.
//
// The error is non-nil only when no row's fate is known (nothing it sent
// got an answer: any row may have committed, see FinishRecorded); when only
// some rows' fate is unknown, those rows carry the error in their Err.
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
	b := &finishBatch{reqs: reqs, out: make([]FinishResult, len(reqs))}
	plain, failed := b.split()
	s.finishPlain(ctx, b, plain)
	s.finishFailed(ctx, b, failed)
	if b.lost != nil && b.unknown == b.tried {
		return nil, fmt.Errorf("finish %d tasks: %w", b.tried, b.lost)
	}
	return b.out, nil
}

// finishKey names a row of a finish: a task and the token it must hold.
type finishKey struct {
	id  uuid.UUID
	tok int64
}

// finishRow is a row qFinish returns.
type finishRow struct {
	ID       uuid.UUID      `db:"id"`
	Token    int64          `db:"token"`
	State    core.TaskState `db:"state"`
	Notified int            `db:"notified"`
	// Promoted is 1 when the statement promoted a child and woke the
	// publishers (qFinishDone), else 0.
	Promoted int `db:"promoted"`
	// RunWorkflow, RunCreatedAt and RunFinishedAt describe the run the
	// statement settled with this row (qFinishDone only); NULL otherwise.
	RunWorkflow   sql.NullString `db:"run_workflow"`
	RunCreatedAt  sql.NullTime   `db:"run_created_at"`
	RunFinishedAt sql.NullTime   `db:"run_finished_at"`
}

// byKey maps each finished row to its new state.
func byKey(rows []finishRow) map[finishKey]core.TaskState {
	m := make(map[finishKey]core.TaskState, len(rows))
	for _, r := range rows {
		m[finishKey{r.ID, r.Token}] = r.State
	}
	return m
}

// finishBatch is one FinishMany's requests, answers and account of the
// rows whose fate is unknown.
type finishBatch struct {
	reqs    []FinishRequest
	out     []FinishResult
	tried   int   // requests sent to the database
	unknown int   // of those, the requests whose fate is unknown
	lost    error // the first error that left a request's fate unknown
	// runs are the runs the statements settled, by the row that did.
	runs map[finishKey]*SettledRun
}

// noteSettled keeps the runs rows settled, for record.
func (b *finishBatch) noteSettled(rows []finishRow) {
	for _, r := range rows {
		if !r.RunFinishedAt.Valid {
			continue
		}
		if b.runs == nil {
			b.runs = map[finishKey]*SettledRun{}
		}
		b.runs[finishKey{r.ID, r.Token}] = &SettledRun{Workflow: r.RunWorkflow.String, State: core.RunSucceeded,
			CreatedAt: r.RunCreatedAt.Time, FinishedAt: r.RunFinishedAt.Time}
	}
}

// split checks each request (an unknown outcome sets its Err) and returns
// the indexes of the requests to record, one per (task, token): the
// SUCCEEDED and CANCELLED ones (plain) and the FAILED ones apart.
func (b *finishBatch) split() (plain, failed []int) {
	seen := make(map[finishKey]bool, len(b.reqs))
	for i, req := range b.reqs {
		switch req.Outcome {
		case OutcomeSucceeded, OutcomeFailed, OutcomeCancelled:
		default:
			b.out[i].Err = fmt.Errorf("finish task %s: unknown outcome %q", req.ID, req.Outcome)
			continue
		}
		k := finishKey{req.ID, req.Token}
		if seen[k] {
			continue
		}
		seen[k] = true
		if req.Outcome == OutcomeFailed {
			failed = append(failed, i)
		} else {
			plain = append(plain, i)
		}
	}
	return plain, failed
}

// record answers the requests idx from the rows a statement finished.
func (b *finishBatch) record(idx []int, rows map[finishKey]core.TaskState) {
	for _, i := range idx {
		if st, ok := rows[finishKey{b.reqs[i].ID, b.reqs[i].Token}]; ok {
			b.out[i] = FinishResult{State: st, OK: true, Run: b.runs[finishKey{b.reqs[i].ID, b.reqs[i].Token}]}
		}
	}
}

// lose answers the requests idx with err, after which any may have
// committed.
func (b *finishBatch) lose(idx []int, err error) {
	for _, i := range idx {
		b.out[i].Err = fmt.Errorf("finish task %s: %w", b.reqs[i].ID, err)
	}
	b.unknown += len(idx)
	if b.lost == nil {
		b.lost = err
	}
}

// settle answers the requests idx from what their statement returned:
// its rows; err without an SQLSTATE (no answer: any may have committed);
// err with one (refused, nothing written), for which a batch of several
// is recorded again row by row so that one poisoned row cannot sink the
// others, and a single row gets err (wrapping ErrLockTimeout for a lock
// wait past its bound).
func (s *Store) settle(ctx context.Context, b *finishBatch, idx []int, rows map[finishKey]core.TaskState, err error) {
	switch {
	case len(idx) == 0:
	case err == nil:
		b.record(idx, rows)
	case pgCode(err) == "":
		b.lose(idx, err)
	case len(idx) > 1:
		for _, i := range idx {
			res, err := s.FinishMany(ctx, b.reqs[i:i+1])
			if err != nil {
				b.lose([]int{i}, err)
				continue
			}
			b.out[i] = res[0]
		}
	default:
		b.out[idx[0]].Err = fmt.Errorf("finish task %s: %w", b.reqs[idx[0]].ID, asLockTimeout(err))
	}
}

// taskIDs returns the task ids of the requests idx.
func taskIDs(reqs []FinishRequest, idx []int) [][16]byte {
	ids := make([][16]byte, len(idx))
	for j, i := range idx {
		ids[j] = reqs[i].ID
	}
	return ids
}

// finishValue is one request's values as the finish statements take them
// (its request columns q; see finishSet).
type finishValue struct {
	result  *string // the result's text on success, else NULL
	reusedT *[16]byte
	reusedR *[16]byte
	note    string
	delayMS int64
	outcome string
}

// valuesOf returns req's values for the finish statements.
func valuesOf(req FinishRequest) finishValue {
	v := finishValue{outcome: string(req.Outcome), delayMS: req.RetryDelay.Milliseconds()}
	if req.Outcome == OutcomeSucceeded {
		r := "null"
		if len(req.Result) > 0 {
			r = string(req.Result)
		}
		v.result = &r
		if req.ReusedFrom != nil {
			t := [16]byte(req.ReusedFrom.TaskRunID)
			v.reusedT = &t
			if req.ReusedFrom.RunID != uuid.Nil {
				r := [16]byte(req.ReusedFrom.RunID)
				v.reusedR = &r
			}
			v.note = ReuseNote(*req.ReusedFrom, req.IdempotencyKey)
		}
		switch {
		case req.ResultNote == "":
		case v.note == "":
			v.note = req.ResultNote
		default:
			v.note += "; " + req.ResultNote
		}
	}
	return v
}

// finishOneArgs returns qFinishDoneOne's parameters for req: its values,
// the bounds of its notification (runWakeBounds) and the state it must be
// in.
func finishOneArgs(req FinishRequest) []any {
	v := valuesOf(req)
	return append([]any{[16]byte(req.ID), req.Token, v.outcome, v.result, req.Error, req.Permanent, v.delayMS,
		req.IdempotencyKey, req.WorkerID, v.reusedT, v.reusedR, v.note}, append(runWakeBounds(), string(core.TaskRunning), string(core.TaskPending))...)
}

// finishArgs returns the batch statements' arrays (qFinish, qFinishDone)
// for the requests idx, the bounds of their notification (runWakeBounds)
// and the state each must be in.
func finishArgs(reqs []FinishRequest, idx []int) []any {
	n := len(idx)
	var (
		ids              = make([][16]byte, 0, n)
		toks, delays     = make([]int64, 0, n), make([]int64, 0, n)
		outcomes, errs   = make([]string, 0, n), make([]string, 0, n)
		results          = make([]*string, 0, n)
		perm             = make([]bool, 0, n)
		keys, workers    = make([]string, 0, n), make([]string, 0, n)
		reusedT, reusedR = make([]*[16]byte, 0, n), make([]*[16]byte, 0, n)
		notes            = make([]string, 0, n)
		from             = make([]string, 0, n)
	)
	for _, i := range idx {
		req := reqs[i]
		v := valuesOf(req)
		ids, toks, outcomes = append(ids, req.ID), append(toks, req.Token), append(outcomes, v.outcome)
		results, errs, perm = append(results, v.result), append(errs, req.Error), append(perm, req.Permanent)
		delays, keys, workers = append(delays, v.delayMS), append(keys, req.IdempotencyKey), append(workers, req.WorkerID)
		reusedT, reusedR, notes = append(reusedT, v.reusedT), append(reusedR, v.reusedR), append(notes, v.note)
		from = append(from, string(core.TaskRunning))
	}
	return append([]any{ids, toks, outcomes, results, errs, perm, delays, keys, workers, reusedT, reusedR, notes},
		append(runWakeBounds(), from)...)
}
