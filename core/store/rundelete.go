package store

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jmoiron/sqlx"

	"github.com/flowforge/flowforge/core"
)

// ErrRunNotSettled is wrapped by the refusal of DeleteRuns to delete a run
// that is not settled (open, or with a task READY, RUNNING or RETRYING, or
// a child run whose parent's task has not yet taken its end).
var ErrRunNotSettled = errors.New("run is not settled")

// RunNotSettledError names the runs DeleteRuns refused because they are
// not settled, with their states; nothing was deleted. It wraps
// ErrRunNotSettled.
type RunNotSettledError struct {
	Runs []RunDeletion // ID and State set
}

func (e *RunNotSettledError) Error() string {
	parts := make([]string, len(e.Runs))
	for i, r := range e.Runs {
		parts[i] = fmt.Sprintf("%s (%s)", r.RunID, r.State)
	}
	return fmt.Sprintf("run %s: %v: only a run that has ended (%s with nothing left running; a child run once its parent's task has taken its end) can be deleted; cancel it and wait for it to end first",
		strings.Join(parts, ", "), ErrRunNotSettled, core.JoinRunStates(core.FinalRunStates(), " or "))
}

func (e *RunNotSettledError) Unwrap() error { return ErrRunNotSettled }

// ErrRunHoldsDead is wrapped by the refusal of DeleteRuns to delete, by id
// and without IncludeDead, a run that holds a DEAD task: `ffctl dead
// requeue` could still retry that task, and the deletion would take it
// away; the retention pruner keeps such runs too unless --retain-dead.
var ErrRunHoldsDead = errors.New("run holds DEAD tasks")

// RunHoldsDeadError names the runs DeleteRuns refused because they hold a
// DEAD task (IncludeDead not set), with their states and DEAD task counts;
// nothing was deleted. It wraps ErrRunHoldsDead.
type RunHoldsDeadError struct {
	Runs []RunDeletion // RunID, State and DeadTasks set
}

func (e *RunHoldsDeadError) Error() string {
	parts := make([]string, len(e.Runs))
	for i, r := range e.Runs {
		parts[i] = fmt.Sprintf("%s (%s, %d DEAD)", r.RunID, r.State, r.DeadTasks)
	}
	return fmt.Sprintf("run %s: %v that a requeue could still retry: deleting it needs the opt-in (ffctl run delete --include-dead)",
		strings.Join(parts, ", "), ErrRunHoldsDead)
}

func (e *RunHoldsDeadError) Unwrap() error { return ErrRunHoldsDead }

// RunDeletion is one run DeleteRuns deleted (or, in a dry run, would
// delete), as recorded in run_deletions: TaskRuns is the number of task runs
// that went with it.
type RunDeletion struct {
	RunID           uuid.UUID     `db:"run_id" json:"run_id"`
	Workflow        string        `db:"workflow_name" json:"workflow"`
	WorkflowVersion int           `db:"workflow_version" json:"workflow_version"`
	State           core.RunState `db:"state" json:"state"`
	CreatedAt       time.Time     `db:"created_at" json:"created_at"`
	FinishedAt      *time.Time    `db:"finished_at" json:"finished_at"`
	TaskRuns        int64         `db:"task_runs" json:"task_runs"`
	// DeadTasks is how many of those task runs were DEAD.
	DeadTasks int64 `db:"dead_tasks" json:"dead_tasks"`
}

// DeleteRunsRequest selects the runs DeleteRuns deletes: IDs (every one
// must name a settled run), or, with no IDs, the settled runs in State
// (SUCCEEDED, FAILED or CANCELLED) whose finished_at is older than
// OlderThan (database clock). A run holding a DEAD task (every FAILED run,
// a CANCELLED one whose task died before the cancel) goes only with
// IncludeDead: named by id without it, it is refused (*RunHoldsDeadError);
// selected by the filter without it, it is skipped. DryRun deletes nothing
// and returns what would go. Actor and Reason are recorded in
// run_deletions for every run deleted.
type DeleteRunsRequest struct {
	IDs         []uuid.UUID
	State       core.RunState
	OlderThan   time.Duration
	IncludeDead bool
	DryRun      bool
	Actor       string
	Reason      string
}

