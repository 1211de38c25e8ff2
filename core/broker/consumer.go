package broker

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// Consumer receives dispatch messages from the dispatch queue with manual
// acknowledgements on one AMQP connection and channel. It does not
// reconnect: when Deliveries closes, check Err, Close the consumer and dial
// a new one. Its methods are safe for concurrent use.
type Consumer struct {
	cfg  Config
	log  *slog.Logger
	conn *amqp.Connection
	ch   *amqp.Channel
	tag  string
	// tags and queues are the consumers of c, aligned: the shared queue
	// under tag first, then each handler queue (Config.Handlers).
	tags   []string
	queues []string

	out  chan Delivery
	stop chan struct{} // closed by Close: the forwarder stops sending

	mu        sync.Mutex
	closing   bool // guarded by mu; set by Close before the connection closes
	cancelled atomic.Bool
	err       error // guarded by mu; set before out is closed

	wg        sync.WaitGroup // forward and in-flight Cancel calls
	closeOnce sync.Once
	closeErr  error
}

// Delivery is one message received from the dispatch queue. It must be
// settled exactly once with Ack, Requeue or Reject, on the Consumer that
// delivered it and before that Consumer is closed; unsettled deliveries
// are requeued by the broker when the connection closes.
type Delivery struct {
	// Body is the message payload (JSON).
	Body []byte
	// MessageID is the AMQP MessageId: the outbox row id as text.
	MessageID string
	// ContentType is the AMQP content type ("application/json" for
	// messages from Publisher).
	ContentType string
	// Timestamp is when the publisher sent the message (UTC, second
	// precision); zero if unset.
	Timestamp time.Time
	// Redelivered is true when the broker delivered this message before
	// (to any consumer) without it being acknowledged.
	Redelivered bool
	// DeliveryCount is the quorum queue's x-delivery-count: how many times
	// the message was delivered before and returned to the queue (0 on the
	// first delivery; also 0 on brokers that do not set the header).
	DeliveryCount int64
	// DeliveryTag identifies the delivery on its channel.
	DeliveryTag uint64
	// Headers are the AMQP message headers (may be nil).
	Headers map[string]any

	raw amqp.Delivery
}

// Ack acknowledges the delivery: the broker removes the message from the
// queue. An error wrapping ErrConnectionLost means the channel closed; the
// broker will redeliver the message.
func (d Delivery) Ack() error {
	return settleErr("ack", d.DeliveryTag, d.raw.Ack(false))
}

// Requeue negatively acknowledges the delivery with requeue: the broker
// puts the message back and delivers it again with Redelivered set. Errors
// as for Ack.
func (d Delivery) Requeue() error {
	return settleErr("requeue", d.DeliveryTag, d.raw.Nack(false, true))
}

// Reject negatively acknowledges the delivery without requeue: the broker
// dead-letters the message into the dead-letter queue Config.Queue + ".dead"
// (via the queue's x-dead-letter arguments). Errors as for Ack.
func (d Delivery) Reject() error {
	return settleErr("reject", d.DeliveryTag, d.raw.Reject(false))
}

func settleErr(op string, tag uint64, err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, amqp.ErrClosed):
		return fmt.Errorf("%s delivery %d: %w", op, tag, lost(err))
	default:
		return fmt.Errorf("%s delivery %d: %w", op, tag, err)
	}
}

// DialConsumer connects to the first reachable URL of cfg.URLs, declares
// the topology (see package doc), sets the channel's prefetch to prefetch
// unacknowledged messages per queue (must be >= 1) and starts consuming
// the dispatch queue with manual acknowledgements under consumerTag
// (empty: a random "flowforge-<hex>" tag), and each handler queue of
// cfg.Handlers (see HandlerQueue) under consumerTag + ".h<i>", all into
// one Deliveries channel. Quorum queues have no channel-wide prefetch: the
// broker may hand the consumer up to prefetch deliveries per queue. It honours ctx for the whole setup. Errors: as for
// DialPublisher (including *TopologyMismatchError), plus an invalid
// prefetch.
func DialConsumer(ctx context.Context, cfg Config, prefetch int, consumerTag string) (*Consumer, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, fmt.Errorf("dial consumer: %w", err)
	}
	if prefetch < 1 || prefetch > 65535 {
		return nil, fmt.Errorf("dial consumer: prefetch %d out of range 1..65535", prefetch)
	}
	if consumerTag == "" {
		consumerTag = "flowforge-" + randomHex(8)
	}
	conn, err := dial(ctx, cfg, "consumer")
	if err != nil {
		return nil, fmt.Errorf("dial consumer: %w", err)
	}
	c, err := setupConsumer(ctx, cfg, conn, prefetch, consumerTag)
	if err != nil {
		_ = conn.CloseDeadline(time.Now().Add(cfg.DialTimeout))
		var mm *TopologyMismatchError
		if errors.As(err, &mm) {
			return nil, err
		}
		return nil, fmt.Errorf("dial consumer: %w", err)
	}
	return c, nil
}

