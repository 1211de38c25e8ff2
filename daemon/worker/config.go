package worker

import (
	"cmp"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/google/uuid"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/flowforge/flowforge/core"
	"github.com/flowforge/flowforge/core/broker"
	"github.com/flowforge/flowforge/daemon"
	"github.com/flowforge/flowforge/daemon/clock"
	"github.com/flowforge/flowforge/daemon/failpoint"
	"github.com/flowforge/flowforge/daemon/metrics"
)

// Defaults for Config.
const (
	// ConcurrencyDefault is 100 slots, as Hatchet's workers have: a slot
	// is a goroutine and a share of the prefetch, cheap for in-process
	// handlers, and the claims and finishes of many slots share their
	// statements (batches), so the database sees a few statements for
	// many tasks. The expensive handlers are bounded apart: the shell
	// handler runs at most handlers.ShellConcurrencyDefault commands at
	// once (--shell-concurrency). See docs/performance.md, "Defaults".
	ConcurrencyDefault = 100
	LeaseDefault       = 30 * time.Second
	SlotWaitDefault    = time.Minute
	// UnknownHandlerGraceDefault is how long a READY task whose handler
	// this worker does not register is handed back to the queue for another
	// worker before a worker claims it and fails it permanently.
	UnknownHandlerGraceDefault = time.Minute
	// AbortGraceDefault is how long an aborted worker waits for a handler
	// that does not return when its context is cancelled (Config.AbortGrace,
	// --abort-grace): long enough for a handler that cleans up on
	// cancellation, short enough that a stuck one does not hold the
	// process (and so the task, whose lease it renews) for minutes.
	AbortGraceDefault = 10 * time.Second
	// AbortGraceMax bounds Config.AbortGrace: ten minutes is far past any
	// process manager's stop timeout (systemd's default 90 s, Kubernetes'
	// 30 s), which kills the process first anyway; a larger value is a
	// unit typo (10h for 10s) that would let a stuck handler hold its task,
	// whose lease the worker renews while it waits, for hours.
	AbortGraceMax = 10 * time.Minute
)

// ConcurrencyMax is the largest Concurrency Validate accepts. The
// concurrency is also the consumer's prefetch, which AMQP caps at 65535;
// past a few thousand slots a worker's batches and its database pool, not
// its slots, bound it.
const ConcurrencyMax = 10_000

// LeaseMin is the shortest Lease Validate accepts: heartbeats run every
// Lease/3, and a renewal must fit in that with a database round trip to
// spare.
const LeaseMin = 300 * time.Millisecond

// Config configures a Worker.
type Config struct {
	Store Store
	// Renewer defaults to Store when it implements Renewer.
	Renewer Renewer
	// Broker's Handlers are set by New to Registry's names: the worker
	// consumes the shared queue and the queue of each handler it registers.
	Broker   broker.Config
	Registry *core.Registry
	// Concurrency is the number of handlers run at once and the consumer's
	// prefetch (default ConcurrencyDefault).
	Concurrency int
	// Lease is how long a claim is valid without a heartbeat; heartbeats
	// run every Lease/3 (default LeaseDefault; at least LeaseMin).
	Lease time.Duration
	// SlotWait bounds how long a delivery waits, unacked, for a free slot
	// before it is handed back to the queue. Keep it well below the
	// broker's consumer_timeout (default SlotWaitDefault).
	SlotWait time.Duration
	// UnknownHandlerGrace: a delivery whose handler this worker does not
	// register is handed back (requeued, no attempt used) so that a worker
	// that does can take it, until its task has been READY this long
	// (database clock); then it is claimed and fails permanently with
	// "unknown handler" (default UnknownHandlerGraceDefault).
	UnknownHandlerGrace time.Duration
	// AbortGrace is how long, once the worker is aborted (Abort), it waits
	// for a handler that does not return when its context is cancelled;
	// then the attempt is recorded failed (retried) without it, so that
	// the process can exit and end it (default AbortGraceDefault).
	AbortGrace time.Duration
	// ID names this process in leases and history (worker_id) and is its
	// consumer tag; see CheckID.
	ID      string
	Logger  *slog.Logger
	Metrics *metrics.Metrics
	// Clock is the process clock (default clock.System); it only measures
	// the worker's own intervals, never a lease.
	Clock clock.Clock
	// DatabaseURL, when set, is where the worker LISTENs on
	// store.CancelChannel (a dedicated connection, reconnected with
	// backoff) so that a cancelled run's handlers stop within a database
	// round trip instead of at their next heartbeat. Empty: heartbeats
	// alone deliver cancellation (within Lease/3).
	DatabaseURL string
	// TaskLogMaxBytes caps the bytes of one attempt's log (the lines a
	// handler logs through core.Logger, a shell command's output), at
	// most TaskLogMaxBytesMax; 0 is TaskLogMaxBytesDefault. See tasklog.go.
	TaskLogMaxBytes int
	// TaskLogsOff turns task logs off (--task-log-max-bytes 0):
	// core.Logger discards, and a shell command's output is kept only in
	// its result's tails.
	TaskLogsOff bool
	// TaskLogs is where task logs are written; it defaults to Store when
	// it implements TaskLogStore, else task logs are off.
	TaskLogs TaskLogStore
	// Failpoints is a testing aid (package failpoint); nil in production.
	Failpoints *failpoint.Failpoints
	// TracerProvider records the spans of traced deliveries (those whose
	// dispatch carries a traceparent: package tracing); nil is the no-op
	// provider.
	TracerProvider trace.TracerProvider
}