// qLockRunsForDelete locks the runs named, in id order (as requeues and the
// reaper lock them), and says whether each is settled.
const qLockRunsForDelete = `
SELECT r.id AS run_id, r.state, (` + settledNow + `) AS settled,
       (SELECT count(*) FROM task_runs d WHERE d.run_id = r.id AND d.state = 'DEAD') AS dead_tasks
  FROM workflow_runs r WHERE r.id = ANY ($1::uuid[])
 ORDER BY r.id
   FOR UPDATE`

// settledNow is settledOlder without the age: the run r is settled now.
const settledNow = `r.finished_at IS NOT NULL AND r.state IN ` + finalRunStatesSQL + `
       AND (SELECT count(*) FROM task_runs a WHERE a.run_id = r.id AND a.state IN ('READY', 'RUNNING', 'RETRYING')) = 0
       AND ` + parentTookItsEnd

// qDeleteRuns lists the runs $1 (locked and checked settled before), or
// with $1 NULL up to $5 settled runs in state $3 settled longer than $2 ms
// ago (skipping locked ones, oldest first), with their task run counts;
// unless $4 (a dry run) it deletes them (their task runs, outbox rows and
// history cascade; their log lines and stream rows go in deleteCandRows) and records each
// in run_deletions with actor $6 and reason $7. The filter skips runs holding a DEAD task unless $8.
const qDeleteRuns = `
WITH due AS (
    SELECT r.id FROM workflow_runs r
     WHERE $1::uuid[] IS NULL AND r.state = $3::text AND ` + settledOlder + `
       AND ($8::bool OR NOT EXISTS (SELECT 1 FROM task_runs d WHERE d.run_id = r.id AND d.state = 'DEAD'))
     ORDER BY r.finished_at
     LIMIT $5::bigint
       FOR UPDATE SKIP LOCKED
), cand AS (
    SELECT r.id FROM workflow_runs r WHERE r.id = ANY ($1::uuid[])
    UNION ALL
    SELECT id FROM due
), info AS (
    SELECT r.id AS run_id, r.workflow_name, r.workflow_version, r.state, r.created_at, r.finished_at,
           (SELECT count(*) FROM task_runs t WHERE t.run_id = r.id) AS task_runs,
           (SELECT count(*) FROM task_runs t WHERE t.run_id = r.id AND t.state = 'DEAD') AS dead_tasks
      FROM workflow_runs r WHERE r.id = ANY (ARRAY (SELECT id FROM cand))
), ` + deleteCandRowsUnlessDry + `, gone AS (
    DELETE FROM workflow_runs r WHERE r.id = ANY (ARRAY (SELECT id FROM cand)) AND NOT $4::bool RETURNING r.id
), audit AS (
    INSERT INTO run_deletions (run_id, workflow_name, workflow_version, state, run_created_at, run_finished_at, actor, reason, task_runs_deleted)
    SELECT i.run_id, i.workflow_name, i.workflow_version, i.state, i.created_at, i.finished_at, $6::text, $7::text, i.task_runs
      FROM info i JOIN gone g ON g.id = i.run_id
)
SELECT * FROM info ORDER BY finished_at, run_id`

// deleteBatch is the runs one transaction of a filtered DeleteRuns deletes.
const deleteBatch = PruneBatchDefault

