package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/flowforge/flowforge/core"
)

// Run is a workflow run as shown to operators. JSON field names are a
// stable interface (README documents them).
type Run struct {
	ID                uuid.UUID     `db:"id" json:"id"`
	Workflow          string        `db:"workflow_name" json:"workflow"`
	WorkflowVersion   int           `db:"workflow_version" json:"workflow_version"`
	State             core.RunState `db:"state" json:"state"`
	Params            JSON          `db:"params" json:"params"`
	IdempotencyKey    *string       `db:"idempotency_key" json:"idempotency_key"`
	FailFast          bool          `db:"fail_fast" json:"fail_fast"`
	CancelRequestedAt *time.Time    `db:"cancel_requested_at" json:"cancel_requested_at"`
	CreatedAt         time.Time     `db:"created_at" json:"created_at"`
	StartedAt         *time.Time    `db:"started_at" json:"started_at"`
	FinishedAt        *time.Time    `db:"finished_at" json:"finished_at"`
	TasksTotal        int           `db:"tasks_total" json:"tasks_total"`
	// TasksDone counts the tasks in a terminal state (SUCCEEDED, DEAD,
	// CANCELLED, UPSTREAM_FAILED, SKIPPED): every task of a settled run.
	TasksDone int       `db:"tasks_done" json:"tasks_done"`
	Tasks     []TaskRun `db:"-" json:"tasks,omitempty"`
	// Paused is the pause of the run's workflow while it is paused (its
	// tasks wait, undispatched); nil otherwise. GetRun sets it, ListRuns
	// does not.
	Paused *Pause `db:"-" json:"paused,omitempty"`
	// RerunOf is the run this one repeats (Store.Rerun), with who asked,
	// why and when; nil for a run that is not a rerun.
	RerunOf *RerunLink `db:"rerun_of" json:"rerun_of"`
	// Reruns are the newest reruns of this run (at most RerunsShown, newest
	// first) and RerunsTotal counts them all. GetRun sets them, ListRuns
	// does not.
	Reruns      []RerunLink `db:"-" json:"reruns,omitempty"`
	RerunsTotal int         `db:"-" json:"reruns_total,omitempty"`
}

// Ended reports whether the run has ended (core.RunEnded): its state is
// terminal and the scheduler has settled it, which it records by setting
// FinishedAt.
func (r Run) Ended() bool { return core.RunEnded(r.State, r.FinishedAt != nil) }

// TaskRun is one task of a run as shown to operators.
type TaskRun struct {
	ID             uuid.UUID      `db:"id" json:"id"`
	RunID          uuid.UUID      `db:"run_id" json:"run_id"`
	Name           string         `db:"task_name" json:"name"`
	Handler        string         `db:"handler" json:"handler"`
	State          core.TaskState `db:"state" json:"state"`
	Attempt        int            `db:"attempt" json:"attempt"`
	MaxAttempts    int            `db:"max_attempts" json:"max_attempts"`
	FencingToken   int64          `db:"fencing_token" json:"fencing_token"`
	DependsOn      JSON           `db:"depends_on" json:"depends_on"`
	WorkerID       *string        `db:"worker_id" json:"worker_id"`
	LeaseExpiresAt *time.Time     `db:"lease_expires_at" json:"lease_expires_at"`
	// LeaseSeconds is the lease time left on the database clock (negative:
	// expired, not yet reaped); null when not RUNNING.
	LeaseSeconds   *float64   `db:"lease_seconds" json:"lease_seconds_left"`
	HeartbeatAt    *time.Time `db:"heartbeat_at" json:"heartbeat_at"`
	NextAttemptAt  *time.Time `db:"next_attempt_at" json:"next_attempt_at"`
	StartedAt      *time.Time `db:"started_at" json:"started_at"`
	FinishedAt     *time.Time `db:"finished_at" json:"finished_at"`
	Result         JSON       `db:"result" json:"result"`
	Error          *string    `db:"error" json:"error"`
	IdempotencyKey *string    `db:"idempotency_key" json:"idempotency_key"`
	Workflow       string     `db:"workflow_name" json:"workflow,omitempty"`
	// WaitingForHandler names the task's handler while it is READY and a
	// worker has handed it back because it does not register that handler
	// (at the current fencing token; see NoteWaitingForHandler); null
	// otherwise.
	WaitingForHandler *string `db:"waiting_for_handler" json:"waiting_for_handler"`
	// ReusedFrom names the task run whose recorded result for the
	// idempotency key this one reused instead of running its handler; null
	// when it ran its own.
	ReusedFrom *KeySource `db:"reused_from" json:"reused_from"`
	// Kind is the task's kind when it is not a plain "task" (for_each: the
	// scheduler expands it and it ends with its elements); null otherwise.
	Kind *string `db:"kind" json:"kind,omitempty"`
	// ElementOf names the for_each task this task run is an element of,
	// and ElementIndex its place in the list (from 0); null otherwise.
	ElementOf    *string `db:"element_of" json:"element_of,omitempty"`
	ElementIndex *int    `db:"element_index" json:"element_index,omitempty"`
}

