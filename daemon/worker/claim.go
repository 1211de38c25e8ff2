package worker

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/flowforge/flowforge/core"
	"github.com/flowforge/flowforge/core/broker"
	"github.com/flowforge/flowforge/core/store"
	"github.com/flowforge/flowforge/daemon/backoff"
	"github.com/flowforge/flowforge/daemon/metrics"
)

// Batching of claims (see doc.go).
const (
	// BatchMaxDefault bounds the rows of one claim or finish statement
	// (and never more than Concurrency claims).
	BatchMaxDefault = 64
	// BatchWindowDefault is how long a claim batch that already holds more
	// than one delivery (the worker is under load) waits for more before
	// it claims: the most a batch delays a claim. A lone delivery is
	// claimed at once.
	BatchWindowDefault = time.Millisecond
	// statementsInFlightDefault is how many claim statements one worker
	// runs at once: a batch waits for at most that many before its own.
	// (Finish statements run one at a time: see finishBatcher.)
	statementsInFlightDefault = 2
)

// pendingDelivery is a decoded dispatch waiting for a slot and its claim.
type pendingDelivery struct {
	d       broker.Delivery
	disp    core.Dispatch
	log     *slog.Logger
	arrived time.Time // process clock: measures SlotWait, starts the claim span
	// parent is the span context of the dispatch's traceparent, the parent
	// of the delivery's spans; invalid (the zero value) when not traced.
	parent trace.SpanContext
}

// claimedDelivery is a delivery holding a slot, with its claim's answer:
// res when the batch's statement answered, err when it did not.
type claimedDelivery struct {
	pendingDelivery
	res store.ClaimResult
	err error
}

// claimLoop takes the deliveries of pending in order, each into a slot
// (takeSlot), waits until fewer than statementsInFlight claim statements
// run, gathers those that arrived meanwhile into one batch (gather),
// claims the batch in one statement (in a goroutine of its own) and hands
// every delivery, with its row's answer, to the runners (work). It returns, closing work, once
// pending is closed and drained; after ctx ends it claims nothing more and
// requeues what it takes.
func (w *Worker) claimLoop(ctx context.Context, pending <-chan pendingDelivery, work chan<- claimedDelivery) {
	inFlight := make(chan struct{}, max(w.statementsInFlight, 1))
	var claims sync.WaitGroup
	defer func() {
		claims.Wait()
		close(work)
	}()
	var next *pendingDelivery
	for {
		var head pendingDelivery
		if next != nil {
			head, next = *next, nil
		} else {
			p, ok := <-pending
			if !ok {
				return
			}
			head = p
		}
		if !w.takeSlot(ctx, head) {
			continue
		}
		// Wait for a statement slot first: what arrives meanwhile joins
		// this batch.
		inFlight <- struct{}{}
		batch := []pendingDelivery{head}
		batch, next = w.gather(ctx, pending, batch)
		claims.Add(1)
		go func() {
			defer claims.Done()
			defer func() { <-inFlight }()
			w.claimBatch(ctx, batch, work)
		}()
	}
}

// takeSlot waits up to SlotWait (from the delivery's arrival) for a free
// slot; a delivery that gets none, or arrives while the worker stops, is
// handed back to the queue and takeSlot returns false.
func (w *Worker) takeSlot(ctx context.Context, p pendingDelivery) bool {
	if ctx.Err() != nil {
		_ = p.d.Requeue()
		return false
	}
	timer := time.NewTimer(w.cfg.SlotWait - w.cfg.Clock.Now().Sub(p.arrived))
	defer timer.Stop()
	select {
	case w.slots <- struct{}{}:
	case <-timer.C:
		w.cfg.Metrics.HandedBack.WithLabelValues("no_slot").Inc()
		p.log.Info("worker: no free slot; handing the delivery back", "slot_wait", w.cfg.SlotWait.String())
		_ = p.d.Requeue()
		return false
	case <-ctx.Done():
		_ = p.d.Requeue()
		return false
	}
	return true
}

