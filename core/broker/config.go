package broker

import (
	"cmp"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"
)

// QueueDefault is the name of the dispatch queue when Config.Queue is empty.
// Its dead-letter queue is DeadLetterQueue(QueueDefault) =
// "flowforge.dispatch.dead".
const QueueDefault = "flowforge.dispatch"

// Defaults applied by Config when a field is zero.
const (
	// ConfirmTimeoutDefault is the default Config.ConfirmTimeout.
	ConfirmTimeoutDefault = 10 * time.Second
	// DialTimeoutDefault is the default Config.DialTimeout.
	DialTimeoutDefault = 5 * time.Second
	// HeartbeatDefault is the default Config.Heartbeat.
	HeartbeatDefault = 10 * time.Second
	// HeartbeatMax bounds Config.Heartbeat: AMQP 0-9-1 negotiates the
	// heartbeat in whole seconds, in an unsigned 16-bit field (its
	// connection.tune method).
	HeartbeatMax = 65535 * time.Second
)

// maxQueueNameLen is RabbitMQ's limit on queue names (a shortstr).
const maxQueueNameLen = 255

// Config says where the broker is and how FlowForge talks to it. The zero
// value is not usable: URLs must hold at least one URL. Config is a plain
// value; copies share only the Cursor pointer.
type Config struct {
	// URLs are the AMQP URLs of the broker, one per cluster node, e.g.
	// "amqp://user:pass@rabbit-1:5672/vhost". Required (at least one). Each
	// dial tries them in order, starting after the URL that last connected
	// (see Cursor), and returns the first that connects; if all fail the
	// error wraps every failure and names each URL with its password
	// redacted.
	URLs []string

	// Queue is the name of the durable quorum dispatch queue. Its
	// dead-letter queue is Queue + ".dead". Default QueueDefault
	// ("flowforge.dispatch"). Must not start with "amq." and must leave
	// room for the ".unrouted" suffix within RabbitMQ's 255-byte limit.
	// The route exchange (Queue + ".route"), the unrouted exchange (Queue +
	// ".unrouted") and the handler queues (Queue + ".h." + handler) are
	// named after it.
	Queue string

	// EventsExchange, for a publisher only, is the transition stream's
	// topic exchange (see DialEventTail), declared durable on every dial
	// when not empty. Checked by CheckExchangeName.
	EventsExchange string

	// Handlers, for a consumer only, are the handlers whose own queues
	// (HandlerQueue) it declares, binds to the route exchange and consumes
	// beside the shared queue. Empty: it consumes the shared queue only, as
	// before routing. A publisher ignores it.
	Handlers []string

	// ConfirmTimeout bounds one PublishBatch: publishing the batch and
	// waiting for all its publisher confirms. When it elapses the connection
	// is closed and PublishBatch returns an error wrapping ErrTimeout and
	// ErrConnectionLost. Default ConfirmTimeoutDefault (10s).
	ConfirmTimeout time.Duration

	// DialTimeout bounds one connection attempt to one URL (TCP connect plus
	// AMQP handshake). Dial is additionally bounded by its ctx. Default
	// DialTimeoutDefault (5s).
	DialTimeout time.Duration

	// Heartbeat is the AMQP heartbeat interval H requested from the
	// broker, whole seconds from 1s to HeartbeatMax; the connection uses
	// the smaller of it and the broker's own (heartbeat, 60 s by default).
	// Both ends send a frame at least every H/2 when otherwise silent. The
	// client (amqp091) drops a connection it has read nothing from for
	// 1.5·H, so a black-holed connection is noticed 1 to 1.5·H after the
	// cut; RabbitMQ drops one silent for about 2·H and requeues its
	// unacknowledged deliveries (mode 137 measures both). A heartbeat
	// parameter in the URL takes precedence. Default HeartbeatDefault
	// (10s); ffctl's --amqp-heartbeat.
	Heartbeat time.Duration

	// Cursor remembers which URL connected last so that the next dial made
	// with the same Cursor starts with the following URL (fail over away
	// from the node that just dropped the connection). Optional: nil means
	// every dial starts with URLs[0]. Share one Cursor across the redials of
	// one component; it is safe for concurrent use.
	Cursor *Cursor

	// Logger receives connection lifecycle events (connect, dial failures,
	// blocked/unblocked, unexpected close, consumer cancel). Nil discards.
	Logger *slog.Logger
}

