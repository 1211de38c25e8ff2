package worker

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/flowforge/flowforge/core"
	"github.com/flowforge/flowforge/core/broker"
	"github.com/flowforge/flowforge/daemon/backoff"
)

// handBack requeues, without claiming, a delivery for a handler this worker
// does not register, so that a worker that does can run it: workers with
// different handler sets may share a queue. It does so while the task has
// been READY for less than UnknownHandlerGrace on the database clock; after
// that it lets the claim go ahead and the attempt fail permanently, so a
// task no worker can run ends DEAD instead of circulating forever. Each
// hand-back of the same task waits longer first (handBackPacer: capped
// exponential with full jitter, HandBackMinDefault to HandBackMaxDefault),
// which bounds how fast an orphan circulates; the first hand-back of a
// task at a fencing token is noted in its history (WaitNoter) so that
// `run show` and the dashboard say what it waits for.
func (w *Worker) handBack(ctx context.Context, d broker.Delivery, disp core.Dispatch, log *slog.Logger) bool {
	if disp.Handler == "" || w.cfg.Registry.Has(disp.Handler) {
		return false
	}
	age, ready, err := w.cfg.Store.ReadyFor(ctx, disp.TaskRunID)
	switch {
	case err != nil:
		// The database did not say how long the task has waited: a claim
		// now would fail permanently a task that a worker registering its
		// handler may be about to run (a new user's trial found tasks DEAD
		// within 100 ms while such workers ran). Hand it back, paced.
		log.Warn("worker: could not read how long a task whose handler this worker lacks has been READY; handing it back", "handler", disp.Handler, "error", err)
	case !ready || age >= w.cfg.UnknownHandlerGrace:
		w.handBacks.forget(disp.TaskRunID)
		return false // the claim decides (and fails it permanently if it wins)
	}
	wait, first := w.handBacks.next(disp.TaskRunID, disp.FencingToken)
	if n, ok := w.cfg.Store.(WaitNoter); ok && first {
		if _, err := n.NoteWaitingForHandler(ctx, disp.TaskRunID, disp.FencingToken, w.cfg.ID, disp.Handler, strings.Join(w.cfg.Registry.Names(), ", ")); err != nil {
			log.Warn("worker: note that a task waits for a handler", "error", err)
		}
	}
	_ = backoff.Sleep(ctx, wait)
	w.cfg.Metrics.HandedBack.WithLabelValues("unknown_handler").Inc()
	log.Debug("worker: handing back a task whose handler this worker does not register",
		"handler", disp.Handler, "ready_for", age.String(), "waited", wait.String())
	if err := d.Requeue(); err != nil {
		log.Warn("worker: hand back", "error", err)
	}
	w.signals.deliveryHandedBack(disp.TaskRunID)
	return true
}

// WaitNoter is implemented by a Store that records that a task waits for a
// worker with its handler (*store.Store does); see
// store.Store.NoteWaitingForHandler.
type WaitNoter interface {
	NoteWaitingForHandler(ctx context.Context, id uuid.UUID, token int64, workerID, handler, registered string) (bool, error)
}

// Pacing of hand-backs of one task (see handBack).
const (
	HandBackMinDefault = 50 * time.Millisecond
	// HandBackMaxDefault caps one wait: a delivery held here occupies one
	// of the consumer's prefetch slots, so it stays short.
	HandBackMaxDefault = 2 * time.Second
	// handBackTasksMax bounds the tasks handBackPacer remembers; when it
	// is full it starts over (the next hand-backs wait the minimum again).
	handBackTasksMax = 4096
)

// handBackPacer remembers, per task, how often this worker has handed it
// back at its current fencing token. Safe for concurrent use.
type handBackPacer struct {
	mu    sync.Mutex
	tasks map[uuid.UUID]*handBackState
}

type handBackState struct {
	token int64
	bo    backoff.Backoff
}

// next records a hand-back of task id at token and returns how long to
// wait before requeueing it, and whether it is the first hand-back at that
// token that this worker remembers.
func (p *handBackPacer) next(id uuid.UUID, token int64) (time.Duration, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	st, ok := p.tasks[id]
	if !ok || st.token != token {
		if p.tasks == nil || len(p.tasks) >= handBackTasksMax {
			p.tasks = make(map[uuid.UUID]*handBackState)
		}
		st = &handBackState{token: token, bo: backoff.Backoff{Min: HandBackMinDefault, Max: HandBackMaxDefault}}
		p.tasks[id] = st
		ok = false
	}
	return st.bo.Fail(), !ok
}

// forget drops task id (it is no longer handed back).
func (p *handBackPacer) forget(id uuid.UUID) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.tasks, id)
}
