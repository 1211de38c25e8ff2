package store

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/google/uuid"
	"github.com/jmoiron/sqlx"

	"github.com/flowforge/flowforge/core"
)

// ErrNotDead is matched by the refusal of a requeue of a task that exists
// but is not DEAD (or whose run was cancelled); the task is left unchanged.
var ErrNotDead = errors.New("task is not DEAD")

// setRequeued is the SET list of a task run sent back to PENDING by an
// operator's requeue (qRequeue) or with it (qFailFastRevive): the fencing
// token is bumped, the attempt counter reset, lease, worker, error and
// finish time cleared.
const setRequeued = `state = 'PENDING', fencing_token = t.fencing_token + 1, attempt = 0, error = NULL,
           started_at = NULL, finished_at = NULL, next_attempt_at = NULL, lease_expires_at = NULL, worker_id = NULL`

// shiftLogsOfRQ and shiftLogsOfC are data-modifying CTE bodies that
// number below 1 the log lines of the task runs a CTE (rq, c: its
// RETURNING id) sent back to attempt 0. The next attempt 1 writes seqs
// from 1 again; before, its lines collided with the earlier attempt 1's
// on (task run, attempt, seq) and were dropped, unreported (a trial found
// a requeued task's new lines missing). Every line of such a task run
// gets a new seq: its rank in the log's order (logOrder: the rounds
// already moved by seq, then the last round by attempt and seq), placed
// just below the lowest seq the task run had, so that the earlier rounds
// read by seq alone in the order they were logged, and no new value
// meets one not yet moved (PostgreSQL checks the primary key row by row
// while the UPDATE runs). Lines keep their attempt. A task run with no
// line above 0 (none since its last move) is left alone.
const (
	shiftLogsOfRQ = shiftLogsHead + `rq` + shiftLogsMid + `rq` + shiftLogsTail
	shiftLogsOfC  = shiftLogsHead + `c` + shiftLogsMid + `c` + shiftLogsTail
	shiftLogsHead = `
    UPDATE task_logs l SET seq = m.low - m.n - 1 + k.r
      FROM (SELECT task_run_id, least(min(seq), 1) AS low, count(*) AS n FROM task_logs
             WHERE task_run_id IN (SELECT id FROM `
	shiftLogsMid = `) GROUP BY task_run_id HAVING max(seq) > 0) m,
           (SELECT l.task_run_id, l.attempt, l.seq,
                   row_number() OVER (PARTITION BY l.task_run_id ORDER BY ` + logOrder + `) AS r
              FROM task_logs l WHERE l.task_run_id IN (SELECT id FROM `
	shiftLogsTail = `)) k
     WHERE l.task_run_id = m.task_run_id AND k.task_run_id = l.task_run_id AND k.attempt = l.attempt AND k.seq = l.seq`
)

// reopenForEach is the SET list of a DEAD for_each task brought back to
// RUNNING by the requeue of one of its DEAD elements (qRequeue): it runs
// through its elements again, holding no worker, and the pass's join
// (qForEachJoin) ends it once they have all ended. The fencing token is
// bumped (a new incarnation in its history), the error and finish time
// cleared, the start time is the requeue's; its result was NULL (a DEAD
// for_each task has none).
const reopenForEach = `state = 'RUNNING', fencing_token = t.fencing_token + 1, error = NULL,
           started_at = now(), finished_at = NULL`

