package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/flowforge/flowforge/core"
	"github.com/flowforge/flowforge/core/store"
	"github.com/flowforge/flowforge/daemon/backoff"
)

// execute runs one claimed attempt and records its outcome. The error is
// non-nil when the outcome's fate is unknown (finish gave up: see finish);
// nil when it was recorded or rejected by its fencing token. parent is the
// span context of the dispatch's traceparent: when valid, the handler and
// the finish are recorded as spans of the run's trace, and the handler's
// context carries its span.
func (w *Worker) execute(c store.ClaimedTask, parent trace.SpanContext) error {
	w.cfg.Metrics.InFlight.Inc()
	defer w.cfg.Metrics.InFlight.Dec()
	log := w.log.With("task_run_id", c.ID, "run_id", c.RunID, "task", c.TaskName, "attempt", c.Attempt, "fencing_token", c.FencingToken)
	log.Debug("worker: running task", "handler", c.Handler)

	hctx, cancel := context.WithCancelCause(w.abortCtx)
	defer cancel(nil)
	hb := w.heartbeat(c, cancel, log)
	w.track(c.RunID, hb)
	// The crash gate (suspect.go): held until the finish returns; the
	// timeout starts once it is passed.
	runCtx := hctx
	var result json.RawMessage
	var reusedFrom *store.KeySource
	leaveGate, runErr := w.passGate(hctx, c, log)
	if runErr == nil {
		defer leaveGate()
		if t := c.Timeout(); t > 0 {
			var cancelT context.CancelFunc
			runCtx, cancelT = context.WithTimeoutCause(hctx, t, fmt.Errorf("%w after %s", ErrTimeout, t))
			defer cancelT()
		}
		result, reusedFrom, runErr = w.invokeTraced(runCtx, c, parent, log)
	}

	req := w.finishRequest(c, result, reusedFrom, runErr, context.Cause(runCtx), log)
	// The heartbeat keeps renewing while the outcome is recorded: a finish
	// slowed by the database (a lock, a failover) must not let the lease
	// lapse and have a completed attempt reaped and run again.
	hb.finishing.Store(true)
	state, ok, err := w.finishTraced(req, c, parent, log)
	w.untrack(c.RunID, hb)
	hb.stop()
	defer w.signals.attemptFinished(attemptFinished{Req: req, State: state, OK: ok, Err: err})
	switch {
	case errors.Is(err, errOutcomeUnknown):
		log.Error("worker: the outcome may have been recorded: a try got no answer and the attempt could not be read back; if it was not recorded, the reaper retries the task once its lease expires", "error", err)
	case err != nil:
		log.Error("worker: could not record the outcome; the lease will expire and the task will be retried", "error", err)
	case !ok:
		w.cfg.Metrics.StaleWrites.WithLabelValues("finish").Inc()
		log.Warn("worker: stale finish rejected by fencing token (lease lost); outcome discarded", "outcome", req.Outcome)
	default:
		w.cfg.Metrics.TasksFinished.WithLabelValues(string(state)).Inc()
		if req.Outcome == store.OutcomeSucceeded {
			log.Debug("worker: task finished", "state", state)
		} else {
			// A failure is an operator's business: a retry or a cancel at
			// Info, a DEAD at Warn; a success stays at Debug
			// (the hot path logs nothing per task at the default level).
			attrs := []any{"state", state, "error", req.Error, "handler", c.Handler}
			switch state {
			case core.TaskRetrying:
				log.Info("worker: task failed; retrying", append(attrs, "retry_in", req.RetryDelay.String())...)
			case core.TaskCancelled:
				log.Info("worker: task cancelled", attrs...)
			default:
				log.Warn("worker: task failed", attrs...)
			}
		}
	}
	return err
}

// finishRequest is the FinishRequest of attempt c: its outcome from runErr
// and cause (the handler's context's), its result stored as
// core.SanitizeResultNoted makes it (a rewrite noted, logged and counted:
// mode 130), its error sanitised, its retry delay from its policy.
func (w *Worker) finishRequest(c store.ClaimedTask, result json.RawMessage, reusedFrom *store.KeySource, runErr, cause error, log *slog.Logger) store.FinishRequest {
	req := store.FinishRequest{ID: c.ID, Token: c.FencingToken, WorkerID: w.cfg.ID}
	switch {
	case runErr == nil:
		req.Outcome = store.OutcomeSucceeded
		var rw core.ResultRewrite
		req.Result, rw = core.SanitizeResultNoted(result)
		if rw.Note != "" {
			req.ResultNote = rw.Note
			for _, how := range rw.Kinds {
				w.cfg.Metrics.ResultsRewritten.WithLabelValues(how).Inc()
			}
			log.Warn("worker: " + rw.Note)
		}
		if c.IdempotencyKey.Valid {
			req.IdempotencyKey = c.IdempotencyKey.String
		}
		req.ReusedFrom = reusedFrom
	case errors.Is(cause, core.ErrRunCancelled):
		req.Outcome = store.OutcomeCancelled
		req.Error = "cancelled: " + core.SanitizeText(runErr.Error(), core.MaxErrorBytes)
	default:
		req.Outcome = store.OutcomeFailed
		msg := runErr.Error()
		if cause != nil && !errors.Is(runErr, cause) {
			msg = fmt.Sprintf("%s (%v)", msg, cause)
		}
		req.Error = core.SanitizeText(msg, core.MaxErrorBytes)
		req.Permanent = core.IsPermanent(runErr)
		req.RetryDelay = c.Policy().Backoff(c.Attempt, nil)
	}
	return req
}

