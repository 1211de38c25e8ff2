package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/flowforge/flowforge/core"
)

// Pause is a paused workflow: its row in workflow_pauses.
type Pause struct {
	Workflow string         `db:"workflow_name" json:"workflow"`
	Mode     core.PauseMode `db:"mode" json:"mode"`
	// Actor and Reason are those of the latest pause or re-pause.
	Actor  string `db:"actor" json:"by"`
	Reason string `db:"reason" json:"reason"`
	// Since is when the pause began (a re-pause keeps it); UpdatedAt when
	// it was last re-paused with another mode or reason (database clock).
	Since     time.Time `db:"paused_at" json:"since"`
	UpdatedAt time.Time `db:"updated_at" json:"updated_at"`
	// Dropped counts the runs that triggers did not create (mode drop).
	Dropped int64 `db:"dropped" json:"dropped"`
}

// PauseEvent is one row of the pause audit (workflow_pause_events).
type PauseEvent struct {
	ID       int64     `db:"id" json:"id"`
	Workflow string    `db:"workflow_name" json:"workflow"`
	At       time.Time `db:"at" json:"at"`
	// Action is "pause" (a pause or a re-pause) or "resume".
	Action string         `db:"action" json:"action"`
	Mode   core.PauseMode `db:"mode" json:"mode"`
	Actor  string         `db:"actor" json:"by"`
	Reason string         `db:"reason" json:"reason"`
	// Dropped is set on a resume: the runs dropped during the pause.
	Dropped *int64 `db:"dropped" json:"dropped,omitempty"`
}

// PauseResult says what PauseWorkflow did.
type PauseResult struct {
	// Pause is the workflow's pause as it stands after the call.
	Pause Pause
	// Changed is false when the workflow was already paused with the same
	// mode and reason (nothing was written, nothing audited).
	Changed bool
	// Repaused is true when an existing pause was changed (mode or
	// reason); Since and Dropped are kept.
	Repaused bool
}

// qPause pauses workflow $1 (every version) with mode $2, actor $3 and
// reason $4 in one statement: it inserts the pause row, or updates the
// mode, reason and actor of an existing one whose mode or reason differ,
// and audits what it wrote. Nothing is written for a name no workflow has
// (known false) or for an identical re-pause.
const qPause = `
WITH wf AS (
    SELECT EXISTS (SELECT 1 FROM workflows WHERE name = $1::text) AS known
), up AS (
    INSERT INTO workflow_pauses AS p (workflow_name, mode, actor, reason)
    SELECT $1::text, $2::text, $3::text, $4::text FROM wf WHERE wf.known
    ON CONFLICT (workflow_name) DO UPDATE
       SET mode = EXCLUDED.mode, reason = EXCLUDED.reason, actor = EXCLUDED.actor, updated_at = clock_timestamp()
     WHERE (p.mode, p.reason) IS DISTINCT FROM (EXCLUDED.mode, EXCLUDED.reason)
    RETURNING p.workflow_name, p.mode, (p.xmax = 0) AS inserted
), ev AS (
    INSERT INTO workflow_pause_events (workflow_name, action, mode, actor, reason)
    SELECT workflow_name, 'pause', mode, $3::text, $4::text FROM up
)
SELECT wf.known, EXISTS (SELECT 1 FROM up) AS changed, coalesce((SELECT NOT inserted FROM up), false) AS repaused FROM wf`

// qGetPause reads one workflow's pause.
const qGetPause = `
SELECT workflow_name, mode, actor, reason, paused_at, updated_at, dropped
  FROM workflow_pauses WHERE workflow_name = $1`

