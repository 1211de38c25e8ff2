package supervisor

import (
	"cmp"
	"fmt"
	"log/slog"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/flowforge/flowforge/core/broker"
	"github.com/flowforge/flowforge/core/store"
	"github.com/flowforge/flowforge/daemon"
	"github.com/flowforge/flowforge/daemon/api"
	"github.com/flowforge/flowforge/daemon/dbhealth"
	"github.com/flowforge/flowforge/daemon/handlers"
	"github.com/flowforge/flowforge/daemon/metrics"
	"github.com/flowforge/flowforge/daemon/pruner"
	"github.com/flowforge/flowforge/daemon/publisher"
	"github.com/flowforge/flowforge/daemon/scheduler"
	"github.com/flowforge/flowforge/daemon/worker"
)

// Role names the daemons a process runs.
type Role string

// The roles.
const (
	RoleAll       Role = "all" // scheduler, publisher and worker in one process
	RoleScheduler Role = "scheduler"
	RolePublisher Role = "publisher"
	RoleWorker    Role = "worker"
	// RoleAPI serves the HTTP API (package daemon/api) alone; RoleAll
	// serves it too when Config.API.Listen is set.
	RoleAPI Role = "api"
)

// Roles returns every role, in the order ffctl lists them.
func Roles() []Role { return []Role{RoleAll, RoleScheduler, RolePublisher, RoleWorker, RoleAPI} }

// Runs reports whether a process of role r runs the daemon d (one of
// RoleScheduler, RolePublisher and RoleWorker): r is d, or RoleAll. The
// API is another matter: see Config.servesAPI.
func (r Role) Runs(d Role) bool { return r == d || (r == RoleAll && d != RoleAPI) }

// usesBroker reports whether a process of role r speaks to RabbitMQ: all
// but the scheduler and the API.
func (r Role) usesBroker() bool { return r != RoleScheduler && r != RoleAPI }

// HealthAddrDefault is the role's default address of the health server:
// 127.0.0.1 port 8080 for all, 8081 scheduler, 8082 publisher, 8083
// worker, 8084 api ("" for an unknown role).
func (r Role) HealthAddrDefault() string {
	return map[Role]string{
		RoleAll:       "127.0.0.1:8080",
		RoleScheduler: "127.0.0.1:8081",
		RolePublisher: "127.0.0.1:8082",
		RoleWorker:    "127.0.0.1:8083",
		RoleAPI:       "127.0.0.1:8084",
	}[r]
}

func (r Role) valid() bool { return r.HealthAddrDefault() != "" }

// Defaults for Config.
const (
	// DBMaxConnsDefault is the size of the main database pool, plus
	// WorkerConnsMax more (at most the worker's Concurrency) for the roles
	// that run a worker.
	DBMaxConnsDefault = 10
	// WorkerConnsMax bounds what a worker adds to the main pool by
	// default: its claims and finishes are batched (a few statements in
	// flight whatever the slots), and the per-task calls (idempotency key
	// claims, read-backs) are short, so a pool that grew with the slots
	// (110 connections at the default 100) would only exhaust the
	// server's max_connections (100 by default).
	WorkerConnsMax = 10
	// RenewerMaxConns is the size of the worker's own pool for lease
	// renewals, so that handlers or claims that exhaust the main pool
	// never starve heartbeats.
	RenewerMaxConns = 3
	// DependencyWatchInterval is how often the process checks its
	// dependencies for flowforge_dependency_up and the "dependency
	// lost/recovered" log lines.
	DependencyWatchInterval = time.Second
	// PresenceInterval is the period of the presence heartbeat (the
	// dashboard's Workers screen) under the default IDLease: a third of
	// the lease.
	PresenceInterval = 5 * time.Second
	// IDLeaseDefault is the default Config.IDLease: three presence
	// heartbeats.
	IDLeaseDefault = 3 * PresenceInterval
)