// Validate checks the settings of c against their bounds, the one place
// they are checked (ffctl maps its flags to a Config and reports this
// error as a usage error): Concurrency, SlotWait, UnknownHandlerGrace,
// AbortGrace and TaskLogMaxBytes must not be negative (nor TaskLogMaxBytes above
// TaskLogMaxBytesMax, nor AbortGrace above AbortGraceMax), Lease must be 0 or at least LeaseMin, and ID must
// pass CheckID. Zero settings take their defaults in New. The error is a
// *daemon.SettingError, or CheckID's wrapped for the ID. The dependencies
// (Store, Renewer, Registry, Broker) are New's to check.
func (c Config) Validate() error {
	if c.Lease != 0 && c.Lease < LeaseMin {
		return &daemon.SettingError{Component: "worker", Field: "Lease", Flag: "lease", Value: c.Lease,
			Want: fmt.Sprintf("at least %s, or 0 for the default (%s)", LeaseMin, LeaseDefault)}
	}
	for _, err := range []error{
		daemon.CheckNotNegative("worker", "Concurrency", "concurrency", c.Concurrency, ConcurrencyDefault),
		daemon.CheckRange("worker", "Concurrency", "concurrency", c.Concurrency, ConcurrencyDefault, 1, ConcurrencyMax),
		daemon.CheckNotNegative("worker", "SlotWait", "slot-wait", c.SlotWait, SlotWaitDefault),
		daemon.CheckNotNegative("worker", "UnknownHandlerGrace", "unknown-handler-grace", c.UnknownHandlerGrace, UnknownHandlerGraceDefault),
		daemon.CheckNotNegative("worker", "TaskLogMaxBytes", "task-log-max-bytes", c.TaskLogMaxBytes, TaskLogMaxBytesDefault),
		daemon.CheckNotNegative("worker", "AbortGrace", "abort-grace", c.AbortGrace, AbortGraceDefault),
		daemon.CheckRange("worker", "AbortGrace", "abort-grace", c.AbortGrace, AbortGraceDefault, 1, AbortGraceMax),
		daemon.CheckRange("worker", "TaskLogMaxBytes", "task-log-max-bytes", c.TaskLogMaxBytes, TaskLogMaxBytesDefault, 0, TaskLogMaxBytesMax),
	} {
		if err != nil {
			return err
		}
	}
	if err := CheckID(c.ID); err != nil {
		return fmt.Errorf("worker: --id (Config.ID): %w", err)
	}
	return nil
}

func (c *Config) validate() error {
	if c.Store == nil {
		return errors.New("worker: Store is required")
	}
	if c.Renewer == nil {
		r, ok := c.Store.(Renewer)
		if !ok {
			return errors.New("worker: Renewer is required")
		}
		c.Renewer = r
	}
	if c.Registry == nil {
		return errors.New("worker: Registry is required")
	}
	if len(c.Broker.URLs) == 0 {
		return errors.New("worker: at least one broker URL is required")
	}
	if err := c.Validate(); err != nil {
		return err
	}
	// Routing by handler: the consumer takes the queue of each handler
	// this worker registers beside the shared queue.
	c.Broker.Handlers = c.Registry.Names()
	c.Concurrency = cmp.Or(c.Concurrency, ConcurrencyDefault)
	c.Lease = cmp.Or(c.Lease, LeaseDefault)
	c.SlotWait = cmp.Or(c.SlotWait, SlotWaitDefault)
	c.UnknownHandlerGrace = cmp.Or(c.UnknownHandlerGrace, UnknownHandlerGraceDefault)
	c.AbortGrace = cmp.Or(c.AbortGrace, AbortGraceDefault)
	c.TaskLogMaxBytes = cmp.Or(c.TaskLogMaxBytes, TaskLogMaxBytesDefault)
	if c.TaskLogs == nil && !c.TaskLogsOff {
		c.TaskLogs, _ = c.Store.(TaskLogStore)
	}
	if c.ID == "" {
		c.ID = "worker-" + uuid.NewString()[:8]
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Metrics == nil {
		c.Metrics = metrics.New()
	}
	if c.TracerProvider == nil {
		c.TracerProvider = noop.NewTracerProvider()
	}
	c.Clock = clock.OrSystem(c.Clock)
	if c.Broker.Cursor == nil {
		c.Broker.Cursor = &broker.Cursor{}
	}
	return nil
}
