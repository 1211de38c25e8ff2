package store

import (
	"context"
	"fmt"

	"github.com/google/uuid"
)

// qSweepCandidates finds, each part through an index on the live states
// (so its cost follows the live work, never the history), the open runs a
// scheduler's sweep must advance even when no notification named them:
// runs with a retry due (task_runs_retry_due), runs with a PENDING task
// whose dependencies all SUCCEEDED (task_runs_pending: a finish whose
// notification was lost), and open runs (workflow_runs_open) that are
// cancelled or have no READY, RUNNING or RETRYING task left (to settle, or
// to bury behind a DEAD task an older binary left). At most $1 runs.
const qSweepCandidates = `
SELECT id FROM (
    (SELECT t.run_id AS id FROM task_runs t
      WHERE t.state = 'RETRYING' AND t.next_attempt_at <= now()
      ORDER BY t.next_attempt_at LIMIT $1)
    UNION
    (SELECT t.run_id FROM task_runs t
      WHERE t.state = 'PENDING'
        AND NOT EXISTS (SELECT 1 FROM task_runs p
                         WHERE p.run_id = t.run_id AND p.task_name = ANY (t.depends_on) AND p.state <> 'SUCCEEDED')
      LIMIT $1)
    UNION
    (SELECT r.id FROM workflow_runs r
      WHERE r.finished_at IS NULL
        AND (r.cancel_requested_at IS NOT NULL
             OR NOT EXISTS (SELECT 1 FROM task_runs t
                             WHERE t.run_id = r.id AND t.state IN ('READY', 'RUNNING', 'RETRYING')))
      LIMIT $1)
    UNION
    (SELECT t.run_id FROM task_runs t JOIN workflow_runs r ON r.id = t.run_id
      WHERE t.state = 'RUNNING' AND r.state = 'PENDING' AND r.finished_at IS NULL
      LIMIT $1)
) c
 LIMIT $1`

// SweepCandidates returns up to limit open runs that a scheduler's sweep
// should advance (AdvanceRuns) although no notification may have named
// them (qSweepCandidates): retries due, promotable tasks (a lost
// notification), runs to settle or cancel, and PENDING runs with a task
// RUNNING (a claim notifies nobody, and a trigger only the publishers:
// without this a run showed PENDING, started_at unset, while its tasks ran
// for up to a full sweep; found by a new user's trial). The last is driven
// by the RUNNING tasks' partial index, which holds at most the workers'
// slots. It reads without locking; AdvanceRuns locks. The runs it cannot
// see (a run whose derived state changed while tasks still run, with its
// notification lost) wait for the scheduler's rarer full sweep (Advance).
func (s *Store) SweepCandidates(ctx context.Context, limit int) ([]uuid.UUID, error) {
	var ids []uuid.UUID
	if err := s.db.SelectContext(ctx, &ids, qSweepCandidates, limit); err != nil {
		return nil, fmt.Errorf("find runs to sweep: %w", err)
	}
	return ids, nil
}