// gather adds to batch (whose deliveries hold slots) the deliveries of
// pending that are there already and find a free slot, up to the batch
// bound; once it holds two or more, and a slot is still free, it waits up
// to BatchWindowDefault for more. The first delivery that finds no free slot ends the batch and is
// returned as next (it waits for its slot as the next head).
func (w *Worker) gather(ctx context.Context, pending <-chan pendingDelivery, batch []pendingDelivery) ([]pendingDelivery, *pendingDelivery) {
	limit := min(w.cfg.Concurrency, BatchMaxDefault)
	var window <-chan time.Time
	for len(batch) < limit && ctx.Err() == nil {
		var p pendingDelivery
		var ok bool
		select {
		case p, ok = <-pending:
		default:
			if len(batch) < 2 || len(w.slots) == cap(w.slots) {
				// Light load, or no slot left for another delivery (nor,
				// with prefetch = Concurrency, a delivery to come): claim now.
				return batch, nil
			}
			if window == nil {
				t := time.NewTimer(BatchWindowDefault)
				defer t.Stop()
				window = t.C
			}
			select {
			case p, ok = <-pending:
			case <-window:
				return batch, nil
			}
		}
		if !ok {
			return batch, nil
		}
		select {
		case w.slots <- struct{}{}:
			batch = append(batch, p)
		default:
			return batch, &p
		}
	}
	return batch, nil
}

// claimBatch claims batch (every delivery holding a slot) in one
// ClaimMany and hands each delivery with its answer to the runners. After
// ctx ended it claims nothing: the deliveries are requeued and their slots
// freed.
func (w *Worker) claimBatch(ctx context.Context, batch []pendingDelivery, work chan<- claimedDelivery) {
	if ctx.Err() != nil {
		for _, p := range batch {
			_ = p.d.Requeue()
			<-w.slots
		}
		return
	}
	reqs := make([]store.ClaimRequest, len(batch))
	for i, p := range batch {
		reqs[i] = store.ClaimRequest{ID: p.disp.TaskRunID, Token: p.disp.FencingToken}
	}
	// The claim must not be cut short by shutdown: a statement cancelled
	// after the server committed it would leave RUNNING tasks that this
	// worker never runs (until their leases expire and cost an attempt).
	// Shutdown was checked just above; the claim itself is bounded.
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), w.cfg.Lease)
	res, err := w.cfg.Store.ClaimMany(cctx, reqs, w.cfg.ID, w.cfg.Lease)
	cancel()
	w.cfg.Metrics.WriteBatchSize.WithLabelValues("claim").Observe(float64(len(batch)))
	for i, p := range batch {
		c := claimedDelivery{pendingDelivery: p, err: err}
		if err == nil {
			c.res = res[i]
		}
		work <- c
	}
}

// runClaimed settles one claimed delivery and frees its slot: a lost claim
// is acked, explained and counted; a won one is acked and run, unless
// another delivery of the same (task, token) runs here already
// (runningAttempts: then it is acked as a duplicate); an error is read
// back (or, for a lock timeout, requeued).
func (w *Worker) runClaimed(ctx context.Context, c claimedDelivery) {
	defer func() { <-w.slots }()
	d, disp, log := c.d, c.disp, c.log
	claimed, ok, err := c.res.Task, c.res.OK, c.err
	span := w.startClaimSpan(c.pendingDelivery)
	if err != nil {
		// The error may have come after the claim committed (its reply was
		// lost): read the row back and act on what it says. A lock
		// timeout is certain to have written nothing.
		if errors.Is(err, store.ErrLockTimeout) {
			log.Warn("worker: claim gave up waiting for a lock; requeueing the delivery", "error", err)
		} else {
			claimed, ok = w.claimCommitted(disp, err, log)
		}
		if !ok {
			endClaimSpan(span, claimed, false, "error")
			_ = backoff.Sleep(ctx, time.Second)
			_ = d.Requeue()
			return
		}
	}
	if !ok {
		reason := w.explainLostClaim(ctx, disp)
		endClaimSpan(span, claimed, false, reason)
		w.cfg.Metrics.ClaimsLost.WithLabelValues(reason).Inc()
		log.Info("worker: claim lost; acking without running", "reason", reason, "redelivered", d.Redelivered)
		if err := d.Ack(); err != nil {
			log.Warn("worker: ack", "error", err)
		}
		w.signals.claimLost(disp.TaskRunID)
		return
	}
	key := attemptKey{id: claimed.ID, token: claimed.FencingToken}
	if !w.attempts.start(key, w.cfg.Clock.Now()) {
		// Another delivery of this (task, token) runs here already: its
		// claim and this one's read-back both match the one attempt.
		w.cfg.Metrics.ClaimsLost.WithLabelValues("duplicate").Inc()
		endClaimSpan(span, claimed, false, "duplicate")
		log.Info("worker: another delivery of this dispatch runs here already; acking without running", "redelivered", d.Redelivered)
		if err := d.Ack(); err != nil {
			log.Warn("worker: ack", "error", err)
		}
		w.signals.claimLost(disp.TaskRunID)
		return
	}
	// In the claim's span, so that the queue-wait and trigger -> READY
	// observations carry its trace id as their exemplar.
	observeClaim(trace.ContextWithSpan(ctx, span), w.cfg.Metrics.Latency, claimed)
	w.cfg.Metrics.TasksClaimed.Inc()
	if err := d.Ack(); err != nil {
		// The claim committed: the lease, not the broker, now governs this
		// task. A redelivery will lose its claim.
		log.Warn("worker: ack after claim failed; the lease governs the task", "error", err)
	}
	endClaimSpan(span, claimed, true, "")
	recordErr := w.execute(claimed, c.parent)
	w.attempts.end(key, recordErr == nil, w.cfg.Clock.Now(), 2*w.cfg.Lease)
}

