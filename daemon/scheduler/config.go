package scheduler

import (
	"cmp"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/flowforge/flowforge/core/store"
	"github.com/flowforge/flowforge/daemon"
	"github.com/flowforge/flowforge/daemon/clock"
	"github.com/flowforge/flowforge/daemon/failpoint"
	"github.com/flowforge/flowforge/daemon/metrics"
)

// Defaults for Config.
const (
	SweepIntervalDefault = time.Second
	// FullSweepIntervalDefault is the period of the full paged pass over
	// every open run (Config.FullSweepInterval).
	FullSweepIntervalDefault = 30 * time.Second
	BatchSizeDefault         = 500
	ReapLimitDefault         = 500
	// RedispatchAfterDefault is how long a READY task may stay unclaimed
	// after its dispatch was confirmed before it is dispatched again.
	RedispatchAfterDefault = 5 * time.Minute
	// OutageGapDefault: a pass that starts more than SweepInterval plus
	// this after the previous one started (on the database's clock), or a
	// reap that runs more than this after its pass started, means the
	// scheduler lost the database meanwhile (see Config.OutageGap).
	OutageGapDefault = time.Second
)

// Config configures a Scheduler.
type Config struct {
	Store Store
	// DatabaseURL is used for the LISTEN connection; empty disables
	// NOTIFY wake-ups (the sweep still runs).
	DatabaseURL string
	// ID names this process in task history (actor).
	ID string
	// SweepInterval is the period of the sweep that runs even without a
	// NOTIFY (default SweepIntervalDefault): reap, redispatch, and advance
	// the runs store.SweepCandidates finds (retries due, promotable tasks
	// whose notification was lost, runs to settle or cancel). It bounds
	// the delay a lost notification costs a promotion.
	SweepInterval time.Duration
	// FullSweepInterval is the period of the full paged pass over every
	// open run (store.Advance), the safety net for what the sweep's
	// candidates cannot see (a derived run state whose notification was
	// lost while tasks still run). Default FullSweepIntervalDefault, or
	// SweepInterval when that is longer; at least SweepInterval. A
	// listener (re)connect runs one at once.
	FullSweepInterval time.Duration
	// BatchSize is how many open runs one transaction handles.
	BatchSize int
	// ReapLimit bounds expired leases handled per pass.
	ReapLimit int
	// RedispatchAfter: a READY task nobody claimed this long after its
	// dispatch was confirmed is dispatched again (same fencing token), in
	// case the message was lost with a deleted queue or a failed broker
	// node (default RedispatchAfterDefault). Keep it well above the
	// longest normal queueing delay: a needless copy costs a lost claim.
	RedispatchAfter time.Duration
	// OutageGap (default OutageGapDefault) is how late, on the database's
	// clock, a sweep may reach the database after the previous one did
	// (beyond SweepInterval) or a reap may run after its sweep started
	// before the scheduler treats the delay as its own loss of the
	// database. A pass that failed to reach the database
	// (store.IsUnreachable) always counts; one the database answered with
	// a refusal (a lock or statement timeout) never does, nor a run held
	// by another transaction (no failure at all: store.AdvanceRuns hands it
	// back). After such an outage the reaper grants every lapsed lease one
	// lease of grace from the reconnect, and reaps a lease that lapsed during
	// the outage without using up its attempt (store.ReapRequest.Outage).
	OutageGap time.Duration
	// Schedules, when set, has each sweep fire the schedule ticks due
	// (see fireTicks); nil fires none.
	Schedules ScheduleStore
	// MisfireGrace: a tick due longer ago than this is missed and follows
	// its schedule's catch-up policy (default store.MisfireGraceDefault,
	// or twice SweepInterval when that is longer); at least twice
	// SweepInterval (a tick is seen at most one sweep after it is due).
	MisfireGrace time.Duration
	// MaxChildDepth bounds how deep child runs nest: a run started by no
	// task has depth 0, its child runs 1, and a workflow task whose child
	// would be deeper is DEAD, naming the bound (a workflow that starts
	// itself, directly or through others, ends there). The pass that
	// starts a child run is the store's, so the bound is the Store's:
	// whoever opens it passes this as store.Options.MaxChildDepth (the
	// supervisor does, for the process's store); the Scheduler itself does
	// not read it. 0: store.MaxChildDepthDefault; otherwise
	// MaxChildDepthMin to MaxChildDepthMax.
	MaxChildDepth int
	// Failpoints is a testing aid (package failpoint); nil in production.
	Failpoints *failpoint.Failpoints
	// TracerProvider records a flowforge.promote span of each task a pass
	// makes READY in a traced run (store.AdvanceResult.Traced); nil is the
	// no-op provider.
	TracerProvider trace.TracerProvider
	Logger         *slog.Logger
	Metrics        *metrics.Metrics
	// Clock is the process clock (default clock.System). It only dates the
	// last pass for the liveness check: leases and due times are compared
	// on the database's clock inside the SQL.
	Clock clock.Clock
}

// Bounds of Config.SweepInterval: the sweep reaps lapsed leases and
// promotes retries coming due, so a sweep longer than SweepIntervalMax
// stalls both; one shorter than SweepIntervalMin busy-loops the database
// (a pass every few microseconds found by a new user's trial).
const (
	SweepIntervalMin = 10 * time.Millisecond
	SweepIntervalMax = time.Minute
)

