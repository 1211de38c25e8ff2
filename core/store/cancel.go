package store

import (
	"context"
	"errors"
	"fmt"

	"github.com/google/uuid"
	"github.com/jmoiron/sqlx"

	"github.com/flowforge/flowforge/core"
)

// ErrNotDead is returned by Requeue for a task that exists but is not DEAD
// (or whose run was cancelled); the task is left unchanged.
var ErrNotDead = errors.New("task is not DEAD")

// setRequeued is the SET list of a task run sent back to PENDING by an
// operator's requeue (qRequeue) or with it (qFailFastRevive): the fencing
// token is bumped, the attempt counter reset, lease, worker, error and
// finish time cleared.
const setRequeued = `state = 'PENDING', fencing_token = t.fencing_token + 1, attempt = 0, error = NULL,
           started_at = NULL, finished_at = NULL, next_attempt_at = NULL, lease_expires_at = NULL, worker_id = NULL`

// qRequeue is DEAD -> PENDING in one statement: the fencing token is bumped,
// the attempt counter is reset (the task gets a fresh budget of
// max_attempts), the last error is cleared (the history keeps it), the run
// is reopened, and the audit rows are written. In a fail_fast run it also
// moves every other DEAD task and every CANCELLED task of the run to
// PENDING the same way: an uncancelled fail_fast run's CANCELLED tasks were
// all cancelled by fail_fast, and the requeue withdraws the failure that
// stopped the run, so the run can run to SUCCEEDED. Then the UPSTREAM_FAILED
// descendants (over depends_on, within the run) of the DEAD tasks it moves
// go back to PENDING too, except those that still descend from a DEAD task
// it leaves DEAD. It returns the ids moved, the requeued task first.
const qRequeue = `
WITH RECURSIVE target AS (
    SELECT t.id, t.run_id, r.fail_fast
      FROM task_runs t JOIN workflow_runs r ON r.id = t.run_id
     WHERE t.id = $1 AND t.state = 'DEAD' AND r.cancel_requested_at IS NULL
), direct AS (
    SELECT t.id, t.state FROM task_runs t, target
     WHERE t.id = target.id
        OR (target.fail_fast AND t.run_id = target.run_id AND t.state IN ('DEAD', 'CANCELLED'))
), revived (task_name) AS (
    SELECT t.task_name FROM task_runs t JOIN direct ON direct.id = t.id WHERE direct.state = 'DEAD'
    UNION
    SELECT c.task_name FROM revived v JOIN task_runs c ON v.task_name = ANY (c.depends_on) JOIN target ON c.run_id = target.run_id
), still (task_name) AS (
    SELECT t.task_name FROM task_runs t JOIN target ON t.run_id = target.run_id
     WHERE t.state = 'DEAD' AND t.id NOT IN (SELECT id FROM direct)
    UNION
    SELECT c.task_name FROM still v JOIN task_runs c ON v.task_name = ANY (c.depends_on) JOIN target ON c.run_id = target.run_id
), cand AS (
    SELECT id, state FROM direct
    UNION ALL
    SELECT t.id, t.state FROM task_runs t JOIN target ON t.run_id = target.run_id
     WHERE t.state = 'UPSTREAM_FAILED'
       AND t.task_name IN (SELECT task_name FROM revived) AND t.task_name NOT IN (SELECT task_name FROM still)
), rq AS (
    UPDATE task_runs t SET ` + setRequeued + `
      FROM cand
     WHERE t.id = cand.id AND t.state = cand.state
 RETURNING t.id, t.run_id, t.fencing_token, cand.state AS from_state
), reopen AS (
    UPDATE workflow_runs r SET finished_at = NULL FROM target WHERE r.id = target.run_id AND EXISTS (SELECT 1 FROM rq)
), ev AS (
    INSERT INTO task_events (task_run_id, run_id, from_state, to_state, attempt, fencing_token, actor, reason)
    SELECT id, run_id, from_state, 'PENDING', 0, fencing_token, $2,
           CASE WHEN id = $1 THEN $3
                WHEN from_state = 'UPSTREAM_FAILED' THEN 'upstream task requeued with task ' || $1::text || ': ' || $3
                ELSE 'fail_fast run requeued with task ' || $1::text || ': ' || $3 END
      FROM rq
)
SELECT id FROM rq ORDER BY id <> $1, id`