func setupConsumer(ctx context.Context, cfg Config, conn *amqp.Connection, prefetch int, tag string) (*Consumer, error) {
	stop := context.AfterFunc(ctx, func() { _ = conn.CloseDeadline(time.Now()) })
	var (
		ch      *amqp.Channel
		cancels chan string
		closes  chan *amqp.Error
		srcs    []<-chan amqp.Delivery
		tags    []string
	)
	handlerQueues, err := declareTopology(conn, cfg.Queue, cfg.Handlers, cfg.Logger)
	queues := append([]string{cfg.Queue}, handlerQueues...)
	if err == nil {
		ch, err = conn.Channel()
		if err != nil {
			err = lost(fmt.Errorf("open channel: %w", err))
		}
	}
	if err == nil {
		// Per consumer (global=false): quorum queues have no channel-wide
		// prefetch, so each queue's consumer may hold prefetch deliveries.
		if err = ch.Qos(prefetch, 0, false); err != nil {
			err = fmt.Errorf("set prefetch: %w", err)
		}
	}
	if err == nil {
		cancels = ch.NotifyCancel(make(chan string, len(queues)))
		closes = ch.NotifyClose(make(chan *amqp.Error, 1))
		srcs, tags, err = consumeAll(ch, queues, tag)
	}
	if !stop() {
		return nil, ctx.Err()
	}
	if err != nil {
		return nil, err
	}
	c := &Consumer{
		cfg:    cfg,
		log:    cfg.Logger.With("queue", cfg.Queue, "consumer_tag", tag),
		conn:   conn,
		ch:     ch,
		tag:    tag,
		tags:   tags,
		queues: queues,
		out:    make(chan Delivery),
		stop:   make(chan struct{}),
	}
	c.wg.Add(1)
	go c.forward(srcs, cancels, closes)
	return c, nil
}

// consumeAll starts a consumer on each of queues (the shared queue first,
// under tag; each handler queue under tag + ".h<i>", or a random tag with
// that suffix when tag leaves no room for it) and returns their delivery
// channels and tags, aligned with queues.
func consumeAll(ch *amqp.Channel, queues []string, tag string) ([]<-chan amqp.Delivery, []string, error) {
	srcs := make([]<-chan amqp.Delivery, len(queues))
	tags := make([]string, len(queues))
	for i, q := range queues {
		t := tag
		if i > 0 {
			suffix := ".h" + strconv.Itoa(i)
			t = cmp.Or(tag, "flowforge") + suffix
			if len(t) > maxQueueNameLen {
				t = "flowforge-" + randomHex(8) + suffix
			}
		}
		src, err := ch.Consume(q, t, false, false, false, false, nil)
		if err != nil {
			return nil, nil, fmt.Errorf("consume %s: %w", q, err)
		}
		srcs[i], tags[i] = src, t
	}
	return srcs, tags, nil
}

// forward converts the deliveries of every queue's consumer (srcs) until
// the sources close or Close is called, then records why and closes c.out.
// When the broker cancels one queue's consumer (its queue deleted) the
// others are cancelled too, so that the caller re-dials and re-declares.
func (c *Consumer) forward(srcs []<-chan amqp.Delivery, cancels <-chan string, closes <-chan *amqp.Error) {
	defer c.wg.Done()
	defer close(c.out)
	var pumps sync.WaitGroup
	ended := make(chan struct{}, len(srcs))
	for _, src := range srcs {
		pumps.Add(1)
		go func() {
			defer pumps.Done()
			c.pump(src)
			ended <- struct{}{}
		}()
	}
	<-ended
	// amqp091 notifies cancel and close listeners before it closes a
	// source, so a non-blocking look is enough.
	var err error
	select {
	case tag, ok := <-cancels:
		if ok {
			err = fmt.Errorf("consumer %s on queue %s: %w", tag, c.queueOf(tag), ErrConsumerCancelled)
			c.cancelAll()
		}
	default:
	}
	pumps.Wait()
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case err != nil:
		c.log.Warn("broker: cancelled consumer (queue deleted?)", "error", err)
	case c.closing:
	case c.ch.IsClosed() || c.conn.IsClosed():
		err = ErrConnectionLost
		select {
		case e, ok := <-closes:
			if ok && e != nil {
				err = fmt.Errorf("%w: %w", ErrConnectionLost, e)
			}
		default:
		}
		c.log.Warn("broker: consumer connection lost", "error", err)
	case c.cancelled.Load():
	default:
		err = ErrConnectionLost
	}
	c.err = err
}

