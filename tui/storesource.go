package tui

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/flowforge/flowforge/core"
	"github.com/flowforge/flowforge/core/store"
)

// Listing bounds of StoreSource.
const (
	RunsLimit       = 50
	RunCountCap     = 1000
	DeadLimit       = 100
	LeasesLimit     = 200
	OutboxRowsLimit = 20
	// WorkersWithin is how recently a process must have been seen to be
	// listed on the Workers screen.
	WorkersWithin = 10 * time.Minute
)

// StoreSource reads and acts through *store.Store, on the same code paths
// as the CLI (store.RequeueMany, store.CancelRun), auditing actions as Actor.
type StoreSource struct {
	Store *store.Store
	Actor string
	// HorizonWarn is the xmin-horizon hold the Outbox screen warns about;
	// 0 means store.XminHorizonWarnDefault.
	HorizonWarn time.Duration
}

// NewStoreSource returns a Source over s whose actions are audited as actor.
func NewStoreSource(s *store.Store, actor string) *StoreSource {
	return &StoreSource{Store: s, Actor: actor}
}

// pingTimeout bounds the ping that tells "the database is gone" from "this
// query failed".
const pingTimeout = time.Second

// classify marks err as ErrDisconnected when the database does not even
// answer a ping (also after ctx ran out: a timed-out read is either a slow
// database or a missing one).
func (s *StoreSource) classify(ctx context.Context, err error) error {
	if err == nil {
		return nil
	}
	pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), pingTimeout)
	defer cancel()
	if perr := s.Store.Ping(pctx); perr != nil {
		return fmt.Errorf("%w: %w", ErrDisconnected, err)
	}
	return err
}

// Runs reads the clock, the bounded per-state counts and the newest runs.
func (s *StoreSource) Runs(ctx context.Context, f RunFilter) (RunsData, error) {
	now, err := s.Store.Now(ctx)
	if err != nil {
		return RunsData{}, s.classify(ctx, fmt.Errorf("read clock: %w", err))
	}
	counts, err := s.Store.RunStateCountsBounded(ctx, RunCountCap)
	if err != nil {
		return RunsData{}, s.classify(ctx, err)
	}
	runs, err := s.Store.ListRuns(ctx, store.RunFilter{Workflow: f.Workflow, State: f.State, Limit: RunsLimit})
	if err != nil {
		return RunsData{}, s.classify(ctx, err)
	}
	return RunsData{Now: now, Counts: counts, CountCap: RunCountCap, Runs: runs}, nil
}

// Run reads one run and its tasks.
func (s *StoreSource) Run(ctx context.Context, id uuid.UUID) (RunData, error) {
	now, err := s.Store.Now(ctx)
	if err != nil {
		return RunData{}, s.classify(ctx, fmt.Errorf("read clock: %w", err))
	}
	r, err := s.Store.GetRun(ctx, id)
	if err != nil {
		return RunData{}, s.classify(ctx, err)
	}
	return RunData{Now: now, Run: r}, nil
}

// Task reads one task and its history.
func (s *StoreSource) Task(ctx context.Context, id uuid.UUID) (TaskData, error) {
	now, err := s.Store.Now(ctx)
	if err != nil {
		return TaskData{}, s.classify(ctx, fmt.Errorf("read clock: %w", err))
	}
	t, err := s.Store.GetTask(ctx, id)
	if err != nil {
		return TaskData{}, s.classify(ctx, err)
	}
	logs, err := s.Store.TaskLogTail(ctx, id, TaskLogTailLines)
	if err != nil {
		return TaskData{}, s.classify(ctx, err)
	}
	return TaskData{Now: now, Task: t, Logs: logs}, nil
}

// Leases reads every RUNNING task (bounded), soonest expiry first.
func (s *StoreSource) Leases(ctx context.Context) (LeasesData, error) {
	now, err := s.Store.Now(ctx)
	if err != nil {
		return LeasesData{}, s.classify(ctx, fmt.Errorf("read clock: %w", err))
	}
	l, err := s.Store.ListLeases(ctx, LeasesLimit)
	if err != nil {
		return LeasesData{}, s.classify(ctx, err)
	}
	return LeasesData{Now: now, Leases: l}, nil
}

// Outbox reads the outbox summary, its oldest pending rows and the
// database's xmin horizon (store.DBHealth).
func (s *StoreSource) Outbox(ctx context.Context) (OutboxData, error) {
	now, err := s.Store.Now(ctx)
	if err != nil {
		return OutboxData{}, s.classify(ctx, fmt.Errorf("read clock: %w", err))
	}
	st, err := s.Store.OutboxStatus(ctx)
	if err != nil {
		return OutboxData{}, s.classify(ctx, err)
	}
	rows, err := s.Store.OldestPendingDispatches(ctx, OutboxRowsLimit)
	if err != nil {
		return OutboxData{}, s.classify(ctx, err)
	}
	db, err := s.Store.DBHealth(ctx)
	if err != nil {
		return OutboxData{}, s.classify(ctx, err)
	}
	warn := s.HorizonWarn
	if warn <= 0 {
		warn = store.XminHorizonWarnDefault
	}
	return OutboxData{Now: now, Status: st, Oldest: rows, DB: db, HorizonWarn: warn}, nil
}