// qRequeue is DEAD -> PENDING for the set of task ids $1 in one statement,
// after qLockRunsOfTasks locked their runs. The targets are the ids that
// are DEAD in an uncancelled run. Each is moved back to PENDING: the
// fencing token is bumped, the attempt counter is reset (a fresh budget of
// max_attempts), the last error is cleared (the history keeps it), its run
// is reopened, and an audit row is written per task moved. The lead of a
// run is its first target in the order given; in a fail_fast run the lead
// also moves every other DEAD task and every CANCELLED task of the run (an
// uncancelled fail_fast run's CANCELLED tasks were all cancelled by
// fail_fast, and the requeue withdraws the failure that stopped the run, so
// the run can run to SUCCEEDED), the run's other targets among them. Then
// the UPSTREAM_FAILED descendants (over depends_on, within the run) of the
// DEAD tasks it moves go back to PENDING too, except those that still
// descend from a DEAD task it leaves DEAD. Every task moved has an origin:
// the target whose requeue moved it (itself for a target; the lead for
// what fail_fast moves; for a descendant, the first target in the order
// given it descends from). A DEAD element it moves (element_of set) whose
// for_each task is DEAD and not moved itself brings that task back to
// RUNNING (foreach, reopenForEach: the join ends it again once its
// elements have ended), audited, with the element as its origin; the
// for_each task then counts as revived for its UPSTREAM_FAILED
// descendants, unless another of its elements stays DEAD (still), which
// will end it DEAD again. It returns one row per id given (ord set; state
// and run_cancelled as the statement read them, state NULL for an unknown
// id; origin set when it was moved), then one row per other task moved
// (ord NULL).
const qRequeue = `
WITH RECURSIVE given AS (
    SELECT g.id, g.ord FROM unnest($1::uuid[]) WITH ORDINALITY AS g (id, ord)
), target AS (
    SELECT t.id, t.run_id, r.fail_fast, given.ord
      FROM given JOIN task_runs t ON t.id = given.id JOIN workflow_runs r ON r.id = t.run_id
     WHERE t.state = 'DEAD' AND r.cancel_requested_at IS NULL
), lead AS (
    SELECT DISTINCT ON (run_id) run_id, id, fail_fast, ord FROM target ORDER BY run_id, ord
), direct AS (
    SELECT t.id, t.state, t.run_id, t.task_name, t.element_of,
           CASE WHEN lead.fail_fast THEN lead.id ELSE t.id END AS origin,
           CASE WHEN lead.fail_fast THEN lead.ord ELSE own.ord END AS ord
      FROM task_runs t JOIN lead ON lead.run_id = t.run_id LEFT JOIN target own ON own.id = t.id
     WHERE own.id IS NOT NULL
        OR (lead.fail_fast AND t.state IN ('DEAD', 'CANCELLED'))
), foreach AS (
    SELECT DISTINCT ON (p.id) p.id, p.run_id, p.task_name, d.origin, d.ord, d.task_name AS element
      FROM direct d JOIN task_runs p ON p.run_id = d.run_id AND p.task_name = d.element_of
     WHERE d.state = 'DEAD' AND p.state = 'DEAD' AND p.kind = 'for_each'
       AND p.id NOT IN (SELECT id FROM direct)
     ORDER BY p.id, d.ord
), revived (run_id, task_name, origin, ord) AS (
    SELECT * FROM (SELECT run_id, task_name, origin, ord FROM direct WHERE state = 'DEAD'
                   UNION ALL
                   SELECT run_id, task_name, origin, ord FROM foreach) AS moved
    UNION
    SELECT c.run_id, c.task_name, v.origin, v.ord FROM revived v JOIN task_runs c ON c.run_id = v.run_id AND v.task_name = ANY (c.depends_on)
), still (run_id, task_name) AS (
    SELECT * FROM (SELECT t.run_id, t.task_name FROM task_runs t JOIN lead ON lead.run_id = t.run_id
                    WHERE t.state = 'DEAD' AND t.id NOT IN (SELECT id FROM direct) AND t.id NOT IN (SELECT id FROM foreach)
                   UNION ALL
                   SELECT t.run_id, t.element_of FROM task_runs t JOIN lead ON lead.run_id = t.run_id
                    WHERE t.state = 'DEAD' AND t.element_of IS NOT NULL AND t.id NOT IN (SELECT id FROM direct)
                      AND (t.run_id, t.element_of) NOT IN (SELECT run_id, task_name FROM direct)) AS dead
    UNION
    SELECT c.run_id, c.task_name FROM still v JOIN task_runs c ON c.run_id = v.run_id AND v.task_name = ANY (c.depends_on)
), cand AS (
    SELECT id, state, origin FROM direct
    UNION ALL
    (SELECT DISTINCT ON (t.id) t.id, t.state, v.origin
       FROM task_runs t JOIN revived v ON v.run_id = t.run_id AND v.task_name = t.task_name
     WHERE t.state = 'UPSTREAM_FAILED'
       AND (t.run_id, t.task_name) NOT IN (SELECT run_id, task_name FROM still)
     ORDER BY t.id, v.ord)
), rq AS (
    UPDATE task_runs t SET ` + setRequeued + `
      FROM cand
     WHERE t.id = cand.id AND t.state = cand.state
 RETURNING t.id, t.run_id, t.fencing_token, cand.state AS from_state, cand.origin
), rq_logs AS (` + shiftLogsOfRQ + `
), fe AS (
    UPDATE task_runs t SET ` + reopenForEach + `
      FROM foreach
     WHERE t.id = foreach.id AND t.state = 'DEAD'
 RETURNING t.id, t.run_id, t.attempt, t.fencing_token, foreach.origin, foreach.element
), reopen AS (
    UPDATE workflow_runs r SET finished_at = NULL WHERE r.id IN (SELECT run_id FROM rq UNION SELECT run_id FROM fe)
), ev AS (
    INSERT INTO task_events (task_run_id, run_id, from_state, to_state, attempt, fencing_token, actor, reason)
    SELECT id, run_id, from_state, 'PENDING', 0, fencing_token, $2,
           CASE WHEN id = origin THEN $3
                WHEN from_state = 'UPSTREAM_FAILED' THEN 'upstream task requeued with task ' || origin::text || ': ' || $3
                ELSE 'fail_fast run requeued with task ' || origin::text || ': ' || $3 END
      FROM rq
    UNION ALL
    SELECT id, run_id, 'DEAD', 'RUNNING', attempt, fencing_token, $2,
           'for_each: element ' || element || ' requeued with task ' || origin::text || ': ' || $3
      FROM fe
)
SELECT g.id, g.ord, t.state, r.cancel_requested_at IS NOT NULL AS run_cancelled, rq.origin, t.run_id
  FROM given g LEFT JOIN task_runs t ON t.id = g.id LEFT JOIN workflow_runs r ON r.id = t.run_id LEFT JOIN rq ON rq.id = g.id
UNION ALL
SELECT rq.id, NULL, NULL, false, rq.origin, rq.run_id FROM rq WHERE rq.id NOT IN (SELECT id FROM given)
UNION ALL
SELECT fe.id, NULL, NULL, false, fe.origin, fe.run_id FROM fe WHERE fe.id NOT IN (SELECT id FROM given)
ORDER BY ord NULLS LAST, id`

