package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jmoiron/sqlx"

	"github.com/flowforge/flowforge/core"
)

// ErrNotQuarantined is returned by RetryQuarantined and DropQuarantined for
// an outbox row that exists but is not quarantined (it is pending,
// published, or already dropped); the row is left unchanged.
var ErrNotQuarantined = errors.New("outbox row is not quarantined")

// Outbox audit actions (outbox_events.action).
const (
	OutboxActionQuarantine = "quarantine"
	OutboxActionRetry      = "retry"
	OutboxActionDrop       = "drop"
)

// qQuarantine sets pending rows aside, counting the attempt and writing the
// audit rows, in one statement guarded by the pending state.
const qQuarantine = `
WITH q AS (
    UPDATE outbox
       SET quarantined_at = now(), quarantine_reason = $2, last_error = $2,
           publish_attempts = publish_attempts + 1
     WHERE id = ANY ($1::bigint[]) AND published_at IS NULL AND quarantined_at IS NULL
 RETURNING id
), ev AS (
    INSERT INTO outbox_events (outbox_id, action, actor, reason)
    SELECT id, 'quarantine', $3, $2 FROM q
)
SELECT count(*) FROM q`

// Quarantine sets the rows aside with reason, as actor ("publisher"): the
// broker refuses them permanently (see package publisher for the list), so
// no later cycle publishes them until an operator retries them. It returns
// how many rows it quarantined (rows no longer pending are skipped).
func (b *OutboxBatch) Quarantine(ctx context.Context, ids []int64, actor, reason string) (int, error) {
	if len(ids) == 0 {
		return 0, nil
	}
	var n int
	if err := b.tx.GetContext(ctx, &n, qQuarantine, ids, reason, actor); err != nil {
		return 0, fmt.Errorf("quarantine outbox rows: %w", err)
	}
	return n, nil
}

// QuarantinedRow is one quarantined outbox row with its task.
type QuarantinedRow struct {
	ID            int64          `db:"id" json:"id"`
	TaskRunID     uuid.UUID      `db:"task_run_id" json:"task_run_id"`
	RunID         uuid.UUID      `db:"run_id" json:"run_id"`
	FencingToken  int64          `db:"fencing_token_snapshot" json:"fencing_token"`
	Workflow      string         `db:"workflow_name" json:"workflow"`
	TaskName      string         `db:"task_name" json:"task"`
	TaskState     core.TaskState `db:"task_state" json:"task_state"`
	PayloadBytes  int64          `db:"payload_bytes" json:"payload_bytes"`
	Attempts      int            `db:"publish_attempts" json:"publish_attempts"`
	CreatedAt     time.Time      `db:"created_at" json:"created_at"`
	QuarantinedAt time.Time      `db:"quarantined_at" json:"quarantined_at"`
	Reason        string         `db:"quarantine_reason" json:"reason"`
}

// qListQuarantined walks outbox_quarantined in id order.
const qListQuarantined = `
SELECT o.id, o.task_run_id, t.run_id, o.fencing_token_snapshot, r.workflow_name, t.task_name,
       t.state AS task_state, octet_length(o.payload::text) AS payload_bytes, o.publish_attempts,
       o.created_at, o.quarantined_at, coalesce(o.quarantine_reason, '') AS quarantine_reason
  FROM (SELECT * FROM outbox
         WHERE published_at IS NULL AND quarantined_at IS NOT NULL AND dropped_at IS NULL
         ORDER BY id LIMIT $1) o
  JOIN task_runs t ON t.id = o.task_run_id
  JOIN workflow_runs r ON r.id = t.run_id
 ORDER BY o.id`

// ListQuarantined returns up to limit quarantined rows, oldest first.
// limit <= 0 means 100.
func (s *Store) ListQuarantined(ctx context.Context, limit int) ([]QuarantinedRow, error) {
	if limit <= 0 {
		limit = 100
	}
	var out []QuarantinedRow
	if err := s.db.SelectContext(ctx, &out, qListQuarantined, limit); err != nil {
		return nil, fmt.Errorf("list quarantined outbox rows: %w", err)
	}
	return out, nil
}