// Requeue moves one DEAD task back to PENDING, audited with actor and
// reason, and wakes the schedulers; see RequeueTask, whose result it drops.
func (s *Store) Requeue(ctx context.Context, id uuid.UUID, actor, reason string) error {
	_, err := s.RequeueTask(ctx, id, actor, reason)
	return err
}

// RequeueTask moves one DEAD task back to PENDING with a fresh budget of
// attempts, audited with actor and reason, reopens its run and wakes the
// schedulers. In a fail_fast run it requeues the whole run: every DEAD task
// and every task fail_fast CANCELLED goes back to PENDING with it (audited,
// the reason naming the task requeued), so fail_fast cannot cancel the
// requeued task again for a sibling that is still DEAD, and the run can
// reach SUCCEEDED. The UPSTREAM_FAILED descendants of the tasks it requeues
// return to PENDING with them, unless another ancestor of theirs stays
// DEAD. It returns the ids moved, id first. Errors: ErrNotFound
// for an unknown id, ErrNotDead (naming the current state) when it is not
// DEAD or its run was cancelled; in both cases nothing changes. Concurrent
// requeues of one task (or of two tasks of one fail_fast run): exactly one
// succeeds, the others get ErrNotDead.
func (s *Store) RequeueTask(ctx context.Context, id uuid.UUID, actor, reason string) ([]uuid.UUID, error) {
	if err := mustEdge(core.TaskDead, core.TaskPending); err != nil {
		return nil, err
	}
	if err := mustEdge(core.TaskCancelled, core.TaskPending); err != nil {
		return nil, err
	}
	if err := mustEdge(core.TaskUpstreamFailed, core.TaskPending); err != nil {
		return nil, err
	}
	var moved []uuid.UUID
	err := s.inTx(ctx, func(tx *sqlx.Tx) error {
		// Lock the run row before the task rows, in the same order as the
		// scheduler's pass and CancelRun, so they cannot deadlock; the
		// requeue's statement then sees what a pass committed before.
		if _, err := tx.ExecContext(ctx, `SELECT 1 FROM workflow_runs r JOIN task_runs t ON t.run_id = r.id WHERE t.id = $1 FOR UPDATE OF r`, id); err != nil {
			return fmt.Errorf("requeue task %s: lock run: %w", id, err)
		}
		if err := tx.SelectContext(ctx, &moved, qRequeue, id, actor, reason); err != nil {
			return fmt.Errorf("requeue task %s: %w", id, err)
		}
		if len(moved) == 0 {
			return nil
		}
		return notify(ctx, tx, TopicTasks)
	})
	if err != nil {
		return nil, err
	}
	if len(moved) > 0 {
		return moved, nil
	}
	state, _, err := s.TaskStateOf(ctx, id)
	if err != nil {
		return nil, err
	}
	if state == core.TaskDead {
		return nil, fmt.Errorf("task %s: %w: its run was cancelled", id, ErrNotDead)
	}
	return nil, fmt.Errorf("task %s: %w (it is %s)", id, ErrNotDead, state)
}

// ErrRunFinished is returned by CancelRun for a run that already SUCCEEDED
// or whose cancellation was already requested.
var ErrRunFinished = errors.New("run already finished")

// qRequestCancel persists the cancellation on the run row first; its row
// lock also waits out a scheduler pass that holds the run.
const qRequestCancel = `
UPDATE workflow_runs
   SET cancel_requested_at = now(), cancel_reason = $2, finished_at = NULL
 WHERE id = $1 AND cancel_requested_at IS NULL AND state <> 'SUCCEEDED'
RETURNING id`