// requeueRow is one row qRequeue returns.
type requeueRow struct {
	ID           uuid.UUID  `db:"id"`
	Ord          *int64     `db:"ord"`
	State        *string    `db:"state"`
	RunCancelled bool       `db:"run_cancelled"`
	Origin       *uuid.UUID `db:"origin"`
	RunID        *uuid.UUID `db:"run_id"` // nil for an unknown id
}

// RequeueOutcome says what RequeueMany did with one id.
type RequeueOutcome string

// The outcomes of a requeue, per id.
const (
	// RequeueMoved: the task was DEAD and is PENDING now.
	RequeueMoved RequeueOutcome = "requeued"
	// RequeueMovedWith: the requeue of another id of the same call (With)
	// moved the task to PENDING: it was DEAD or CANCELLED in that id's
	// fail_fast run, or an UPSTREAM_FAILED descendant of it.
	RequeueMovedWith RequeueOutcome = "requeued_with"
	// RequeueNotFound: no task has the id.
	RequeueNotFound RequeueOutcome = "not_found"
	// RequeueNotDead: the task is not DEAD (State says what it is); it is
	// unchanged.
	RequeueNotDead RequeueOutcome = "not_dead"
	// RequeueRunCancelled: the task is DEAD but its run's cancellation was
	// requested; it is unchanged.
	RequeueRunCancelled RequeueOutcome = "run_cancelled"
)