// DeadLetterQueue returns the name of the dead-letter queue that belongs to
// dispatch queue queue: queue + ".dead".
func DeadLetterQueue(queue string) string { return queue + ".dead" }

// Check reports, without dialling, whether c can work: at least one URL,
// each an amqp:// or amqps:// URL that parses (named in the error by its
// redacted form, never its password), a queue name without the reserved
// "amq." prefix and short enough, a valid events exchange. ffctl reports
// its error as a usage error (exit 2) at a daemon's start, where the
// dial's would be retried as an outage.
func (c Config) Check() error {
	if _, err := c.withDefaults(); err != nil {
		return err
	}
	for i, u := range c.URLs {
		if _, _, err := describeURL(u, i); err != nil {
			return fmt.Errorf("config: %w", err)
		}
	}
	return nil
}

// withDefaults returns a copy of c with defaults filled in, or an error if c
// cannot work.
func (c Config) withDefaults() (Config, error) {
	if len(c.URLs) == 0 {
		return c, errors.New("config: no broker urls")
	}
	c.Queue = cmp.Or(c.Queue, QueueDefault)
	if strings.HasPrefix(c.Queue, "amq.") {
		return c, fmt.Errorf("config: queue name %q uses the reserved prefix \"amq.\"", c.Queue)
	}
	if len(UnroutedExchange(c.Queue)) > maxQueueNameLen {
		return c, fmt.Errorf("config: queue name %q is too long (max %d bytes with the .unrouted suffix)", c.Queue, maxQueueNameLen)
	}
	if c.EventsExchange != "" {
		if err := CheckExchangeName(c.EventsExchange); err != nil {
			return c, fmt.Errorf("config: events exchange: %w", err)
		}
	}
	if c.ConfirmTimeout < 0 || c.DialTimeout < 0 || c.Heartbeat < 0 {
		return c, errors.New("config: negative duration")
	}
	c.ConfirmTimeout = cmp.Or(c.ConfirmTimeout, ConfirmTimeoutDefault)
	c.DialTimeout = cmp.Or(c.DialTimeout, DialTimeoutDefault)
	if err := CheckHeartbeat(c.Heartbeat); err != nil {
		return c, fmt.Errorf("config: %w", err)
	}
	c.Heartbeat = cmp.Or(c.Heartbeat, HeartbeatDefault)
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c, nil
}

// CheckHeartbeat returns an error unless d is a valid Config.Heartbeat:
// 0 (the default) or whole seconds from 1s to HeartbeatMax (the AMQP
// field's unit and range: a fraction would be dropped unseen).
func CheckHeartbeat(d time.Duration) error {
	if d == 0 || (d >= time.Second && d <= HeartbeatMax && d%time.Second == 0) {
		return nil
	}
	return fmt.Errorf("heartbeat %v: want whole seconds from 1s to %ds, or 0 for the default (%v)", d, HeartbeatMax/time.Second, HeartbeatDefault)
}

// Cursor remembers the index of the URL in Config.URLs that connected last.
// The zero value is ready to use (nothing connected yet: start at URLs[0]).
type Cursor struct {
	mu    sync.Mutex
	last  int
	valid bool
}

// start returns the index the next dial over n URLs starts at.
func (c *Cursor) start(n int) int {
	if c == nil || n == 0 {
		return 0
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.valid {
		return 0
	}
	return (c.last + 1) % n
}

// record notes that URL index i connected.
func (c *Cursor) record(i int) {
	if c == nil {
		return
	}
	c.mu.Lock()
	c.last, c.valid = i, true
	c.mu.Unlock()
}
