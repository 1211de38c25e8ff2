package publisher

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/flowforge/flowforge/core/broker"
	"github.com/flowforge/flowforge/core/store"
	"github.com/flowforge/flowforge/daemon"
	"github.com/flowforge/flowforge/daemon/failpoint"
	"github.com/flowforge/flowforge/daemon/metrics"
)

// Defaults for Config.
const (
	BatchSizeDefault = 200
	// LanesDefault is two batches in flight: while one waits for its
	// confirms, the next is locked and published (see Publisher).
	LanesDefault        = 2
	PollIntervalDefault = time.Second
	// MaxMessageBytesDefault is FlowForge's own limit on a dispatch
	// message body: 1 MiB. A dispatch carries ids and two names bounded at
	// apply (core.MaxNameLength, core.MaxHandlerLength), well under 1 KiB,
	// so anything near the limit is an anomaly; and it stays far below
	// every RabbitMQ default max_message_size (128 MiB up to 3.13, 16 MiB
	// from 4.0), so FlowForge refuses an oversized row itself, cleanly,
	// before the broker closes the channel over it.
	MaxMessageBytesDefault = 1 << 20
	// RedriveIntervalDefault is how often the publisher looks into the
	// dead-letter queue for dispatches a delivery-limit dead-lettered
	// (redrive.go, mode 138): well within the scheduler's
	// --redispatch-after (5 min by default), which would send them
	// otherwise.
	RedriveIntervalDefault = 5 * time.Second
)

// Store is what the publisher needs from the database.
type Store interface {
	LockOutbox(ctx context.Context, limit int) (*store.OutboxBatch, error)
	OutboxStatus(ctx context.Context) (store.OutboxStatus, error)
	streamStore
}

// Config configures a Publisher.
type Config struct {
	Store Store
	// DatabaseURL is used for the LISTEN connection; empty disables NOTIFY
	// wake-ups (polling still runs).
	DatabaseURL string
	Broker      broker.Config
	// BatchSize bounds rows per transaction (default BatchSizeDefault).
	BatchSize int
	// Lanes is how many batches are in flight at once, each on a broker
	// connection of its own (default LanesDefault, at most LanesMax).
	Lanes int
	// PollInterval is the period of the cycle that runs without a NOTIFY.
	PollInterval time.Duration
	// MaxMessageBytes bounds a dispatch message body, in bytes (default
	// MaxMessageBytesDefault; keep it below the broker's
	// max_message_size). A larger row is quarantined before publishing.
	MaxMessageBytes int
	Logger          *slog.Logger
	Metrics         *metrics.Metrics
	// Failpoints arms test-only faults (see package failpoint); nil, the
	// normal case, arms none.
	Failpoints *failpoint.Failpoints
	// ID is the daemon's id (the supervisor's --id, such as
	// publisher-ops1-4242-1a2b), recorded as who turned the transition
	// stream on (`ffctl events status`); "" records "publisher".
	ID string
	// EventsExchange, when not empty, turns the transition stream on (in
	// the database, at start) and publishes it to this durable topic
	// exchange (see stream.go). Checked by broker.CheckExchangeName.
	EventsExchange string
	// StreamPollInterval is the period of the stream loop without a
	// NOTIFY (default StreamPollIntervalDefault).
	StreamPollInterval time.Duration
	// RedriveInterval is how often the publisher looks into the
	// dead-letter queue for dispatches a quorum queue's delivery-limit
	// dead-lettered and sends them back (default RedriveIntervalDefault;
	// passes that send nothing back lengthen it up to a minute).
	RedriveInterval time.Duration
	// TracerProvider records a flowforge.publish span of each traced row
	// (its dispatch carries a traceparent: package tracing); nil is the
	// no-op provider.
	TracerProvider trace.TracerProvider
}

// Bounds of Config.PollInterval: the poll is the publisher's safety net
// for lost notifications; shorter than PollIntervalMin it busy-loops the
// database, longer than PollIntervalMax it leaves rows waiting.
const (
	// MaxMessageBytesMin and MaxMessageBytesMax bound
	// Config.MaxMessageBytes: a dispatch message holds ids, names and a
	// version (about 220 bytes at the least), so a bound below 256 bytes
	// quarantines every row; RabbitMQ refuses a message over 512 MiB
	// whatever its max_message_size.
	MaxMessageBytesMin = 256
	MaxMessageBytesMax = 512 << 20
	// LanesMax bounds Config.Lanes: each lane holds a database connection
	// while its batch waits for confirms.
	LanesMax        = 16
	PollIntervalMin = 10 * time.Millisecond
	PollIntervalMax = time.Minute
)

// Validate checks the settings of c against their bounds, the one place
// they are checked (ffctl maps its flags to a Config and reports this
// error as a usage error): BatchSize, PollInterval, MaxMessageBytes and
// RedriveInterval must not be negative; zero ones take their defaults in
// New. The error is a *daemon.SettingError. The dependencies (Store,
// Broker) are New's to check.
func (c Config) Validate() error {
	for _, err := range []error{
		daemon.CheckNotNegative("publisher", "BatchSize", "", c.BatchSize, BatchSizeDefault),
		daemon.CheckRange("publisher", "Lanes", "batches-in-flight", c.Lanes, LanesDefault, 1, LanesMax),
		daemon.CheckNotNegative("publisher", "PollInterval", "poll-interval", c.PollInterval, PollIntervalDefault),
		daemon.CheckRange("publisher", "PollInterval", "poll-interval", c.PollInterval, PollIntervalDefault, PollIntervalMin, PollIntervalMax),
		daemon.CheckNotNegative("publisher", "MaxMessageBytes", "max-message-bytes", c.MaxMessageBytes, MaxMessageBytesDefault),
		daemon.CheckRange("publisher", "MaxMessageBytes", "max-message-bytes", c.MaxMessageBytes, MaxMessageBytesDefault, MaxMessageBytesMin, MaxMessageBytesMax),
		daemon.CheckNotNegative("publisher", "RedriveInterval", "", c.RedriveInterval, RedriveIntervalDefault),
	} {
		if err != nil {
			return err
		}
	}
	return nil
}

// validate checks the dependencies (Store, a broker URL) and Validate's
// bounds, then fills in the defaults of the zero settings.
func (c *Config) validate() error {
	if c.Store == nil {
		return errors.New("publisher: Store is required")
	}
	if c.EventsExchange != "" {
		if err := broker.CheckExchangeName(c.EventsExchange); err != nil {
			return fmt.Errorf("publisher: --events-exchange: %w", err)
		}
	}
	if len(c.Broker.URLs) == 0 {
		return errors.New("publisher: at least one broker URL is required")
	}
	if err := c.Validate(); err != nil {
		return err
	}
	c.BatchSize = cmp.Or(c.BatchSize, BatchSizeDefault)
	c.Lanes = cmp.Or(c.Lanes, LanesDefault)
	c.PollInterval = cmp.Or(c.PollInterval, PollIntervalDefault)
	c.StreamPollInterval = cmp.Or(c.StreamPollInterval, StreamPollIntervalDefault)
	c.MaxMessageBytes = cmp.Or(c.MaxMessageBytes, MaxMessageBytesDefault)
	c.RedriveInterval = cmp.Or(c.RedriveInterval, RedriveIntervalDefault)
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.TracerProvider == nil {
		c.TracerProvider = noop.NewTracerProvider()
	}
	if c.Metrics == nil {
		c.Metrics = metrics.New()
	}
	if c.Broker.Cursor == nil {
		c.Broker.Cursor = &broker.Cursor{}
	}
	return nil
}
