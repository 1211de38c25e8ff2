package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
)

// WaitingReasonPrefix starts the reason of the task_events row a worker
// writes when it hands back a task whose handler it does not register.
const WaitingReasonPrefix = "waiting for a worker with handler "

// NoteWaitingForHandler records, once per task and fencing token, that
// worker workerID handed the READY task id (at token) back because it does
// not register handler: a READY -> READY task_events row with worker_id
// set, the reason naming the handler and the handlers the worker does
// register (registered, as given). The unique index
// task_events_waiting_once makes a second note for the same task and token,
// from any worker, a no-op. It reports whether it wrote the row (false: the
// task is no longer READY at token, or the note exists).
func (s *Store) NoteWaitingForHandler(ctx context.Context, id uuid.UUID, token int64, workerID, handler, registered string) (bool, error) {
	res, err := s.db.ExecContext(ctx, `
INSERT INTO task_events (task_run_id, run_id, from_state, to_state, attempt, fencing_token, worker_id, actor, reason)
SELECT t.id, t.run_id, 'READY', 'READY', t.attempt, t.fencing_token, $3, $3,
       $4 || quote_ident($5) || ' (handed back by ' || $3 || ', which registers ' || CASE WHEN $6 = '' THEN 'no handler' ELSE $6 END || ')'
  FROM task_runs t WHERE t.id = $1 AND t.state = 'READY' AND t.fencing_token = $2
ON CONFLICT DO NOTHING`, id, token, workerID, WaitingReasonPrefix, handler, registered)
	if err != nil {
		return false, fmt.Errorf("note task %s waits for handler %s: %w", id, handler, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return false, fmt.Errorf("note task %s waits for handler %s: %w", id, handler, err)
	}
	return n == 1, nil
}

// ReadyFor returns how long the task has been READY (database clock). ok is
// false when it is not READY (or does not exist).
func (s *Store) ReadyFor(ctx context.Context, id uuid.UUID) (time.Duration, bool, error) {
	var ms float64
	err := s.db.GetContext(ctx, &ms, `SELECT extract(epoch FROM now() - ready_at) * 1000 FROM task_runs WHERE id = $1 AND state = 'READY'`, id)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, fmt.Errorf("read task %s: %w", id, err)
	}
	return time.Duration(ms * float64(time.Millisecond)), true, nil
}
