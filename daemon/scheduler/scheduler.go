package scheduler

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/flowforge/flowforge/core"
	"github.com/flowforge/flowforge/core/store"
	"github.com/flowforge/flowforge/daemon"
	"github.com/flowforge/flowforge/daemon/backoff"
	"github.com/flowforge/flowforge/daemon/clock"
	"github.com/flowforge/flowforge/daemon/metrics"
)

// Defaults for Config.
const (
	SweepIntervalDefault = time.Second
	BatchSizeDefault     = 500
	ReapLimitDefault     = 500
	// RedispatchAfterDefault is how long a READY task may stay unclaimed
	// after its dispatch was confirmed before it is dispatched again.
	RedispatchAfterDefault = 5 * time.Minute
	// OutageGapDefault: a pass that starts more than SweepInterval plus
	// this after the previous one started (on the database's clock), or a
	// reap that runs more than this after its pass started, means the
	// scheduler lost the database meanwhile (see Config.OutageGap).
	OutageGapDefault = time.Second
)

// Store is what the scheduler needs from the database.
type Store interface {
	Now(ctx context.Context) (time.Time, error)
	Reap(ctx context.Context, req store.ReapRequest) (store.ReapResult, error)
	Advance(ctx context.Context, after *store.Cursor, limit int, actor string) (store.AdvanceResult, error)
	Redispatch(ctx context.Context, after time.Duration, limit int, actor string) (int, error)
}

// Config configures a Scheduler.
type Config struct {
	Store Store
	// DatabaseURL is used for the LISTEN connection; empty disables
	// NOTIFY wake-ups (the sweep still runs).
	DatabaseURL string
	// ID names this process in task history (actor).
	ID string
	// SweepInterval is the period of the pass that runs even without a
	// NOTIFY (default SweepIntervalDefault).
	SweepInterval time.Duration
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
	// clock, a pass may start after the previous one (beyond SweepInterval)
	// or a reap may run after its pass started before the scheduler treats
	// the delay as its own loss of the database. A failed pass always
	// counts. After such an outage the reaper grants every lapsed lease one
	// lease of grace from the reconnect, and reaps a lease that lapsed during
	// the outage without using up its attempt (store.ReapRequest.Outage).
	OutageGap time.Duration
	Logger    *slog.Logger
	Metrics   *metrics.Metrics
	// Clock is the process clock (default clock.System). It only dates the
	// last pass for the liveness check: leases and due times are compared
	// on the database's clock inside the SQL.
	Clock clock.Clock
}

// Validate checks the settings of c against their bounds, the one place
// they are checked (ffctl maps its flags to a Config and reports this
// error as a usage error): SweepInterval, BatchSize, ReapLimit,
// RedispatchAfter and OutageGap must not be negative; zero ones take their
// defaults in New. The error is a *daemon.SettingError. The Store is New's
// to check.
func (c Config) Validate() error {
	for _, err := range []error{
		daemon.CheckNotNegative("scheduler", "SweepInterval", "sweep-interval", c.SweepInterval, SweepIntervalDefault),
		daemon.CheckNotNegative("scheduler", "BatchSize", "", c.BatchSize, BatchSizeDefault),
		daemon.CheckNotNegative("scheduler", "ReapLimit", "", c.ReapLimit, ReapLimitDefault),
		daemon.CheckNotNegative("scheduler", "RedispatchAfter", "redispatch-after", c.RedispatchAfter, RedispatchAfterDefault),
		daemon.CheckNotNegative("scheduler", "OutageGap", "", c.OutageGap, OutageGapDefault),
	} {
		if err != nil {
			return err
		}
	}
	return nil
}

func (c *Config) validate() error {
	if c.Store == nil {
		return errors.New("scheduler: Store is required")
	}
	if err := c.Validate(); err != nil {
		return err
	}
	c.SweepInterval = cmp.Or(c.SweepInterval, SweepIntervalDefault)
	c.BatchSize = cmp.Or(c.BatchSize, BatchSizeDefault)
	c.ReapLimit = cmp.Or(c.ReapLimit, ReapLimitDefault)
	c.RedispatchAfter = cmp.Or(c.RedispatchAfter, RedispatchAfterDefault)
	c.OutageGap = cmp.Or(c.OutageGap, OutageGapDefault)
	c.ID = cmp.Or(c.ID, "scheduler")
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Metrics == nil {
		c.Metrics = metrics.New()
	}
	c.Clock = clock.OrSystem(c.Clock)
	return nil
}

// Scheduler promotes, retries, reaps and derives run states.
type Scheduler struct {
	cfg      Config
	log      *slog.Logger
	lastPass atomic.Int64 // unix nanos of the last completed pass
	healthy  atomic.Bool

	// Owned by the goroutine that calls RunOnce (Run's), on the database's
	// clock: the start of the last pass that completed, whether a pass
	// failed since, and the latest outage seen.
	lastDB time.Time
	failed bool
	outage *store.Outage

	signals testSignals // a nil channel outside this package's tests
}

// New validates cfg and returns a Scheduler.
func New(cfg Config) (*Scheduler, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	return &Scheduler{cfg: cfg, log: cfg.Logger}, nil
}

