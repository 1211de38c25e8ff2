package broker

import (
	"context"
	"fmt"
	"log/slog"

	amqp "github.com/rabbitmq/amqp091-go"
)

// Routing by handler (see the package doc, "Routing"): a publisher sends a
// dispatch to RouteExchange(queue) with the handler as routing key; a
// worker binds a queue of its own per handler it registers
// (HandlerQueue); a dispatch whose handler has no bound queue falls
// through the route exchange's alternate exchange, UnroutedExchange(queue),
// to the shared queue.

// queueSafeName reports whether handler may name a queue of its own:
// ASCII letters, digits, '.', '_' and '-', starting with a letter or digit.
// Such a name is safe in a queue name, a routing key, a rabbitmqctl
// argument and a management API path without escaping. Other names are not
// refused: their dispatches take the shared queue, as before routing.
func queueSafeName(handler string) bool {
	for i, r := range handler {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9':
		case i > 0 && (r == '.' || r == '_' || r == '-'):
		default:
			return false
		}
	}
	return handler != ""
}

// handlerQueueInfix separates the dispatch queue's name from a handler's in
// HandlerQueue.
const handlerQueueInfix = ".h."

// RouteExchange returns the name of the direct exchange publishers send
// dispatches to: queue + ".route". Its alternate exchange is
// UnroutedExchange(queue).
func RouteExchange(queue string) string { return queue + ".route" }

// UnroutedExchange returns the name of the fanout exchange that receives
// what RouteExchange(queue) cannot route (a handler without a queue of its
// own): queue + ".unrouted", bound to the shared queue queue.
func UnroutedExchange(queue string) string { return queue + ".unrouted" }

// HandlerQueue returns the name of handler's own dispatch queue, queue +
// ".h." + handler, and true; or "" and false when handler gets no queue of
// its own: empty, outside [A-Za-z0-9][A-Za-z0-9._-]*, or making a name
// longer than RabbitMQ's 255 bytes. A handler without a queue is served
// from the shared queue.
func HandlerQueue(queue, handler string) (string, bool) {
	name := queue + handlerQueueInfix + handler
	if !queueSafeName(handler) || len(name) > maxQueueNameLen {
		return "", false
	}
	return name, true
}

// RoutingKey returns the exchange and routing key a dispatch for handler
// is published with: RouteExchange(queue) and handler when the handler can
// have a queue of its own (HandlerQueue), else the default exchange and
// queue (the shared queue, directly).
func RoutingKey(queue, handler string) (exchange, key string) {
	if _, ok := HandlerQueue(queue, handler); ok {
		return RouteExchange(queue), handler
	}
	return "", queue
}

// exchangeSpec is one exchange FlowForge declares.
type exchangeSpec struct {
	name, kind string
	args       amqp.Table
	required   string // for TopologyMismatchError
}

// exchanges returns the exchanges of dispatch queue queue, the alternate
// one first so that it exists when the route exchange names it.
func exchanges(queue string) []exchangeSpec {
	unrouted := UnroutedExchange(queue)
	return []exchangeSpec{
		{name: unrouted, kind: amqp.ExchangeFanout, required: "a durable fanout exchange"},
		{name: RouteExchange(queue), kind: amqp.ExchangeDirect, args: amqp.Table{"alternate-exchange": unrouted},
			required: fmt.Sprintf("a durable direct exchange with alternate-exchange=%q", unrouted)},
	}
}

// handlerQueueSpec is handler's own queue: a durable quorum queue that
// dead-letters into the shared queue's dead-letter queue, as the shared
// queue does.
func handlerQueueSpec(queue, name string) queueSpec {
	spec := topology(queue)[1] // the shared queue's arguments
	spec.name = name
	return spec
}