// qRetryQuarantined makes a quarantined row pending again, audited.
const qRetryQuarantined = `
WITH q AS (
    UPDATE outbox SET quarantined_at = NULL, quarantine_reason = NULL
     WHERE id = $1 AND published_at IS NULL AND quarantined_at IS NOT NULL AND dropped_at IS NULL
 RETURNING id
), ev AS (
    INSERT INTO outbox_events (outbox_id, action, actor, reason)
    SELECT id, 'retry', $2, $3 FROM q
)
SELECT count(*) FROM q`

// RetryQuarantined makes quarantined row id pending again (the publishers
// try it on their next cycle; a row still refused is quarantined again),
// audited with actor and reason in outbox_events, and wakes the publishers.
// Errors: ErrNotFound for an unknown id, ErrNotQuarantined (naming what the
// row is) when it is not quarantined; in both cases nothing changes; one
// wrapping core.ErrBadReason for a reason core.ValidateReason refuses.
func (s *Store) RetryQuarantined(ctx context.Context, id int64, actor, reason string) error {
	if err := core.ValidateReason(reason); err != nil {
		return fmt.Errorf("retry outbox row %d: %w", id, err)
	}
	var n int
	err := s.inTx(ctx, func(tx *sqlx.Tx) error {
		if err := tx.GetContext(ctx, &n, qRetryQuarantined, id, actor, reason); err != nil {
			return fmt.Errorf("retry outbox row %d: %w", id, err)
		}
		if n == 0 {
			return nil
		}
		return notifyAll(ctx, tx, outboxNotice())
	})
	if err != nil {
		return err
	}
	if n == 1 {
		return nil
	}
	return s.notQuarantined(ctx, id)
}

// DropResult says what DropQuarantined did to the row's task.
type DropResult struct {
	TaskRunID uuid.UUID `json:"task_run_id"`
	// TaskBuried is true when the task was READY with the row's fencing
	// token and is now DEAD with the reason.
	TaskBuried bool `json:"task_buried"`
	// TaskState is the task's state after the drop (DEAD when buried).
	TaskState core.TaskState `json:"task_state"`
}

// qDropQuarantined marks the row dropped and buries its task READY -> DEAD
// when the task still waits for this very dispatch (same fencing token),
// with the audit rows of both, in one statement guarded by state; the
// buried task's PENDING descendants become UPSTREAM_FAILED with it
// (buryDownstream).
const qDropQuarantined = `
WITH RECURSIVE d AS (
    UPDATE outbox SET dropped_at = now()
     WHERE id = $1 AND published_at IS NULL AND quarantined_at IS NOT NULL AND dropped_at IS NULL
 RETURNING id, task_run_id, fencing_token_snapshot
), dev AS (
    INSERT INTO outbox_events (outbox_id, action, actor, reason)
    SELECT id, 'drop', $2, $3 FROM d
), bury AS (
    UPDATE task_runs t
       SET state = 'DEAD', finished_at = now(), error = $4, lease_expires_at = NULL, worker_id = NULL
      FROM d
     WHERE t.id = d.task_run_id AND t.state = 'READY' AND t.fencing_token = d.fencing_token_snapshot
 RETURNING t.id, t.run_id, t.attempt, t.fencing_token
), tev AS (
    INSERT INTO task_events (task_run_id, run_id, from_state, to_state, attempt, fencing_token, actor, reason)
    SELECT id, run_id, 'READY', 'DEAD', attempt, fencing_token, $2, $4 FROM bury
), buried (id, actor) AS (
    SELECT id, $2::text FROM bury
), ` + buryDownstream + `
SELECT (SELECT count(*) FROM d) AS dropped, (SELECT count(*) FROM bury) AS buried,
       coalesce((SELECT task_run_id FROM d), '00000000-0000-0000-0000-000000000000'::uuid) AS task_run_id,
       (SELECT run_id FROM bury) AS run_id`

