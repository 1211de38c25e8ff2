package broker

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// The transition stream's exchange (issue 28): a durable topic exchange
// the publisher sends every run and task transition to, with routing keys
// "run.<workflow>.<state>" and "task.<workflow>.<task>.<state>"
// (core.TransitionEvent.RoutingKey). Subscribers bind queues of their own;
// FlowForge declares no queue on it. EventTail is `ffctl events tail`'s
// subscriber.

// ErrBadExchangeName is wrapped by CheckExchangeName's errors.
var ErrBadExchangeName = errors.New("bad exchange name")

// CheckExchangeName checks the name of the events exchange: 1 to 255
// bytes of ASCII letters, digits, '.', '_', ':' and '-', not starting with
// "amq." (RabbitMQ reserves it). Errors wrap ErrBadExchangeName and name
// the problem.
func CheckExchangeName(name string) error {
	switch {
	case name == "":
		return fmt.Errorf("%w: empty", ErrBadExchangeName)
	case len(name) > maxQueueNameLen:
		return fmt.Errorf("%w: %q is longer than %d bytes", ErrBadExchangeName, name, maxQueueNameLen)
	case strings.HasPrefix(name, "amq."):
		return fmt.Errorf("%w: %q uses the reserved prefix \"amq.\"", ErrBadExchangeName, name)
	}
	for _, r := range name {
		ok := r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("._:-", r)
		if !ok {
			return fmt.Errorf("%w: %q may hold only ASCII letters, digits, '.', '_', ':' and '-'", ErrBadExchangeName, name)
		}
	}
	return nil
}

// declareEventsExchange declares name as a durable topic exchange on a
// channel of its own. A name that exists with another type is a
// *TopologyMismatchError.
func declareEventsExchange(conn *amqp.Connection, name string) error {
	err := onChannel(conn, func(ch *amqp.Channel) error {
		return ch.ExchangeDeclare(name, amqp.ExchangeTopic, true, false, false, false, nil)
	})
	if isAMQPCode(err, amqp.PreconditionFailed) {
		return &TopologyMismatchError{Kind: "exchange", Queue: name, Required: "a durable topic exchange", Detail: amqpReason(err)}
	}
	if err != nil {
		return fmt.Errorf("declare events exchange %s: %w", name, err)
	}
	return nil
}

// EventTail is a subscriber of the events exchange: a server-named,
// exclusive, auto-delete queue bound with the given keys, consumed with
// automatic acks (a tail shows what passes; it is gone with its
// connection). It does not reconnect.
type EventTail struct {
	conn *amqp.Connection
	ch   *amqp.Channel
	msgs <-chan amqp.Delivery

	mu       sync.Mutex // guards exchange, queue and keys (Follow)
	exchange string
	queue    string
	keys     []string
}

// DialEventTail connects (cfg.URLs, as every dial), declares exchange (a
// durable topic exchange; declaring it is harmless when the publisher
// already did), and binds a fresh queue with each of keys (topic patterns,
// core.StreamBindings). Errors: a bad cfg or exchange name, every URL
// failing, ctx ending, *TopologyMismatchError when exchange exists with
// another type, or a failed declare, bind or consume.
func DialEventTail(ctx context.Context, cfg Config, exchange string, keys []string) (*EventTail, error) {
	if err := CheckExchangeName(exchange); err != nil {
		return nil, fmt.Errorf("dial event tail: %w", err)
	}
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, fmt.Errorf("dial event tail: %w", err)
	}
	conn, err := dial(ctx, cfg, "events tail")
	if err != nil {
		return nil, fmt.Errorf("dial event tail: %w", err)
	}
	stop := context.AfterFunc(ctx, func() { _ = conn.CloseDeadline(time.Now()) })
	t, err := setupEventTail(conn, exchange, keys)
	if !stop() && err == nil {
		err = ctx.Err()
	}
	if err != nil {
		_ = conn.CloseDeadline(time.Now().Add(cfg.DialTimeout))
		return nil, err
	}
	return t, nil
}

func setupEventTail(conn *amqp.Connection, exchange string, keys []string) (*EventTail, error) {
	if err := declareEventsExchange(conn, exchange); err != nil {
		return nil, err
	}
	ch, err := conn.Channel()
	if err != nil {
		return nil, lost(fmt.Errorf("open channel: %w", err))
	}
	q, err := ch.QueueDeclare("", false, true, true, false, nil)
	if err != nil {
		return nil, fmt.Errorf("declare tail queue: %w", err)
	}
	for _, k := range keys {
		if err := ch.QueueBind(q.Name, k, exchange, false, nil); err != nil {
			return nil, fmt.Errorf("bind tail queue with %q: %w", k, err)
		}
	}
	msgs, err := ch.Consume(q.Name, "", true, true, false, false, nil)
	if err != nil {
		return nil, fmt.Errorf("consume tail queue: %w", err)
	}
	return &EventTail{conn: conn, ch: ch, msgs: msgs, exchange: exchange, queue: q.Name, keys: keys}, nil
}