// claimCommitted reads back a claim that failed with claimErr: the claim
// committed if the task is RUNNING for this worker with the token the claim
// would have returned. It retries the read for up to one lease (past that,
// a committed claim's lease has lapsed anyway) and then renews the lease
// once, so the attempt starts with a whole lease. ok=false means run
// nothing and requeue the delivery (claimErr is logged here).
func (w *Worker) claimCommitted(disp core.Dispatch, claimErr error, log *slog.Logger) (store.ClaimedTask, bool) {
	deadline := w.cfg.Clock.Now().Add(w.cfg.Lease)
	bo := backoff.Backoff{Min: 50 * time.Millisecond, Max: max(w.cfg.Lease/10, 50*time.Millisecond)}
	for {
		ctx, cancel := context.WithTimeout(context.Background(), max(w.cfg.Lease/3, time.Second))
		c, ok, err := w.cfg.Store.ClaimedBy(ctx, disp.TaskRunID, disp.FencingToken+1, w.cfg.ID)
		cancel()
		switch {
		case err == nil && !ok:
			w.cfg.Metrics.AmbiguousWrites.WithLabelValues("claim", "not_committed").Inc()
			log.Error("worker: claim failed; requeueing the delivery", "error", claimErr)
			return store.ClaimedTask{}, false
		case err == nil:
			w.cfg.Metrics.AmbiguousWrites.WithLabelValues("claim", "committed").Inc()
			log.Warn("worker: the claim committed although its reply was lost; running the task", "error", claimErr)
			rctx, cancel := context.WithTimeout(context.Background(), max(w.cfg.Lease/3, time.Second))
			res, rerr := w.cfg.Renewer.Renew(rctx, c.ID, c.FencingToken, w.cfg.Lease)
			cancel()
			if rerr == nil && !res.OK {
				log.Warn("worker: the recovered claim's lease was lost before it could be renewed; running nothing")
				return store.ClaimedTask{}, false
			}
			return c, true
		case w.cfg.Clock.Now().After(deadline):
			log.Error("worker: claim failed and could not be read back; requeueing the delivery", "error", claimErr, "read_error", err)
			return store.ClaimedTask{}, false
		}
		time.Sleep(bo.Fail())
	}
}

func (w *Worker) explainLostClaim(ctx context.Context, disp core.Dispatch) string {
	state, token, err := w.cfg.Store.TaskStateOf(ctx, disp.TaskRunID)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return "unknown_task"
	case err != nil:
		return "unknown"
	case state == core.TaskReady && token != disp.FencingToken:
		return "stale"
	case state == core.TaskCancelled:
		return "cancelled"
	case state == core.TaskReady:
		// READY at the delivery's own token: the claim's fence refused it
		// because the workflow is paused (or, for an instant, because its
		// run's cancellation is being written). The ack hands it back: the
		// task stays READY, and the resume re-sends it.
		return "paused"
	default:
		return "duplicate"
	}
}

// observeClaim observes a won claim's queue wait (READY -> claimed) and,
// for a task's first attempt, its trigger -> READY, both from the
// database's times the claim returned (none is observed for a row made
// READY without ready_at by an older binary).
func observeClaim(ctx context.Context, l *metrics.Latency, c store.ClaimedTask) {
	if !c.ReadyAt.Valid {
		return
	}
	l.ObserveQueueWait(ctx, c.Workflow, c.Handler, c.ClaimedAt.Sub(c.ReadyAt.Time))
	if c.Attempt == 1 {
		l.ObserveTriggerToReady(ctx, c.Workflow, c.Handler, c.ReadyAt.Time.Sub(c.RunCreatedAt))
	}
}