// DropQuarantined gives up on quarantined row id: the row is kept, marked
// dropped (it is never published), and its task, when it is still READY
// waiting for this dispatch, is buried DEAD with the reason (so the run
// fails visibly and `ffctl dead requeue` can bring it back) and its
// PENDING descendants UPSTREAM_FAILED; all in one
// transaction, audited as actor in outbox_events and task_events. The
// schedulers are woken to settle the run. Errors: ErrNotFound for an
// unknown id, ErrNotQuarantined when the row is not quarantined; in both
// cases nothing changes; one wrapping core.ErrBadReason for a reason
// core.ValidateReason refuses.
func (s *Store) DropQuarantined(ctx context.Context, id int64, actor, reason string) (DropResult, error) {
	if err := core.ValidateReason(reason); err != nil {
		return DropResult{}, fmt.Errorf("drop outbox row %d: %w", id, err)
	}
	if err := mustEdge(core.TaskReady, core.TaskDead); err != nil {
		return DropResult{}, err
	}
	if err := mustEdge(core.TaskPending, core.TaskUpstreamFailed); err != nil {
		return DropResult{}, err
	}
	var row struct {
		Dropped   int        `db:"dropped"`
		Buried    int        `db:"buried"`
		TaskRunID uuid.UUID  `db:"task_run_id"`
		RunID     *uuid.UUID `db:"run_id"` // the buried task's run, nil when none was buried
	}
	err := s.inTx(ctx, func(tx *sqlx.Tx) error {
		// Lock the run row before the task row, in the same order as the
		// scheduler's pass and CancelRun, so they cannot deadlock.
		if _, err := tx.ExecContext(ctx, `SELECT 1 FROM workflow_runs r JOIN task_runs t ON t.run_id = r.id JOIN outbox o ON o.task_run_id = t.id WHERE o.id = $1 FOR UPDATE OF r`, id); err != nil {
			return fmt.Errorf("drop outbox row %d: lock run: %w", id, err)
		}
		if err := tx.GetContext(ctx, &row, qDropQuarantined, id, actor, reason, "dispatch dropped from the outbox quarantine: "+reason); err != nil {
			return fmt.Errorf("drop outbox row %d: %w", id, err)
		}
		if row.Buried == 0 || row.RunID == nil {
			return nil
		}
		return notifyAll(ctx, tx, runsNotices([]uuid.UUID{*row.RunID})...)
	})
	if err != nil {
		return DropResult{}, err
	}
	if row.Dropped == 0 {
		return DropResult{}, s.notQuarantined(ctx, id)
	}
	res := DropResult{TaskRunID: row.TaskRunID, TaskBuried: row.Buried == 1}
	if res.TaskBuried {
		res.TaskState = core.TaskDead
		return res, nil
	}
	state, _, err := s.TaskStateOf(ctx, row.TaskRunID)
	if err != nil {
		return res, err
	}
	res.TaskState = state
	return res, nil
}

// notQuarantined explains why row id could not be retried or dropped:
// ErrNotFound, or ErrNotQuarantined naming what the row is.
func (s *Store) notQuarantined(ctx context.Context, id int64) error {
	var cur struct {
		Published   bool `db:"published"`
		Quarantined bool `db:"quarantined"`
		Dropped     bool `db:"dropped"`
	}
	err := s.db.GetContext(ctx, &cur, `SELECT published_at IS NOT NULL AS published, quarantined_at IS NOT NULL AS quarantined, dropped_at IS NOT NULL AS dropped FROM outbox WHERE id = $1`, id)
	if err != nil {
		return fmt.Errorf("outbox row %d: %w", id, ErrNotFound)
	}
	what := "pending"
	switch {
	case cur.Published:
		what = "published"
	case cur.Dropped:
		what = "dropped"
	}
	return fmt.Errorf("outbox row %d: %w (it is %s)", id, ErrNotQuarantined, what)
}

// OutboxEvent is one audit row of an outbox row (quarantine, retry, drop).
type OutboxEvent struct {
	ID       int64     `db:"id" json:"id"`
	OutboxID int64     `db:"outbox_id" json:"outbox_id"`
	At       time.Time `db:"at" json:"at"`
	Action   string    `db:"action" json:"action"`
	Actor    string    `db:"actor" json:"actor"`
	Reason   string    `db:"reason" json:"reason"`
}

// OutboxEvents returns the audit trail of outbox row id, oldest first
// (empty for an unknown id).
func (s *Store) OutboxEvents(ctx context.Context, id int64) ([]OutboxEvent, error) {
	var out []OutboxEvent
	if err := s.db.SelectContext(ctx, &out, `SELECT id, outbox_id, at, action, actor, reason FROM outbox_events WHERE outbox_id = $1 ORDER BY id`, id); err != nil {
		return nil, fmt.Errorf("outbox row %d events: %w", id, err)
	}
	return out, nil
}
