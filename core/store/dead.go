package store

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"
)

// DeadQuery selects DEAD tasks for `ffctl dead list`, `dead requeue --all`
// and the dashboard's DEAD screen. Zero values mean "any".
type DeadQuery struct {
	Workflow string
	// Run keeps only the tasks of this run.
	Run uuid.UUID
	// OlderThan keeps tasks that died at least this long ago (database
	// clock).
	OlderThan time.Duration
	// Requeueable drops tasks whose run was cancelled: Requeue refuses them.
	Requeueable bool
	Limit       int // 0 means 100
}

const qListDeadTasks = `SELECT ` + taskColumns + `, r.workflow_name FROM task_runs t JOIN workflow_runs r ON r.id = t.run_id
 WHERE t.state = 'DEAD' AND ($1 = '' OR r.workflow_name = $1)
   AND ($2::uuid IS NULL OR t.run_id = $2)
   AND t.finished_at <= now() - $3::bigint * interval '1 millisecond'
   AND (NOT $4 OR r.cancel_requested_at IS NULL)
 ORDER BY t.finished_at DESC, t.id LIMIT $5`

// ListDeadTasks returns the DEAD tasks q selects (at most q.Limit, 100 when
// 0), most recent death first (ties by id), each with its workflow's name;
// the scan is backed by the partial index on DEAD tasks. The one error is
// the database's.
func (s *Store) ListDeadTasks(ctx context.Context, q DeadQuery) ([]TaskRun, error) {
	if q.Limit <= 0 {
		q.Limit = 100
	}
	var run *uuid.UUID
	if q.Run != uuid.Nil {
		run = &q.Run
	}
	var out []TaskRun
	if err := s.db.SelectContext(ctx, &out, qListDeadTasks, q.Workflow, run, q.OlderThan.Milliseconds(), q.Requeueable, q.Limit); err != nil {
		return nil, fmt.Errorf("list dead tasks: %w", err)
	}
	return out, nil
}
