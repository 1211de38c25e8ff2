package broker

import (
	"context"
	"fmt"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// Ping checks that the broker is usable: it dials (trying cfg.URLs as Dial
// does), opens a channel, passively declares cfg.Queue if it exists (a
// missing queue is fine: Publisher and Consumer declare it) and closes the
// connection. Meant for readiness probes; bounded by ctx (give it a
// deadline) and cfg.DialTimeout per URL. It returns nil when the broker
// answered, otherwise the dial, channel or inspect error (wrapping
// ctx.Err() when ctx ended).
func Ping(ctx context.Context, cfg Config) error {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return fmt.Errorf("ping broker: %w", err)
	}
	err = withConn(ctx, cfg, "ping", func(conn *amqp.Connection) error {
		_, _, err := inspectQueue(conn, cfg.Queue)
		return err
	})
	if err != nil {
		return fmt.Errorf("ping broker: %w", err)
	}
	return nil
}

// QueueDepth returns the number of ready messages in cfg.Queue (not counting
// deliveries awaiting acknowledgement) and its number of consumers, using a
// passive declare on a short-lived connection. To inspect the dead-letter
// queue set cfg.Queue to DeadLetterQueue(queue). Errors: those of Ping, and
// one wrapping ErrQueueNotFound when the queue does not exist.
func QueueDepth(ctx context.Context, cfg Config) (messages, consumers int, err error) {
	cfg, err = cfg.withDefaults()
	if err != nil {
		return 0, 0, fmt.Errorf("queue depth: %w", err)
	}
	err = withConn(ctx, cfg, "inspect", func(conn *amqp.Connection) error {
		q, exists, err := inspectQueue(conn, cfg.Queue)
		if err != nil {
			return err
		}
		if !exists {
			return fmt.Errorf("%w: %s", ErrQueueNotFound, cfg.Queue)
		}
		messages, consumers = q.Messages, q.Consumers
		return nil
	})
	if err != nil {
		return 0, 0, fmt.Errorf("queue depth: %w", err)
	}
	return messages, consumers, nil
}

// withConn dials, runs fn bounded by ctx and closes the connection. cfg
// must have defaults applied.
func withConn(ctx context.Context, cfg Config, role string, fn func(*amqp.Connection) error) error {
	conn, err := dial(ctx, cfg, role)
	if err != nil {
		return err
	}
	defer func() { _ = conn.CloseDeadline(time.Now().Add(cfg.DialTimeout)) }()
	stop := context.AfterFunc(ctx, func() { _ = conn.CloseDeadline(time.Now()) })
	err = fn(conn)
	if !stop() {
		return ctx.Err()
	}
	return err
}