// Dead reads the most recent DEAD tasks.
func (s *StoreSource) Dead(ctx context.Context) (DeadData, error) {
	now, err := s.Store.Now(ctx)
	if err != nil {
		return DeadData{}, s.classify(ctx, fmt.Errorf("read clock: %w", err))
	}
	t, err := s.Store.ListDeadTasks(ctx, store.DeadQuery{Limit: DeadLimit})
	if err != nil {
		return DeadData{}, s.classify(ctx, err)
	}
	return DeadData{Now: now, Tasks: t}, nil
}

// Workers reads the daemon processes seen recently.
func (s *StoreSource) Workers(ctx context.Context) (WorkersData, error) {
	now, err := s.Store.Now(ctx)
	if err != nil {
		return WorkersData{}, s.classify(ctx, fmt.Errorf("read clock: %w", err))
	}
	w, err := s.Store.ListWorkers(ctx, WorkersWithin)
	if err != nil {
		return WorkersData{}, s.classify(ctx, err)
	}
	return WorkersData{Now: now, Workers: w}, nil
}

// Limits reads flow control's keys with store.ListLimits, the hottest
// first, at most LimitsShown.
func (s *StoreSource) Limits(ctx context.Context) (LimitsData, error) {
	now, err := s.Store.Now(ctx)
	if err != nil {
		return LimitsData{}, s.classify(ctx, fmt.Errorf("read clock: %w", err))
	}
	ls, err := s.Store.ListLimits(ctx, LimitsShown)
	if err != nil {
		return LimitsData{}, s.classify(ctx, err)
	}
	return LimitsData{Now: now, Limits: ls}, nil
}

// Requeue requeues the tasks with store.RequeueMany, as `ffctl dead
// requeue` does: one statement for the set, each task audited and
// reported on its own. A failed call (the database's error) is returned as
// the error, never as a task's refusal.
func (s *StoreSource) Requeue(ctx context.Context, ids []uuid.UUID, reason string) ([]store.RequeueResult, error) {
	res, err := s.Store.RequeueMany(ctx, ids, s.Actor, reason)
	if err != nil {
		return nil, s.classify(ctx, err)
	}
	return res, nil
}

// CancelRun cancels a run with store.CancelRun, as `ffctl run cancel` does.
func (s *StoreSource) CancelRun(ctx context.Context, id uuid.UUID, reason string) (store.CancelResult, error) {
	res, err := s.Store.CancelRun(ctx, id, s.Actor, reason)
	if err != nil {
		return res, s.classify(ctx, err)
	}
	return res, nil
}

// PauseWorkflow pauses a workflow (mode queue) with store.PauseWorkflow,
// as `ffctl workflow pause` does.
func (s *StoreSource) PauseWorkflow(ctx context.Context, workflow, reason string) (store.PauseResult, error) {
	res, err := s.Store.PauseWorkflow(ctx, workflow, core.PauseQueue, s.Actor, reason)
	if err != nil {
		return res, s.classify(ctx, err)
	}
	return res, nil
}

// ResumeWorkflow resumes a workflow with store.ResumeWorkflow, as `ffctl
// workflow resume` does.
func (s *StoreSource) ResumeWorkflow(ctx context.Context, workflow, reason string) (store.ResumeResult, error) {
	res, err := s.Store.ResumeWorkflow(ctx, workflow, s.Actor, reason)
	if err != nil {
		return res, s.classify(ctx, err)
	}
	return res, nil
}

// Find resolves a run or task id or id prefix with store.FindByIDPrefix.
func (s *StoreSource) Find(ctx context.Context, ref string) (store.IDMatch, error) {
	m, err := s.Store.FindByIDPrefix(ctx, ref)
	if err != nil && ctx.Err() != nil {
		return m, s.classify(ctx, err)
	}
	return m, err
}

// Workflows lists workflows with store.ListWorkflows.
func (s *StoreSource) Workflows(ctx context.Context) (WorkflowsData, error) {
	now, err := s.Store.Now(ctx)
	if err != nil {
		return WorkflowsData{}, s.classify(ctx, fmt.Errorf("read clock: %w", err))
	}
	w, err := s.Store.ListWorkflows(ctx, WorkflowsLimit)
	if err != nil {
		return WorkflowsData{}, s.classify(ctx, err)
	}
	return WorkflowsData{Now: now, Workflows: w}, nil
}

// Trigger starts a run with store.Trigger, audited as Actor.
func (s *StoreSource) Trigger(ctx context.Context, workflow string, params json.RawMessage) (uuid.UUID, error) {
	res, err := s.Store.Trigger(ctx, store.TriggerRequest{Workflow: workflow, Params: params, Actor: s.Actor})
	if err != nil {
		if ctx.Err() != nil {
			return uuid.Nil, s.classify(ctx, err)
		}
		return uuid.Nil, err
	}
	return res.RunID, nil
}
