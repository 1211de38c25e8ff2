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
	// CancelReason is why the run's cancellation was requested: the
	// operator's reason (run cancel), or what cancelled it (a parent run,
	// a concurrency key's strategy); nil while none was requested.
	CancelReason *string    `db:"cancel_reason" json:"cancel_reason,omitempty"`
	CreatedAt    time.Time  `db:"created_at" json:"created_at"`
	StartedAt    *time.Time `db:"started_at" json:"started_at"`
	FinishedAt   *time.Time `db:"finished_at" json:"finished_at"`
	TasksTotal   int        `db:"tasks_total" json:"tasks_total"`
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
	// ParentRunID and ParentTaskRunID name the run, and its `workflow:`
	// task run, that started this run as a child; null for a run no task
	// started. ParentTask is that task's name, null also once the parent
	// run is deleted or pruned (the ids stay: no foreign key holds them).
	ParentRunID     *uuid.UUID `db:"parent_run_id" json:"parent_run_id,omitempty"`
	ParentTaskRunID *uuid.UUID `db:"parent_task_run_id" json:"parent_task_run_id,omitempty"`
	ParentTask      *string    `db:"parent_task" json:"parent_task,omitempty"`
	// Depth is how deep the run nests: 0 for a run no task started, 1 for
	// its children, and so on (at most the scheduler's --max-child-depth).
	Depth int `db:"depth" json:"depth"`
	// Children are the runs this run's tasks started (ChildRun), at most
	// ChildRunsShown, oldest first, and ChildrenTotal counts them all
	// (a task retried or requeued starts a new child each attempt). GetRun
	// sets them, ListRuns does not; absent when there are none.
	Children      []ChildRun `db:"-" json:"children,omitempty"`
	ChildrenTotal int        `db:"-" json:"children_total,omitempty"`
	// ConcurrencyKey is the run's own concurrency key (its workflow's
	// run-level `concurrency`), as evaluated at its trigger; null for none.
	ConcurrencyKey *string `db:"concurrency_key" json:"concurrency_key,omitempty"`
	// SlotsHeld and SlotsLimit are set while the run waits for a slot of
	// its key (no task of it starts): the open runs holding one, and the
	// key's effective limit. Null otherwise.
	SlotsHeld  *int `db:"run_slots_held" json:"-"`
	SlotsLimit *int `db:"run_slots_limit" json:"-"`
	// Waiting says what a waiting run waits for ("waiting: run concurrency
	// acme (2/2)"); absent otherwise.
	Waiting string `db:"-" json:"waiting,omitempty"`
}

