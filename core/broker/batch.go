package broker

import (
	"context"
	"errors"
	"fmt"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// PublishBatch publishes msgs (persistent, mandatory, ContentType
// application/json, MessageId = ID) each to its handler's queue through
// the route exchange, or to the shared dispatch queue when the handler has
// no queue bound or none of its own (see RoutingKey and the package doc,
// "Routing"), and waits for all publisher confirms,
// bounded by ctx and Config.ConfirmTimeout.
//
// The returned outcomes are aligned with msgs and always have len(msgs)
// entries, also when err is non-nil. Nacked and Returned are per-message
// results, not errors. Errors:
//   - ErrBlocked: the connection is blocked by a resource alarm (checked
//     before each message); the rest of the batch is NotSent.
//   - ErrTimeout together with ErrConnectionLost: publishing or confirming
//     took longer than ConfirmTimeout; the connection has been closed and
//     unconfirmed messages are TimedOut.
//   - ErrConnectionLost: the connection or channel closed; unconfirmed
//     messages are TimedOut or NotSent, never Confirmed.
//   - ctx.Err(): ctx ended. While confirms are awaited the connection is
//     kept and pending messages are TimedOut; if ctx ends while messages are
//     still being written the connection is closed (a write the broker does
//     not read can only be interrupted that way) and the error also wraps
//     ErrConnectionLost.
func (p *Publisher) PublishBatch(ctx context.Context, msgs []Message) ([]Outcome, error) {
	return p.publishBatch(ctx, msgs, nil)
}

// publishBatch implements PublishBatch. keys, if not nil, overrides the
// routing key per message (tests use it to publish unroutable messages).
func (p *Publisher) publishBatch(ctx context.Context, msgs []Message, keys []string) ([]Outcome, error) {
	out := make([]Outcome, len(msgs))
	if len(msgs) == 0 {
		return out, nil
	}
	p.pubMu.Lock()
	defer p.pubMu.Unlock()

	if err := p.canPublish(ctx); err != nil {
		return out, fmt.Errorf("publish batch: %w", err)
	}

	wctx, cancel := context.WithTimeout(ctx, p.cfg.ConfirmTimeout)
	defer cancel()
	// Watchdog for the publish phase: when the broker stops reading (alarm,
	// flow control, dead peer) a write blocks in the kernel and only closing
	// the socket frees it.
	aborted := make(chan struct{})
	stopWatchdog := context.AfterFunc(wctx, func() {
		defer close(aborted)
		p.abort()
	})

	seqs, dcs, pubErr := p.publishAll(wctx, msgs, keys, out)

	watchdogFired := !stopWatchdog()
	if watchdogFired {
		<-aborted
	} else {
		p.awaitConfirms(wctx, dcs)
	}

	// Decide outcomes: confirms first, then returns, which win.
	pending := p.confirmOutcomes(dcs, out)
	p.returnOutcomes(msgs, seqs, out)

	return out, p.batchErr(ctx, wctx, watchdogFired, pubErr, pending, len(msgs))
}

// canPublish says why a batch cannot start: the publisher is dead (its
// deadErr), the connection is blocked (ErrBlocked) or ctx ended (ctx.Err()).
func (p *Publisher) canPublish(ctx context.Context) error {
	select {
	case <-p.done:
		return p.deadErr()
	default:
	}
	if p.blocked.Load() {
		return ErrBlocked
	}
	return ctx.Err()
}

// publishAll publishes msgs in order until one fails, the connection is
// blocked or wctx ends, marking each published message TimedOut in out
// until a confirm says otherwise. It returns, aligned with msgs, each
// published message's sequence number (seqHeader) and deferred confirm
// (zero and nil for the messages not sent), and why it stopped early
// (ErrBlocked, the publish error, or nil).
func (p *Publisher) publishAll(wctx context.Context, msgs []Message, keys []string, out []Outcome) ([]uint64, []*amqp.DeferredConfirmation, error) {
	p.sock.cork()
	seqs, dcs, err := p.writeAll(wctx, msgs, keys, out)
	if uerr := p.sock.uncork(); uerr != nil {
		// The messages held are lost with the socket: close the
		// connection, so that their confirms resolve (TimedOut) and Done
		// says it.
		p.abort()
		if err == nil {
			err = lost(fmt.Errorf("write batch: %w", uerr))
		}
	}
	return seqs, dcs, err
}

// writeAll is publishAll's loop, run while the socket is corked: amqp091
// writes each message into the cork's buffer, and publishAll's uncork
// sends what is left of them in one write (corkConn).
func (p *Publisher) writeAll(wctx context.Context, msgs []Message, keys []string, out []Outcome) ([]uint64, []*amqp.DeferredConfirmation, error) {
	seqs := make([]uint64, len(msgs))
	dcs := make([]*amqp.DeferredConfirmation, len(msgs))
	for i, m := range msgs {
		if p.blocked.Load() {
			return seqs, dcs, ErrBlocked
		}
		if wctx.Err() != nil {
			break
		}
		exchange, key := RoutingKey(p.cfg.Queue, m.Handler)
		mandatory := true
		switch {
		case keys != nil:
			exchange, key = "", keys[i]
		case m.Exchange != "":
			exchange, key, mandatory = m.Exchange, m.Key, false
		}
		p.seq++
		dc, err := p.ch.PublishWithDeferredConfirm(exchange, key, mandatory, false, amqp.Publishing{
			Headers:      amqp.Table{seqHeader: int64(p.seq)},
			ContentType:  "application/json",
			DeliveryMode: amqp.Persistent,
			MessageId:    m.ID,
			Timestamp:    time.Now().UTC(),
			Body:         m.Body,
		})
		if err != nil {
			return seqs, dcs, err
		}
		seqs[i], dcs[i] = p.seq, dc
		out[i] = TimedOut // until a confirm says otherwise
	}
	return seqs, dcs, nil
}

// confirmOutcomes sets out[i] from each resolved confirmation dcs[i]
// (Confirmed, Nacked, or TimedOut when a closing channel resolved it) and
// returns how many published messages are still TimedOut.
func (p *Publisher) confirmOutcomes(dcs []*amqp.DeferredConfirmation, out []Outcome) int {
	pending := 0
	for i, dc := range dcs {
		if dc == nil {
			continue
		}
		select {
		case <-dc.Done():
			if dc.Acked() {
				out[i] = Confirmed
			} else if p.ch.IsClosed() || p.conn.IsClosed() {
				// amqp091 resolves pending confirms as nacks when the channel
				// closes: the real fate is unknown.
				out[i] = TimedOut
			} else {
				out[i] = Nacked
			}
		default:
		}
		if out[i] == TimedOut {
			pending++
		}
	}
	return pending
}

// returnOutcomes marks Returned, whatever its confirm said, each published
// message (seqs[i] != 0) that the broker returned, and logs how many.
func (p *Publisher) returnOutcomes(msgs []Message, seqs []uint64, out []Outcome) {
	returned := p.returns.flush()
	nReturned := 0
	for i, seq := range seqs {
		if seq != 0 && returned.has(seq, msgs[i].ID) {
			out[i] = Returned
			nReturned++
		}
	}
	if nReturned > 0 {
		p.log.Warn("broker: returned unroutable messages", "returned", nReturned, "batch", len(msgs))
	}
}

// awaitConfirms waits until every non-nil confirmation is resolved or wctx
// ends.
func (p *Publisher) awaitConfirms(wctx context.Context, dcs []*amqp.DeferredConfirmation) {
	for _, dc := range dcs {
		if dc == nil {
			continue
		}
		select {
		case <-dc.Done():
		case <-wctx.Done():
			return
		}
	}
}

// batchErr builds the error of a batch: nil when every published message
// got a definite answer (Confirmed, Nacked or Returned) and nothing stopped
// the batch early.
func (p *Publisher) batchErr(ctx, wctx context.Context, watchdogFired bool, pubErr error, pending, total int) error {
	ctxErr := ctx.Err()
	if watchdogFired {
		if ctxErr != nil {
			return fmt.Errorf("publish batch: interrupted while writing, connection closed: %w: %w", ErrConnectionLost, ctxErr)
		}
		return fmt.Errorf("publish batch: publishing took longer than %s, connection closed: %w: %w",
			p.cfg.ConfirmTimeout, ErrTimeout, ErrConnectionLost)
	}
	if pending > 0 && wctx.Err() != nil {
		if ctxErr != nil {
			return fmt.Errorf("publish batch: %d of %d messages unconfirmed: %w", pending, total, ctxErr)
		}
		p.abort()
		return fmt.Errorf("publish batch: %d of %d messages unconfirmed after %s, connection closed: %w: %w",
			pending, total, p.cfg.ConfirmTimeout, ErrTimeout, ErrConnectionLost)
	}
	switch {
	case errors.Is(pubErr, ErrBlocked):
		return fmt.Errorf("publish batch: %w", ErrBlocked)
	case pubErr != nil:
		if cause := p.closeCause(); cause != nil && !p.closing.Load() {
			return fmt.Errorf("publish batch: %w: %w", lost(pubErr), cause)
		}
		return fmt.Errorf("publish batch: %w", lost(pubErr))
	case pending > 0:
		// Only a closing channel resolves confirms without an answer.
		p.closeCause()
		return fmt.Errorf("publish batch: %d of %d messages unconfirmed: %w", pending, total, p.deadErrNow())
	}
	return nil
}

// PermanentRefusal reports whether err (from PublishBatch) says that the
// broker refused a message for good, and the broker's reason. The
// refusals no retry can cure, as RabbitMQ reports them:
//   - 406 PRECONDITION_FAILED closing the channel while publishing: the
//     message is larger than the broker's max_message_size, or another
//     property of the message itself is refused.
//
// The channel is closed, so the rest of the batch is TimedOut or NotSent:
// the broker does not say which message it refused. A batch of one
// message names it.
func PermanentRefusal(err error) (reason string, ok bool) {
	var ae *amqp.Error
	if errors.As(err, &ae) && ae.Server && ae.Code == amqp.PreconditionFailed {
		return ae.Reason, true
	}
	return "", false
}

// closeCauseWait bounds how long a failed batch waits for the broker's
// reason for closing the channel.
const closeCauseWait = time.Second

// closeCause waits (at most closeCauseWait) for the connection or channel
// to be reported closed and returns why, or nil if it was not.
func (p *Publisher) closeCause() error {
	t := time.NewTimer(closeCauseWait)
	defer t.Stop()
	select {
	case <-p.done:
	case <-t.C:
		return nil
	}
	p.reasonMu.Lock()
	defer p.reasonMu.Unlock()
	return p.reason
}
