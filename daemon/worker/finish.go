package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/flowforge/flowforge/core"
	"github.com/flowforge/flowforge/core/store"
	"github.com/flowforge/flowforge/daemon/backoff"
)

// errOutcomeUnknown is wrapped by finish's error when it gave up after a
// try that may have committed (its reply lost) and the attempt could not be
// read back: the outcome may have been recorded.
var errOutcomeUnknown = errors.New("the outcome may have been recorded: a try got no answer and the attempt could not be read back")

// finish records the outcome through the finish batcher (recordFinish),
// retrying this row's errors for up to one lease from its own first try
// (the heartbeat keeps renewing meanwhile). A try whose error may have
// committed (any error but store.ErrLockTimeout, which writes nothing)
// makes the attempt's history the judge: a later try that matches nothing,
// and the give-up at the deadline, read the attempt back (finishCommitted),
// and a recorded finish is reported as finished, never as a fencing
// rejection. A failed read-back is retried like a failed try. Past the
// deadline the worker gives up (giveUp): its heartbeat stops and the lapsed
// lease hands the task to the reaper. ok=false with a nil error is a
// fencing rejection: the lease was lost before any try committed.
func (w *Worker) finish(req store.FinishRequest, log *slog.Logger) (core.TaskState, bool, error) {
	deadline := w.cfg.Clock.Now().Add(w.cfg.Lease)
	var bo backoff.Backoff
	bo.Min, bo.Max = 50*time.Millisecond, 2*time.Second
	mayHaveCommitted := false
	for {
		res := w.recordFinish(req)
		err := res.Err
		if err == nil {
			if bo.Reset() {
				log.Info("worker: recovered", "dependency", "postgres")
			}
			if res.OK || !mayHaveCommitted {
				return res.State, res.OK, nil
			}
			// An earlier try may have committed and lost its reply: then
			// this one matched nothing because the attempt already left
			// RUNNING, and its history row says so whatever the task did
			// since (the retry promoted, the reaper, a newer claim).
			st, committed, rerr := w.finishCommitted(req, log)
			if rerr == nil {
				return st, committed, nil
			}
			err = rerr
		} else if !errors.Is(err, store.ErrLockTimeout) {
			mayHaveCommitted = true
		}
		if w.cfg.Clock.Now().After(deadline) {
			return w.giveUp(req, mayHaveCommitted, err, log)
		}
		d := bo.Fail()
		log.Warn("worker: finish failed; retrying", "error", err, "retry_in", d.String())
		time.Sleep(d)
	}
}

// giveUp ends finish at its deadline; err is the last try's error. When a
// try may have committed it reads the attempt back once more: a recorded
// finish is reported as finished; a read-back that fails too makes the
// error wrap errOutcomeUnknown (the outcome may have been recorded); one
// that finds nothing leaves err (nothing was recorded: the reaper will
// retry the task).
func (w *Worker) giveUp(req store.FinishRequest, mayHaveCommitted bool, err error, log *slog.Logger) (core.TaskState, bool, error) {
	if !mayHaveCommitted {
		return "", false, err
	}
	st, committed, rerr := w.finishCommitted(req, log)
	switch {
	case rerr != nil:
		return "", false, fmt.Errorf("%w: %w (read-back: %w)", errOutcomeUnknown, err, rerr)
	case committed:
		return st, true, nil
	}
	return "", false, err
}

// finishCommitted reads back whether a try of req whose reply was lost
// committed: from the attempt's own history row (store.FinishRecorded at
// its fencing token and worker), never from the task row, which the
// scheduler (a promoted retry, token + 1), the reaper or a newer claim may
// have moved on since. The answer is counted in
// flowforge_ambiguous_writes_total{op="finish"}; err is the read's
// (nothing counted).
func (w *Worker) finishCommitted(req store.FinishRequest, log *slog.Logger) (core.TaskState, bool, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	st, recorded, err := w.cfg.Store.FinishRecorded(ctx, req.ID, req.Token, req.WorkerID)
	cancel()
	if err != nil {
		log.Warn("worker: could not read back a finish whose reply was lost", "error", err)
		return "", false, err
	}
	if !recorded {
		w.cfg.Metrics.AmbiguousWrites.WithLabelValues("finish", "not_committed").Inc()
		return "", false, nil
	}
	w.cfg.Metrics.AmbiguousWrites.WithLabelValues("finish", "committed").Inc()
	log.Info("worker: the finish committed although its reply was lost", "state", st)
	return st, true, nil
}