// withRunWaiting sets r.Waiting from the columns read.
func withRunWaiting(r *Run) {
	if r.ConcurrencyKey != nil && r.SlotsHeld != nil && r.SlotsLimit != nil {
		r.Waiting = core.RunConcurrencyWaitText(*r.ConcurrencyKey, *r.SlotsHeld, *r.SlotsLimit)
	}
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
	// DueAt is when a RUNNING sleep wakes, or when a RUNNING wait times
	// out (database clock); null otherwise (the scheduler clears it when
	// the task ends).
	DueAt *time.Time `db:"due_at" json:"due_at,omitempty"`
	// DueSeconds is the time left until DueAt on the database clock, in
	// seconds (negative: due, and not yet ended by a scheduler pass); null
	// when DueAt is.
	DueSeconds *float64 `db:"due_seconds" json:"due_seconds_left,omitempty"`
	// WaitEvent is the name of the event a wait waits for and WaitKey the
	// key it must carry ("" for an event sent without one, at most
	// core.MaxEventKeyLength bytes: the task's wait_for.key evaluated when
	// it started); OnTimeout is what its timeout does, "fail" or "skip".
	// Null until the wait first starts, kept once it ended.
	WaitEvent *string `db:"wait_event" json:"wait_event,omitempty"`
	WaitKey   *string `db:"wait_key" json:"wait_key,omitempty"`
	OnTimeout *string `db:"on_timeout" json:"on_timeout,omitempty"`
	// CompletedByEvent is the id of the event that completed a SUCCEEDED
	// wait (its delivery, event_deliveries); null otherwise.
	CompletedByEvent *string `db:"completed_by_event" json:"completed_by_event,omitempty"`
	// ChildRunID is the run a `workflow:` task started (its latest
	// attempt's); null until it started one. Run.Children has its
	// workflow and state.
	ChildRunID *uuid.UUID `db:"child_run_id" json:"child_run_id,omitempty"`
	// ConcurrencyKey and RateKey are the task's flow-control keys as
	// evaluated when its run was triggered; null for a task without.
	ConcurrencyKey *string `db:"concurrency_key" json:"concurrency_key,omitempty"`
	RateKey        *string `db:"rate_key" json:"rate_key,omitempty"`
	// Priority orders the task's run among the waiters of its key:
	// core.PriorityMin (1) to core.PriorityMax (4).
	Priority int `db:"priority" json:"priority"`
	// FlowWait is what a READY task waits for before its dispatch:
	// "concurrency" (a slot of ConcurrencyKey) or "rate" (room within
	// RateKey's limit); null for a task not waiting (see flowColumns for
	// FlowInUse, FlowLimit and FlowPerMs, set only while it waits).
	FlowWait *string `db:"flow_wait" json:"flow_wait,omitempty"`
	// FlowInUse counts the task runs holding a slot of ConcurrencyKey
	// while FlowWait is "concurrency"; FlowLimit is the key's effective
	// limit (the operator's, else the definitions') and FlowPerMs a rate
	// key's period in milliseconds.
	FlowInUse *int   `db:"flow_in_use" json:"flow_in_use,omitempty"`
	FlowLimit *int   `db:"flow_limit" json:"flow_limit,omitempty"`
	FlowPerMs *int64 `db:"flow_per_ms" json:"flow_per_ms,omitempty"`
	// FlowPaused is true while the task waits for its admission and its
	// workflow is paused: the admission passes it over until the resume
	// (notPausedSQL), whatever room its key has; null when not waiting.
	FlowPaused *bool `db:"flow_paused" json:"flow_paused,omitempty"`
	// AdmittedAt is when flow control's admission dispatched the task's
	// current READY (database clock; migration 00019); null for a task
	// without flow control, still waiting, or made READY again since (a
	// retry waiting anew).
	AdmittedAt *time.Time `db:"admitted_at" json:"admitted_at,omitempty"`
	// Waiting is FlowWaitText's words for a task waiting for its
	// admission ("waiting: concurrency customer-42 (5/5)"); GetRun and
	// GetTask set it, absent otherwise.
	Waiting string `db:"-" json:"waiting,omitempty"`
}

// FlowWaitText is what a READY task waiting for flow control's admission
// waits for, in core's words (core.ConcurrencyWaitText,
// core.RateWaitText), for `run show`, `task show` and the dashboard; ""
// for a task not waiting.
//
// A waiter of a paused workflow says so after what it waits for
// ("waiting: concurrency slow-key (0/1); workflow paused: admitted after
// its resume"): its key may have room, and the admission passes it over.
func (t TaskRun) FlowWaitText() string {
	if t.FlowWait == nil || t.State != core.TaskReady || t.FlowLimit == nil {
		return ""
	}
	var w string
	switch *t.FlowWait {
	case FlowConcurrency:
		if t.ConcurrencyKey != nil && t.FlowInUse != nil {
			w = core.ConcurrencyWaitText(*t.ConcurrencyKey, *t.FlowInUse, *t.FlowLimit)
		}
	case FlowRate:
		if t.RateKey != nil && t.FlowPerMs != nil {
			w = core.RateWaitText(*t.RateKey, *t.FlowLimit, time.Duration(*t.FlowPerMs)*time.Millisecond)
		}
	}
	if w != "" && t.FlowPaused != nil && *t.FlowPaused {
		w += PausedWaitSuffix
	}
	return w
}

// PausedWaitSuffix ends the FlowWaitText of a waiter whose workflow is
// paused.
const PausedWaitSuffix = "; workflow paused: admitted after its resume"

