package broker

import (
	"context"
	"fmt"
	"strings"

	amqp "github.com/rabbitmq/amqp091-go"
)

// Re-driving the dispatches a quorum queue's delivery-limit dead-lettered
// (e2e/FAILURE_MODEL.md, mode 138). A delivery-limit (a policy on RabbitMQ
// 3.10, a default of 20 from 4.0) dead-letters a dispatch returned to its
// queue too often: by worker crashes and closed channels, and by hand-backs
// (basic.nack with requeue; RabbitMQ 3.10 to 4.2 count those). Nothing
// drains the dead-letter queue, so its task would wait for the scheduler's
// redispatch (--redispatch-after). The publisher sends such a dispatch back
// to the queue it died in instead; everything else in the dead-letter
// queue (the garbage a worker rejected on purpose, what a person put there)
// stays, its content and order intact.

// DeathReasonDeliveryLimit is the reason RabbitMQ records in x-death (and
// x-first-death-reason) for a message a quorum queue dead-lettered because
// its delivery count passed the queue's delivery-limit (RabbitMQ 3.10.8,
// checked by e2e.TestDeliveryLimitDeadLettersAreRedrivenAndGarbageStays).
// A worker's basic.reject of garbage is recorded as "rejected".
const DeathReasonDeliveryLimit = "delivery_limit"

// RedriveTarget decides, from the headers of a message in queue's
// dead-letter queue, whether the re-driver sends it back (ok, to target)
// or leaves it where it is. It re-drives only a message whose most recent
// death (x-death[0]: RabbitMQ keeps the most recent first) has reason
// DeathReasonDeliveryLimit and happened in one of queue's dispatch queues,
// queue itself or a handler's queue (queue.h.<handler>); target is that
// queue. It leaves every other message: one a worker rejected as garbage
// (reason "rejected"), one that expired, one dead-lettered from another
// queue, one without x-death (published there by hand).
func RedriveTarget(queue string, headers map[string]any) (target string, ok bool) {
	deaths, _ := headers["x-death"].([]any)
	if len(deaths) == 0 {
		return "", false
	}
	var last map[string]any
	switch d := deaths[0].(type) {
	case amqp.Table:
		last = d
	case map[string]any:
		last = d
	default:
		return "", false
	}
	reason, _ := last["reason"].(string)
	died, _ := last["queue"].(string)
	if reason != DeathReasonDeliveryLimit {
		return "", false
	}
	prefix := queue + handlerQueueInfix
	if died != queue && (!strings.HasPrefix(died, prefix) || len(died) == len(prefix)) {
		return "", false
	}
	return died, true
}

// RedrivePass is what one RedriveDeadLetters pass did.
type RedrivePass struct {
	// Redriven counts the dead letters sent back, by the queue each copy
	// was confirmed in.
	Redriven map[string]int
	// Kept counts the dead letters the pass took and left in the
	// dead-letter queue (RedriveTarget said leave, or no copy was
	// confirmed).
	Kept int
	// Failed counts the kept dead letters RedriveTarget re-drives whose
	// copy was not confirmed (returned, nacked, unanswered): a later pass
	// should try them again.
	Failed int
}

// redriveBatch bounds how many dead letters a pass takes before it
// publishes their copies and waits for the confirms together.
const redriveBatch = 64

// RedriveDeadLetters takes one pass over the dead-letter queue of the
// publisher's queue, taking at most limit messages (basic.get, unacked, on
// a channel of its own): each one RedriveTarget re-drives is published to
// its target (the default exchange, mandatory, with its body and message
// id), or to the shared queue when the target returns it (a handler queue
// deleted since), and only once that copy is confirmed is the dead letter
// acked; every other message it took is returned with one basic.nack
// (multiple, requeue) when the pass ends, which a quorum queue puts back at
// its head in their order. The messages it holds are invisible to other
// readers until then. A copy confirmed whose ack is lost leaves the dead
// letter to be re-driven again: a duplicate dispatch, which its claim
// refuses (mode 2). Errors: the connection or channel lost (wrapping
// ErrConnectionLost: the broker then returns what the pass held, in an
// order of its own), a publish error (PublishBatch's), ctx ending.
func (p *Publisher) RedriveDeadLetters(ctx context.Context, limit int) (RedrivePass, error) {
	pass := RedrivePass{Redriven: map[string]int{}}
	ch, err := p.conn.Channel()
	if err != nil {
		return pass, lost(fmt.Errorf("redrive: open channel: %w", err))
	}
	var lastKept uint64
	defer func() {
		if lastKept != 0 {
			// Every delivery still unacked is one the pass keeps.
			_ = ch.Nack(lastKept, true, true)
		}
		_ = ch.Close()
	}()
	dead := DeadLetterQueue(p.cfg.Queue)
	for taken := 0; taken < limit && ctx.Err() == nil; {
		batch, drained, err := takeDeadLetters(ch, dead, min(redriveBatch, limit-taken))
		if err != nil {
			return pass, err // the channel is gone: the broker returns what it held
		}
		taken += len(batch)
		kept, err := p.redriveBatch(ctx, batch, &pass)
		pass.Kept += len(kept)
		for _, tag := range kept {
			lastKept = max(lastKept, tag)
		}
		if err != nil || drained {
			return pass, err
		}
	}
	return pass, ctx.Err()
}

