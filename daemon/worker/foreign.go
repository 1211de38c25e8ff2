package worker

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/flowforge/flowforge/core"
	"github.com/flowforge/flowforge/core/broker"
	"github.com/flowforge/flowforge/daemon/backoff"
)

// Dispatches of another installation (mode 89). Two installations (two
// databases) whose workers consume one queue receive each other's
// dispatches; a claim of one in the wrong database matches nothing, and
// acking it as a lost claim would lose it for its own installation until
// that installation's redispatch. So a worker sends a dispatch that names
// another installation back to the queue without claiming it: it publishes
// a copy (confirmed) to the queue's tail and then acks the original
// (forward), or, when no copy can be confirmed, nacks it with requeue. It
// never rejects it (the dead-letter queue) and never acks it without a
// confirmed copy. The copy goes to the tail, not the head a nack returns a
// message to, so this installation's own dispatches keep flowing past the
// foreign ones, and a fresh copy starts with no x-delivery-count, so a
// delivery limit on the queue (RabbitMQ 4.0-4.2's default of 20 counts
// nacks) never dead-letters it however often it comes back. Each task's
// returns are paced (foreignPacer, as hand-backs are), and the first of a
// burst is logged at error level, then at most once per foreignLogEvery.
const (
	// foreignLogEvery is how often the error log of foreign dispatches
	// repeats while they keep coming.
	foreignLogEvery = time.Minute
	// foreignForwardTimeout bounds one forward: a dial and a confirm.
	foreignForwardTimeout = 10 * time.Second
	// ourInstallationTimeout bounds the read of this worker's installation.
	ourInstallationTimeout = 5 * time.Second
)

// foreignVerdict is what the worker does with a dispatch before it claims.
type foreignVerdict int

const (
	// verdictClaim: ours, or a message naming no installation (an older
	// binary's): claim it as always.
	verdictClaim foreignVerdict = iota
	// verdictForward: another installation's: send it back to the queue.
	verdictForward
	// verdictUndecided: it names an installation but ours could not be
	// read: hand it back (requeue, paced) and decide on a later delivery.
	verdictUndecided
)

// foreignDecision decides what to do with d given this worker's
// installation ours, or the error that reading it returned (oursErr).
func foreignDecision(ours uuid.UUID, oursErr error, d core.Dispatch) foreignVerdict {
	switch {
	case d.Installation == uuid.Nil:
		return verdictClaim
	case oursErr != nil || ours == uuid.Nil:
		return verdictUndecided
	case d.Foreign(ours):
		return verdictForward
	}
	return verdictClaim
}

// mayBeForeign reports whether consume must decide on p in a goroutine of
// its own (settleForeign) before it is claimed: it names an installation
// that is not known to be ours.
func (w *Worker) mayBeForeign(p pendingDelivery) bool {
	if p.disp.Installation == uuid.Nil {
		return false
	}
	ours := w.ours.Load()
	return ours == nil || p.disp.Foreign(*ours)
}

// ourInstallation returns this worker's installation id, read from the
// store once it answers and remembered.
func (w *Worker) ourInstallation(ctx context.Context) (uuid.UUID, error) {
	if ours := w.ours.Load(); ours != nil {
		return *ours, nil
	}
	ctx, cancel := context.WithTimeout(ctx, ourInstallationTimeout)
	defer cancel()
	in, err := w.cfg.Store.Installation(ctx)
	if err != nil {
		return uuid.Nil, err
	}
	w.ours.Store(&in.ID)
	return in.ID, nil
}

// settleForeign decides on p, which names an installation not known to be
// ours (mayBeForeign): ours after all goes on to the claim (ownDelivery);
// another installation's is sent back to the queue (sendBack); undecided
// is handed back after a paced wait.
func (w *Worker) settleForeign(ctx context.Context, p pendingDelivery, pending chan<- pendingDelivery) {
	ours, err := w.ourInstallation(ctx)
	switch foreignDecision(ours, err, p.disp) {
	case verdictClaim:
		w.ownDelivery(ctx, p, pending)
	case verdictForward:
		w.sendBack(ctx, p, ours)
	default:
		wait, _ := w.foreignPacer.next(p.disp.TaskRunID, p.disp.FencingToken)
		p.log.Warn("worker: could not read this database's installation to tell whose dispatch this is; handing it back", "error", err, "dispatch_installation", p.disp.Installation)
		_ = backoff.Sleep(ctx, wait)
		w.cfg.Metrics.HandedBack.WithLabelValues("installation_unknown").Inc()
		if err := p.d.Requeue(); err != nil {
			p.log.Warn("worker: hand back", "error", err)
		}
	}
}

