package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/flowforge/flowforge/core"
)

// ChildRunsShown bounds the child runs GetRun reads for a run
// (Run.Children); the total is counted whatever it is (Run.ChildrenTotal).
const ChildRunsShown = 50

// ChildRun is a run a `workflow:` task started (core.KindWorkflow), as its
// parent shows it: Run.Children, TaskDetail.ChildRun.
type ChildRun struct {
	RunID uuid.UUID `db:"run_id" json:"run_id"`
	// TaskRunID is the task run that started it and Task that task's
	// name, in the parent run.
	TaskRunID uuid.UUID `db:"task_run_id" json:"task_run_id"`
	Task      string    `db:"task_name" json:"task"`
	// Workflow is the child's workflow, State its state now.
	Workflow  string        `db:"workflow_name" json:"workflow"`
	State     core.RunState `db:"state" json:"state"`
	CreatedAt time.Time     `db:"created_at" json:"created_at"`
}

// qChildrenOf reads the oldest $2 child runs of run $1 and how many there
// are, through workflow_runs_parent (the partial index of the runs with a
// parent), each with its parent task's name (a primary-key probe).
const qChildrenOf = `
SELECT c.id AS run_id, c.parent_task_run_id AS task_run_id, coalesce(t.task_name, '') AS task_name,
       c.workflow_name, c.state, c.created_at, count(*) OVER () AS total
  FROM workflow_runs c LEFT JOIN task_runs t ON t.id = c.parent_task_run_id
 WHERE c.parent_run_id = $1::uuid AND c.parent_task_run_id IS NOT NULL
 ORDER BY c.created_at, c.id
 LIMIT $2::int`

// childrenOf returns the oldest ChildRunsShown child runs of run id and
// their total.
func (s *Store) childrenOf(ctx context.Context, id uuid.UUID) ([]ChildRun, int, error) {
	var rows []struct {
		ChildRun
		Total int `db:"total"`
	}
	if err := s.db.SelectContext(ctx, &rows, qChildrenOf, s.args(id, ChildRunsShown)...); err != nil {
		return nil, 0, fmt.Errorf("read child runs: %w", err)
	}
	var out []ChildRun
	total := 0
	for _, r := range rows {
		out = append(out, r.ChildRun)
		total = r.Total
	}
	return out, total, nil
}

// qChildRun reads the workflow, state and creation time of run $1 (by its
// primary key).
const qChildRun = `SELECT c.workflow_name, c.state, c.created_at FROM workflow_runs c WHERE c.id = $1`

// childRun returns the child run id that task t started, nil when that
// run no longer exists.
func (s *Store) childRun(ctx context.Context, id uuid.UUID, t TaskRun) (*ChildRun, error) {
	c := ChildRun{RunID: id, TaskRunID: t.ID, Task: t.Name}
	err := s.db.GetContext(ctx, &c, qChildRun, id)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read child run %s: %w", id, err)
	}
	return &c, nil
}

// HeldText is what a held task t holds, in core's words (core.SleepingText
// and its kin), for `run show`, `task show` and the dashboard's task
// screen: a RUNNING sleep's due time, a RUNNING wait's event, key and
// timeout, the event that completed a wait or the timeout that skipped it,
// a workflow task's child run; "" for any other task. child is the task's
// child run as read (nil when it was not read), gone that it no longer
// exists (deleted or pruned).
func (t TaskRun) HeldText(child *ChildRun, gone bool) string {
	if t.Kind == nil {
		return ""
	}
	running := t.State == core.TaskRunning && t.DueAt != nil
	switch core.TaskKind(*t.Kind) {
	case core.KindSleep:
		if running {
			return core.SleepingText(*t.DueAt, core.SecondsLeft(t.DueSeconds))
		}
	case core.KindWait:
		switch {
		case t.WaitEvent == nil:
		case running:
			return core.WaitingText(*t.WaitEvent, deref(t.WaitKey), core.SecondsLeft(t.DueSeconds), deref(t.OnTimeout))
		case t.CompletedByEvent != nil:
			return core.CompletedByText(*t.CompletedByEvent)
		case t.State == core.TaskSkipped:
			return core.TimedOutText(*t.WaitEvent, deref(t.WaitKey))
		}
	case core.KindWorkflow:
		if t.ChildRunID == nil {
			return ""
		}
		if child == nil {
			return core.ChildRunText(t.ChildRunID.String(), "", "", gone)
		}
		return core.ChildRunText(t.ChildRunID.String(), child.Workflow, child.State, false)
	}
	return ""
}

// deref is *s, or "" for nil.
func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