// takeDeadLetters takes up to n messages from queue with basic.get
// (unacked), and reports whether the queue had no more.
func takeDeadLetters(ch *amqp.Channel, queue string, n int) ([]amqp.Delivery, bool, error) {
	var out []amqp.Delivery
	for len(out) < n {
		d, ok, err := ch.Get(queue, false)
		if err != nil {
			return out, false, lost(fmt.Errorf("redrive: get from %s: %w", queue, err))
		}
		if !ok {
			return out, true, nil
		}
		out = append(out, d)
	}
	return out, false, nil
}

// redriveBatch re-drives the dead letters of batch that RedriveTarget
// sends back, acking each whose copy was confirmed, counts them in pass
// (Redriven, Failed) and returns the delivery tags of those it keeps.
func (p *Publisher) redriveBatch(ctx context.Context, batch []amqp.Delivery, pass *RedrivePass) ([]uint64, error) {
	var kept []uint64
	var send []amqp.Delivery
	var targets []string
	for _, d := range batch {
		if target, ok := RedriveTarget(p.cfg.Queue, d.Headers); ok {
			send = append(send, d)
			targets = append(targets, target)
		} else {
			kept = append(kept, d.DeliveryTag)
		}
	}
	if len(send) == 0 {
		return kept, nil
	}
	out, err := p.publishCopies(ctx, send, targets)
	for i, d := range send {
		if out[i] != Confirmed {
			kept = append(kept, d.DeliveryTag)
			pass.Failed++
			continue
		}
		if ackErr := d.Ack(false); ackErr != nil && err == nil {
			err = lost(fmt.Errorf("redrive: ack: %w", ackErr))
		}
		pass.Redriven[targets[i]]++
	}
	return kept, err
}

// publishCopies publishes a copy of each of ds to targets[i] and, for those
// the broker returned from a handler's queue, to the shared queue; targets
// is updated to where each copy was confirmed.
func (p *Publisher) publishCopies(ctx context.Context, ds []amqp.Delivery, targets []string) ([]Outcome, error) {
	msgs := make([]Message, len(ds))
	for i, d := range ds {
		msgs[i] = Message{ID: d.MessageId, Body: d.Body}
	}
	out, err := p.publishBatch(ctx, msgs, targets)
	if err != nil {
		return out, fmt.Errorf("redrive: %w", err)
	}
	var again []int
	for i, o := range out {
		if o == Returned && targets[i] != p.cfg.Queue {
			again = append(again, i)
		}
	}
	if len(again) == 0 {
		return out, nil
	}
	retry := make([]Message, len(again))
	keys := make([]string, len(again))
	for j, i := range again {
		retry[j], keys[j] = msgs[i], p.cfg.Queue
	}
	out2, err := p.publishBatch(ctx, retry, keys)
	for j, i := range again {
		out[i] = out2[j]
		if out2[j] == Confirmed {
			targets[i] = p.cfg.Queue
		}
	}
	if err != nil {
		return out, fmt.Errorf("redrive: %w", err)
	}
	return out, nil
}

// DeadLetterDepth returns the number of messages ready in the dead-letter
// queue of the publisher's queue (a passive declare on a throwaway channel;
// messages a reader holds unacked are not counted). Errors: the queue does
// not exist, or the connection is lost (wrapping ErrConnectionLost).
func (p *Publisher) DeadLetterDepth() (int, error) {
	q, exists, err := inspectQueue(p.conn, DeadLetterQueue(p.cfg.Queue))
	if err != nil {
		return 0, err
	}
	if !exists {
		return 0, fmt.Errorf("dead-letter queue %s does not exist", DeadLetterQueue(p.cfg.Queue))
	}
	return q.Messages, nil
}