// Config configures a daemon process. The daemons' own settings are given
// in their Configs (Scheduler, Publisher, Worker, DBHealth); the fields the
// supervisor provides (Store, Renewer, DatabaseURL, Broker, ID, Logger,
// Metrics, Clock) are overwritten. The sections of daemons the role does
// not run are ignored.
type Config struct {
	Role Role
	// ID names the process in presence, history and leases, and is the
	// worker's consumer tag (see worker.CheckID). Empty: role-host-pid-
	// and four random hex digits.
	ID string
	// DatabaseURL is where PostgreSQL is; Session's bounds are added to it
	// for every connection of the process (pools and LISTENs).
	DatabaseURL string
	// Session bounds every database session: StatementTimeout,
	// LockTimeout and IdleInTxTimeout of store.Options (the other fields
	// are ignored); zero keeps the server's default.
	Session store.Options
	// DBMaxConns is the size of the main database pool (0: the default,
	// DBMaxConnsDefault plus the worker's Concurrency, at most
	// WorkerConnsMax, where one runs).
	DBMaxConns int
	// Broker is RabbitMQ, required for every role but the scheduler. The
	// worker gets a copy with a cursor of its own.
	Broker broker.Config
	// HealthAddr is the host:port of /health/live, /health/ready and
	// /metrics; "" disables the health server.
	HealthAddr string
	// HealthFallback: when HealthAddr's port is taken, listen on a free
	// port of the same host instead (and log it). False: Run fails.
	HealthFallback bool
	// MetricsMaxLabelValues bounds the distinct values of each workflow
	// and handler label of the latency histograms (the rest are exported
	// as "other"): 0 is metrics.MaxLabelValuesDefault, else 1 to
	// metrics.MaxLabelValuesMax.
	MetricsMaxLabelValues int

	Scheduler scheduler.Config
	// Pruner is the retention pruner run beside the scheduler (its Store,
	// Logger and Metrics are the process's); NoPrune runs none.
	Pruner    pruner.Config
	NoPrune   bool
	Publisher publisher.Config
	// Worker's Registry receives the built-in handlers (nil: a new one).
	Worker   worker.Config
	Handlers handlers.Options // the built-in handlers' options
	// WorkerHandlers, when not empty, limits the worker to these handlers
	// of Worker.Registry (built-ins included): it registers, reports in its
	// presence and consumes the queues of only these (--handlers). A name
	// not registered fails Run (core.Registry.Only's error).
	WorkerHandlers []string
	DBHealth       dbhealth.Config
	// API is the HTTP API's (its Client, Logger, Metrics and CheckParams
	// are the process's). RoleAPI serves it, on API.Listen or
	// api.ListenDefault; RoleAll serves it when API.Listen is set.
	API api.Config

	// TracerProvider records the spans of the process's daemons and of
	// the API's triggers (package tracing); nil is the no-op provider. The
	// caller built it (tracing.Setup) and shuts it down after Run.
	TracerProvider trace.TracerProvider

	// ClockSkew shifts every process-clock reading of the scheduler and
	// worker: a testing aid (package clock); 0 in production.
	ClockSkew time.Duration
	// Logger receives the process's logs (nil: none).
	Logger *slog.Logger
	// Hard, closed, aborts the worker's in-flight handlers: the second
	// stage of the stop, after Run's ctx ended (closed earlier, it takes
	// effect when ctx ends). Nil: only StopTimeout does.
	Hard <-chan struct{}
	// StopTimeout bounds the graceful stage of the stop: this long after
	// Run's ctx ended (the first signal) the in-flight handlers are
	// aborted as when Hard is closed. 0: DefaultStopTimeout.
	StopTimeout time.Duration
	// IDLease is how long after its holder's last presence heartbeat an
	// ID stays held (the heartbeat runs every IDLease/3): a process
	// started with an ID a live process holds is refused (*IDInUseError),
	// one whose holder has not been heard from for IDLease takes it over.
	// 0: IDLeaseDefault.
	IDLease time.Duration
}

