package store

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/flowforge/flowforge/core"
)

// This file holds the read-only queries that only the dashboard (ffctl tui)
// needs. Each is bounded (LIMIT) and backed by an index, so its cost does not
// grow with history: the dashboard runs them every second or two.

// qRunStateCountsBounded counts runs per state, each count stopping at $1:
// an index scan (workflow_runs_state_created, or workflow_runs_created when
// the state is most of the table) reads at most about $1 entries per state,
// where a plain GROUP BY would read the whole table. The ORDER BY matches
// those indexes so the planner never prefers a sequential scan.
const qRunStateCountsBounded = `
SELECT (SELECT count(*) FROM (SELECT 1 FROM workflow_runs WHERE state = 'PENDING' ORDER BY created_at DESC LIMIT $1) x) AS pending,
       (SELECT count(*) FROM (SELECT 1 FROM workflow_runs WHERE state = 'RUNNING' ORDER BY created_at DESC LIMIT $1) x) AS running,
       (SELECT count(*) FROM (SELECT 1 FROM workflow_runs WHERE state = 'SUCCEEDED' ORDER BY created_at DESC LIMIT $1) x) AS succeeded,
       (SELECT count(*) FROM (SELECT 1 FROM workflow_runs WHERE state = 'FAILED' ORDER BY created_at DESC LIMIT $1) x) AS failed,
       (SELECT count(*) FROM (SELECT 1 FROM workflow_runs WHERE state = 'CANCELLED' ORDER BY created_at DESC LIMIT $1) x) AS cancelled`

// RunStateCountsBounded counts runs per state, but each
// count stops at limit (a count equal to limit means "limit or more"), so
// its cost is bounded whatever the history. limit <= 0 means 10000.
func (s *Store) RunStateCountsBounded(ctx context.Context, limit int64) (map[core.RunState]int64, error) {
	if limit <= 0 {
		limit = 10000
	}
	var row struct {
		Pending   int64 `db:"pending"`
		Running   int64 `db:"running"`
		Succeeded int64 `db:"succeeded"`
		Failed    int64 `db:"failed"`
		Cancelled int64 `db:"cancelled"`
	}
	if err := s.db.GetContext(ctx, &row, qRunStateCountsBounded, limit); err != nil {
		return nil, fmt.Errorf("count runs by state: %w", err)
	}
	return map[core.RunState]int64{
		core.RunPending:   row.Pending,
		core.RunRunning:   row.Running,
		core.RunSucceeded: row.Succeeded,
		core.RunFailed:    row.Failed,
		core.RunCancelled: row.Cancelled,
	}, nil
}

// PendingDispatch is one outbox row not yet confirmed by the broker, with
// the task it dispatches.
type PendingDispatch struct {
	ID           int64     `db:"id" json:"id"`
	TaskRunID    uuid.UUID `db:"task_run_id" json:"task_run_id"`
	FencingToken int64     `db:"fencing_token_snapshot" json:"fencing_token"`
	TaskName     string    `db:"task_name" json:"task"`
	Workflow     string    `db:"workflow_name" json:"workflow"`
	CreatedAt    time.Time `db:"created_at" json:"created_at"`
	// AgeSeconds is measured on the database clock.
	AgeSeconds float64 `db:"age_seconds" json:"age_seconds"`
	Attempts   int     `db:"publish_attempts" json:"publish_attempts"`
	LastError  *string `db:"last_error" json:"last_error"`
}

// qOldestPending walks outbox_pending (the partial index on pending rows) in
// id order, so it reads at most $1 rows whatever was published before
// (and the held rows of paused workflows, which it leaves out: they are
// not stuck, see OutboxStatus.Paused).
const qOldestPending = `
SELECT o.id, o.task_run_id, o.fencing_token_snapshot, t.task_name, r.workflow_name, o.created_at,
       extract(epoch FROM now() - o.created_at)::float8 AS age_seconds, o.publish_attempts, o.last_error
  FROM (SELECT * FROM outbox o WHERE published_at IS NULL AND quarantined_at IS NULL AND ` + notPaused + ` ORDER BY id LIMIT $1) o
  JOIN task_runs t ON t.id = o.task_run_id
  JOIN workflow_runs r ON r.id = t.run_id
 ORDER BY o.id`

// OldestPendingDispatches returns up to limit pending outbox rows, oldest
// first, leaving out those of paused workflows. limit <= 0 means 20.
func (s *Store) OldestPendingDispatches(ctx context.Context, limit int) ([]PendingDispatch, error) {
	if limit <= 0 {
		limit = 20
	}
	var out []PendingDispatch
	if err := s.db.SelectContext(ctx, &out, qOldestPending, limit); err != nil {
		return nil, fmt.Errorf("list pending dispatches: %w", err)
	}
	return out, nil
}
