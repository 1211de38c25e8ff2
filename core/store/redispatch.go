package store

import (
	"context"
	"fmt"
	"time"

	"github.com/jmoiron/sqlx"
)

// readyUndispatched holds for a READY task run t of run r that waits for
// a worker with no dispatch in flight: READY for longer than $1 ms, not
// waiting for its admission, its workflow not paused, and no outbox row of
// its token pending (or quarantined) or confirmed within the last $1 ms.
// The redispatch re-sends such a task; `ffctl doctor` reports one that
// stayed so past the redispatch's own delay (StrandedReady).
const readyUndispatched = `t.state = 'READY' AND t.ready_at < now() - $1::bigint * interval '1 millisecond' AND t.flow_wait IS NULL
       AND NOT EXISTS (SELECT 1 FROM workflow_pauses p WHERE p.workflow_name = r.workflow_name)
       AND NOT EXISTS (SELECT 1 FROM outbox o
                        WHERE o.task_run_id = t.id AND o.fencing_token_snapshot = t.fencing_token
                          AND (o.published_at IS NULL OR o.published_at > now() - $1::bigint * interval '1 millisecond'))`

// redispatchCandidate selects the columns of the CTE "stale" that
// redispatchInsert reads, from task runs t of runs r; the statement adds
// its WHERE.
const redispatchCandidate = `SELECT t.id, t.run_id, t.task_name, t.handler, t.fencing_token, t.attempt,
           (SELECT max(o.dispatch) FROM outbox o
             WHERE o.task_run_id = t.id AND o.fencing_token_snapshot = t.fencing_token) AS last_dispatch
      FROM task_runs t JOIN workflow_runs r ON r.id = t.run_id`

// redispatchInsert is the CTE "ins" that writes the next dispatch (same
// fencing token, dispatch number last_dispatch + 1) of each task of the CTE
// "stale" (id, run_id, task_name, handler, fencing_token, attempt,
// last_dispatch), returning (task_run_id, dispatch).
const redispatchInsert = `, ins AS (
    INSERT INTO outbox (task_run_id, fencing_token_snapshot, dispatch, payload)
    SELECT id, fencing_token, coalesce(last_dispatch, 0) + 1,
           ` + dispatchPayloadSQL + `
      FROM stale
    ON CONFLICT (task_run_id, fencing_token_snapshot, dispatch) DO NOTHING
 RETURNING task_run_id, dispatch
)`

// qRedispatch writes a new outbox row (same fencing token, next dispatch
// number) for READY tasks that nobody claimed although their last dispatch
// was confirmed more than $1 ms ago and none is pending. The earlier
// message may be lost (its queue deleted, its broker node gone); if it is
// merely slow, the two copies carry the same token and the first to arrive
// claims while the other loses. The task's state does not change; the
// history records the redispatch. A paused workflow's READY tasks are not
// lost, they wait: they are skipped (ResumeWorkflow re-sends them). A task
// waiting for its admission (flow_wait) has no dispatch by design: the
// admission writes it (Admit).
const qRedispatch = `
WITH stale AS (
    ` + redispatchCandidate + `
     WHERE ` + readyUndispatched + `
     ORDER BY t.ready_at
     LIMIT $2
       FOR UPDATE OF t SKIP LOCKED
)` + redispatchInsert + `, ev AS (
    INSERT INTO task_events (task_run_id, run_id, from_state, to_state, attempt, fencing_token, actor, reason)
    SELECT s.id, s.run_id, 'READY', 'READY', s.attempt, s.fencing_token, $3,
           'redispatched (dispatch ' || i.dispatch || '): no worker claimed it since its last dispatch was confirmed'
      FROM stale s JOIN ins i ON i.task_run_id = s.id
)
SELECT count(*) FROM ins`

// Redispatch re-sends up to limit READY tasks that no worker claimed within
// after of their last confirmed dispatch (see qRedispatch), and wakes the
// publishers. It returns how many it re-sent. after should be far longer
// than a normal queueing delay: a slow copy costs only a lost claim.
func (s *Store) Redispatch(ctx context.Context, after time.Duration, limit int, actor string) (int, error) {
	var n int
	err := s.inTx(ctx, func(tx *sqlx.Tx) error {
		if err := tx.GetContext(ctx, &n, qRedispatch, after.Milliseconds(), limit, actor); err != nil {
			return fmt.Errorf("redispatch stale READY tasks: %w", err)
		}
		if n > 0 {
			return notifyAll(ctx, tx, outboxNotice())
		}
		return nil
	})
	return n, err
}
