package store

import (
	"context"
	"fmt"

	"github.com/jmoiron/sqlx"
)

// dispatchPayloadSQL is the one SQL spelling of the dispatch message,
// core.Dispatch at version core.DispatchVersion, built from a task row:
// every statement that writes an outbox row (the root tasks of Trigger,
// Advance's promotions, Redispatch) selects it over a row source with the
// task's columns id, run_id, fencing_token, task_name and handler.
// TestEveryOutboxPayloadDecodesToItsTaskRow decodes what each of them
// writes with core.DecodeDispatch. A new field is added here and to
// core.Dispatch; v changes only with core.DispatchVersion (see core.Dispatch
// for what a version may change). Version 2 added the installation
// (installationSQL: this database's installation id, mode 89). The
// optional traceparent (core.Dispatch.Traceparent) is the run's
// (runTraceparentSQL: one look-up by primary key), added only when the run
// has one: an untraced run's message is unchanged.
const dispatchPayloadSQL = dispatchPayloadBase + ` || jsonb_strip_nulls(jsonb_build_object('traceparent', ` + runTraceparentSQL + `))`

// dispatchPayloadBase is dispatchPayloadSQL without the traceparent:
// qTrigger adds its runs' own (triggerPayloadSQL), which the look-up of
// runTraceparentSQL cannot see in the statement that inserts them.
const dispatchPayloadBase = `jsonb_build_object('v', 2, 'task_run_id', id, 'run_id', run_id, 'fencing_token', fencing_token, 'task', task_name, 'handler', handler, 'installation', ` + installationSQL + `)`

// runTraceparentSQL is the traceparent of the row source's run (run_id),
// NULL when the run is not traced (migration 00020).
const runTraceparentSQL = `(SELECT tr.traceparent FROM workflow_runs tr WHERE tr.id = run_id)`

// notPaused is true for an outbox row o whose task's workflow is not
// paused. The uncorrelated first test is evaluated once per statement (an
// InitPlan): with no pause at all, no row pays for the join. The second
// finds the row's workflow by primary keys (a scalar subquery correlated
// to o) and looks it up among the pauses: a join of the pauses with the
// runs could be planned as one hash of every run (a scan of the history)
// when the pauses are known to be few.
const notPaused = `(NOT EXISTS (SELECT 1 FROM workflow_pauses) OR NOT EXISTS (
    SELECT 1 FROM workflow_pauses pp
     WHERE pp.workflow_name = (SELECT pr.workflow_name FROM task_runs pt JOIN workflow_runs pr ON pr.id = pt.run_id
                                WHERE pt.id = o.task_run_id)))`

// OutboxRow is one pending dispatch.
type OutboxRow struct {
	ID       int64 `db:"id"`
	Payload  JSON  `db:"payload"`
	Attempts int   `db:"publish_attempts"`
}

// OutboxBatch is a batch of pending outbox rows locked by one publisher's
// transaction (FOR UPDATE SKIP LOCKED: concurrent publishers take disjoint
// batches). The publisher publishes them, marks what the broker confirmed,
// and commits; until the commit nothing is stamped, so a crash anywhere
// leaves every row pending (at-least-once).
//
// The transaction does not end when the ctx given to LockOutbox is
// cancelled: only Commit or Rollback end it. database/sql rolls a
// transaction back when the context it was begun with is cancelled, so a
// batch begun with the daemon's context lost its stamps to a shutdown
// signal that arrived between the broker's confirm and the commit, although
// the stamps were written with a fresh context (mode 44).
type OutboxBatch struct {
	heldTx
	Rows []OutboxRow
}

// heldTx is a transaction on a connection of its own that outlives the
// ctx it was begun with (see OutboxBatch): only Commit or Rollback end it.
type heldTx struct {
	conn *sqlx.Conn
	tx   *sqlx.Tx
}

// beginHeld takes a connection (bounded by ctx) and begins a heldTx on it.
func (s *Store) beginHeld(ctx context.Context) (*heldTx, error) {
	conn, err := s.db.Connx(ctx)
	if err != nil {
		return nil, fmt.Errorf("connect: %w", err)
	}
	tx, err := conn.BeginTxx(context.WithoutCancel(ctx), nil)
	if err != nil {
		_ = conn.Close()
		return nil, fmt.Errorf("begin: %w", err)
	}
	return &heldTx{conn: conn, tx: tx}, nil
}

// qLockOutbox walks outbox_pending (unpublished and not quarantined rows),
// skipping the rows of paused workflows (notPaused): they stay pending and
// go out once the workflow is resumed.
const qLockOutbox = `
SELECT id, payload, publish_attempts FROM outbox o
 WHERE published_at IS NULL AND quarantined_at IS NULL AND ` + notPaused + `
 ORDER BY id
 LIMIT $1
   FOR UPDATE SKIP LOCKED`