// pump sends the deliveries of src to c.out until src closes or Close is
// called.
func (c *Consumer) pump(src <-chan amqp.Delivery) {
	for d := range src {
		select {
		case c.out <- newDelivery(d):
		case <-c.stop:
			return // Close: err stays nil
		}
	}
}

// cancelAll cancels every consumer of c (those already gone answer with
// an error, ignored): their sources close once the broker confirms.
func (c *Consumer) cancelAll() {
	for _, t := range c.tags {
		_ = c.ch.Cancel(t, false)
	}
}

// queueOf returns the queue consumed under tag.
func (c *Consumer) queueOf(tag string) string {
	for i, t := range c.tags {
		if t == tag {
			return c.queues[i]
		}
	}
	return c.cfg.Queue
}

func newDelivery(d amqp.Delivery) Delivery {
	var headers map[string]any
	if d.Headers != nil {
		headers = make(map[string]any, len(d.Headers))
		for k, v := range d.Headers {
			headers[k] = v
		}
	}
	var count int64
	switch v := d.Headers["x-delivery-count"].(type) {
	case int64:
		count = v
	case int32:
		count = int64(v)
	}
	return Delivery{
		Body:          d.Body,
		MessageID:     d.MessageId,
		ContentType:   d.ContentType,
		Timestamp:     d.Timestamp,
		Redelivered:   d.Redelivered,
		DeliveryCount: count,
		DeliveryTag:   d.DeliveryTag,
		Headers:       headers,
		raw:           d,
	}
}

// Deliveries returns the channel of received messages. It is closed when
// the channel or connection closes, the broker cancels the consumer, or
// after Cancel or Close; Err then says why. The same channel is returned on
// every call.
func (c *Consumer) Deliveries() <-chan Delivery { return c.out }

// Err reports why Deliveries closed: an error wrapping
// ErrConsumerCancelled when the broker cancelled the consumer (e.g. the
// queue was deleted), one wrapping ErrConnectionLost when the channel or
// connection closed, and nil after Cancel or Close. It returns nil while
// Deliveries is open.
func (c *Consumer) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// DeadLetterDepth returns the number of messages in the dead-letter queue
// of the consumer's dispatch queue (a passive declare on a throwaway
// channel of the consumer's connection). Errors: the queue does not exist,
// or the connection is lost (wrapping ErrConnectionLost).
func (c *Consumer) DeadLetterDepth() (int, error) {
	q, exists, err := inspectQueue(c.conn, DeadLetterQueue(c.cfg.Queue))
	if err != nil {
		return 0, err
	}
	if !exists {
		return 0, fmt.Errorf("dead-letter queue %s does not exist", DeadLetterQueue(c.cfg.Queue))
	}
	return q.Messages, nil
}

// Tag returns the consumer tag.
func (c *Consumer) Tag() string { return c.tag }

// Cancel stops the broker from sending new deliveries (basic.cancel) but
// keeps the channel open, so deliveries already received can still be
// settled; Deliveries closes once the broker confirmed the cancel. It
// waits for the broker's reply until ctx ends (then it returns ctx.Err()
// wrapped; the cancel still completes in the background). An error
// wrapping ErrConnectionLost means the channel is already closed.
func (c *Consumer) Cancel(ctx context.Context) error {
	c.mu.Lock()
	if c.closing {
		c.mu.Unlock()
		return fmt.Errorf("cancel consumer: %w: consumer closed", ErrConnectionLost)
	}
	c.cancelled.Store(true)
	errc := make(chan error, 1)
	c.wg.Add(1)
	c.mu.Unlock()
	go func() {
		defer c.wg.Done()
		var first error
		for _, t := range c.tags {
			if err := c.ch.Cancel(t, false); err != nil && first == nil {
				first = err
			}
		}
		errc <- first
	}()
	select {
	case err := <-errc:
		if err == nil {
			return nil
		}
		if errors.Is(err, amqp.ErrClosed) || c.ch.IsClosed() {
			return fmt.Errorf("cancel consumer: %w", lost(err))
		}
		return fmt.Errorf("cancel consumer: %w", err)
	case <-ctx.Done():
		return fmt.Errorf("cancel consumer: %w", ctx.Err())
	}
}

// Close closes the connection (waiting at most Config.DialTimeout for the
// broker's close-ok); the broker requeues unsettled deliveries. Deliveries
// is closed and the consumer's goroutines have stopped when Close returns.
// Idempotent.
func (c *Consumer) Close() error {
	c.closeOnce.Do(func() {
		c.mu.Lock()
		c.closing = true
		c.mu.Unlock()
		close(c.stop)
		err := c.conn.CloseDeadline(time.Now().Add(c.cfg.DialTimeout))
		if err != nil && !errors.Is(err, amqp.ErrClosed) {
			c.closeErr = fmt.Errorf("close consumer: %w", err)
		}
		c.wg.Wait()
	})
	return c.closeErr
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
