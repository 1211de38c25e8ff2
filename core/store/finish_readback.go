package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/google/uuid"

	"github.com/flowforge/flowforge/core"
)

// qFinishRecorded finds the history row a finish of the attempt ($1 the
// task run, $2 its fencing token, $3 its worker) wrote: qFinish inserts
// exactly one RUNNING -> SUCCEEDED | RETRYING | DEAD | CANCELLED row per
// row it finishes, at the token it fenced on, with worker_id the finishing
// worker. Nothing else writes such a row at that token and worker: a claim
// writes READY -> RUNNING; the reaper writes its RUNNING -> X row at the
// token it bumped to; a task is claimed once per token (every way back to
// READY bumps it), so at most one row matches. It reads task_events_task
// (task_run_id, id): the index condition is the task, the rest filters
// that task's few rows.
const qFinishRecorded = `
SELECT to_state FROM task_events
 WHERE task_run_id = $1 AND fencing_token = $2 AND worker_id = $3
   AND from_state = 'RUNNING' AND to_state IN ('SUCCEEDED', 'RETRYING', 'DEAD', 'CANCELLED')
 LIMIT 1`

// FinishRecorded reports whether a finish of the attempt of task id at
// fencing token, by workerID, was recorded, and the state it wrote: the
// read-back of a finish whose reply was lost. It reads the attempt's own
// history row, never the task row, which may have moved on since (the
// scheduler promoted the retry, bumping the token; the reaper or a newer
// claim took it): so ok is true for a committed finish whatever the task
// did next, and false (nil error) when no finish of that attempt committed
// (its lease was lost first, or its tries wrote nothing). The state is one
// a finish writes (SUCCEEDED, RETRYING, DEAD, CANCELLED). An unknown task
// (or one whose run was deleted, history and all) is ok false. The error
// is the read's, wrapped; the read is one indexed statement (qFinishRecorded).
func (s *Store) FinishRecorded(ctx context.Context, id uuid.UUID, token int64, workerID string) (core.TaskState, bool, error) {
	var state core.TaskState
	err := s.db.GetContext(ctx, &state, qFinishRecorded, id, token, workerID)
	if errors.Is(err, sql.ErrNoRows) {
		return "", false, nil
	}
	if err != nil {
		return "", false, fmt.Errorf("read back the finish of task %s at token %d: %w", id, token, err)
	}
	return state, true, nil
}