// RequeueResult is the outcome of RequeueMany for one id.
type RequeueResult struct {
	ID      uuid.UUID
	Outcome RequeueOutcome
	// State is the task's state when the requeue read it, before it moved
	// it ("" for RequeueNotFound).
	State core.TaskState
	// With is the id whose requeue moved this task (RequeueMovedWith only).
	With uuid.UUID
	// Also lists the other tasks this id's requeue moved (for
	// RequeueMoved), in id order: to PENDING its UPSTREAM_FAILED
	// descendants, and in a fail_fast run the run's other DEAD tasks
	// (given ids among them) and the tasks fail_fast cancelled; to RUNNING
	// the DEAD for_each task of a DEAD element, with the for_each task's
	// UPSTREAM_FAILED descendants to PENDING.
	Also []uuid.UUID
}

// Requeued reports whether the task is PENDING by this requeue
// (RequeueMoved or RequeueMovedWith).
func (r RequeueResult) Requeued() bool {
	return r.Outcome == RequeueMoved || r.Outcome == RequeueMovedWith
}

// Err is nil for a requeued task, else the refusal, naming the task: one
// wrapping ErrNotFound (RequeueNotFound) or ErrNotDead (naming the state;
// RequeueNotDead, RequeueRunCancelled).
func (r RequeueResult) Err() error {
	switch r.Outcome {
	case RequeueMoved, RequeueMovedWith:
		return nil
	case RequeueNotFound:
		return fmt.Errorf("task %s: %w", r.ID, ErrNotFound)
	case RequeueRunCancelled:
		return fmt.Errorf("task %s: %w: its run was cancelled", r.ID, ErrNotDead)
	}
	return fmt.Errorf("task %s: %w (it is %s)", r.ID, ErrNotDead, r.State)
}

// RequeueMany moves the DEAD tasks among ids back to PENDING with a fresh
// budget of attempts, audited with actor and reason, reopens their runs and
// wakes the schedulers: one transaction, whose one requeue statement
// (qRequeue) acts on the whole set after the runs are locked. In a fail_fast
// run it requeues the whole run: every DEAD task and every task fail_fast
// CANCELLED goes back to PENDING with the first of its ids given (audited,
// the reason naming that task), so fail_fast cannot cancel the requeued
// task again for a sibling that is still DEAD, and the run can reach
// SUCCEEDED. The UPSTREAM_FAILED descendants of the tasks it requeues return
// to PENDING with them, unless another ancestor of theirs stays DEAD. A
// DEAD element of a for_each task that is DEAD (and not requeued itself)
// takes that task back to RUNNING (DEAD -> RUNNING, audited), so that its
// join ends it again once the element has run: SUCCEEDED, its downstream
// tasks revived with it, or DEAD again while another element stays DEAD
// (its downstream tasks then stay UPSTREAM_FAILED).
//
// It returns one result per distinct id, in the order first given: a
// refusal (unknown id, not DEAD, run cancelled) is a result, and changes
// nothing for that id. The error is for the call as a whole, and then
// nothing changed: one wrapping core.ErrBadReason for a reason
// core.ValidateReason refuses, or the database's (a lost connection, a
// cancelled ctx), never reported as a refusal. No ids: no results, no
// statement. Concurrent requeues of one task (or of two tasks of one
// fail_fast run): exactly one moves it, the others get RequeueNotDead.
func (s *Store) RequeueMany(ctx context.Context, ids []uuid.UUID, actor, reason string) ([]RequeueResult, error) {
	for _, from := range []core.TaskState{core.TaskDead, core.TaskCancelled, core.TaskUpstreamFailed} {
		if err := mustEdge(from, core.TaskPending); err != nil {
			return nil, err
		}
	}
	if err := mustEdge(core.TaskDead, core.TaskRunning); err != nil {
		return nil, err
	}
	if err := core.ValidateReason(reason); err != nil {
		return nil, fmt.Errorf("requeue: %w", err)
	}
	ids = distinctIDs(ids)
	if len(ids) == 0 {
		return nil, nil
	}
	var rows []requeueRow
	err := s.inTx(ctx, func(tx *sqlx.Tx) error {
		// Lock the run rows before the task rows, in run id order as the
		// reaper does (a scheduler's pass skips locked runs; CancelRun and
		// FinishMany lock one), so they cannot deadlock; the requeue's statement
		// then sees what a pass committed before.
		if _, err := tx.ExecContext(ctx, qLockRunsOfTasks, ids); err != nil {
			return fmt.Errorf("requeue: lock runs: %w", err)
		}
		if err := tx.SelectContext(ctx, &rows, qRequeue, ids, actor, reason); err != nil {
			return fmt.Errorf("requeue: %w", err)
		}
		var runs []uuid.UUID
		for _, r := range rows {
			if r.Origin != nil && r.RunID != nil {
				runs = append(runs, *r.RunID)
			}
		}
		return notifyAll(ctx, tx, runsNotices(runs)...)
	})
	if err != nil {
		return nil, err
	}
	return requeueResults(rows), nil
}

