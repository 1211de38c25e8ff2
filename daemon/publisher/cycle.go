package publisher

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"time"

	"github.com/flowforge/flowforge/core"
	"github.com/flowforge/flowforge/core/broker"
	"github.com/flowforge/flowforge/core/store"
	"github.com/flowforge/flowforge/daemon/failpoint"
)

// QuarantineActor is the actor of the publisher's quarantine audit rows.
const QuarantineActor = "publisher"

// errReturned reports that the broker returned messages as unroutable: the
// dispatch queue is gone (deleted, or a node lost it). The rows stay
// pending; the publisher re-dials, which re-declares the topology.
var errReturned = errors.New("the broker returned unroutable messages (is the dispatch queue missing?)")

// errNacked reports that the broker refused messages (basic.nack). A
// quorum queue nacks while it has no leader, and a channel whose queue
// client lost its leader can keep nacking after a new leader was elected
// (seen with RabbitMQ 3.10 when the leader's node is killed): the rows stay
// pending and the publisher re-dials, which gives it a fresh channel and
// possibly another node.
var errNacked = errors.New("the broker nacked messages")

// batchLimit is the number of rows the lane's next cycle locks: one while
// a permanent refusal is being isolated, else size (Config.BatchSize).
func (l *lane) batchLimit(size int) int {
	if l.isolate > 0 {
		return 1
	}
	return size
}

// cycle publishes one batch of lane ln through pub; it returns how many
// rows the batch held.
// Rows the broker refuses permanently (see quarantineReasons) are
// quarantined in the batch's transaction; the others are published.
func (p *Publisher) cycle(ctx context.Context, ln *lane, pub *broker.Publisher) (int, error) {
	limit := ln.batchLimit(p.cfg.BatchSize)
	batch, err := p.cfg.Store.LockOutbox(ctx, limit)
	if err != nil {
		return 0, err
	}
	defer batch.Rollback()
	if len(batch.Rows) == 0 {
		ln.isolate = 0
		return 0, nil
	}
	quarantine := map[int64]string{}
	var sendable []store.OutboxRow
	for _, r := range batch.Rows {
		if len(r.Payload) > p.cfg.MaxMessageBytes {
			quarantine[r.ID] = fmt.Sprintf("message of %d bytes is larger than the max message size of %d bytes (--max-message-bytes)", len(r.Payload), p.cfg.MaxMessageBytes)
			continue
		}
		sendable = append(sendable, r)
	}
	msgs := make([]broker.Message, len(sendable))
	var spans publishSpans
	for i, r := range sendable {
		handler, traceparent := core.DispatchRoute(r.Payload)
		msgs[i] = broker.Message{ID: strconv.FormatInt(r.ID, 10), Body: r.Payload, Handler: handler}
		if traceparent != "" {
			spans.start(p.tracer, i, r, traceparent)
		}
	}
	start := time.Now()
	outcomes, pubErr := pub.PublishBatch(ctx, msgs)
	if pubErr != nil && pub.Blocked() && !errors.Is(pubErr, broker.ErrBlocked) {
		// The rows' error says why (ffctl outbox, the dashboard's outbox
		// screen): a timeout while blocked is the alarm's.
		pubErr = fmt.Errorf("%w (%w)", pubErr, broker.ErrBlocked)
	}
	spans.end(outcomes, pubErr)
	p.observeConfirms(ctx, msgs, outcomes, time.Since(start))
	p.injectFaults(ctx, outcomes)
	refused, permanent := broker.PermanentRefusal(pubErr)
	if permanent && len(sendable) == 1 {
		quarantine[sendable[0].ID] = "the broker refused the message: " + refused
		pubErr = nil
		outcomes = []broker.Outcome{broker.Refused}
	}
	res := p.sortOutcomes(sendable, outcomes, pubErr)
	if permanent && len(sendable) > 1 {
		ln.isolate = len(sendable) - len(res.confirmed)
		p.log.Warn("publisher: the broker refused a message of the batch permanently; publishing the unconfirmed rows one at a time to find it", "reason", refused, "rows", ln.isolate)
	} else if ln.isolate > 0 {
		ln.isolate--
	}
	// The stamps are written with a fresh context: once the broker has
	// confirmed, shutting down must not discard what we know. The batch's
	// transaction outlives ctx (store.OutboxBatch), so the commit stands.
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if err := p.record(wctx, batch, res, quarantine); err != nil {
		return 0, err
	}
	if err := batch.Commit(); err != nil {
		return 0, err
	}
	p.logOutcome(len(batch.Rows), res, quarantine)
	switch {
	case pubErr != nil:
		return len(batch.Rows), fmt.Errorf("publish batch: %w", pubErr)
	case res.returned > 0:
		return len(batch.Rows), fmt.Errorf("%d of %d rows: %w", res.returned, len(batch.Rows), errReturned)
	case res.nacked > 0:
		return len(batch.Rows), fmt.Errorf("%d of %d rows: %w", res.nacked, len(batch.Rows), errNacked)
	}
	return len(batch.Rows), nil
}