// LockOutbox begins a transaction and locks up to limit pending rows, oldest
// first. ctx bounds taking a connection and the locking query; the
// transaction itself outlives ctx (see OutboxBatch) and ends only with
// Commit or Rollback, which the caller must call. With no rows it returns a
// batch with no Rows (call Rollback). Errors: the pool or the query failed,
// or ctx ended first.
func (s *Store) LockOutbox(ctx context.Context, limit int) (*OutboxBatch, error) {
	h, err := s.beginHeld(ctx)
	if err != nil {
		return nil, fmt.Errorf("lock outbox: %w", err)
	}
	b := &OutboxBatch{heldTx: *h}
	if err := b.tx.SelectContext(ctx, &b.Rows, qLockOutbox, limit); err != nil {
		_ = b.Rollback()
		return nil, fmt.Errorf("lock outbox: %w", err)
	}
	return b, nil
}

// MarkPublished stamps published_at = now() on the rows the broker
// confirmed (and did not return), and counts the attempt.
func (b *OutboxBatch) MarkPublished(ctx context.Context, ids []int64) error {
	if len(ids) == 0 {
		return nil
	}
	_, err := b.tx.ExecContext(ctx, `UPDATE outbox SET published_at = now(), publish_attempts = publish_attempts + 1, last_error = NULL WHERE id = ANY ($1::bigint[]) AND published_at IS NULL`, ids)
	if err != nil {
		return fmt.Errorf("stamp published rows: %w", err)
	}
	return nil
}

// MarkFailed leaves the rows pending, counting the attempt and recording why.
func (b *OutboxBatch) MarkFailed(ctx context.Context, ids []int64, reason string) error {
	if len(ids) == 0 {
		return nil
	}
	_, err := b.tx.ExecContext(ctx, `UPDATE outbox SET publish_attempts = publish_attempts + 1, last_error = $2 WHERE id = ANY ($1::bigint[]) AND published_at IS NULL`, ids, reason)
	if err != nil {
		return fmt.Errorf("record failed publishes: %w", err)
	}
	return nil
}

// Commit commits the batch's stamps and returns its connection to the
// pool. Errors: the commit's (nothing is stamped then).
func (b *heldTx) Commit() error {
	err := b.tx.Commit()
	_ = b.conn.Close()
	if err != nil {
		return fmt.Errorf("commit batch: %w", err)
	}
	return nil
}

// Rollback abandons the batch; every row stays pending. Safe after Commit
// (then it does nothing and returns sql.ErrTxDone).
func (b *heldTx) Rollback() error {
	err := b.tx.Rollback()
	_ = b.conn.Close()
	return err
}

// OutboxStatus summarises the outbox.
type OutboxStatus struct {
	// Pending counts rows waiting to be published (not quarantined, not
	// of a paused workflow).
	Pending int64 `db:"pending" json:"pending"`
	// OldestPendingSeconds is the age of the oldest pending row on the
	// database clock, 0 when nothing is pending. Rows of a paused workflow
	// are not counted: they wait by an operator's choice, they are not
	// stuck (Paused counts them).
	OldestPendingSeconds float64 `db:"oldest_pending_seconds" json:"oldest_pending_seconds"`
	PublishedLastMinute  int64   `db:"published_last_minute" json:"published_last_minute"`
	// Paused counts the unpublished rows of paused workflows: held back
	// until the workflow is resumed (see Store.PauseWorkflow).
	Paused int64 `db:"paused" json:"paused"`
	// FailingRows counts pending rows whose last publish attempt failed.
	FailingRows int64 `db:"failing" json:"failing"`
	// Quarantined counts rows the broker refuses permanently, set aside
	// until an operator retries or drops them (ffctl outbox quarantined).
	Quarantined int64 `db:"quarantined" json:"quarantined"`
}

// OutboxStatus reads the outbox summary; every count is index-backed (the
// paused ones walk the pending rows only).
func (s *Store) OutboxStatus(ctx context.Context) (OutboxStatus, error) {
	var st OutboxStatus
	err := s.db.GetContext(ctx, &st, `
SELECT (SELECT count(*) FROM outbox o WHERE published_at IS NULL AND quarantined_at IS NULL AND `+notPaused+`) AS pending,
       coalesce((SELECT extract(epoch FROM now() - created_at)::float8 FROM outbox o WHERE published_at IS NULL AND quarantined_at IS NULL AND `+notPaused+` ORDER BY id LIMIT 1), 0) AS oldest_pending_seconds,
       (SELECT count(*) FROM outbox WHERE published_at > now() - interval '1 minute') AS published_last_minute,
       (SELECT count(*) FROM outbox o WHERE published_at IS NULL AND quarantined_at IS NULL AND last_error IS NOT NULL AND `+notPaused+`) AS failing,
       (SELECT count(*) FROM outbox o WHERE published_at IS NULL AND quarantined_at IS NULL AND NOT `+notPaused+`) AS paused,
       (SELECT count(*) FROM outbox WHERE published_at IS NULL AND quarantined_at IS NOT NULL AND dropped_at IS NULL) AS quarantined`)
	if err != nil {
		return OutboxStatus{}, fmt.Errorf("outbox status: %w", err)
	}
	return st, nil
}
