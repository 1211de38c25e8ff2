package worker

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/google/uuid"
	"golang.org/x/sync/semaphore"

	"github.com/flowforge/flowforge/core"
	"github.com/flowforge/flowforge/core/store"
	"github.com/flowforge/flowforge/daemon/backoff"
)

// The crash gate (FAILURE_MODEL modes 128 and 129). A task the reaper took
// from a crashed worker together with others is a suspect
// (store.ClaimedTask.Suspect): it may be the one that killed that worker.
// Its handler runs alone on this worker, so that if it kills this one too
// the reaper knows whom to blame. Every attempt passes the gate before its
// handler starts: an ordinary one takes one unit of it (they run side by
// side, Concurrency at most, as the slots allow anyway), a suspect takes
// all Concurrency units, so it starts only once every running handler has
// ended, and none starts while it runs. The semaphore serves waiters in
// arrival order: a waiting suspect holds back the attempts that come after
// it (no suspect waits for ever behind a steady stream), at the price of
// the worker running nothing else while it drains for the suspect.
//
// A suspect records that it runs alone (store.MarkAlone) once it holds the
// whole gate and before its handler starts: the reaper counts the attempt
// of a suspect that was marked (the culprit), and gives back the attempt
// of one that was still waiting. An attempt holds its part of the gate
// until its finish returns: a suspect's outcome is recorded before any
// other handler may start, so a crash after it is never laid on it.
//
// The attempt's heartbeat renews its lease while it waits; its timeout
// starts when it has passed the gate (when its handler starts), not at
// the claim. A lost lease, a cancelled run or an abort ends the wait: the
// handler never runs and the attempt is recorded as that failure.

// crashGate is the gate of one worker: Concurrency units.
type crashGate struct {
	sem   *semaphore.Weighted
	units int64
}

// newCrashGate returns a gate for concurrency handlers.
func newCrashGate(concurrency int) crashGate {
	return crashGate{sem: semaphore.NewWeighted(int64(concurrency)), units: int64(concurrency)}
}

// passGate waits until attempt c may start its handler (see crashGate)
// and, for a suspect, records that it runs alone. It returns the function
// that gives the gate back, or an error when the wait ended first (ctx
// cancelled: its cause is wrapped) or the attempt lost its lease before
// it was marked (core.ErrLeaseLost, wrapped); then nothing is held.
func (w *Worker) passGate(ctx context.Context, c store.ClaimedTask, log *slog.Logger) (func(), error) {
	units := int64(1)
	if c.Suspect {
		units = w.gate.units
	}
	if !w.gate.sem.TryAcquire(units) {
		if c.Suspect {
			log.Info("worker: crash suspect waiting for the other handlers to end; it runs alone")
		}
		w.signals.gateWait(c.ID)
		if err := w.gate.sem.Acquire(ctx, units); err != nil {
			return nil, fmt.Errorf("waiting to start the handler (crash suspect: %v): %w", c.Suspect, context.Cause(ctx))
		}
	}
	release := func() { w.gate.sem.Release(units) }
	if !c.Suspect {
		return release, nil
	}
	if err := w.markAlone(ctx, c.ID, c.FencingToken); err != nil {
		release()
		return nil, err
	}
	log.Info("worker: running a crash suspect alone")
	return release, nil
}

// markAlone records that the attempt (id, token) runs alone, retrying a
// database error with backoff while ctx lives (each try bounded by a
// third of the lease). A refusal (the attempt is no longer RUNNING with
// its token) returns core.ErrLeaseLost wrapped.
func (w *Worker) markAlone(ctx context.Context, id uuid.UUID, token int64) error {
	bo := backoff.Backoff{Min: 20 * time.Millisecond, Max: max(w.cfg.Lease/15, 20*time.Millisecond)}
	for {
		tctx, cancel := context.WithTimeout(ctx, max(w.cfg.Lease/3, time.Second))
		ok, err := w.cfg.Store.MarkAlone(tctx, id, token)
		cancel()
		switch {
		case err == nil && ok:
			return nil
		case err == nil:
			return fmt.Errorf("record that the crash suspect runs alone: %w", core.ErrLeaseLost)
		}
		if serr := backoff.Sleep(ctx, bo.Fail()); serr != nil {
			return fmt.Errorf("record that the crash suspect runs alone: %w (last error: %v)", context.Cause(ctx), err)
		}
	}
}