// requeueResults turns qRequeue's rows into one result per id given, each
// moved task listed in the Also of its origin.
func requeueResults(rows []requeueRow) []RequeueResult {
	var out []RequeueResult
	at := map[uuid.UUID]int{}
	for _, r := range rows {
		if r.Ord == nil {
			continue
		}
		res := RequeueResult{ID: r.ID}
		if r.State != nil {
			res.State = core.TaskState(*r.State)
		}
		switch {
		case r.Origin != nil && *r.Origin == r.ID:
			res.Outcome = RequeueMoved
		case r.Origin != nil:
			res.Outcome, res.With = RequeueMovedWith, *r.Origin
		case r.State == nil:
			res.Outcome = RequeueNotFound
		case res.State == core.TaskDead && r.RunCancelled:
			res.Outcome = RequeueRunCancelled
		default:
			res.Outcome = RequeueNotDead
		}
		at[r.ID] = len(out)
		out = append(out, res)
	}
	for _, r := range rows {
		if r.Origin == nil || *r.Origin == r.ID {
			continue
		}
		if i, ok := at[*r.Origin]; ok {
			out[i].Also = append(out[i].Also, r.ID)
		}
	}
	for i := range out {
		slices.SortFunc(out[i].Also, func(a, b uuid.UUID) int { return bytes.Compare(a[:], b[:]) })
	}
	return out
}

// distinctIDs returns ids without repeats, in the order first given.
func distinctIDs(ids []uuid.UUID) []uuid.UUID {
	seen := make(map[uuid.UUID]bool, len(ids))
	out := make([]uuid.UUID, 0, len(ids))
	for _, id := range ids {
		if !seen[id] {
			seen[id] = true
			out = append(out, id)
		}
	}
	return out
}

// Requeue requeues one task with RequeueMany; the error is the call's, or
// the task's refusal (RequeueResult.Err).
func (s *Store) Requeue(ctx context.Context, id uuid.UUID, actor, reason string) error {
	_, err := s.RequeueTask(ctx, id, actor, reason)
	return err
}

// RequeueTask requeues one task with RequeueMany and returns the ids it
// moved, id first; the error is the call's, or the task's refusal
// (RequeueResult.Err: ErrNotFound, ErrNotDead), and then nothing moved.
func (s *Store) RequeueTask(ctx context.Context, id uuid.UUID, actor, reason string) ([]uuid.UUID, error) {
	res, err := s.RequeueMany(ctx, []uuid.UUID{id}, actor, reason)
	if err != nil {
		return nil, err
	}
	if err := res[0].Err(); err != nil {
		return nil, err
	}
	return append([]uuid.UUID{id}, res[0].Also...), nil
}
