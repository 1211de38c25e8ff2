package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/flowforge/flowforge/core"
)

// ErrNothingToRollBack is returned (wrapped, naming the versions) by
// RollbackWorkflow when the version asked for is the newest, or its
// definition is the newest's: a rollback would change nothing.
var ErrNothingToRollBack = errors.New("nothing to roll back")

// WorkflowEvent is one row of the workflow audit (workflow_events): an
// action that made a new version of a workflow other than an apply of its
// file. As JSON: {"workflow", "at", "action", "version", "from_version",
// "to_version", "by", "reason"}.
type WorkflowEvent struct {
	ID       int64     `db:"id" json:"-"`
	Workflow string    `db:"workflow_name" json:"workflow"`
	At       time.Time `db:"at" json:"at"`
	// Action is "rollback".
	Action string `db:"action" json:"action"`
	// Version is the version the action created; FromVersion the newest
	// before it; ToVersion the version whose definition it copied.
	Version     int    `db:"version" json:"version"`
	FromVersion int    `db:"from_version" json:"from_version"`
	ToVersion   int    `db:"to_version" json:"to_version"`
	Actor       string `db:"actor" json:"by"`
	Reason      string `db:"reason" json:"reason"`
}

const qInsertWorkflowEvent = `
INSERT INTO workflow_events (workflow_name, action, version, from_version, to_version, actor, reason)
VALUES ($1, 'rollback', $2, $3, $4, $5, $6)
RETURNING id, workflow_name, at, action, version, from_version, to_version, actor, reason`

const qWorkflowEvents = `
SELECT id, workflow_name, at, action, version, from_version, to_version, actor, reason
  FROM workflow_events WHERE workflow_name = $1 ORDER BY id`

// RollbackWorkflow makes version `to` of the named workflow's definition the
// newest again: it stores it, byte for byte as jsonb (tasks, params, retry,
// timeouts, idempotency settings: all a version holds), as a new version
// newest+1, and audits the rollback (actor, reason, the version it was
// rolled back from and to) in the same transaction. Runs keep their
// versions; schedules are not touched. It holds the lock an apply holds
// (lockWorkflowName), so a rollback racing an apply of the same workflow
// waits for it and the two take consecutive numbers. It returns the new
// version and its audit row. Errors: one wrapping core.ErrBadReason for a
// reason core.ValidateReason refuses; one wrapping ErrNotFound for an
// unknown workflow or a version it does not have (to < 1 included);
// ErrNothingToRollBack when `to` is the newest or its definition is the
// newest's; core.ErrBadWorkflow when the old definition no longer
// validates; ErrSchemaOutdated on a database without workflow_events
// (schema < 12); the database's. On any error nothing is written.
func (s *Store) RollbackWorkflow(ctx context.Context, name string, to int, actor, reason string) (Workflow, WorkflowEvent, error) {
	if err := core.ValidateReason(reason); err != nil {
		return Workflow{}, WorkflowEvent{}, fmt.Errorf("roll back workflow %q: %w", name, err)
	}
	var (
		wf Workflow
		ev WorkflowEvent
	)
	err := s.inTx(ctx, func(tx *sqlx.Tx) error {
		var err error
		wf, ev, err = rollbackTx(ctx, tx, name, to, actor, reason)
		return err
	})
	s.defs.forget(name) // this process triggers the new version without a retry
	if err != nil {
		return Workflow{}, WorkflowEvent{}, err
	}
	return wf, ev, wf.decode()
}

// rollbackTx is RollbackWorkflow's work inside tx.
func rollbackTx(ctx context.Context, tx *sqlx.Tx, name string, to int, actor, reason string) (Workflow, WorkflowEvent, error) {
	if err := lockWorkflowName(ctx, tx, name); err != nil {
		return Workflow{}, WorkflowEvent{}, err
	}
	cur, err := getWorkflow(ctx, tx, name, 0)
	if err != nil {
		return Workflow{}, WorkflowEvent{}, fmt.Errorf("roll back: %w", err)
	}
	switch {
	case to < 1 || to > cur.Version:
		return Workflow{}, WorkflowEvent{}, fmt.Errorf("roll back workflow %q: %w: it has no version %d (its versions are 1 to %d)", name, ErrNotFound, to, cur.Version)
	case to == cur.Version:
		return Workflow{}, WorkflowEvent{}, fmt.Errorf("roll back workflow %q: %w: version %d is already the newest", name, ErrNothingToRollBack, to)
	}
	old, err := getWorkflow(ctx, tx, name, to)
	if err != nil {
		return Workflow{}, WorkflowEvent{}, fmt.Errorf("roll back: %w", err)
	}
	if err := old.Definition.Validate(); err != nil {
		return Workflow{}, WorkflowEvent{}, fmt.Errorf("roll back workflow %q to version %d: its definition no longer validates: %w", name, to, err)
	}
	var same bool
	if err := tx.GetContext(ctx, &same, `SELECT $1::jsonb = $2::jsonb`, cur.RawDef, old.RawDef); err != nil {
		return Workflow{}, WorkflowEvent{}, fmt.Errorf("roll back workflow %q: compare versions: %w", name, err)
	}
	if same {
		return Workflow{}, WorkflowEvent{}, fmt.Errorf("roll back workflow %q: %w: version %d's definition is already the newest's (version %d)", name, ErrNothingToRollBack, to, cur.Version)
	}
	if err := checkChildWorkflows(ctx, tx, &old.Definition); err != nil {
		return Workflow{}, WorkflowEvent{}, fmt.Errorf("roll back workflow %q to version %d: %w", name, to, err)
	}
	var wf Workflow
	if err := tx.GetContext(ctx, &wf, qInsertWorkflow, name, cur.Version+1, old.RawDef); err != nil {
		return Workflow{}, WorkflowEvent{}, fmt.Errorf("roll back workflow %q: insert version %d: %w", name, cur.Version+1, err)
	}
	var ev WorkflowEvent
	if err := tx.GetContext(ctx, &ev, qInsertWorkflowEvent, name, wf.Version, cur.Version, to, actor, reason); err != nil {
		if pgCode(err) == "42P01" { // undefined_table: schema older than 12
			return Workflow{}, WorkflowEvent{}, fmt.Errorf("roll back workflow %q: %w: the database has no workflow_events (schema 12): run `ffctl migrate`", name, ErrSchemaOutdated)
		}
		return Workflow{}, WorkflowEvent{}, fmt.Errorf("roll back workflow %q: audit: %w", name, err)
	}
	return wf, ev, nil
}

// WorkflowEvents returns the audit of the named workflow's versions
// (rollbacks), oldest first; none (nil) for a workflow without any, and on
// a database older than workflow_events (schema < 12). Errors: the
// database's.
func (s *Store) WorkflowEvents(ctx context.Context, name string) ([]WorkflowEvent, error) {
	var out []WorkflowEvent
	err := s.db.SelectContext(ctx, &out, qWorkflowEvents, name)
	switch {
	case pgCode(err) == "42P01":
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("read the events of workflow %q: %w", name, err)
	}
	return out, nil
}