// qCancelTasks cancels every task of the given runs that has not started
// (PENDING, READY, RETRYING), with its audit rows. It runs as its own
// statement after the run rows are locked, so its snapshot includes
// whatever a concurrent scheduler pass promoted before it released them.
const qCancelTasks = `
WITH cand AS (
    SELECT t.id, t.state FROM task_runs t
     WHERE t.run_id = ANY ($1::uuid[]) AND t.state IN ('PENDING', 'READY', 'RETRYING')
), c AS (
    UPDATE task_runs t SET state = 'CANCELLED', finished_at = now(), next_attempt_at = NULL
      FROM cand WHERE t.id = cand.id AND t.state = cand.state
 RETURNING t.id, t.run_id, cand.state AS from_state, t.attempt, t.fencing_token
), ev AS (
    INSERT INTO task_events (task_run_id, run_id, from_state, to_state, attempt, fencing_token, actor, reason)
    SELECT id, run_id, from_state, 'CANCELLED', attempt, fencing_token, $2, $3 FROM c
)
SELECT count(*) FROM c`

// CancelResult says what CancelRun did.
type CancelResult struct {
	// TasksCancelled counts tasks that had not started (PENDING, READY,
	// RETRYING) and are now CANCELLED. RUNNING tasks are signalled through
	// CancelChannel (their worker renews at once and cancels the handler),
	// backed by their next heartbeat, and end CANCELLED when their handler
	// returns.
	TasksCancelled int
}

// CancelRun persists the cancellation request first, cancels every task that
// has not started, and, in one NOTIFY statement, wakes the schedulers and
// tells the workers on CancelChannel; running tasks see the request at once
// (or at their next heartbeat if the notification is lost). Errors: ErrNotFound, ErrRunFinished (nothing
// changed).
func (s *Store) CancelRun(ctx context.Context, id uuid.UUID, actor, reason string) (CancelResult, error) {
	for _, from := range []core.TaskState{core.TaskPending, core.TaskReady, core.TaskRetrying} {
		if err := mustEdge(from, core.TaskCancelled); err != nil {
			return CancelResult{}, err
		}
	}
	var row struct {
		Runs  int
		Tasks int
	}
	err := s.inTx(ctx, func(tx *sqlx.Tx) error {
		var ids []uuid.UUID
		if err := tx.SelectContext(ctx, &ids, qRequestCancel, id, reason); err != nil {
			return fmt.Errorf("cancel run %s: %w", id, err)
		}
		row.Runs = len(ids)
		if row.Runs == 0 {
			return nil
		}
		if err := tx.GetContext(ctx, &row.Tasks, qCancelTasks, ids, actor, "run cancelled: "+reason); err != nil {
			return fmt.Errorf("cancel tasks of run %s: %w", id, err)
		}
		return notifyAll(ctx, tx, tasksNotice(TopicTasks), cancelNotice(ids))
	})
	if err != nil {
		return CancelResult{}, err
	}
	if row.Runs == 1 {
		return CancelResult{TasksCancelled: row.Tasks}, nil
	}
	var cur struct {
		State     string `db:"state"`
		Requested bool   `db:"requested"`
	}
	if err := s.db.GetContext(ctx, &cur, `SELECT state, cancel_requested_at IS NOT NULL AS requested FROM workflow_runs WHERE id = $1`, id); err != nil {
		return CancelResult{}, fmt.Errorf("run %s: %w", id, ErrNotFound)
	}
	if cur.Requested {
		return CancelResult{}, fmt.Errorf("run %s: %w: its cancellation was already requested (state %s; a scheduler settles it)", id, ErrRunFinished, cur.State)
	}
	return CancelResult{}, fmt.Errorf("run %s: %w (it is %s)", id, ErrRunFinished, cur.State)
}