// invoke resolves the idempotency key, then runs the handler, turning a
// panic into an error. A non-nil source means the result is the one that
// task run recorded for the key: the handler did not run. The handler's
// context carries the attempt's task log, closed when invoke returns
// (before the finish: its lines are written beside it, never in it).
func (w *Worker) invoke(ctx context.Context, c store.ClaimedTask, log *slog.Logger) (json.RawMessage, *store.KeySource, error) {
	ctx, endLog := w.withTaskLog(ctx, c)
	defer endLog()
	if c.IdempotencyKey.Valid && c.IdempotencyKey.String != "" {
		res, from, err := w.awaitKey(ctx, c, log)
		if err != nil || from != nil {
			return res, from, err
		}
	}
	start := w.cfg.Clock.Now()
	res, err := w.runHandler(ctx, c, log)
	w.cfg.Metrics.Latency.ObserveHandler(ctx, c.Workflow, c.Handler, w.cfg.Clock.Now().Sub(start))
	return res, nil, err
}

// runHandler looks the handler up and calls it.
func (w *Worker) runHandler(ctx context.Context, c store.ClaimedTask, log *slog.Logger) (json.RawMessage, error) {
	h, ok := w.cfg.Registry.Lookup(c.Handler)
	if !ok {
		hint := "every worker on a queue should register the same handlers, or use a --queue of its own"
		if c.Handler == "shell" {
			hint = "start the worker with --allow-shell to enable it"
		}
		return nil, core.Permanent(fmt.Errorf("unknown handler %q: no worker that took it registers it (this one registers %v); %s", c.Handler, w.cfg.Registry.Names(), hint))
	}
	task := core.Task{
		RunID: c.RunID.String(), TaskRunID: c.ID.String(), Workflow: c.Workflow, TaskName: c.TaskName,
		Attempt: c.Attempt, MaxAttempts: c.MaxAttempts,
		RunParams: json.RawMessage(c.RunParams), Params: json.RawMessage(c.Params),
		Upstream: c.UpstreamResults(), IdempotencyKey: c.IdempotencyKey.String,
	}
	if len(c.Item) > 0 {
		task.Item = json.RawMessage(c.Item)
	}
	return w.call(ctx, h, task, log)
}

// call runs the handler in a goroutine of its own and returns its outcome;
// once the worker is aborted (Abort: a second stop signal, or
// --stop-timeout passed) it waits at most Config.AbortGrace more for a
// handler that does not return when its context is cancelled, then
// returns an error wrapping ErrAborted without it: the attempt is recorded
// failed and the worker's Run can return, so the process exits (which ends
// the handler) instead of waiting for it for ever. Outside an abort it
// waits for the handler however long it takes (its timeout cancels its
// context; a handler that ignores that keeps its slot, and the task is not
// retried while it may still be running here).
func (w *Worker) call(ctx context.Context, h core.Handler, task core.Task, log *slog.Logger) (json.RawMessage, error) {
	type outcome struct {
		res json.RawMessage
		err error
	}
	done := make(chan outcome, 1)
	go func() {
		res, err := w.callRecovering(ctx, h, task, log)
		done <- outcome{res, err}
	}()
	select {
	case o := <-done:
		return o.res, o.err
	case <-w.abortCtx.Done():
	}
	grace := time.NewTimer(w.cfg.AbortGrace)
	defer grace.Stop()
	select {
	case o := <-done:
		return o.res, o.err
	case <-grace.C:
		log.Error("worker: the handler did not return within the abort grace of its cancellation; its attempt is recorded failed and the process exits without it",
			"abort_grace", w.cfg.AbortGrace.String())
		return nil, fmt.Errorf("%w: the handler did not return within %s of its cancellation", ErrAborted, w.cfg.AbortGrace)
	}
}

// callRecovering calls h, turning a panic into an error.
func (w *Worker) callRecovering(ctx context.Context, h core.Handler, task core.Task, log *slog.Logger) (res json.RawMessage, err error) {
	defer func() {
		if r := recover(); r != nil {
			w.cfg.Metrics.HandlerPanics.Inc()
			log.Error("worker: handler panicked", "panic", fmt.Sprint(r), "stack", string(debug.Stack()))
			res, err = nil, fmt.Errorf("handler panicked: %v", r)
		}
	}()
	return h(ctx, task)
}

// awaitKey makes this attempt the key's owner, or waits for the owner's
// result. A non-nil source means the result is that task run's; the finish
// records it (reused_from and the history's reason).
func (w *Worker) awaitKey(ctx context.Context, c store.ClaimedTask, log *slog.Logger) (json.RawMessage, *store.KeySource, error) {
	bo := backoff.Backoff{Min: 20 * time.Millisecond, Max: time.Second}
	for {
		kc, err := w.cfg.Store.ClaimIdempotencyKey(ctx, c.IdempotencyKey.String, c.ID, c.FencingToken)
		switch {
		case err != nil:
			return nil, nil, fmt.Errorf("idempotency key %q: %w", c.IdempotencyKey.String, err)
		case kc.Owned:
			return nil, nil, nil
		case kc.Done:
			log.Info("worker: reusing the result recorded for the idempotency key", "idempotency_key", c.IdempotencyKey.String,
				"reused_from_task_run_id", kc.From.TaskRunID, "reused_from_run_id", kc.From.RunID)
			from := kc.From
			return json.RawMessage(kc.Result), &from, nil
		}
		if err := backoff.Sleep(ctx, bo.Fail()); err != nil {
			return nil, nil, fmt.Errorf("waiting for idempotency key %q: %w", c.IdempotencyKey.String, context.Cause(ctx))
		}
	}
}