const runColumns = `r.id, r.workflow_name, r.workflow_version, r.state, r.params, r.idempotency_key, r.fail_fast,
       r.cancel_requested_at, r.created_at, r.started_at, r.finished_at,
       (SELECT count(*) FROM task_runs t WHERE t.run_id = r.id) AS tasks_total,
       (SELECT count(*) FROM task_runs t WHERE t.run_id = r.id AND t.state IN ('SUCCEEDED', 'DEAD', 'CANCELLED', 'UPSTREAM_FAILED', 'SKIPPED')) AS tasks_done,
       ` + rerunOfColumn

const taskColumns = `t.id, t.run_id, t.task_name, t.handler, t.state, t.attempt, t.max_attempts, t.fencing_token,
       to_jsonb(t.depends_on) AS depends_on, t.worker_id, t.lease_expires_at,
       CASE WHEN t.state = 'RUNNING' THEN extract(epoch FROM t.lease_expires_at - now())::float8 END AS lease_seconds,
       t.heartbeat_at, t.next_attempt_at, t.started_at, t.finished_at, t.result, t.error, t.idempotency_key,
       CASE WHEN t.state = 'READY' AND EXISTS (SELECT 1 FROM task_events e WHERE e.task_run_id = t.id
            AND e.fencing_token = t.fencing_token AND e.from_state = 'READY' AND e.to_state = 'READY'
            AND e.worker_id IS NOT NULL) THEN t.handler END AS waiting_for_handler,
       CASE WHEN t.reused_from IS NOT NULL THEN jsonb_build_object('task_run_id', t.reused_from,
            'run_id', coalesce(t.reused_from_run, '00000000-0000-0000-0000-000000000000'::uuid)) END AS reused_from,
       NULLIF(t.kind, 'task') AS kind, t.element_of, t.element_index`

// GetRun returns the run with its tasks (in creation order), or ErrNotFound.
func (s *Store) GetRun(ctx context.Context, id uuid.UUID) (Run, error) {
	var r Run
	err := s.db.GetContext(ctx, &r, `SELECT `+runColumns+` FROM workflow_runs r WHERE r.id = $1`, id)
	if errors.Is(err, sql.ErrNoRows) {
		return Run{}, fmt.Errorf("run %s: %w", id, ErrNotFound)
	}
	if err != nil {
		return Run{}, fmt.Errorf("read run %s: %w", id, err)
	}
	if err := s.db.SelectContext(ctx, &r.Tasks, `SELECT `+taskColumns+`, '' AS workflow_name FROM task_runs t WHERE t.run_id = $1 ORDER BY t.created_at, t.task_name`, id); err != nil {
		return Run{}, fmt.Errorf("read tasks of run %s: %w", id, err)
	}
	p, paused, err := s.WorkflowPause(ctx, r.Workflow)
	if err != nil {
		return Run{}, fmt.Errorf("read run %s: %w", id, err)
	}
	if paused {
		r.Paused = &p
	}
	if r.Reruns, r.RerunsTotal, err = s.rerunsOf(ctx, id); err != nil {
		return Run{}, fmt.Errorf("read run %s: %w", id, err)
	}
	return r, nil
}