// withWaiting sets the Waiting text of each task of ts.
func withWaiting(ts []TaskRun) {
	for i := range ts {
		ts[i].Waiting = ts[i].FlowWaitText()
	}
}

const runColumns = `r.id, r.workflow_name, r.workflow_version, r.state, r.params, r.idempotency_key, r.fail_fast,
       r.cancel_requested_at, r.cancel_reason, r.created_at, r.started_at, r.finished_at,
       (SELECT count(*) FROM task_runs t WHERE t.run_id = r.id) AS tasks_total,
       (SELECT count(*) FROM task_runs t WHERE t.run_id = r.id AND t.state IN ('SUCCEEDED', 'DEAD', 'CANCELLED', 'UPSTREAM_FAILED', 'SKIPPED')) AS tasks_done,
       r.parent_run_id, r.parent_task_run_id, r.depth,
       CASE WHEN r.parent_task_run_id IS NOT NULL THEN (SELECT p.task_name FROM task_runs p WHERE p.id = r.parent_task_run_id) END AS parent_task,
       r.concurrency_key,
       CASE WHEN r.run_wait AND r.finished_at IS NULL AND r.cancel_requested_at IS NULL THEN
            (SELECT count(*) FROM workflow_runs h WHERE h.concurrency_key = r.concurrency_key AND h.finished_at IS NULL AND NOT h.run_wait) END AS run_slots_held,
       CASE WHEN r.run_wait AND r.finished_at IS NULL AND r.cancel_requested_at IS NULL THEN
            coalesce((SELECT coalesce(f.operator_limit, f.lim) FROM flow_limits f WHERE f.kind = 'run' AND f.key = r.concurrency_key), r.concurrency_limit) END AS run_slots_limit,
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
       NULLIF(t.kind, 'task') AS kind, t.element_of, t.element_index, ` + heldColumns + `, ` + flowColumns

// flowColumns are the TaskRun fields of flow control: the keys, and for a
// READY task waiting for its admission what it waits for, its key's
// effective limit (flow_limits, else the task's definition's), a rate
// key's period and a concurrency key's holders (the predicate of the
// partial index task_runs_slots): the subqueries run only for waiting
// tasks.
const flowColumns = `t.concurrency_key, t.rate_key, t.flow_wait, t.priority,
       CASE WHEN t.flow_wait IS NULL AND t.admitted_at >= t.ready_at THEN t.admitted_at END AS admitted_at,
       CASE WHEN t.state = 'READY' AND t.flow_wait = 'concurrency' THEN (SELECT count(*) FROM task_runs h
            WHERE h.concurrency_key = t.concurrency_key AND h.kind = 'task' AND h.state IN ('READY', 'RUNNING')
              AND h.flow_wait IS DISTINCT FROM 'concurrency') END AS flow_in_use,
       CASE WHEN t.state = 'READY' AND t.flow_wait = 'concurrency' THEN coalesce((SELECT coalesce(f.operator_limit, f.lim)
                 FROM flow_limits f WHERE f.kind = 'concurrency' AND f.key = t.concurrency_key), t.concurrency_limit)
            WHEN t.state = 'READY' AND t.flow_wait = 'rate' THEN coalesce((SELECT coalesce(f.operator_limit, f.lim)
                 FROM flow_limits f WHERE f.kind = 'rate' AND f.key = t.rate_key), t.rate_limit) END AS flow_limit,
       CASE WHEN t.state = 'READY' AND t.flow_wait = 'rate' THEN coalesce((SELECT f.per_ms
                 FROM flow_limits f WHERE f.kind = 'rate' AND f.key = t.rate_key), t.rate_per_ms) END AS flow_per_ms,
       CASE WHEN t.state = 'READY' AND t.flow_wait IS NOT NULL THEN ` + runPausedSQL + ` END AS flow_paused`

