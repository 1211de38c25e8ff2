package client

import (
	"context"
	"fmt"

	"github.com/google/uuid"

	"github.com/flowforge/flowforge/core"
	"github.com/flowforge/flowforge/core/store"
)

// TaskLogPage is a page of a task run's log (`ffctl task logs`, GET
// /v1/tasks/{id}/logs): the task run, its state when the page was read
// (read before the lines: a final state means every attempt has ended)
// and its lines, oldest first (by attempt, then seq).
type TaskLogPage struct {
	TaskRunID uuid.UUID           `json:"task_run_id"`
	State     core.TaskState      `json:"state"`
	Lines     []store.TaskLogLine `json:"lines"`
}

// TaskLogQuery selects a page of TaskLogs: the lines of attempt Attempt
// (0: every attempt) after the line (AfterAttempt, AfterSeq) (zeros: from
// the first), at most Limit (0: store.TaskLogPageDefault).
type TaskLogQuery struct {
	Attempt, AfterAttempt, AfterSeq, Limit int
}

// TaskLogs returns a page of the log of the task run id names (a whole
// UUID or a unique prefix). A task run that logged nothing (or whose
// worker runs with task logs off) has no lines. Errors: those of
// ResolveID (the same as Task's); ErrInvalidInput for a negative
// Attempt or Limit; the database's.
func (c *Client) TaskLogs(ctx context.Context, id string, q TaskLogQuery) (TaskLogPage, error) {
	if q.Attempt < 0 || q.Limit < 0 {
		return TaskLogPage{}, fmt.Errorf("%w: attempt %d and limit %d must not be negative", ErrInvalidInput, q.Attempt, q.Limit)
	}
	return lookup(ctx, c, store.IDTask, id, func(tid uuid.UUID) (TaskLogPage, error) {
		state, _, err := c.s.TaskStateOf(ctx, tid)
		if err != nil {
			return TaskLogPage{}, err
		}
		lines, err := c.s.TaskLogs(ctx, store.TaskLogQuery{TaskRunID: tid, Attempt: q.Attempt,
			AfterAttempt: q.AfterAttempt, AfterSeq: q.AfterSeq, Limit: q.Limit})
		if err != nil {
			return TaskLogPage{}, err
		}
		if lines == nil {
			lines = []store.TaskLogLine{}
		}
		return TaskLogPage{TaskRunID: tid, State: state, Lines: lines}, nil
	})
}