// batchResult is what the broker's outcomes mean for a batch's rows.
type batchResult struct {
	confirmed        []int64
	failed           map[string][]int64 // reason -> rows left pending
	returned, nacked int
}

// sortOutcomes sorts the published rows by outcome, counting each in
// flowforge_publish_total. A Refused row is counted but neither confirmed
// nor failed: it is quarantined.
func (p *Publisher) sortOutcomes(rows []store.OutboxRow, outcomes []broker.Outcome, pubErr error) batchResult {
	res := batchResult{failed: map[string][]int64{}}
	for i, r := range rows {
		o := broker.NotSent
		if i < len(outcomes) {
			o = outcomes[i]
		}
		p.cfg.Metrics.PublishOutcomes.WithLabelValues(o.String()).Inc()
		switch o {
		case broker.Confirmed:
			res.confirmed = append(res.confirmed, r.ID)
			continue
		case broker.Refused:
			continue
		case broker.Returned:
			res.returned++
		case broker.Nacked:
			res.nacked++
		}
		reason := o.String()
		if o == broker.TimedOut && pubErr == nil {
			reason = "confirm lost"
		}
		if pubErr != nil {
			reason = fmt.Sprintf("%s: %v", o, pubErr)
		}
		res.failed[reason] = append(res.failed[reason], r.ID)
	}
	return res
}

// record writes the batch's stamps, failures and quarantines in its
// transaction.
func (p *Publisher) record(ctx context.Context, batch *store.OutboxBatch, res batchResult, quarantine map[int64]string) error {
	if err := batch.MarkPublished(ctx, res.confirmed); err != nil {
		return err
	}
	for reason, ids := range res.failed {
		if err := batch.MarkFailed(ctx, ids, reason); err != nil {
			return err
		}
	}
	for id, reason := range quarantine {
		if _, err := batch.Quarantine(ctx, []int64{id}, QuarantineActor, reason); err != nil {
			return err
		}
	}
	return nil
}

// logOutcome logs what a committed batch left behind and counts the
// quarantines.
func (p *Publisher) logOutcome(rows int, res batchResult, quarantine map[int64]string) {
	for id, reason := range quarantine {
		p.cfg.Metrics.OutboxQuarantinedTotal.Inc()
		p.log.Error("publisher: quarantined an outbox row the broker refuses permanently; the others are published (see ffctl outbox quarantined)", "outbox_id", id, "reason", reason)
	}
	if len(quarantine) > 0 {
		p.cfg.Metrics.OutboxQuarantined.Add(float64(len(quarantine)))
	}
	if len(res.failed) > 0 {
		reasons := make([]string, 0, len(res.failed))
		for reason := range res.failed {
			reasons = append(reasons, reason)
		}
		sort.Strings(reasons)
		p.log.Warn("publisher: rows left pending", "confirmed", len(res.confirmed), "pending", rows-len(res.confirmed)-len(quarantine), "reasons", reasons)
	}
}

// injectFaults applies the armed failpoints to a batch the broker has
// answered. publisher.discard-confirms turns every confirm of the batch into
// a lost one (the messages are in the queue; the rows must stay pending).
// publisher.exit-after-confirm ends the process once the broker confirmed
// something, before any row is stamped: the open transaction dies with it.
// publisher.sigterm-after-confirm sends the process SIGTERM at that point
// and returns once the signal has cancelled ctx.
func (p *Publisher) injectFaults(ctx context.Context, outcomes []broker.Outcome) {
	if p.cfg.Failpoints == nil || !hasConfirmed(outcomes) {
		return
	}
	if p.cfg.Failpoints.Fire(failpoint.PublisherDiscardConfirms) {
		p.log.Warn("publisher: failpoint discards the confirms of this batch", "failpoint", failpoint.PublisherDiscardConfirms)
		for i, o := range outcomes {
			if o == broker.Confirmed {
				outcomes[i] = broker.TimedOut
			}
		}
	}
	p.cfg.Failpoints.ExitIf(failpoint.PublisherExitAfterConfirm)
	p.cfg.Failpoints.SignalIf(ctx, failpoint.PublisherSigtermAfterConfirm)
}

func hasConfirmed(outcomes []broker.Outcome) bool {
	for _, o := range outcomes {
		if o == broker.Confirmed {
			return true
		}
	}
	return false
}

// observeConfirms observes took, the batch's publish -> last confirm, in
// flowforge_publish_confirm_seconds once for each message the broker
// confirmed (a message's own confirm came no later), by its handler.
func (p *Publisher) observeConfirms(ctx context.Context, msgs []broker.Message, outcomes []broker.Outcome, took time.Duration) {
	for i, o := range outcomes {
		if o == broker.Confirmed && i < len(msgs) {
			p.cfg.Metrics.Latency.ObservePublishConfirm(ctx, msgs[i].Handler, took)
		}
	}
}
