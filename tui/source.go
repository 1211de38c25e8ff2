package tui

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/google/uuid"

	"github.com/flowforge/flowforge/core"
	"github.com/flowforge/flowforge/core/store"
)

// Source is everything the dashboard reads and does. The dashboard never
// speaks SQL: StoreSource adapts *store.Store to it, and tests hand the
// models a fake. Every call is bounded by its ctx; every listing is bounded
// by a LIMIT and served by an index.
type Source interface {
	Runs(ctx context.Context, f RunFilter) (RunsData, error)
	Run(ctx context.Context, id uuid.UUID) (RunData, error)
	Task(ctx context.Context, id uuid.UUID) (TaskData, error)
	Leases(ctx context.Context) (LeasesData, error)
	Outbox(ctx context.Context) (OutboxData, error)
	Dead(ctx context.Context) (DeadData, error)
	Workers(ctx context.Context) (WorkersData, error)
	// Requeue moves DEAD tasks back to PENDING, audited with reason; it
	// reports each task's outcome (see store.Store.RequeueMany), and
	// returns an error only when the call failed as a whole.
	Requeue(ctx context.Context, ids []uuid.UUID, reason string) ([]store.RequeueResult, error)
	// CancelRun requests the run's cancellation, audited with reason.
	CancelRun(ctx context.Context, id uuid.UUID, reason string) (store.CancelResult, error)
	// Find resolves a full run or task id, or a unique prefix of one of at
	// least core.IDPrefixMinDefault hex digits (the ":" jump); see
	// store.Store.FindByIDPrefix for its errors.
	Find(ctx context.Context, ref string) (store.IDMatch, error)
	// Workflows lists the newest version of each workflow (bounded).
	Workflows(ctx context.Context) (WorkflowsData, error)
	// Trigger starts a run of the workflow's newest version with params (a
	// JSON object, nil for none), as `ffctl run trigger` does.
	Trigger(ctx context.Context, workflow string, params json.RawMessage) (uuid.UUID, error)
	// PauseWorkflow pauses the workflow with mode queue, audited with
	// reason, as `ffctl workflow pause` does (store.Store.PauseWorkflow).
	PauseWorkflow(ctx context.Context, workflow, reason string) (store.PauseResult, error)
	// ResumeWorkflow ends its pause, audited with reason, as `ffctl
	// workflow resume` does (store.Store.ResumeWorkflow).
	ResumeWorkflow(ctx context.Context, workflow, reason string) (store.ResumeResult, error)
	// ScheduleSource: the Schedules screen (tui/schedules.go).
	ScheduleSource
	// Limits lists flow control's keys, the hottest first (at most
	// LimitsShown), as `ffctl limits list` does (store.Store.ListLimits).
	Limits(ctx context.Context) (LimitsData, error)
}

// LimitsData feeds the Limits screen.
type LimitsData struct {
	Now    time.Time
	Limits []store.FlowLimit
}

// WorkflowsData feeds the Workflows screen.
type WorkflowsData struct {
	Now       time.Time
	Workflows []store.WorkflowSummary
}

// ErrDisconnected wraps a read error when the database does not answer at
// all (as opposed to a query that failed): the dashboard shows
// "disconnected, retrying" and keeps polling.
var ErrDisconnected = errors.New("database unreachable")

// RunFilter narrows the Runs screen. Zero values mean "any".
type RunFilter struct {
	Workflow string
	State    core.RunState
}

// Every *Data carries Now, the database's clock when it was read: ages
// shown on screen are differences against it, never against the terminal's
// clock.

// RunsData feeds the Runs screen.
type RunsData struct {
	Now time.Time
	// Counts holds runs per state, each capped at CountCap (a count equal
	// to CountCap is shown as "CountCap+").
	Counts   map[core.RunState]int64
	CountCap int64
	Runs     []store.Run
}

// RunData feeds the Run screen: the run with its tasks.
type RunData struct {
	Now time.Time
	Run store.Run
}

// TaskData feeds the task history screen: the task, and the last lines
// of its log (at most TaskLogTailLines, oldest first; none when it logged
// nothing).
type TaskData struct {
	Now  time.Time
	Task store.TaskDetail
	Logs []store.TaskLogLine
}

// TaskLogTailLines is the most lines of a task's log the task screen
// reads (it shows what its height can spare; `ffctl task logs` has all).
const TaskLogTailLines = 20

// LeasesData feeds the Leases screen: every RUNNING task, soonest expiry
// first.
type LeasesData struct {
	Now    time.Time
	Leases []store.TaskRun
}

// OutboxData feeds the Outbox screen.
type OutboxData struct {
	Now    time.Time
	Status store.OutboxStatus
	Oldest []store.PendingDispatch
	// DB is the database's oldest transaction, xmin horizon and hot-table
	// dead tuples; the screen warns when DB.HorizonSeconds reaches
	// HorizonWarn.
	DB          store.DBHealth
	HorizonWarn time.Duration
}

// DeadData feeds the DEAD screen.
type DeadData struct {
	Now   time.Time
	Tasks []store.TaskRun
}

// WorkersData feeds the Workers screen.
type WorkersData struct {
	Now     time.Time
	Workers []store.Worker
}

// SchedulesLimit bounds the Schedules screen's list.
const SchedulesLimit = 200

// ScheduleSource is what the Schedules screen reads and does; Source
// embeds it. The actions are the calls `ffctl schedule pause|resume|
// trigger-now` make, audited with reason.
type ScheduleSource interface {
	// Schedules lists the schedules by name (at most SchedulesLimit), each
	// with its newest tick.
	Schedules(ctx context.Context) (SchedulesData, error)
	// Schedule reads one schedule with its last store.ScheduleTicksShown
	// ticks; store.ErrNotFound when it is gone.
	Schedule(ctx context.Context, name string) (ScheduleData, error)
	// PauseSchedule and ResumeSchedule: see store.Store.PauseSchedule
	// (false when it already was so: nothing changed; errors:
	// core.ErrBadReason, store.ErrNotFound).
	PauseSchedule(ctx context.Context, name, reason string) (bool, error)
	ResumeSchedule(ctx context.Context, name, reason string) (bool, error)
	// TriggerScheduleNow starts a run of the schedule now (a manual tick);
	// see store.Store.TriggerScheduleNow.
	TriggerScheduleNow(ctx context.Context, name, reason string) (store.Tick, error)
}

// SchedulesData feeds the Schedules screen's list. Now is the database's
// clock: next fire times are computed from it.
type SchedulesData struct {
	Now       time.Time
	Schedules []store.Schedule
}

// ScheduleData feeds a schedule's detail.
type ScheduleData struct {
	Now      time.Time
	Schedule store.Schedule
}