// Follow moves the tail to exchange: it declares it (as DialEventTail
// does), binds the tail's queue to it with the same keys, then unbinds
// the queue from the exchange it followed. Events published to either
// while it moves may come through; none published to the new one after
// Follow returns is missed. The same exchange is a no-op. Safe beside
// Next. Errors: a bad exchange name, *TopologyMismatchError, or the
// broker's (wrapping ErrConnectionLost when the connection is gone).
func (t *EventTail) Follow(exchange string) error {
	if err := CheckExchangeName(exchange); err != nil {
		return fmt.Errorf("follow %s: %w", exchange, err)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if exchange == t.exchange {
		return nil
	}
	if err := declareEventsExchange(t.conn, exchange); err != nil {
		return err
	}
	for _, k := range t.keys {
		if err := t.ch.QueueBind(t.queue, k, exchange, false, nil); err != nil {
			return lost(fmt.Errorf("bind tail queue to %s with %q: %w", exchange, k, err))
		}
	}
	for _, k := range t.keys {
		if err := t.ch.QueueUnbind(t.queue, k, t.exchange, nil); err != nil {
			return lost(fmt.Errorf("unbind tail queue from %s (%q): %w", t.exchange, k, err))
		}
	}
	t.exchange = exchange
	return nil
}

// ErrExchangeGone is wrapped by Rebind's error when the exchange the tail
// follows does not exist on the broker (deleted; a publisher declares it
// again before it next publishes).
var ErrExchangeGone = errors.New("the events exchange does not exist")

// Rebind binds the tail's queue to the exchange it follows again, with
// its keys, on a channel of its own (a refused bind closes that channel,
// not the one the tail consumes on). Binding what is bound is a no-op. An
// exchange deleted on the broker takes its bindings with it, and one
// declared again under the same name has none: a tail that never bound
// again went quiet for good without a word (a new user's trial), so events
// tail calls Rebind at each look at the stream's setting. Errors: wrapping
// ErrExchangeGone when the exchange does not exist; the broker's (wrapping
// ErrConnectionLost when the connection is gone).
func (t *EventTail) Rebind() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	err := onChannel(t.conn, func(ch *amqp.Channel) error {
		for _, k := range t.keys {
			if err := ch.QueueBind(t.queue, k, t.exchange, false, nil); err != nil {
				return err
			}
		}
		return nil
	})
	switch {
	case isAMQPCode(err, amqp.NotFound) && !t.conn.IsClosed():
		return fmt.Errorf("bind tail queue to %s again: %w", t.exchange, ErrExchangeGone)
	case err != nil:
		return lost(fmt.Errorf("bind tail queue to %s again: %w", t.exchange, err))
	}
	return nil
}

// Next returns the body of the next event. Errors: ctx ended (ctx.Err()),
// or the connection closed (wraps ErrConnectionLost).
func (t *EventTail) Next(ctx context.Context) ([]byte, error) {
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case d, ok := <-t.msgs:
		if !ok {
			return nil, fmt.Errorf("event tail: %w", ErrConnectionLost)
		}
		return d.Body, nil
	}
}

// Close closes the connection (the queue goes with it). Idempotent.
// Errors: the close's, other than an already closed connection.
func (t *EventTail) Close() error {
	err := t.conn.CloseDeadline(time.Now().Add(time.Second))
	if err != nil && !errors.Is(err, amqp.ErrClosed) {
		return fmt.Errorf("close event tail: %w", err)
	}
	return nil
}

// DeleteExchange deletes exchange name (the events exchange) on a
// short-lived connection; one that does not exist is fine. For tests and
// for an operator retiring the stream: its subscribers' bindings go with
// it. Errors: a bad cfg, the connection's, or the refused delete.
func DeleteExchange(ctx context.Context, cfg Config, name string) error {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return fmt.Errorf("delete exchange: %w", err)
	}
	err = withConn(ctx, cfg, "admin", func(conn *amqp.Connection) error {
		return onChannel(conn, func(ch *amqp.Channel) error { return ch.ExchangeDelete(name, false, false) })
	})
	if err != nil {
		return fmt.Errorf("delete exchange %s: %w", name, err)
	}
	return nil
}
