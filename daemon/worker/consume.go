package worker

import (
	"context"
	"errors"

	"github.com/flowforge/flowforge/core"
	"github.com/flowforge/flowforge/core/broker"
	"github.com/flowforge/flowforge/daemon"
	"github.com/flowforge/flowforge/daemon/backoff"
)

// consumeUntilStopped consumes through cons (dialling one when nil, and
// again after each lost connection, with backoff) and hands deliveries to
// pending, until ctx ends. It returns the consumer it holds then (nil if
// none), for Run to cancel and close once the attempts in flight ended.
func (w *Worker) consumeUntilStopped(ctx context.Context, cons *broker.Consumer, pending chan<- pendingDelivery) *broker.Consumer {
	bo := daemon.Recovery{Component: "worker", Dependency: "rabbitmq", Log: w.log, Metrics: w.cfg.Metrics}
	for ctx.Err() == nil {
		if cons == nil {
			var err error
			cons, err = broker.DialConsumer(ctx, w.cfg.Broker, w.cfg.Concurrency, w.cfg.ID)
			if err != nil {
				if ctx.Err() != nil {
					break
				}
				d := bo.Fail()
				w.log.Error("worker: connect to broker", "error", err, "failures", bo.Failures(), "retry_in", d.String())
				_ = backoff.Sleep(ctx, d)
				continue
			}
		}
		bo.Succeeded()
		w.consuming.Store(true)
		w.current.Store(cons)
		w.consume(ctx, cons, pending)
		w.current.Store(nil)
		w.consuming.Store(false)
		if ctx.Err() != nil {
			break
		}
		err := cons.Err()
		cons.Close()
		cons = nil
		d := bo.Fail()
		if errors.Is(err, broker.ErrConsumerCancelled) {
			w.log.Warn("worker: the broker cancelled the consumer (queue deleted?); re-declaring and re-subscribing", "error", err, "retry_in", d.String())
		} else {
			w.log.Warn("worker: broker connection lost; reconnecting", "error", err, "retry_in", d.String())
		}
		_ = backoff.Sleep(ctx, d)
	}
	return cons
}

// consume decodes each delivery of cons and hands it to the claim loop
// (pending) until ctx ends or the consumer closes. A delivery that is not
// a dispatch is rejected here; one that names an installation not known to
// be ours goes through settleForeign, and one for a handler this worker
// lacks through handBack, each in a goroutine of its own (they wait before
// they requeue).
func (w *Worker) consume(ctx context.Context, cons *broker.Consumer, pending chan<- pendingDelivery) {
	for {
		select {
		case <-ctx.Done():
			return
		case d, ok := <-cons.Deliveries():
			if !ok {
				return
			}
			p, ok := w.decode(d)
			if !ok {
				continue
			}
			w.signals.deliveryReceived(p.disp.TaskRunID)
			if w.mayBeForeign(p) {
				// Perhaps another installation's (mode 89): decided, and
				// sent back unclaimed if so, off the consume loop.
				w.handBacksWG.Add(1)
				go func() {
					defer w.handBacksWG.Done()
					w.settleForeign(ctx, p, pending)
				}()
				continue
			}
			w.ownDelivery(ctx, p, pending)
		}
	}
}

// ownDelivery hands p, a dispatch of this installation (or of none: an
// older binary's), to the claim loop, or, for a handler this worker lacks,
// to handBack in a goroutine of its own.
func (w *Worker) ownDelivery(ctx context.Context, p pendingDelivery, pending chan<- pendingDelivery) {
	if p.disp.Handler != "" && !w.cfg.Registry.Has(p.disp.Handler) {
		w.handBacksWG.Add(1)
		go func() {
			defer w.handBacksWG.Done()
			if !w.handBack(ctx, p.d, p.disp, p.log) {
				w.enqueue(ctx, pending, p)
			}
		}()
		return
	}
	w.enqueue(ctx, pending, p)
}

// enqueue hands p to the claim loop, or back to the queue when the worker
// stops first.
func (w *Worker) enqueue(ctx context.Context, pending chan<- pendingDelivery, p pendingDelivery) {
	select {
	case pending <- p:
	case <-ctx.Done():
		_ = p.d.Requeue()
	}
}

// decode turns d into a pendingDelivery; a message that is not a dispatch
// is counted, logged and rejected (dead-lettered), and ok is false.
func (w *Worker) decode(d broker.Delivery) (pendingDelivery, bool) {
	disp, err := core.DecodeDispatch(d.Body)
	if err != nil {
		w.cfg.Metrics.PoisonMessages.Inc()
		w.log.Error("worker: rejected a message that is not a dispatch (sent to the dead-letter queue)",
			"message_id", d.MessageID, "error", err, "body_prefix", core.SanitizeText(string(d.Body), 200))
		if err := d.Reject(); err != nil {
			w.log.Warn("worker: reject poison message", "error", err)
		}
		return pendingDelivery{}, false
	}
	log := w.log.With("task_run_id", disp.TaskRunID, "run_id", disp.RunID, "fencing_token", disp.FencingToken)
	return pendingDelivery{d: d, disp: disp, log: log, arrived: w.cfg.Clock.Now(), parent: traceParent(disp)}, true
}