// TaskDetail is a task with its history.
type TaskDetail struct {
	TaskRun
	Params JSON             `db:"params" json:"params"`
	Events []core.TaskEvent `db:"-" json:"events"`
}

// GetTask returns a task with its whole history, or ErrNotFound.
func (s *Store) GetTask(ctx context.Context, id uuid.UUID) (TaskDetail, error) {
	var d TaskDetail
	err := s.db.GetContext(ctx, &d, `SELECT `+taskColumns+`, t.params, r.workflow_name FROM task_runs t JOIN workflow_runs r ON r.id = t.run_id WHERE t.id = $1`, id)
	if errors.Is(err, sql.ErrNoRows) {
		return TaskDetail{}, fmt.Errorf("task %s: %w", id, ErrNotFound)
	}
	if err != nil {
		return TaskDetail{}, fmt.Errorf("read task %s: %w", id, err)
	}
	if err := s.db.SelectContext(ctx, &d.Events, `SELECT id, at, from_state, to_state, attempt, fencing_token, worker_id, actor, reason FROM task_events WHERE task_run_id = $1 ORDER BY id LIMIT 1000`, id); err != nil {
		return TaskDetail{}, fmt.Errorf("read history of task %s: %w", id, err)
	}
	return d, nil
}

// ListLeases returns RUNNING tasks that hold a lease (a for_each task runs
// through its elements and holds none), soonest expiry first (expired ones
// first of all), at most limit (0 means 200).
func (s *Store) ListLeases(ctx context.Context, limit int) ([]TaskRun, error) {
	if limit <= 0 {
		limit = 200
	}
	var out []TaskRun
	err := s.db.SelectContext(ctx, &out, `SELECT `+taskColumns+`, r.workflow_name FROM task_runs t JOIN workflow_runs r ON r.id = t.run_id
 WHERE t.state = 'RUNNING' AND t.kind = 'task' ORDER BY t.lease_expires_at LIMIT $1`, limit)
	if err != nil {
		return nil, fmt.Errorf("list leases: %w", err)
	}
	return out, nil
}

// DAGName is the task's name: TaskRun is a core.DAGNode, so
// core.DAGOrder(run.Tasks) lays a run out as operators read it.
func (t TaskRun) DAGName() string { return t.Name }

// DAGDeps returns the names of the tasks t depends on (none when
// DependsOn does not decode as a list of names).
func (t TaskRun) DAGDeps() []string {
	var d []string
	_ = json.Unmarshal(t.DependsOn, &d)
	return d
}

// InDAGOrder returns r with its tasks in core.DAGOrder (roots first, then
// by depth, then by name): the order `ffctl run show` lists them in, in
// its table and in JSON.
func (r Run) InDAGOrder() Run {
	if r.Tasks == nil {
		return r
	}
	ordered := core.DAGOrder(r.Tasks)
	tasks := make([]TaskRun, len(ordered))
	for i, o := range ordered {
		tasks[i] = o.Node
	}
	r.Tasks = tasks
	return r
}

// TaskStateOf returns a task's current state and fencing token, or
// ErrNotFound. Workers use it to explain a lost claim in their logs.
func (s *Store) TaskStateOf(ctx context.Context, id uuid.UUID) (core.TaskState, int64, error) {
	var row struct {
		State core.TaskState `db:"state"`
		Token int64          `db:"fencing_token"`
	}
	err := s.db.GetContext(ctx, &row, `SELECT state, fencing_token FROM task_runs WHERE id = $1`, id)
	if errors.Is(err, sql.ErrNoRows) {
		return "", 0, fmt.Errorf("task %s: %w", id, ErrNotFound)
	}
	if err != nil {
		return "", 0, fmt.Errorf("read task %s: %w", id, err)
	}
	return row.State, row.Token, nil
}