// Bounds of Config.MaxChildDepth. Below 1 every workflow task would be
// DEAD (leave such tasks out instead). Above 100 the bound no longer does
// its job: apply refuses workflows that start each other in a cycle, but
// a cycle closed by two applies at once is only ended by this bound, and
// each level holds a run open until it ends.
const (
	MaxChildDepthMin = 1
	MaxChildDepthMax = 100
)

// Validate checks the settings of c against their bounds, the one place
// they are checked (ffctl maps its flags to a Config and reports this
// error as a usage error): SweepInterval within [SweepIntervalMin,
// SweepIntervalMax], FullSweepInterval not below it, MaxChildDepth within
// [MaxChildDepthMin, MaxChildDepthMax], BatchSize, ReapLimit,
// RedispatchAfter and OutageGap must not be negative; zero ones take their
// defaults in New. The error is a *daemon.SettingError. The Store is New's
// to check.
func (c Config) Validate() error {
	for _, err := range []error{
		daemon.CheckNotNegative("scheduler", "SweepInterval", "sweep-interval", c.SweepInterval, SweepIntervalDefault),
		daemon.CheckRange("scheduler", "SweepInterval", "sweep-interval", c.SweepInterval, SweepIntervalDefault, SweepIntervalMin, SweepIntervalMax),
		daemon.CheckNotNegative("scheduler", "FullSweepInterval", "full-sweep-interval", c.FullSweepInterval, FullSweepIntervalDefault),
		c.checkFullSweep(),
		daemon.CheckNotNegative("scheduler", "BatchSize", "", c.BatchSize, BatchSizeDefault),
		daemon.CheckNotNegative("scheduler", "ReapLimit", "", c.ReapLimit, ReapLimitDefault),
		daemon.CheckNotNegative("scheduler", "RedispatchAfter", "redispatch-after", c.RedispatchAfter, RedispatchAfterDefault),
		daemon.CheckNotNegative("scheduler", "OutageGap", "", c.OutageGap, OutageGapDefault),
		daemon.CheckNotNegative("scheduler", "MisfireGrace", "misfire-grace", c.MisfireGrace, store.MisfireGraceDefault),
		c.checkMisfireGrace(),
		daemon.CheckRange("scheduler", "MaxChildDepth", "max-child-depth", c.MaxChildDepth, store.MaxChildDepthDefault, MaxChildDepthMin, MaxChildDepthMax),
	} {
		if err != nil {
			return err
		}
	}
	return nil
}

// checkFullSweep bounds FullSweepInterval below by SweepInterval (each
// after its default): a full pass more often than the sweep it backs
// would be the sweep.
func (c Config) checkFullSweep() error {
	sweep := cmp.Or(c.SweepInterval, SweepIntervalDefault)
	if c.FullSweepInterval <= 0 || c.SweepInterval < 0 || c.FullSweepInterval >= sweep {
		return nil
	}
	return &daemon.SettingError{Component: "scheduler", Field: "FullSweepInterval", Flag: "full-sweep-interval", Value: c.FullSweepInterval,
		Want: fmt.Sprintf("at least the sweep interval (%v), or 0 for the default (%v)", sweep, FullSweepIntervalDefault)}
}

// checkMisfireGrace bounds MisfireGrace below by twice SweepInterval
// (after its default): a tick is seen at most one sweep after it is due,
// so a shorter grace calls on time ticks missed (catch-up none: the
// schedule never fires).
func (c Config) checkMisfireGrace() error {
	sweep := cmp.Or(c.SweepInterval, SweepIntervalDefault)
	if c.MisfireGrace <= 0 || c.SweepInterval < 0 || c.MisfireGrace >= 2*sweep {
		return nil
	}
	return &daemon.SettingError{Component: "scheduler", Field: "MisfireGrace", Flag: "misfire-grace", Value: c.MisfireGrace,
		Want: fmt.Sprintf("at least twice the sweep interval (%v: a tick is seen up to one sweep after it is due), or 0 for the default (%v)", 2*sweep, store.MisfireGraceDefault)}
}

func (c *Config) validate() error {
	if c.Store == nil {
		return errors.New("scheduler: Store is required")
	}
	if err := c.Validate(); err != nil {
		return err
	}
	c.SweepInterval = cmp.Or(c.SweepInterval, SweepIntervalDefault)
	c.FullSweepInterval = cmp.Or(c.FullSweepInterval, max(FullSweepIntervalDefault, c.SweepInterval))
	c.BatchSize = cmp.Or(c.BatchSize, BatchSizeDefault)
	c.ReapLimit = cmp.Or(c.ReapLimit, ReapLimitDefault)
	c.RedispatchAfter = cmp.Or(c.RedispatchAfter, RedispatchAfterDefault)
	c.OutageGap = cmp.Or(c.OutageGap, OutageGapDefault)
	c.MisfireGrace = cmp.Or(c.MisfireGrace, max(store.MisfireGraceDefault, 2*c.SweepInterval))
	c.ID = cmp.Or(c.ID, "scheduler")
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.TracerProvider == nil {
		c.TracerProvider = noop.NewTracerProvider()
	}
	if c.Metrics == nil {
		c.Metrics = metrics.New()
	}
	c.Clock = clock.OrSystem(c.Clock)
	return nil
}