// declareRouting declares the exchanges of queue, binds the unrouted
// exchange to the shared queue and, for each of handlers that can have a
// queue of its own, declares that queue and binds it to the route
// exchange with the handler's name. It returns the handler queues, in the
// order of handlers; a handler that gets none is logged. Errors as for
// declareTopology (an exchange declared otherwise is a
// *TopologyMismatchError with Kind "exchange").
func declareRouting(conn *amqp.Connection, queue string, handlers []string, log *slog.Logger) ([]string, error) {
	for _, x := range exchanges(queue) {
		if err := onChannel(conn, func(ch *amqp.Channel) error {
			return ch.ExchangeDeclare(x.name, x.kind, true, false, false, false, x.args)
		}); err != nil {
			if isAMQPCode(err, amqp.PreconditionFailed) {
				return nil, &TopologyMismatchError{Kind: "exchange", Queue: x.name, Required: x.required, Detail: amqpReason(err)}
			}
			return nil, fmt.Errorf("declare topology: exchange %s: %w", x.name, err)
		}
	}
	if err := bind(conn, queue, "", UnroutedExchange(queue)); err != nil {
		return nil, err
	}
	var queues []string
	for _, h := range handlers {
		name, ok := HandlerQueue(queue, h)
		if !ok {
			log.Warn("broker: handler gets no queue of its own (name not safe in a queue name, or too long); its dispatches come through the shared queue", "handler", h)
			continue
		}
		if err := declareQueue(conn, handlerQueueSpec(queue, name)); err != nil {
			if isAMQPCode(err, amqp.PreconditionFailed) {
				return nil, &TopologyMismatchError{Queue: name, Required: handlerQueueSpec(queue, name).required, Detail: amqpReason(err)}
			}
			return nil, fmt.Errorf("declare topology: queue %s: %w", name, err)
		}
		if err := bind(conn, name, h, RouteExchange(queue)); err != nil {
			return nil, err
		}
		queues = append(queues, name)
	}
	return queues, nil
}

// bind binds queue to exchange with key on a throwaway channel.
func bind(conn *amqp.Connection, queue, key, exchange string) error {
	err := onChannel(conn, func(ch *amqp.Channel) error {
		return ch.QueueBind(queue, key, exchange, false, nil)
	})
	if err != nil {
		return fmt.Errorf("declare topology: bind %s to %s (key %q): %w", queue, exchange, key, err)
	}
	return nil
}

// onChannel runs fn on a throwaway channel of conn, so that a channel
// exception cannot poison the caller's channel. An error while the
// connection is closed wraps ErrConnectionLost.
func onChannel(conn *amqp.Connection, fn func(ch *amqp.Channel) error) error {
	ch, err := conn.Channel()
	if err != nil {
		return lost(fmt.Errorf("open channel: %w", err))
	}
	if err := fn(ch); err != nil {
		if !isAMQPCode(err, amqp.PreconditionFailed) && conn.IsClosed() {
			return lost(err)
		}
		return err // the exception closed the channel
	}
	if err := ch.Close(); err != nil {
		return lost(fmt.Errorf("close channel: %w", err))
	}
	return nil
}

// TopologyNames returns the names of what FlowForge declares for dispatch
// queue queue when its workers register handlers: the queues (the shared
// queue, its dead-letter queue, then each handler's own queue, see
// HandlerQueue) and the exchanges (the route and unrouted exchanges). For
// tools and tests that inspect or delete them.
func TopologyNames(queue string, handlers []string) (queues, exchanges []string) {
	queues = []string{queue, DeadLetterQueue(queue)}
	for _, h := range handlers {
		if name, ok := HandlerQueue(queue, h); ok {
			queues = append(queues, name)
		}
	}
	return queues, []string{RouteExchange(queue), UnroutedExchange(queue)}
}

// DeleteTopology deletes, on a short-lived connection, the queues and
// exchanges TopologyNames names for cfg.Queue and cfg.Handlers, with the
// messages they hold; one that does not exist is fine. It is for tests and
// for an operator retiring a dispatch queue. Errors: those of Ping, and
// the first refused delete.
func DeleteTopology(ctx context.Context, cfg Config) error {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return fmt.Errorf("delete topology: %w", err)
	}
	queues, exchanges := TopologyNames(cfg.Queue, cfg.Handlers)
	err = withConn(ctx, cfg, "admin", func(conn *amqp.Connection) error {
		for _, q := range queues {
			if err := onChannel(conn, func(ch *amqp.Channel) error {
				_, err := ch.QueueDelete(q, false, false, false)
				return err
			}); err != nil {
				return fmt.Errorf("queue %s: %w", q, err)
			}
		}
		for _, x := range exchanges {
			if err := onChannel(conn, func(ch *amqp.Channel) error {
				return ch.ExchangeDelete(x, false, false)
			}); err != nil {
				return fmt.Errorf("exchange %s: %w", x, err)
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("delete topology: %w", err)
	}
	return nil
}