// Run loops until ctx ends, then returns nil. A database fault never ends
// it: the pass is retried with capped, jittered backoff, and "scheduler:
// recovered" is logged when a pass succeeds again.
func (s *Scheduler) Run(ctx context.Context) error {
	var wake <-chan struct{}
	if s.cfg.DatabaseURL != "" {
		var wait func()
		wake, wait = daemon.Wakeups(ctx, s.cfg.DatabaseURL, store.TopicTasks, s.log)
		defer wait()
	}
	tick := time.NewTicker(s.cfg.SweepInterval)
	defer tick.Stop()
	bo := daemon.Recovery{Component: "scheduler", Dependency: "postgres", Log: s.log, Metrics: s.cfg.Metrics}
	s.log.Info("scheduler: started", "sweep_interval", s.cfg.SweepInterval.String())
	for {
		err := s.RunOnce(ctx)
		s.signals.passDone(err)
		switch {
		case ctx.Err() != nil:
			s.log.Info("scheduler: stopped")
			return nil
		case err != nil:
			s.failed = true
			s.healthy.Store(false)
			d := bo.Fail()
			s.log.Error("scheduler: pass failed", "error", err, "failures", bo.Failures(), "retry_in", d.String())
			if backoff.Sleep(ctx, d) != nil {
				s.log.Info("scheduler: stopped")
				return nil
			}
			continue
		}
		s.healthy.Store(true)
		bo.Succeeded()
		select {
		case <-ctx.Done():
			s.log.Info("scheduler: stopped")
			return nil
		case <-wake:
		case <-tick.C:
		}
	}
}

// RunOnce reaps expired leases, then advances every open run (in pages of
// BatchSize runs, one transaction each). It dates the pass on the
// database's clock first: after a failed pass, or a gap longer than
// SweepInterval+OutageGap since the last pass, it records an outage, and
// the reaper then grants one lease of grace from this pass and refunds the
// attempt of a lease that lapsed during the outage. Calls must not overlap.
func (s *Scheduler) RunOnce(ctx context.Context) error {
	start, err := s.cfg.Store.Now(ctx)
	if err != nil {
		return fmt.Errorf("read the database clock: %w", err)
	}
	if gap := start.Sub(s.lastDB); s.failed || (!s.lastDB.IsZero() && gap > s.cfg.SweepInterval+s.cfg.OutageGap) {
		s.outage = &store.Outage{Since: s.lastDB, Until: start}
		s.cfg.Metrics.SchedulerOutages.Inc()
		attrs := []any{"failed_pass", s.failed}
		if !s.lastDB.IsZero() {
			attrs = append(attrs, "since_last_pass", gap.Round(time.Millisecond).String())
		}
		s.log.Warn("scheduler: reached the database after an outage; lapsed leases get one lease of grace, and those that lapsed during it keep their attempt", attrs...)
	}
	res, err := s.cfg.Store.Reap(ctx, store.ReapRequest{
		Limit: s.cfg.ReapLimit,
		Backoff: func(p core.RetryPolicy, attempt int) time.Duration {
			return p.Backoff(attempt, nil)
		},
		Actor:    s.cfg.ID,
		Outage:   s.outage,
		NotAfter: start.Add(s.cfg.OutageGap),
	})
	if err != nil {
		return fmt.Errorf("reap: %w", err)
	}
	if res.Reaped > 0 {
		s.cfg.Metrics.LeasesReaped.Add(float64(res.Reaped))
		s.cfg.Metrics.LeasesReapedAfterOutage.Add(float64(res.Refunded))
		s.log.Warn("scheduler: reaped expired leases", "count", res.Reaped, "refunded_after_outage", res.Refunded)
	}
	redispatched, err := s.cfg.Store.Redispatch(ctx, s.cfg.RedispatchAfter, s.cfg.ReapLimit, s.cfg.ID)
	if err != nil {
		return fmt.Errorf("redispatch: %w", err)
	}
	if redispatched > 0 {
		s.cfg.Metrics.TasksRedispatched.Add(float64(redispatched))
		s.log.Warn("scheduler: redispatched READY tasks whose confirmed dispatch led to no claim", "count", redispatched, "after", s.cfg.RedispatchAfter.String())
	}
	var cur *store.Cursor
	for {
		res, err := s.cfg.Store.Advance(ctx, cur, s.cfg.BatchSize, s.cfg.ID)
		if err != nil {
			return fmt.Errorf("advance: %w", err)
		}
		s.cfg.Metrics.TasksPromoted.Add(float64(res.Promoted + res.RetriesDue))
		if res.Promoted+res.RetriesDue+res.FailFastCancelled+res.FailFastRevived+res.UpstreamFailed+res.UpstreamRevived+res.RunsChanged > 0 {
			s.log.Debug("scheduler: pass", "promoted", res.Promoted, "retries_due", res.RetriesDue,
				"fail_fast_cancelled", res.FailFastCancelled, "fail_fast_revived", res.FailFastRevived,
				"upstream_failed", res.UpstreamFailed, "upstream_revived", res.UpstreamRevived,
				"runs_changed", res.RunsChanged, "runs_settled", res.RunsSettled)
		}
		if res.Next == nil {
			break
		}
		cur = res.Next
	}
	s.lastDB, s.failed = start, false
	s.lastPass.Store(s.cfg.Clock.Now().UnixNano())
	return nil
}

// Live reports an error when no pass completed for a long time while the
// scheduler believes it is healthy (a stuck loop).
func (s *Scheduler) Live() error {
	last := s.lastPass.Load()
	if last == 0 || !s.healthy.Load() {
		return nil
	}
	if age := clock.Since(s.cfg.Clock, time.Unix(0, last)); age > 10*s.cfg.SweepInterval+time.Minute {
		return fmt.Errorf("no scheduler pass for %s", age.Round(time.Second))
	}
	return nil
}
