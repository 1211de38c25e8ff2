package worker

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"

	"github.com/flowforge/flowforge/core"
	"github.com/flowforge/flowforge/core/store"
	"github.com/flowforge/flowforge/daemon"
	"github.com/flowforge/flowforge/daemon/backoff"
)

// heartbeatLoop is the lease renewal of one attempt.
type heartbeatLoop struct {
	// finishing is set once the handler returned and its outcome is being
	// recorded: a renewal that then matches nothing lost to that finish (or
	// to the reaper, which the finish will report), so it is not a fault
	// of its own and cancels nothing.
	finishing atomic.Bool
	stop      func()
	// check asks for a renewal now (a cancel notification): the renewal's
	// Stop flag, read from the database, decides whether to cancel.
	check chan struct{}
}

// listenForCancels LISTENs on store.CancelChannel at Config.DatabaseURL
// (reconnecting with backoff) and hands each notification to
// cancelNotified, until ctx ends.
func (w *Worker) listenForCancels(ctx context.Context) {
	daemon.Listen(ctx, w.cfg.DatabaseURL, store.CancelChannel, w.log, w.cancelNotified)
}

// track registers hb as an attempt of run in flight.
func (w *Worker) track(run uuid.UUID, hb *heartbeatLoop) {
	w.runningMu.Lock()
	defer w.runningMu.Unlock()
	if w.running == nil {
		w.running = make(map[uuid.UUID]map[*heartbeatLoop]struct{})
	}
	if w.running[run] == nil {
		w.running[run] = make(map[*heartbeatLoop]struct{})
	}
	w.running[run][hb] = struct{}{}
}

// untrack removes what track registered.
func (w *Worker) untrack(run uuid.UUID, hb *heartbeatLoop) {
	w.runningMu.Lock()
	defer w.runningMu.Unlock()
	delete(w.running[run], hb)
	if len(w.running[run]) == 0 {
		delete(w.running, run)
	}
}

// cancelNotified handles a CancelChannel notification: items are run ids
// (or store.CancelAllRuns; nil after a (re)connect, when notifications may
// have been missed). Every attempt in flight of those runs renews its lease
// at once, and the renewal's Stop flag cancels its handler with
// core.ErrRunCancelled. The notification is only a hint: the database
// decides, as at every heartbeat. Items that are not run ids are ignored.
func (w *Worker) cancelNotified(items []string) {
	wake := store.DecodeCancelWake(items)
	all := wake.AllRuns
	runs := make(map[uuid.UUID]bool, len(wake.Runs))
	for _, id := range wake.Runs {
		runs[id] = true
	}
	w.runningMu.Lock()
	defer w.runningMu.Unlock()
	for run, hbs := range w.running {
		if !all && !runs[run] {
			continue
		}
		if !all {
			w.log.Info("worker: cancel notification; checking the run's running tasks", "run_id", run, "tasks", len(hbs))
		}
		for hb := range hbs {
			select {
			case hb.check <- struct{}{}:
			default: // a check is already pending
			}
		}
	}
}

// heartbeat renews the lease every Lease/3 until stopped, through the
// Renewer's own pool, and at once when hb.check is signalled. While the handler runs it cancels the handler's
// context with core.ErrLeaseLost when the renewal matches nothing, and with
// core.ErrRunCancelled when the run was cancelled.
func (w *Worker) heartbeat(c store.ClaimedTask, cancel context.CancelCauseFunc, log *slog.Logger) *heartbeatLoop {
	hb := &heartbeatLoop{check: make(chan struct{}, 1)}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		interval := w.cfg.Lease / 3
		// A failed renewal is retried soon, not at the next interval: the
		// lease must be renewed as soon as the database answers again.
		retry := backoff.Backoff{Min: max(w.cfg.Lease/60, 10*time.Millisecond), Max: max(w.cfg.Lease/15, 20*time.Millisecond)}
		t := time.NewTimer(interval)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
			case <-hb.check:
			}
			ctx, cc := context.WithTimeout(context.Background(), interval)
			res, err := w.cfg.Renewer.Renew(ctx, c.ID, c.FencingToken, w.cfg.Lease)
			cc()
			if err != nil {
				d := retry.Fail()
				if retry.Failures() == 1 || retry.Failures()%20 == 0 {
					log.Warn("worker: heartbeat failed; retrying", "error", err, "failures", retry.Failures(), "retry_in", d.String())
				}
				t.Reset(d)
				continue
			}
			if retry.Reset() {
				log.Info("worker: heartbeat recovered", "dependency", "postgres")
			}
			t.Reset(interval)
			switch {
			case !res.OK && hb.finishing.Load():
				return
			case !res.OK:
				w.cfg.Metrics.StaleWrites.WithLabelValues("renew").Inc()
				log.Warn("worker: heartbeat rejected by fencing token: lease lost; cancelling the handler")
				cancel(core.ErrLeaseLost)
				return
			case res.Stop && !hb.finishing.Load():
				log.Info("worker: run cancelled; cancelling the handler")
				cancel(core.ErrRunCancelled)
			}
		}
	}()
	hb.stop = func() {
		close(done)
		wg.Wait()
	}
	return hb
}
