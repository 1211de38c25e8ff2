package store

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/google/uuid"

	"github.com/flowforge/flowforge/core"
)

// TriggerManyRequest asks for many runs of one workflow version, one per
// params object, without idempotency keys.
type TriggerManyRequest struct {
	// Workflow is the workflow's name; Version 0 means the newest.
	Workflow string
	Version  int
	// Params holds one JSON object per run (nil means {}); each is checked
	// with core.ValidateParams before anything is written.
	Params []json.RawMessage
	// Actor is recorded in the history (OS user or process id).
	Actor string
	// Priority, when not 0, overrides the priority of every task of every
	// run, as TriggerRequest.Priority does: core.PriorityMin (1) to
	// core.PriorityMax (4); another value is refused (core.ErrBadParams).
	Priority int
}

// TriggerManyMax bounds the runs of one TriggerMany call: one statement
// and one transaction carry them all.
const TriggerManyMax = 5000

// TriggerManyMaxTaskRuns bounds the task runs (runs × the definition's
// tasks) of one TriggerMany call, for the same reason: a caller of a large
// workflow sends fewer runs per call (see TriggerManyBatch).
const TriggerManyMaxTaskRuns = 100_000

// TriggerManyBatch is the most runs of a workflow of tasks tasks that one
// TriggerMany call takes: at most want, TriggerManyMax, and the runs whose
// task runs fit TriggerManyMaxTaskRuns, and at least 1.
func TriggerManyBatch(want, tasks int) int {
	return max(1, min(want, TriggerManyMax, TriggerManyMaxTaskRuns/max(tasks, 1)))
}

// TriggerMany creates len(req.Params) runs of one workflow version in ONE
// statement (one transaction: all of them or none), their roots READY with
// their outbox rows, and notifies the publishers once. It returns the runs'
// ids in the order of req.Params. Errors: core.ErrBadParams (with the
// 0-based index of the first bad params object, as a *BadRunError) before
// anything is written, also for more than TriggerManyMax runs or a task
// idempotency key or params template that cannot be rendered; ErrNotFound for an unknown
// workflow; ErrWorkflowPaused when the workflow is paused with mode drop
// (no run created, all of them counted as dropped);
// ErrCommitOutcomeUnknown when the statement got no answer (the runs may
// all exist).
func (s *Store) TriggerMany(ctx context.Context, req TriggerManyRequest) ([]uuid.UUID, error) {
	return s.triggerMany(ctx, SQLQuerier(s.db), req)
}

// triggerMany is TriggerMany on q: the pool, or a caller's transaction
// (TriggerManyTx).
func (s *Store) triggerMany(ctx context.Context, q Querier, req TriggerManyRequest) ([]uuid.UUID, error) {
	if len(req.Params) > TriggerManyMax {
		return nil, fmt.Errorf("%w: %d runs in one batch, more than %d", core.ErrBadParams, len(req.Params), TriggerManyMax)
	}
	if len(req.Params) == 0 {
		return nil, nil
	}
	if req.Priority != 0 {
		if err := core.ValidatePriority(req.Priority); err != nil {
			return nil, fmt.Errorf("%w: %w", core.ErrBadParams, err)
		}
	}
	runs := make([]newRun, len(req.Params))
	for i, p := range req.Params {
		params, err := triggerParams(TriggerRequest{Params: p})
		if err != nil {
			return nil, &BadRunError{Index: i, Err: err}
		}
		runs[i] = newRun{id: uuid.New(), params: params, priority: req.Priority}
	}
	created, _, err := s.insertRuns(ctx, q, req.Workflow, req.Version, runs, nil, TriggerManyMaxTaskRuns)
	if err != nil {
		return nil, err
	}
	if created != len(runs) {
		// Unreachable: runs without keys cannot conflict.
		return nil, fmt.Errorf("trigger %q: %d of %d runs created", req.Workflow, created, len(runs))
	}
	ids := make([]uuid.UUID, len(runs))
	for i, r := range runs {
		ids[i] = r.id
	}
	return ids, nil
}

// BadRunError is TriggerMany's refusal of the params of one run (Index,
// 0-based, in the request's Params); Err wraps core.ErrBadParams.
type BadRunError struct {
	Index int
	Err   error
}

func (e *BadRunError) Error() string { return fmt.Sprintf("run %d: %v", e.Index+1, e.Err) }

func (e *BadRunError) Unwrap() error { return e.Err }

// CheckRuns checks, writing nothing, that runs of version (0: the newest)
// of workflow can be created with each of params: each is a params object
// (core.ValidateParams) from which every task's idempotency key and params
// templates render (core.RenderRunTasks).
// It returns the workflow version it checked against, whose Version a
// caller creating the runs in several TriggerMany calls passes to each so
// that all are of one version (and whose tasks size its batches: see
// TriggerManyBatch); the caller must not modify it. Errors: a *BadRunError
// (wrapping core.ErrBadParams) naming the first bad params object,
// ErrNotFound for an unknown workflow.
func (s *Store) CheckRuns(ctx context.Context, workflow string, version int, params []json.RawMessage) (Workflow, error) {
	wf, err := s.definition(ctx, SQLQuerier(s.db), workflow, version, false)
	if err != nil {
		return Workflow{}, err
	}
	for i, p := range params {
		params, err := triggerParams(TriggerRequest{Params: p})
		if err == nil {
			var rk runKeys
			var flow *core.FlowPrograms
			if flow, err = wf.flowPrograms(); err == nil {
				err = rk.add(&wf.Definition, flow, params)
			}
		}
		if err != nil {
			return Workflow{}, &BadRunError{Index: i, Err: err}
		}
	}
	return wf, nil
}
