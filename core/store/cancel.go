package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/google/uuid"
	"github.com/jmoiron/sqlx"

	"github.com/flowforge/flowforge/core"
)

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
// (or at their next heartbeat if the notification is lost). Errors: one
// wrapping core.ErrBadReason for a reason core.ValidateReason refuses;
// ErrNotFound for an unknown run; ErrRunFinished for a run that SUCCEEDED or
// whose cancellation was already requested (nothing changed); any other
// error (the database's) as it is, never as ErrNotFound.
func (s *Store) CancelRun(ctx context.Context, id uuid.UUID, actor, reason string) (CancelResult, error) {
	for _, from := range []core.TaskState{core.TaskPending, core.TaskReady, core.TaskRetrying} {
		if err := mustEdge(from, core.TaskCancelled); err != nil {
			return CancelResult{}, err
		}
	}
	if err := core.ValidateReason(reason); err != nil {
		return CancelResult{}, fmt.Errorf("cancel run %s: %w", id, err)
	}
	var res CancelResult
	err := s.inTx(ctx, func(tx *sqlx.Tx) error {
		var err error
		res, err = cancelRunTx(ctx, tx, id, actor, reason)
		return err
	})
	if err != nil {
		return CancelResult{}, err
	}
	return res, nil
}

// cancelRunTx is CancelRun's work inside tx (the caller commits; the
// notifications go out with the commit). Errors: those of CancelRun but
// the reason's (checked by the caller).
func cancelRunTx(ctx context.Context, tx *sqlx.Tx, id uuid.UUID, actor, reason string) (CancelResult, error) {
	var res CancelResult
	var ids []uuid.UUID
	if err := tx.SelectContext(ctx, &ids, qRequestCancel, id, reason); err != nil {
		return res, fmt.Errorf("cancel run %s: %w", id, err)
	}
	if len(ids) == 0 {
		return res, cancelRefused(ctx, tx, id)
	}
	if err := tx.GetContext(ctx, &res.TasksCancelled, qCancelTasks, uuidArray(ids), actor, "run cancelled: "+reason); err != nil {
		return res, fmt.Errorf("cancel tasks of run %s: %w", id, err)
	}
	return res, notifyAll(ctx, tx, append(runsNotices(ids), cancelNotice(ids))...)
}

// cancelRefused says why qRequestCancel matched no row of run id, read in
// the same transaction: ErrNotFound only when the run does not exist.
func cancelRefused(ctx context.Context, tx *sqlx.Tx, id uuid.UUID) error {
	var cur struct {
		State     core.RunState `db:"state"`
		Requested bool          `db:"requested"`
	}
	err := tx.GetContext(ctx, &cur, `SELECT state, cancel_requested_at IS NOT NULL AS requested FROM workflow_runs WHERE id = $1`, id)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return fmt.Errorf("run %s: %w", id, ErrNotFound)
	case err != nil:
		return fmt.Errorf("cancel run %s: read its state: %w", id, err)
	case cur.Requested:
		return fmt.Errorf("run %s: %w: its cancellation was already requested (state %s; a scheduler settles it)", id, ErrRunFinished, cur.State)
	}
	return fmt.Errorf("run %s: %w (it is %s)", id, ErrRunFinished, cur.State)
}
