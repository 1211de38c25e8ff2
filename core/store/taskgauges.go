package store

import (
	"context"
	"fmt"
	"time"
)

// TaskCountCap bounds each count TaskGauges reads: a scrape reads at most
// this many index entries per series, whatever the backlog.
const TaskCountCap = 100_000

// TaskGauges are the tasks in each active state and the waiting ones by
// kind, each count at most TaskCountCap, and the age of the oldest READY
// task.
type TaskGauges struct {
	Pending  int64 `db:"pending"`
	Ready    int64 `db:"ready"` // waiting for flow control included
	Running  int64 `db:"running"`
	Retrying int64 `db:"retrying"`
	// WaitConcurrency and WaitRate are READY tasks waiting for their
	// flow-control admission (flow_wait).
	WaitConcurrency int64 `db:"wait_concurrency"`
	WaitRate        int64 `db:"wait_rate"`
	// Sleeping, Waiting and Children are RUNNING tasks the scheduler
	// holds: a sleep, a wait_for, a child run (kind workflow).
	Sleeping int64 `db:"sleeping"`
	Waiting  int64 `db:"waiting"`
	Children int64 `db:"children"`
	// OldestReadySeconds is the age of the oldest READY task (database
	// clock), 0 when none is READY.
	OldestReadySeconds float64 `db:"oldest_ready_seconds"`
	// WorkersSeen counts the worker processes (role worker or all) whose
	// presence heartbeat (RecordPresence) is more recent than the within
	// of TaskGauges: 0 means no worker is up.
	WorkersSeen int64 `db:"workers_seen"`
}

// qTaskGauges counts the active tasks, each count through the partial
// index of its state and at most $1 entries (LIMIT under the count):
// PENDING task_runs_pending, READY task_runs_ready, RUNNING
// task_runs_running_lease, RETRYING task_runs_retry_due, the flow-control
// waits task_runs_waiting_concurrency and task_runs_waiting_rate, the held
// kinds task_runs_held_due (sleep), task_runs_waiting (wait) and
// task_runs_held_child (workflow); the oldest READY is the first entry of
// task_runs_ready; the workers seen ($2 ms) are read through
// workers_last_seen. The states are literals on purpose (unlike the hot
// path's, see claimFence): each count must be read through its state's
// partial index, whose size follows the live work, never the history. No
// terminal state is counted: SUCCEEDED, DEAD and the others grow for ever.
// TestTaskGaugesReadOnlyThePartialIndexes checks the plan.
const qTaskGauges = `
SELECT (SELECT count(*) FROM (SELECT 1 FROM task_runs WHERE state = 'PENDING' LIMIT $1) s) AS pending,
       (SELECT count(*) FROM (SELECT 1 FROM task_runs WHERE state = 'READY' LIMIT $1) s) AS ready,
       (SELECT count(*) FROM (SELECT 1 FROM task_runs WHERE state = 'RUNNING' LIMIT $1) s) AS running,
       (SELECT count(*) FROM (SELECT 1 FROM task_runs WHERE state = 'RETRYING' LIMIT $1) s) AS retrying,
       (SELECT count(*) FROM (SELECT 1 FROM task_runs WHERE state = 'READY' AND flow_wait = 'concurrency' LIMIT $1) s) AS wait_concurrency,
       (SELECT count(*) FROM (SELECT 1 FROM task_runs WHERE state = 'READY' AND flow_wait = 'rate' LIMIT $1) s) AS wait_rate,
       (SELECT count(*) FROM (SELECT 1 FROM task_runs WHERE state = 'RUNNING' AND due_at IS NOT NULL AND kind = 'sleep' LIMIT $1) s) AS sleeping,
       (SELECT count(*) FROM (SELECT 1 FROM task_runs WHERE state = 'RUNNING' AND wait_event IS NOT NULL LIMIT $1) s) AS waiting,
       (SELECT count(*) FROM (SELECT 1 FROM task_runs WHERE state = 'RUNNING' AND child_run_id IS NOT NULL LIMIT $1) s) AS children,
       coalesce((SELECT extract(epoch FROM now() - ready_at)::float8 FROM task_runs
                  WHERE state = 'READY' AND ready_at IS NOT NULL ORDER BY ready_at LIMIT 1), 0) AS oldest_ready_seconds,
       (SELECT count(*) FROM workers w
         WHERE w.last_seen_at > now() - $2::bigint * interval '1 millisecond' AND w.role IN ('worker', 'all')) AS workers_seen`

// TaskGauges reads the task gauges (qTaskGauges): a bounded cost whatever
// the history, at most TaskCountCap index entries per count; a worker is
// seen when its presence is more recent than within. The error is the
// query's.
func (s *Store) TaskGauges(ctx context.Context, within time.Duration) (TaskGauges, error) {
	var g TaskGauges
	if err := s.db.GetContext(ctx, &g, qTaskGauges, TaskCountCap, within.Milliseconds()); err != nil {
		return TaskGauges{}, fmt.Errorf("task gauges: %w", err)
	}
	return g, nil
}
