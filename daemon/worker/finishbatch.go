package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/flowforge/flowforge/core"
	"github.com/flowforge/flowforge/core/store"
	"github.com/flowforge/flowforge/daemon/backoff"
	"github.com/flowforge/flowforge/daemon/failpoint"
)

// finishCall is one attempt's outcome waiting in a finishBatcher.
type finishCall struct {
	req store.FinishRequest
	res store.FinishResult
	// done is closed once res is set; lead is signalled when this call's
	// goroutine is to record the next batch.
	done chan struct{}
	lead chan struct{}
}

// finishBatcher records outcomes in batches (in the manner of River's
// batch completer) without a goroutine of its own: the goroutine whose
// attempt finds no statement in flight records the queue (up to
// BatchMaxDefault rows) in one FinishMany, and hands the next batch, made
// of the attempts that queued meanwhile, to the first of them. So at most
// one finish statement of the worker is in flight, a lone attempt is
// recorded at once (no window), and under load a batch holds what arrived
// during the previous statement: the delay a batch adds is at most one
// statement. Safe for concurrent use; the zero value is ready.
//
// Rules a batch keeps:
//   - every call of a batch gets its own row's answer (FinishMany's entry
//     for its request) or, when the statement got no answer, the
//     statement's error, in its Err: never another row's answer, and never
//     an empty answer (OK false, nil Err), which says "rejected by the
//     fencing token" and is reported as a stale write;
//   - a failed statement's rows, the leader's and its followers' alike, are
//     each retried or read back by their own attempt (finish), never
//     reported stale: any of them may have committed;
//   - a row's deadline is its own: finish counts one lease from its
//     attempt's first try and checks it only after a try of that row
//     failed; a batch shares a statement, not a deadline.
type finishBatcher struct {
	mu    sync.Mutex
	queue []*finishCall
	busy  bool // a goroutine is recording a batch
}

// recordFinish records req through the worker's finishBatcher and returns
// its row's answer; its Err is the row's own error or that of a statement
// that got no answer (any row of it may have committed).
func (w *Worker) recordFinish(req store.FinishRequest) store.FinishResult {
	b := &w.finishes
	c := &finishCall{req: req, done: make(chan struct{}), lead: make(chan struct{}, 1)}
	b.mu.Lock()
	b.queue = append(b.queue, c)
	lead := !b.busy
	b.busy = true
	b.mu.Unlock()
	if !lead {
		select {
		case <-c.done:
			return c.res
		case <-c.lead:
		}
	}
	w.flushFinishes()
	<-c.done
	return c.res
}

// flushFinishes records the head of the queue (which holds the caller's
// call) in one FinishMany, answers every call of it and passes the lead
// to the next queued call, if any. It keeps finishBatcher's rules: each
// call is answered with its own row's result, or with the statement's
// error when the statement failed (every call of the batch, the leader's
// and the followers', gets that error, so each retries or reads back).
func (w *Worker) flushFinishes() {
	b := &w.finishes
	b.mu.Lock()
	n := min(len(b.queue), BatchMaxDefault)
	batch := append([]*finishCall(nil), b.queue[:n]...)
	b.queue = append(b.queue[:0], b.queue[n:]...)
	b.mu.Unlock()

	reqs := make([]store.FinishRequest, len(batch))
	for i, c := range batch {
		reqs[i] = c.req
	}
	// A testing aid: the process dies with the batch built and not
	// recorded (the e2e test of a worker killed mid-batch).
	w.cfg.Failpoints.ExitIf(failpoint.WorkerExitBeforeFinishBatch)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	res, err := w.cfg.Store.FinishMany(ctx, reqs)
	cancel()
	w.cfg.Metrics.WriteBatchSize.WithLabelValues("finish").Observe(float64(len(batch)))
	for i, c := range batch {
		if err != nil {
			c.res = store.FinishResult{Err: err}
		} else {
			c.res = res[i]
		}
		close(c.done)
	}

	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.queue) > 0 {
		b.queue[0].lead <- struct{}{}
		return
	}
	b.busy = false
}

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