// PauseWorkflow pauses the workflow called name (every version) with mode,
// audited with actor and reason. While it is paused no task of it is
// claimed (ClaimMany refuses its rows), its outbox rows stay unpublished
// (LockOutbox skips them), Redispatch leaves its READY tasks alone, and
// triggers follow mode (see core.PauseMode). Tasks already RUNNING finish. A
// claim that began before the pause committed (one statement) may still
// win: that attempt counts as already running; every claim that begins
// after it refuses. Pausing again with the same mode and reason changes
// nothing (Changed false); with another mode or reason it updates the
// pause, keeping Since and Dropped, and audits the change. Errors: one
// wrapping core.ErrBadReason for a reason core.ValidateReason refuses, one
// wrapping core.ErrBadPauseMode for a mode other than queue or drop, one
// wrapping ErrNotFound (naming the workflow) for an unknown name.
func (s *Store) PauseWorkflow(ctx context.Context, name string, mode core.PauseMode, actor, reason string) (PauseResult, error) {
	if err := core.ValidateReason(reason); err != nil {
		return PauseResult{}, fmt.Errorf("pause workflow %q: %w", name, err)
	}
	if _, err := core.ParsePauseMode(string(mode)); err != nil || mode == "" {
		return PauseResult{}, fmt.Errorf("pause workflow %q: %w, not %q", name, core.ErrBadPauseMode, mode)
	}
	var res PauseResult
	err := s.inTx(ctx, func(tx *sqlx.Tx) error {
		var r struct {
			Known    bool `db:"known"`
			Changed  bool `db:"changed"`
			Repaused bool `db:"repaused"`
		}
		if err := tx.GetContext(ctx, &r, qPause, name, string(mode), actor, reason); err != nil {
			return fmt.Errorf("pause workflow %q: %w", name, err)
		}
		if !r.Known {
			return fmt.Errorf("pause workflow %q: %w: no workflow is called %q", name, ErrNotFound, name)
		}
		res.Changed, res.Repaused = r.Changed, r.Repaused
		if err := tx.GetContext(ctx, &res.Pause, qGetPause, name); err != nil {
			return fmt.Errorf("pause workflow %q: read the pause back: %w", name, err)
		}
		return nil
	})
	return res, err
}

// ResumeResult says what ResumeWorkflow did.
type ResumeResult struct {
	// Resumed is false when the workflow was not paused (nothing written).
	Resumed bool
	// Pause is the pause that ended (zero when Resumed is false).
	Pause Pause
	// ResumedAt is when it ended (database clock).
	ResumedAt time.Time
	// Redispatched counts the READY tasks whose dispatch had gone out (and
	// been handed back, or never claimed) and which got a new outbox row.
	Redispatched int
}

// qResume ends the pause of workflow $1 in one statement: it deletes the
// pause row, audits the resume (actor $2, reason $3, the mode and the drops
// of the pause that ended), and re-dispatches the backlog whose dispatch
// already went out: a new outbox row (same fencing token, next dispatch
// number) for each READY task of the workflow's runs that has no pending
// row at its token, as Redispatch does without its age bound. Pending rows
// need nothing: the publisher sends them once the pause is gone. The
// redispatch is tied to the delete (the name comes from gone): nothing is
// re-sent by a resume that found no pause. It walks the READY tasks
// (task_runs_ready), not the workflow's history. Every READY task of the
// workflow counts as ready from the resume (fresh: ready_at = now()): the
// time a paused task waited is not time it waited for a worker, so neither
// the redispatch nor a worker's unknown-handler grace (ReadyFor) counts
// it. It waits for the task rows a claim holds (locked in id order, as
// claims lock them, before anything is written): a claim that refused a
// task because of the pause has then settled, and its task is re-sent
// with its columns as locked (a task whose claim won is no longer READY
// and is left alone).
const qResume = `
WITH gone AS (
    DELETE FROM workflow_pauses WHERE workflow_name = $1::text
 RETURNING workflow_name, mode, actor, reason, paused_at, updated_at, dropped
), ev AS (
    INSERT INTO workflow_pause_events (workflow_name, action, mode, actor, reason, dropped)
    SELECT workflow_name, 'resume', mode, $2::text, $3::text, dropped FROM gone
), locked AS (
    SELECT t.id, t.run_id, t.task_name, t.handler, t.fencing_token, t.attempt
      FROM task_runs t JOIN workflow_runs r ON r.id = t.run_id
     WHERE t.state = 'READY' AND t.flow_wait IS NULL AND r.workflow_name = (SELECT workflow_name FROM gone)
     ORDER BY t.id
       FOR UPDATE OF t
), fresh AS (
    UPDATE task_runs t SET ready_at = now() FROM locked WHERE t.id = locked.id
), backlog AS (
    SELECT t.id, t.run_id, t.task_name, t.handler, t.fencing_token, t.attempt,
           (SELECT max(o.dispatch) FROM outbox o
             WHERE o.task_run_id = t.id AND o.fencing_token_snapshot = t.fencing_token) AS last_dispatch
      FROM locked t
     WHERE NOT EXISTS (SELECT 1 FROM outbox o
                        WHERE o.task_run_id = t.id AND o.fencing_token_snapshot = t.fencing_token
                          AND o.published_at IS NULL)
), ins AS (
    INSERT INTO outbox (task_run_id, fencing_token_snapshot, dispatch, payload)
    SELECT id, fencing_token, coalesce(last_dispatch, 0) + 1, ` + dispatchPayloadSQL + `
      FROM backlog
    ON CONFLICT (task_run_id, fencing_token_snapshot, dispatch) DO NOTHING
 RETURNING task_run_id, dispatch
), tev AS (
    INSERT INTO task_events (task_run_id, run_id, from_state, to_state, attempt, fencing_token, actor, reason)
    SELECT b.id, b.run_id, 'READY', 'READY', b.attempt, b.fencing_token, $2::text,
           'redispatched (dispatch ' || i.dispatch || '): its workflow was resumed'
      FROM backlog b JOIN ins i ON i.task_run_id = b.id
)
SELECT gone.*, (SELECT count(*) FROM ins) AS redispatched, clock_timestamp() AS resumed_at FROM gone`

