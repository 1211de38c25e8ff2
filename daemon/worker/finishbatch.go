package worker

import (
	"context"
	"sync"
	"time"

	"github.com/flowforge/flowforge/core/store"
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
		if r := c.res.Run; r != nil {
			// The run settled with this finish (its only task succeeded).
			w.cfg.Metrics.Latency.ObserveRun(context.Background(), r.Workflow, string(r.State), r.Duration())
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
