package store

import (
	"context"
	"fmt"

	"github.com/jmoiron/sqlx"
)

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
type OutboxBatch struct {
	tx   *sqlx.Tx
	Rows []OutboxRow
}

const qLockOutbox = `
SELECT id, payload, publish_attempts FROM outbox
 WHERE published_at IS NULL
 ORDER BY id
 LIMIT $1
   FOR UPDATE SKIP LOCKED`

// LockOutbox begins a transaction and locks up to limit pending rows, oldest
// first. With no rows it returns a batch with no Rows (call Rollback).
func (s *Store) LockOutbox(ctx context.Context, limit int) (*OutboxBatch, error) {
	tx, err := s.db.BeginTxx(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("lock outbox: begin: %w", err)
	}
	b := &OutboxBatch{tx: tx}
	if err := tx.SelectContext(ctx, &b.Rows, qLockOutbox, limit); err != nil {
		_ = tx.Rollback()
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

// Commit commits the batch's stamps.
func (b *OutboxBatch) Commit() error {
	if err := b.tx.Commit(); err != nil {
		return fmt.Errorf("commit outbox batch: %w", err)
	}
	return nil
}

// Rollback abandons the batch; every row stays pending. Safe after Commit.
func (b *OutboxBatch) Rollback() error {
	return b.tx.Rollback()
}

// OutboxStatus summarises the outbox.
type OutboxStatus struct {
	Pending int64 `db:"pending" json:"pending"`
	// OldestPendingSeconds is the age of the oldest pending row on the
	// database clock, 0 when nothing is pending.
	OldestPendingSeconds float64 `db:"oldest_pending_seconds" json:"oldest_pending_seconds"`
	PublishedLastMinute  int64   `db:"published_last_minute" json:"published_last_minute"`
	// FailingRows counts pending rows whose last publish attempt failed.
	FailingRows int64 `db:"failing" json:"failing"`
}

// OutboxStatus reads the outbox summary; every count is index-backed.
func (s *Store) OutboxStatus(ctx context.Context) (OutboxStatus, error) {
	var st OutboxStatus
	err := s.db.GetContext(ctx, &st, `
SELECT (SELECT count(*) FROM outbox WHERE published_at IS NULL) AS pending,
       coalesce((SELECT extract(epoch FROM now() - created_at)::float8 FROM outbox WHERE published_at IS NULL ORDER BY id LIMIT 1), 0) AS oldest_pending_seconds,
       (SELECT count(*) FROM outbox WHERE published_at > now() - interval '1 minute') AS published_last_minute,
       (SELECT count(*) FROM outbox WHERE published_at IS NULL AND last_error IS NOT NULL) AS failing`)
	if err != nil {
		return OutboxStatus{}, fmt.Errorf("outbox status: %w", err)
	}
	return st, nil
}