// heldColumns are the TaskRun fields of a held task (core.TaskKind.Held):
// its due time and the time left to it (database clock), what a wait
// waits for, the event that completed a SUCCEEDED wait (a probe of
// event_deliveries_task, only for those) and a child run's id.
const heldColumns = `t.due_at,
       CASE WHEN t.state = 'RUNNING' THEN extract(epoch FROM t.due_at - now())::float8 END AS due_seconds,
       t.wait_event, t.wait_key, t.on_timeout, t.child_run_id,
       CASE WHEN t.kind = 'wait' AND t.state = 'SUCCEEDED' THEN (SELECT d.event_id FROM event_deliveries d
            WHERE d.task_run_id = t.id ORDER BY d.delivered_at DESC, d.event_id LIMIT 1) END AS completed_by_event`

// qRun reads run $1 (runColumns) and qRunTasks its tasks, in creation
// order (the unique (run_id, task_name) index).
const (
	qRun      = `SELECT ` + runColumns + ` FROM workflow_runs r WHERE r.id = $1`
	qRunTasks = `SELECT ` + taskColumns + `, '' AS workflow_name FROM task_runs t WHERE t.run_id = $1 ORDER BY t.created_at, t.task_name`
)

// GetRun returns the run with its tasks (in creation order), its
// workflow's pause, its reruns and its child runs, or ErrNotFound.
func (s *Store) GetRun(ctx context.Context, id uuid.UUID) (Run, error) {
	var r Run
	err := s.db.GetContext(ctx, &r, qRun, id)
	if errors.Is(err, sql.ErrNoRows) {
		return Run{}, fmt.Errorf("run %s: %w", id, ErrNotFound)
	}
	if err != nil {
		return Run{}, fmt.Errorf("read run %s: %w", id, err)
	}
	if err := s.db.SelectContext(ctx, &r.Tasks, qRunTasks, id); err != nil {
		return Run{}, fmt.Errorf("read tasks of run %s: %w", id, err)
	}
	withWaiting(r.Tasks)
	withRunWaiting(&r)
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
	if r.Children, r.ChildrenTotal, err = s.childrenOf(ctx, id); err != nil {
		return Run{}, fmt.Errorf("read run %s: %w", id, err)
	}
	return r, nil
}

// TaskDetail is a task with its history.
type TaskDetail struct {
	TaskRun
	Params JSON             `db:"params" json:"params"`
	Events []core.TaskEvent `db:"-" json:"events"`
	// ChildRun is the run ChildRunID names, with its workflow and state;
	// null when the task started none, or once that run was deleted or
	// pruned (ChildRunID stays).
	ChildRun *ChildRun `db:"-" json:"child_run,omitempty"`
}

// qTask reads task run $1 (taskColumns) with its params and its run's
// workflow.
const qTask = `SELECT ` + taskColumns + `, t.params, r.workflow_name FROM task_runs t JOIN workflow_runs r ON r.id = t.run_id WHERE t.id = $1`

// GetTask returns a task with its whole history (and its child run, for a
// `workflow:` task that started one), or ErrNotFound.
func (s *Store) GetTask(ctx context.Context, id uuid.UUID) (TaskDetail, error) {
	var d TaskDetail
	err := s.db.GetContext(ctx, &d, qTask, id)
	if errors.Is(err, sql.ErrNoRows) {
		return TaskDetail{}, fmt.Errorf("task %s: %w", id, ErrNotFound)
	}
	if err != nil {
		return TaskDetail{}, fmt.Errorf("read task %s: %w", id, err)
	}
	d.Waiting = d.FlowWaitText()
	if err := s.db.SelectContext(ctx, &d.Events, `SELECT id, at, from_state, to_state, attempt, fencing_token, worker_id, actor, reason FROM task_events WHERE task_run_id = $1 ORDER BY id LIMIT 1000`, id); err != nil {
		return TaskDetail{}, fmt.Errorf("read history of task %s: %w", id, err)
	}
	if d.ChildRunID != nil {
		if d.ChildRun, err = s.childRun(ctx, *d.ChildRunID, d.TaskRun); err != nil {
			return TaskDetail{}, fmt.Errorf("read task %s: %w", id, err)
		}
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