// Validate checks c: the role, the database URL and the session bounds,
// the process's settings and, for the daemons the role runs, their
// Configs' Validate. It is the one place ffctl's daemon flags are checked:
// the error names the flag and the Config field (a *daemon.SettingError
// for a bound) and is a usage error there.
func (c Config) Validate() error {
	if !c.Role.valid() {
		return fmt.Errorf("supervisor: role %q: want all, scheduler, publisher, worker or api", c.Role)
	}
	if c.DatabaseURL == "" {
		return &daemon.SettingError{Component: "supervisor", Field: "DatabaseURL", Flag: "database-url", Value: `""`, Want: "a PostgreSQL URL"}
	}
	if err := worker.CheckID(c.ID); err != nil {
		return fmt.Errorf("supervisor: --id (Config.ID): %w", err)
	}
	if err := daemon.CheckNotNegative("supervisor", "DBMaxConns", "db-max-conns", c.DBMaxConns, DBMaxConnsDefault); err != nil {
		return err
	}
	if err := daemon.CheckRange("supervisor", "MetricsMaxLabelValues", "metrics-max-label-values", c.MetricsMaxLabelValues,
		metrics.MaxLabelValuesDefault, 1, metrics.MaxLabelValuesMax); err != nil {
		return err
	}
	if err := daemon.CheckNotNegative("supervisor", "StopTimeout", "stop-timeout", c.StopTimeout, DefaultStopTimeout); err != nil {
		return err
	}
	if err := daemon.CheckNotNegative("supervisor", "IDLease", "", c.IDLease, IDLeaseDefault); err != nil {
		return err
	}
	if err := c.Session.ValidateSession(c.idleHeld()); err != nil {
		return fmt.Errorf("supervisor: --db-statement-timeout, --db-lock-timeout, --db-idle-in-transaction-timeout (Config.Session): %w", err)
	}
	if _, err := c.sessionURL(); err != nil {
		return fmt.Errorf("supervisor: --database-url (Config.DatabaseURL): %w", err)
	}
	if err := c.DBHealth.Validate(); err != nil {
		return err
	}
	if c.Role.usesBroker() && len(c.Broker.URLs) == 0 {
		return &daemon.SettingError{Component: "supervisor", Field: "Broker.URLs", Flag: "amqp-url", Value: `""`, Want: "at least one RabbitMQ URL for the " + string(c.Role)}
	}
	return c.validateDaemons()
}

// validateDaemons checks the Configs of the daemons the role runs.
func (c Config) validateDaemons() error {
	if c.servesAPI() {
		if err := c.API.ValidateSettings(); err != nil {
			return err
		}
	}
	if c.Role.Runs(RoleScheduler) {
		if err := c.Scheduler.Validate(); err != nil {
			return err
		}
		if err := c.Pruner.Validate(); err != nil && !c.NoPrune {
			return err
		}
	}
	if c.Role.Runs(RolePublisher) {
		if err := c.Publisher.Validate(); err != nil {
			return err
		}
	}
	if c.Role.Runs(RoleWorker) {
		if err := c.Worker.Validate(); err != nil {
			return err
		}
		if err := handlers.CheckShellEnvPass(c.Handlers.ShellEnvPass); err != nil {
			return fmt.Errorf("supervisor: --shell-env-pass (Config.Handlers.ShellEnvPass): %w", err)
		}
	}
	return nil
}

// servesAPI reports whether the process serves the HTTP API.
func (c Config) servesAPI() bool {
	return c.Role == RoleAPI || (c.Role == RoleAll && c.API.Listen != "")
}

// idleHeld is the longest a transaction of the process stays open while
// idle: the publisher's broker confirm wait, for the roles that publish.
func (c Config) idleHeld() time.Duration {
	if !c.Role.Runs(RolePublisher) {
		return 0
	}
	return cmp.Or(c.Broker.ConfirmTimeout, broker.ConfirmTimeoutDefault)
}

// sessionURL is DatabaseURL carrying the session bounds.
func (c Config) sessionURL() (string, error) {
	return store.SessionURL(c.DatabaseURL, store.Options{
		StatementTimeout: c.Session.StatementTimeout,
		LockTimeout:      c.Session.LockTimeout,
		IdleInTxTimeout:  c.Session.IdleInTxTimeout,
	})
}

// dbMaxConns is the main pool's size.
func (c Config) dbMaxConns() int {
	if c.DBMaxConns > 0 {
		return c.DBMaxConns
	}
	if c.Role.Runs(RoleWorker) {
		return DBMaxConnsDefault + min(cmp.Or(c.Worker.Concurrency, worker.ConcurrencyDefault), WorkerConnsMax)
	}
	return DBMaxConnsDefault
}

// stopTimeout is the graceful stage's bound.
func (c Config) stopTimeout() time.Duration { return cmp.Or(c.StopTimeout, DefaultStopTimeout) }

// idLease is how long an ID stays held after its holder's last heartbeat.
func (c Config) idLease() time.Duration { return cmp.Or(c.IDLease, IDLeaseDefault) }
