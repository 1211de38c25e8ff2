package publisher

import (
	"context"
	"time"

	"github.com/flowforge/flowforge/core/broker"
)

// Re-driving (e2e/FAILURE_MODEL.md, mode 138). A quorum-queue
// delivery-limit on the dispatch queues dead-letters dispatches returned
// too often (worker crashes, hand-backs) into the dead-letter queue, which
// nothing else drains: their tasks would wait for the scheduler's
// redispatch. The publisher, which owns publishing with confirms, looks
// into the dead-letter queue every RedriveInterval and sends those back
// (broker.Publisher.RedriveDeadLetters); it counts them
// (flowforge_dispatches_redriven_total) and warns once per process that a
// delivery-limit applies.
//
// A pass has to walk past every message it leaves (the garbage workers
// reject, mode 26), returning each to the queue's head in its order, so it
// runs only when the dead-letter queue holds more messages than the last
// pass left, and a pass that re-drove nothing doubles the wait before the
// next (up to redriveWaitMax): a dead-letter queue that only gathers
// garbage is walked rarely.

// redriveWaitMax bounds the wait after passes that re-drove nothing.
const redriveWaitMax = time.Minute

// redriveLoop is the re-driver's state between passes.
type redriveLoop struct {
	// kept is how many messages the last pass left in the dead-letter
	// queue (and the least depth seen since): a depth above it means
	// something new arrived.
	kept int
	// wait is the time until the next look.
	wait time.Duration
	// warned is set once the delivery-limit warning was logged.
	warned bool
}

// runRedrive looks into the dead-letter queue until ctx ends.
func (p *Publisher) runRedrive(ctx context.Context) {
	r := &redriveLoop{wait: p.cfg.RedriveInterval}
	t := time.NewTimer(r.wait)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		p.redriveOnce(ctx, r)
		t.Reset(r.wait)
	}
}

// redriveOnce takes a pass over the dead-letter queue on a lane's open
// connection when it holds more than the last pass left, and sets the
// wait before the next look.
func (p *Publisher) redriveOnce(ctx context.Context, r *redriveLoop) {
	pub := p.openLane()
	if pub == nil {
		return // no connection: the lanes re-dial
	}
	depth, err := pub.DeadLetterDepth()
	if err != nil {
		p.log.Debug("publisher: read the dead-letter queue's depth", "error", err)
		return
	}
	r.kept = min(r.kept, depth)
	if depth <= r.kept {
		return // nothing new since the last pass
	}
	pass, err := pub.RedriveDeadLetters(ctx, depth+redriveBatchSlack)
	r.kept = pass.Kept
	n := 0
	for q, k := range pass.Redriven {
		p.cfg.Metrics.DispatchesRedriven.WithLabelValues(q).Add(float64(k))
		n += k
	}
	if n > 0 && !r.warned {
		r.warned = true
		p.log.Warn("publisher: a quorum-queue delivery-limit dead-lettered dispatches; sending them back to their queues "+
			"(remove delivery-limit from the policy of the dispatch queues: docs/operating.md, \"The dead-letter queue policy\")",
			"queue", p.cfg.Broker.Queue, "redriven", n)
	}
	switch {
	case err != nil || pass.Failed > 0:
		// Try what could not be sent again, later.
		r.kept = 0
		r.wait = p.redriveBackOff(r.wait)
		if ctx.Err() == nil {
			p.log.Warn("publisher: re-drive dead-lettered dispatches", "error", err, "redriven", n, "not_sent", pass.Failed)
		}
	case n > 0:
		r.wait = p.cfg.RedriveInterval
		p.log.Debug("publisher: re-drove dispatches a delivery-limit dead-lettered", "redriven", n, "left", pass.Kept)
	default:
		r.wait = p.redriveBackOff(r.wait)
	}
}

// redriveBackOff doubles the wait after a pass that sent nothing back (or
// failed to), up to redriveWaitMax (or RedriveInterval when that is
// longer).
func (p *Publisher) redriveBackOff(wait time.Duration) time.Duration {
	return min(2*wait, max(redriveWaitMax, p.cfg.RedriveInterval))
}

// redriveBatchSlack is how many messages beyond the depth it saw a pass
// may take (those dead-lettered meanwhile): a pass ends however fast new
// dead letters come.
const redriveBatchSlack = 64

// openLane returns a lane's open connection, nil when none has one.
func (p *Publisher) openLane() *broker.Publisher {
	for _, l := range p.lanes {
		pub := l.current()
		if pub == nil {
			continue
		}
		select {
		case <-pub.Done():
		default:
			return pub
		}
	}
	return nil
}
