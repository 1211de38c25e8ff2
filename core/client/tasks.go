package client

import (
	"context"

	"github.com/google/uuid"

	"github.com/flowforge/flowforge/core"
	"github.com/flowforge/flowforge/core/store"
)

// Task is a task run with its history, the object `ffctl task show -o
// json` prints: store.TaskDetail's fields (the task, its params, its
// workflow and "events", its whole history, oldest first, at most 1000)
// and "attempts", one per claim, rebuilt from that history
// (core.Attempts).
type Task struct {
	store.TaskDetail
	Attempts []core.Attempt `json:"attempts"`
}

// RequeueResult is what RequeueDead did with one task: its id, its
// Outcome (requeued, requeued_with another id of the call, not_found,
// not_dead, run_cancelled), the state it found and the other tasks it
// moved (store.RequeueResult).
type RequeueResult struct {
	store.RequeueResult
}

// Err is nil for a requeued task, else its refusal, naming the task: one
// matching ErrNotFound, or ErrConflict for a task that is not DEAD or
// whose run was cancelled.
func (r RequeueResult) Err() error { return mapError(r.RequeueResult.Err()) }

// RequeueReport is one task's requeue as JSON reports it: an element of
// `ffctl dead requeue -o json`, and the HTTP API's answer to a requeue.
type RequeueReport struct {
	ID       uuid.UUID `json:"id"`
	Requeued bool      `json:"requeued"`
	// Error is the refusal of a task not requeued.
	Error string `json:"error,omitempty"`
	// Also lists the other tasks of its run this requeue moved to PENDING:
	// its UPSTREAM_FAILED descendants, and in a fail_fast run its other
	// DEAD tasks and the ones fail_fast cancelled.
	Also []uuid.UUID `json:"also_requeued,omitempty"`
	// With is the task whose requeue already moved this one.
	With *uuid.UUID `json:"requeued_with,omitempty"`
}

// Report is r as JSON reports it.
func (r RequeueResult) Report() RequeueReport {
	out := RequeueReport{ID: r.ID, Requeued: r.Requeued(), Also: r.Also}
	if err := r.Err(); err != nil {
		out.Error = err.Error()
	}
	if r.Outcome == store.RequeueMovedWith {
		with := r.With
		out.With = &with
	}
	return out
}

// Task returns the task run id names (a whole UUID or a unique prefix)
// with its history and attempts. Errors: those of ResolveID.
func (c *Client) Task(ctx context.Context, id string) (Task, error) {
	return lookup(ctx, c, store.IDTask, id, func(tid uuid.UUID) (Task, error) {
		d, err := c.s.GetTask(ctx, tid)
		if err != nil {
			return Task{}, err
		}
		if d.Events == nil {
			d.Events = []core.TaskEvent{}
		}
		return Task{TaskDetail: d, Attempts: core.Attempts(d.Events)}, nil
	})
}

// RequeueDead moves the DEAD tasks ids name (whole UUIDs or unique
// prefixes, all resolved before any is moved; repeats dropped) back to
// PENDING with a fresh budget of attempts, audited with opts.Reason and
// opts.Actor, in one transaction (store.Store.RequeueMany: their
// UPSTREAM_FAILED descendants with them; in a fail_fast run, the whole
// run). It returns one result per distinct task, in the order first given:
// a task that is not DEAD is a result (its Err() matches ErrConflict), not
// an error. Errors, and then nothing changed: ErrInvalidInput for a reason
// core.ValidateReason refuses or an id ResolveID refuses as bad input;
// ErrNotFound naming every id that names nothing; ErrOutcomeUnknown (the
// tasks may have been requeued); the database's.
func (c *Client) RequeueDead(ctx context.Context, ids []string, opts ActionOptions) ([]RequeueResult, error) {
	if err := core.ValidateReason(opts.Reason); err != nil {
		return nil, mapError(err)
	}
	resolved, err := c.ResolveIDs(ctx, store.IDTask, ids)
	if err != nil {
		return nil, err
	}
	res, err := c.s.RequeueMany(ctx, resolved, c.actorOr(opts.Actor), opts.Reason)
	if err != nil {
		return nil, mapError(err)
	}
	out := make([]RequeueResult, len(res))
	for i, r := range res {
		out[i] = RequeueResult{r}
	}
	return out, nil
}