// DeleteRuns deletes the settled runs req selects (see DeleteRunsRequest),
// with their task runs, outbox rows and history, and records each in
// run_deletions (no foreign key: the record outlives the rows). It returns
// what it deleted (or would delete, DryRun), oldest first.
//
// With IDs it is all or nothing, one transaction: an id that names no run
// is an error wrapping ErrNotFound naming it, a run that is not settled a
// *RunNotSettledError naming every such run, a run holding a DEAD task
// without IncludeDead a *RunHoldsDeadError; then nothing is deleted. With
// a filter it deletes in batches of PruneBatchDefault runs, one short
// transaction each (a dry run lists every match in one statement); an
// error mid-way leaves the batches before it deleted and says how many.
// Errors also: core.ErrBadReason for a reason core.ValidateReason refuses
// (not checked in a dry run), ErrBadPrune for a filter without a final
// state or with an age that is not positive.
func (s *Store) DeleteRuns(ctx context.Context, req DeleteRunsRequest) ([]RunDeletion, error) {
	if !req.DryRun {
		if err := core.ValidateReason(req.Reason); err != nil {
			return nil, fmt.Errorf("delete runs: %w", err)
		}
	}
	if len(req.IDs) > 0 {
		return s.deleteRunIDs(ctx, req)
	}
	if !req.State.Terminal() || req.OlderThan <= 0 {
		return nil, fmt.Errorf("delete runs: %w: want a final state (%s) and a positive age, got state %q, age %v",
			ErrBadPrune, core.JoinRunStates(core.FinalRunStates(), ", "), req.State, req.OlderThan)
	}
	var out []RunDeletion
	for {
		limit := deleteBatch
		if req.DryRun {
			limit = -1
		}
		batch, err := s.deleteRunsTx(ctx, req, limit)
		if err != nil {
			if len(out) > 0 {
				return out, fmt.Errorf("delete runs: %w (%d runs were deleted before it)", err, len(out))
			}
			return nil, fmt.Errorf("delete runs: %w", err)
		}
		out = append(out, batch...)
		if req.DryRun || len(batch) < limit {
			return out, nil
		}
	}
}

// deleteRunIDs is DeleteRuns of req.IDs: lock and check every run, then
// list (and unless a dry run delete) them, in one transaction.
func (s *Store) deleteRunIDs(ctx context.Context, req DeleteRunsRequest) ([]RunDeletion, error) {
	ids := distinctIDs(req.IDs)
	var out []RunDeletion
	err := s.inPruneTx(ctx, func(tx *sqlx.Tx) error {
		var rows []struct {
			RunID     uuid.UUID     `db:"run_id"`
			State     core.RunState `db:"state"`
			Settled   bool          `db:"settled"`
			DeadTasks int64         `db:"dead_tasks"`
		}
		if err := tx.SelectContext(ctx, &rows, qLockRunsForDelete, uuidArray(ids)); err != nil {
			return fmt.Errorf("lock runs: %w", err)
		}
		found := map[uuid.UUID]bool{}
		open := &RunNotSettledError{}
		dead := &RunHoldsDeadError{}
		for _, r := range rows {
			found[r.RunID] = true
			switch {
			case !r.Settled:
				open.Runs = append(open.Runs, RunDeletion{RunID: r.RunID, State: r.State})
			case r.DeadTasks > 0 && !req.IncludeDead:
				dead.Runs = append(dead.Runs, RunDeletion{RunID: r.RunID, State: r.State, DeadTasks: r.DeadTasks})
			}
		}
		var missing []string
		for _, id := range ids {
			if !found[id] {
				missing = append(missing, id.String())
			}
		}
		if len(missing) > 0 {
			return fmt.Errorf("run %s: %w", strings.Join(missing, ", "), ErrNotFound)
		}
		if len(open.Runs) > 0 {
			return open
		}
		if len(dead.Runs) > 0 {
			return dead
		}
		return tx.SelectContext(ctx, &out, qDeleteRuns, uuidArray(ids), nil, nil, req.DryRun, nil, req.Actor, req.Reason, req.IncludeDead)
	})
	if err != nil {
		return nil, fmt.Errorf("delete runs: %w", err)
	}
	slices.SortStableFunc(out, func(a, b RunDeletion) int { return cmpFinished(a.FinishedAt, b.FinishedAt) })
	return out, nil
}

// deleteRunsTx is one transaction of a filtered DeleteRuns: up to limit
// runs (-1: all).
func (s *Store) deleteRunsTx(ctx context.Context, req DeleteRunsRequest, limit int) ([]RunDeletion, error) {
	var lim any = limit
	if limit < 0 {
		lim = nil
	}
	var out []RunDeletion
	err := s.inPruneTx(ctx, func(tx *sqlx.Tx) error {
		return tx.SelectContext(ctx, &out, qDeleteRuns, nil, req.OlderThan.Milliseconds(), string(req.State), req.DryRun, lim, req.Actor, req.Reason, req.IncludeDead)
	})
	return out, err
}

// cmpFinished orders finish times, nil last.
func cmpFinished(a, b *time.Time) int {
	switch {
	case a == nil && b == nil:
		return 0
	case a == nil:
		return 1
	case b == nil:
		return -1
	}
	return a.Compare(*b)
}
