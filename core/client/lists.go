package client

import (
	"context"
	"time"

	"github.com/flowforge/flowforge/core"
	"github.com/flowforge/flowforge/core/store"
)

// TaskRun is a task run as lists show it, without its history
// (store.TaskRun): the objects of `ffctl dead list -o json`.
type TaskRun = store.TaskRun

// WorkflowSummary is one workflow's newest version as `ffctl workflow
// list -o json` shows it (store.WorkflowSummary: name, version, tasks,
// created_at, runs, paused).
type WorkflowSummary = store.WorkflowSummary

// DeadFilter selects the DEAD tasks ListDead returns, as `ffctl dead
// list`'s flags do. Zero values mean "any".
type DeadFilter struct {
	// Workflow keeps the tasks of this workflow.
	Workflow string
	// Run keeps the tasks of the run this id (or unique prefix) names.
	Run string
	// OlderThan keeps the tasks dead for at least this long (database
	// clock).
	OlderThan time.Duration
	// Limit is at most ListLimitMax; 0 means 100.
	Limit int
}

// ListDead returns the DEAD tasks f selects, most recent death first,
// each with its workflow's name. Errors: ErrInvalidInput for a bad
// workflow name, a negative age, a Limit out of 0..ListLimitMax, or a run
// id ResolveID refuses; ErrNotFound for a run id that names no run; the
// database's.
func (c *Client) ListDead(ctx context.Context, f DeadFilter) ([]TaskRun, error) {
	if err := checkLimit("dead list", f.Limit); err != nil {
		return nil, err
	}
	q := store.DeadQuery{Workflow: f.Workflow, OlderThan: f.OlderThan, Limit: f.Limit}
	if f.Workflow != "" {
		if err := core.ValidateName("workflow", f.Workflow); err != nil {
			return nil, mapError(err)
		}
	}
	if f.OlderThan < 0 {
		return nil, invalid("dead list older than %v: want a positive age, or none", f.OlderThan)
	}
	if f.Run != "" {
		id, err := c.ResolveID(ctx, store.IDRun, f.Run)
		if err != nil {
			return nil, err
		}
		q.Run = id
	}
	tasks, err := c.s.ListDeadTasks(ctx, q)
	if tasks == nil && err == nil {
		tasks = []TaskRun{}
	}
	return tasks, mapError(err)
}

// ListWorkflows returns the newest version of every workflow, by name, at
// most limit (0 means 100; at most ListLimitMax), each with its pause.
// Errors: ErrInvalidInput for a limit out of bounds; the database's.
func (c *Client) ListWorkflows(ctx context.Context, limit int) ([]WorkflowSummary, error) {
	if err := checkLimit("workflow list", limit); err != nil {
		return nil, err
	}
	wfs, err := c.s.ListWorkflows(ctx, limit)
	if wfs == nil && err == nil {
		wfs = []WorkflowSummary{}
	}
	return wfs, mapError(err)
}

// checkLimit refuses a list's limit out of 0..ListLimitMax; what names
// the list.
func checkLimit(what string, limit int) error {
	if limit < 0 || limit > ListLimitMax {
		return invalid("%s limit %d: want 1 to %d (0: the default)", what, limit, ListLimitMax)
	}
	return nil
}
