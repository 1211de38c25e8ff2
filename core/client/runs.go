package client

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/flowforge/flowforge/core"
	"github.com/flowforge/flowforge/core/store"
)

// Run is a run with its tasks, the object `ffctl run show -o json` prints
// (without "existing"): its fields and their JSON names are store.Run's.
// Tasks come in DAG order (roots first, then by depth, then by name).
type Run = store.Run

// RunFilter selects the runs ListRuns returns (store.RunFilter: workflow,
// state, a created_at window, top-level params, paging with Before, and
// Limit, 50 when 0, at most 10000).
type RunFilter = store.RunFilter

// CancelResult says what a cancel did: TasksCancelled counts the tasks
// that had not started and are now CANCELLED.
type CancelResult = store.CancelResult

// ActionOptions are an audited write's (Cancel, RequeueDead): Reason,
// required (core.ValidateReason: not blank, at most core.MaxReasonBytes),
// and Actor, recorded with it in the history (empty: the Client's).
type ActionOptions struct {
	Reason string
	Actor  string
}

// Run returns the run id names (a whole UUID or a unique prefix, see
// ParseID) with its tasks in DAG order, its workflow's pause while paused,
// the run it repeats and its reruns. Errors: those of ResolveID.
func (c *Client) Run(ctx context.Context, id string) (Run, error) {
	return lookup(ctx, c, store.IDRun, id, func(rid uuid.UUID) (Run, error) { return c.getRun(ctx, rid) })
}

func (c *Client) getRun(ctx context.Context, id uuid.UUID) (Run, error) {
	r, err := c.s.GetRun(ctx, id)
	if err != nil {
		return Run{}, err
	}
	return r.InDAGOrder(), nil
}

// ListRuns returns the runs f selects, newest first, without their tasks.
// Errors: ErrInvalidInput for a filter that cannot select anything
// (store.ErrBadRunFilter), a bad workflow name, a state that is none of
// core.RunStates, or a Limit out of 0..10000; the database's.
func (c *Client) ListRuns(ctx context.Context, f RunFilter) ([]Run, error) {
	if f.Limit < 0 || f.Limit > ListLimitMax {
		return nil, invalid("run list limit %d: want 1 to %d (0: 50)", f.Limit, ListLimitMax)
	}
	if f.Workflow != "" {
		if err := core.ValidateName("workflow", f.Workflow); err != nil {
			return nil, mapError(err)
		}
	}
	if f.State != "" && !f.State.Valid() {
		return nil, invalid("run state %q: want one of %v", f.State, core.RunStates)
	}
	runs, err := c.s.ListRuns(ctx, f)
	return runs, mapError(err)
}

// ListLimitMax bounds a list's Limit, as ffctl's --limit.
const ListLimitMax = 10000

// Cancel cancels the run id names: cancellation is recorded first, tasks
// that have not started become CANCELLED at once, running ones are
// signalled (their handler's context is cancelled); audited with
// opts.Reason and opts.Actor. Errors: those of ResolveID; ErrInvalidInput
// for a reason core.ValidateReason refuses (before anything is read);
// ErrConflict for a run that SUCCEEDED or whose cancellation was already
// requested (nothing changed); ErrOutcomeUnknown.
func (c *Client) Cancel(ctx context.Context, id string, opts ActionOptions) (CancelResult, error) {
	if err := core.ValidateReason(opts.Reason); err != nil {
		return CancelResult{}, mapError(err)
	}
	return lookup(ctx, c, store.IDRun, id, func(rid uuid.UUID) (CancelResult, error) {
		return c.s.CancelRun(ctx, rid, c.actorOr(opts.Actor), opts.Reason)
	})
}

// The pace of Wait's reads: the first WaitPollMin after the one before,
// each later one WaitPollStep more, up to WaitPollMax apart.
const (
	WaitPollMin  = 50 * time.Millisecond
	WaitPollStep = 25 * time.Millisecond
	WaitPollMax  = 500 * time.Millisecond
)

// WaitOptions tunes Wait.
type WaitOptions struct {
	// OnRead, when not nil, is called with every read of the run (from
	// Wait's goroutine), the last one included: ffctl draws its progress
	// line from it.
	OnRead func(Run)
}

// Wait reads the run id names until it has ended (Run.Ended: SUCCEEDED,
// CANCELLED, or FAILED with nothing left running, settled by the
// scheduler) and returns it, or until ctx ends: then it returns the last
// read (the zero Run when none answered) and an error wrapping ctx.Err()
// and its cause. It only reads (the run is not touched), at the pace of
// WaitPollMin to WaitPollMax; a read that fails for another reason than
// ErrNotFound is tried again. Errors: those of ResolveID, also for a run
// deleted while waited for; ctx's.
func (c *Client) Wait(ctx context.Context, id string, opts WaitOptions) (Run, error) {
	p, err := ParseID(store.IDRun, id)
	if err != nil {
		return Run{}, err
	}
	rid := p.Lo
	if !p.Whole() {
		if rid, err = c.s.ResolveID(ctx, store.IDRun, p); err != nil {
			return Run{}, mapError(err)
		}
	}
	run, err := c.poll(ctx, rid, opts)
	if errors.Is(err, store.ErrNotFound) && run.ID == uuid.Nil && p.Whole() {
		_, err = c.s.ResolveID(ctx, store.IDRun, p) // what the id is, if not a run's
		if err == nil {
			err = fmt.Errorf("run %s: %w", p.Text, store.ErrNotFound)
		}
	}
	return run, mapError(err)
}

// poll reads run id until it has ended or ctx ends (see Wait), calling
// opts.OnRead with each read.
func (c *Client) poll(ctx context.Context, id uuid.UUID, opts WaitOptions) (Run, error) {
	var last Run
	interval := WaitPollMin
	for {
		r, err := c.getRun(ctx, id)
		switch {
		case err == nil:
			last = r
			if opts.OnRead != nil {
				opts.OnRead(r)
			}
			if r.Ended() {
				return r, nil
			}
		case ctx.Err() != nil:
			return last, waitEnded(ctx, id)
		case errors.Is(err, store.ErrNotFound):
			return last, err
		}
		// Not ended, or a transient database error: read again.
		t := time.NewTimer(interval)
		select {
		case <-ctx.Done():
			t.Stop()
			return last, waitEnded(ctx, id)
		case <-t.C:
		}
		interval = min(interval+WaitPollStep, WaitPollMax)
	}
}

// waitEnded is the error of a wait for run id that ctx ended: it wraps
// ctx.Err() and, when another, its cause (ffctl's interrupt).
func waitEnded(ctx context.Context, id uuid.UUID) error {
	if cause := context.Cause(ctx); cause != ctx.Err() {
		return fmt.Errorf("wait for run %s: %w: %w", id, ctx.Err(), cause)
	}
	return fmt.Errorf("wait for run %s: %w", id, ctx.Err())
}