// sendBack returns a dispatch of another installation to the queue after a
// paced wait: a confirmed copy at the tail and then an ack of the original,
// or a nack with requeue when no copy is confirmed (or the worker stops).
func (w *Worker) sendBack(ctx context.Context, p pendingDelivery, ours uuid.UUID) {
	w.logForeign(p, ours)
	wait, _ := w.foreignPacer.next(p.disp.TaskRunID, p.disp.FencingToken)
	outcome := "requeued"
	defer func() {
		w.cfg.Metrics.ForeignDispatches.WithLabelValues(outcome).Inc()
		w.signals.foreignSentBack(foreignSent{ID: p.disp.TaskRunID, DeliveryCount: p.d.DeliveryCount, Outcome: outcome})
	}()
	var err error
	if err = backoff.Sleep(ctx, wait); err == nil {
		fctx, cancel := context.WithTimeout(ctx, foreignForwardTimeout)
		err = w.forwarder.forward(fctx, p.d)
		cancel()
	}
	if err != nil {
		if ctx.Err() == nil {
			p.log.Warn("worker: could not forward a dispatch of another installation; requeueing it", "error", err)
		}
		if err := p.d.Requeue(); err != nil {
			p.log.Warn("worker: requeue a dispatch of another installation", "error", err)
		}
		return
	}
	outcome = "forwarded"
	p.log.Debug("worker: forwarded a dispatch of another installation to the queue's tail", "dispatch_installation", p.disp.Installation, "waited", wait.String())
	if err := p.d.Ack(); err != nil {
		// The copy is queued: the original is redelivered besides it, and
		// the claim in its own installation runs it once.
		p.log.Warn("worker: ack a forwarded dispatch (its copy is queued; the original will come back too)", "error", err)
	}
}

// logForeign logs p at error level, the first of a burst and then at most
// once per foreignLogEvery, with how many were not logged in between.
func (w *Worker) logForeign(p pendingDelivery, ours uuid.UUID) {
	suppressed, ok := w.foreignLog.allow(w.cfg.Clock.Now())
	if !ok {
		return
	}
	p.log.Error("worker: a dispatch of another installation reached this worker's queue; sending it back to the queue, unclaimed "+
		"(two installations share the queue: give each its own --queue or vhost; see docs/operating.md)",
		"installation", ours, "dispatch_installation", p.disp.Installation, "queue", w.cfg.Broker.Queue, "not_logged_since_last", suppressed)
}

// foreignLogLimiter lets one log line through per foreignLogEvery. Safe for
// concurrent use.
type foreignLogLimiter struct {
	mu         sync.Mutex
	last       time.Time
	logged     bool
	suppressed int
}

// allow reports whether a line may be logged at now, and how many were
// held back since the last one.
func (l *foreignLogLimiter) allow(now time.Time) (int, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.logged && now.Sub(l.last) < foreignLogEvery {
		l.suppressed++
		return 0, false
	}
	n := l.suppressed
	l.last, l.logged, l.suppressed = now, true, 0
	return n, true
}

// forwarder publishes copies of deliveries to the dispatch queue on a
// publisher connection of its own, dialled at the first forward and again
// after the connection is lost. Safe for concurrent use (forwards are
// serialised).
type forwarder struct {
	cfg broker.Config
	mu  sync.Mutex
	pub *broker.Publisher
}

// forward publishes a copy of d (its body and message id) and returns nil
// once the broker confirmed it, unreturned: only then may d be acked. Any
// other outcome is an error, and d must be requeued.
func (f *forwarder) forward(ctx context.Context, d broker.Delivery) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.pub != nil {
		select {
		case <-f.pub.Done():
			_ = f.pub.Close()
			f.pub = nil
		default:
		}
	}
	if f.pub == nil {
		p, err := broker.DialPublisher(ctx, f.cfg)
		if err != nil {
			return fmt.Errorf("forward: %w", err)
		}
		f.pub = p
	}
	out, err := f.pub.PublishBatch(ctx, []broker.Message{{ID: d.MessageID, Body: d.Body}})
	if errors.Is(err, broker.ErrConnectionLost) {
		_ = f.pub.Close()
		f.pub = nil
	}
	if err != nil {
		return fmt.Errorf("forward: %w", err)
	}
	if out[0] != broker.Confirmed {
		return fmt.Errorf("forward: the copy was %s", out[0])
	}
	return nil
}

// close closes the publisher, if one was dialled.
func (f *forwarder) close() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.pub != nil {
		_ = f.pub.Close()
		f.pub = nil
	}
}