// ResumeWorkflow ends the pause of the workflow called name, audited with
// actor and reason ("" allowed: the resume is recorded without one), and
// in the same transaction re-dispatches its READY tasks whose dispatch had
// already gone out (see qResume), then wakes the publishers, so the
// backlog goes out at once rather than at the next Redispatch, and the
// schedulers (AnyRun), whose admission passed over the workflow's
// flow-control waiters during the pause (notPausedSQL). Resuming a
// workflow that is not paused is a no-op: Resumed false, nil error. Errors:
// one wrapping core.ErrBadReason for a non-empty reason
// core.ValidateReason refuses; one wrapping ErrNotFound (naming the
// workflow) for a name no workflow has.
func (s *Store) ResumeWorkflow(ctx context.Context, name, actor, reason string) (ResumeResult, error) {
	if reason != "" {
		if err := core.ValidateReason(reason); err != nil {
			return ResumeResult{}, fmt.Errorf("resume workflow %q: %w", name, err)
		}
	}
	var res ResumeResult
	err := s.inTx(ctx, func(tx *sqlx.Tx) error {
		var r struct {
			Pause
			Redispatched int       `db:"redispatched"`
			ResumedAt    time.Time `db:"resumed_at"`
		}
		err := tx.GetContext(ctx, &r, qResume, name, actor, reason)
		if errors.Is(err, sql.ErrNoRows) {
			return workflowKnown(ctx, tx, "resume", name)
		}
		if err != nil {
			return fmt.Errorf("resume workflow %q: %w", name, err)
		}
		res = ResumeResult{Resumed: true, Pause: r.Pause, Redispatched: r.Redispatched, ResumedAt: r.ResumedAt}
		// The schedulers too (a sweep): the admission passed over the
		// workflow's flow-control waiters while it was paused.
		return notifyAll(ctx, tx, outboxNotice(), notice{TasksChannel, AnyRun})
	})
	return res, err
}

// workflowKnown returns nil when a workflow is called name, else an error
// wrapping ErrNotFound for the operation what.
func workflowKnown(ctx context.Context, q sqlx.QueryerContext, what, name string) error {
	var known bool
	if err := sqlx.GetContext(ctx, q, &known, `SELECT EXISTS (SELECT 1 FROM workflows WHERE name = $1)`, name); err != nil {
		return fmt.Errorf("%s workflow %q: %w", what, name, err)
	}
	if !known {
		return fmt.Errorf("%s workflow %q: %w: no workflow is called %q", what, name, ErrNotFound, name)
	}
	return nil
}

// WorkflowPause returns the pause of the workflow called name; ok is false
// when it is not paused (or no workflow is called name).
func (s *Store) WorkflowPause(ctx context.Context, name string) (Pause, bool, error) {
	var p Pause
	err := s.db.GetContext(ctx, &p, qGetPause, name)
	if errors.Is(err, sql.ErrNoRows) {
		return Pause{}, false, nil
	}
	if err != nil {
		return Pause{}, false, fmt.Errorf("read the pause of workflow %q: %w", name, err)
	}
	return p, true, nil
}

// WorkflowPauses returns every paused workflow's pause, by name.
func (s *Store) WorkflowPauses(ctx context.Context) ([]Pause, error) {
	var out []Pause
	err := s.db.SelectContext(ctx, &out, `
SELECT workflow_name, mode, actor, reason, paused_at, updated_at, dropped
  FROM workflow_pauses ORDER BY workflow_name`)
	if err != nil {
		return nil, fmt.Errorf("list workflow pauses: %w", err)
	}
	return out, nil
}

// PauseEvents returns the newest limit (0 means 50) pause audit rows of the
// workflow called name, newest first.
func (s *Store) PauseEvents(ctx context.Context, name string, limit int) ([]PauseEvent, error) {
	if limit <= 0 {
		limit = 50
	}
	var out []PauseEvent
	err := s.db.SelectContext(ctx, &out, `
SELECT id, workflow_name, at, action, mode, actor, reason, dropped
  FROM workflow_pause_events WHERE workflow_name = $1 ORDER BY id DESC LIMIT $2`, name, limit)
	if err != nil {
		return nil, fmt.Errorf("list pause events of workflow %q: %w", name, err)
	}
	return out, nil
}
