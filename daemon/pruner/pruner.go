package pruner

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/flowforge/flowforge/core"
	"github.com/flowforge/flowforge/core/store"
	"github.com/flowforge/flowforge/daemon"
	"github.com/flowforge/flowforge/daemon/metrics"
)

// Defaults and bounds of Config.
const (
	// IntervalDefault is the period of the prune passes.
	IntervalDefault = time.Minute
	IntervalMin     = time.Second
	IntervalMax     = 24 * time.Hour
	// RetainSucceededDefault and RetainCancelledDefault are the ages after
	// which a SUCCEEDED or CANCELLED run (holding no DEAD task) is pruned.
	RetainSucceededDefault = 7 * 24 * time.Hour
	RetainCancelledDefault = 7 * 24 * time.Hour
	// RetainOutboxDefault is the age after which a published outbox row is
	// pruned.
	RetainOutboxDefault = 24 * time.Hour
	// RetainMin and RetainMax bound every retention age.
	RetainMin = time.Minute
	RetainMax = 3650 * 24 * time.Hour
	// BatchSizeDefault is the runs (or outbox rows) one transaction
	// deletes.
	BatchSizeDefault = store.PruneBatchDefault
	BatchSizeMax     = 10000
)

// Store is what the pruner needs from the database.
type Store interface {
	PruneRuns(ctx context.Context, req store.PruneRequest) (store.PruneCounts, error)
	PruneOutbox(ctx context.Context, age time.Duration, limit int) (int64, error)
	PruneEvents(ctx context.Context, after time.Duration, limit int) (int64, error)
	PruneStream(ctx context.Context, age time.Duration, limit int) (int64, error)
}

// Config configures a Pruner. Zero durations and sizes take their
// defaults, except RetainDead, whose zero is off.
type Config struct {
	Store Store
	// Interval is the period of the passes (IntervalDefault).
	Interval time.Duration
	// RetainSucceeded, RetainCancelled: a settled SUCCEEDED, or CANCELLED
	// run holding no DEAD task, is pruned this long after it finished.
	RetainSucceeded time.Duration
	RetainCancelled time.Duration
	// RetainDead: a settled run holding a DEAD task (every FAILED run, and
	// a CANCELLED run with a DEAD task) is pruned this long after it
	// finished; 0 (the default) never prunes one.
	RetainDead time.Duration
	// RetainOutbox: a published outbox row, and a published transition
	// stream row, is pruned this long after it was published.
	RetainOutbox time.Duration
	// BatchSize bounds the rows of one transaction (BatchSizeDefault).
	BatchSize int
	Logger    *slog.Logger
	Metrics   *metrics.Metrics

	// afterBatch, when set (this package's tests), is called after every
	// batch with what it deleted.
	afterBatch func(store.PruneCounts)
}

// Validate checks c's settings against their bounds (the one place;
// ffctl reports the error, a *daemon.SettingError, as a usage error):
// Interval within [IntervalMin, IntervalMax], every retention age within
// [RetainMin, RetainMax], BatchSize within [1, BatchSizeMax]; zero takes
// the default (RetainDead: off).
func (c Config) Validate() error {
	for _, err := range []error{
		daemon.CheckRange("pruner", "Interval", "prune-interval", c.Interval, IntervalDefault, IntervalMin, IntervalMax),
		daemon.CheckRange("pruner", "RetainSucceeded", "retain-succeeded", c.RetainSucceeded, RetainSucceededDefault, RetainMin, RetainMax),
		daemon.CheckRange("pruner", "RetainCancelled", "retain-cancelled", c.RetainCancelled, RetainCancelledDefault, RetainMin, RetainMax),
		daemon.CheckRange("pruner", "RetainOutbox", "retain-outbox", c.RetainOutbox, RetainOutboxDefault, RetainMin, RetainMax),
		checkRetainDead(c.RetainDead),
		daemon.CheckRange("pruner", "BatchSize", "", c.BatchSize, BatchSizeDefault, 1, BatchSizeMax),
	} {
		if err != nil {
			return err
		}
	}
	return nil
}

// checkRetainDead bounds RetainDead like the other ages, 0 meaning off.
func checkRetainDead(d time.Duration) error {
	if d == 0 || (d >= RetainMin && d <= RetainMax) {
		return nil
	}
	return &daemon.SettingError{Component: "pruner", Field: "RetainDead", Flag: "retain-dead", Value: d,
		Want: fmt.Sprintf("between %v and %v, or 0 (the default) never to prune a run holding a DEAD task", RetainMin, RetainMax)}
}

// Pruner deletes settled runs and published outbox rows past their
// retention ages (see the package doc).
type Pruner struct {
	cfg Config
	log *slog.Logger
	m   *metrics.Prune
}

// New validates cfg, fills its defaults and registers the pruner's
// metrics on cfg.Metrics (a new Metrics when nil). Errors: a nil Store, a
// *daemon.SettingError, or the metrics' registration.
func New(cfg Config) (*Pruner, error) {
	if cfg.Store == nil {
		return nil, errors.New("pruner: Store is required")
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.Interval = orDefault(cfg.Interval, IntervalDefault)
	cfg.RetainSucceeded = orDefault(cfg.RetainSucceeded, RetainSucceededDefault)
	cfg.RetainCancelled = orDefault(cfg.RetainCancelled, RetainCancelledDefault)
	cfg.RetainOutbox = orDefault(cfg.RetainOutbox, RetainOutboxDefault)
	if cfg.BatchSize == 0 {
		cfg.BatchSize = BatchSizeDefault
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Metrics == nil {
		cfg.Metrics = metrics.New()
	}
	m, err := metrics.NewPrune(cfg.Metrics)
	if err != nil {
		return nil, fmt.Errorf("pruner: %w", err)
	}
	return &Pruner{cfg: cfg, log: cfg.Logger, m: m}, nil
}

func orDefault(d, def time.Duration) time.Duration {
	if d == 0 {
		return def
	}
	return d
}

// Run prunes at once and then every Interval until ctx ends, then returns
// nil. A failed pass is logged and counted; the next starts an Interval
// later.
func (p *Pruner) Run(ctx context.Context) error {
	p.log.Info("pruner: started", "interval", p.cfg.Interval.String(),
		"retain_succeeded", p.cfg.RetainSucceeded.String(), "retain_cancelled", p.cfg.RetainCancelled.String(),
		"retain_dead", retainDeadText(p.cfg.RetainDead), "retain_outbox", p.cfg.RetainOutbox.String())
	tick := time.NewTicker(p.cfg.Interval)
	defer tick.Stop()
	for {
		if _, err := p.RunOnce(ctx); err != nil && ctx.Err() == nil {
			p.log.Error("pruner: pass failed", "error", err, "retry_in", p.cfg.Interval.String())
		}
		select {
		case <-ctx.Done():
			p.log.Info("pruner: stopped")
			return nil
		case <-tick.C:
		}
	}
}

func retainDeadText(d time.Duration) string {
	if d == 0 {
		return "off"
	}
	return d.String()
}

// class is one kind of settled run the pruner deletes, with its age.
type class struct {
	state       core.RunState
	holdingDead bool
	age         time.Duration
}

// classes are the run classes a pass prunes, by the configured ages: a
// run holding a DEAD task only with RetainDead set.
func (p *Pruner) classes() []class {
	cs := []class{
		{core.RunSucceeded, false, p.cfg.RetainSucceeded},
		{core.RunCancelled, false, p.cfg.RetainCancelled},
	}
	if p.cfg.RetainDead > 0 {
		cs = append(cs, class{core.RunFailed, true, p.cfg.RetainDead}, class{core.RunCancelled, true, p.cfg.RetainDead})
	}
	return cs
}

// PassResult is what one pass deleted: runs and what went with them by
// the runs' final state, published outbox rows pruned by age, and events
// whose lookback ended.
type PassResult struct {
	Runs   map[core.RunState]store.PruneCounts
	Outbox int64
	Events int64
	// Stream counts the published transition stream rows pruned by age.
	Stream int64
}

// Total is the sum of the runs' counts over every state.
func (r PassResult) Total() store.PruneCounts {
	var t store.PruneCounts
	for _, c := range r.Runs {
		t = t.Add(c)
	}
	return t
}

// RunOnce makes one pass (see the package doc) and returns what it
// deleted, also when a batch failed (then with the error, wrapped with the
// class). Calls may overlap, also with other processes' pruners.
func (p *Pruner) RunOnce(ctx context.Context) (PassResult, error) {
	start := time.Now()
	res := PassResult{Runs: map[core.RunState]store.PruneCounts{}}
	err := p.pass(ctx, &res)
	p.m.PassSeconds.Observe(time.Since(start).Seconds())
	if err != nil {
		p.m.PassFailures.Inc()
	}
	if t := res.Total(); t.Runs > 0 || res.Outbox > 0 || res.Events > 0 || res.Stream > 0 {
		attrs := []any{"runs", t.Runs, "task_runs", t.TaskRuns, "outbox_of_runs", t.Outbox, "task_events", t.TaskEvents,
			"outbox_published", res.Outbox, "events", res.Events, "stream_published", res.Stream, "duration_ms", time.Since(start).Milliseconds()}
		for s, c := range res.Runs {
			attrs = append(attrs, "runs_"+string(s), c.Runs)
		}
		p.log.Info("pruner: pruned", attrs...)
	}
	return res, err
}

// pass runs every class's batches, then those of the published outbox
// rows, the events and the published transition stream rows,
// adding to res.
func (p *Pruner) pass(ctx context.Context, res *PassResult) error {
	for _, c := range p.classes() {
		for {
			n, err := p.cfg.Store.PruneRuns(ctx, store.PruneRequest{State: c.state, HoldingDead: c.holdingDead, Age: c.age, Limit: p.cfg.BatchSize})
			if err != nil {
				return fmt.Errorf("pruner: %w", err)
			}
			res.Runs[c.state] = res.Runs[c.state].Add(n)
			p.count(string(c.state), n)
			if p.cfg.afterBatch != nil {
				p.cfg.afterBatch(n)
			}
			if n.Runs < int64(p.cfg.BatchSize) {
				break
			}
		}
	}
	for _, d := range []struct {
		table, state string
		batch        func() (int64, error)
		into         *int64
	}{
		{"outbox", metrics.PrunePublished, func() (int64, error) { return p.cfg.Store.PruneOutbox(ctx, p.cfg.RetainOutbox, p.cfg.BatchSize) }, &res.Outbox},
		{"events", metrics.PruneLookbackEnded, func() (int64, error) {
			return p.cfg.Store.PruneEvents(ctx, store.EventIDMemoryDefault, p.cfg.BatchSize)
		}, &res.Events},
		{"transition_stream", metrics.PrunePublished, func() (int64, error) { return p.cfg.Store.PruneStream(ctx, p.cfg.RetainOutbox, p.cfg.BatchSize) }, &res.Stream},
	} {
		for {
			n, err := d.batch()
			if err != nil {
				return fmt.Errorf("pruner: %w", err)
			}
			*d.into += n
			p.m.Rows.WithLabelValues(d.table, d.state).Add(float64(n))
			if n < int64(p.cfg.BatchSize) {
				break
			}
		}
	}
	return nil
}

// count adds one batch's deletions to the metrics under the runs' state.
func (p *Pruner) count(state string, n store.PruneCounts) {
	p.m.Rows.WithLabelValues("workflow_runs", state).Add(float64(n.Runs))
	p.m.Rows.WithLabelValues("task_runs", state).Add(float64(n.TaskRuns))
	p.m.Rows.WithLabelValues("outbox", state).Add(float64(n.Outbox))
	p.m.Rows.WithLabelValues("task_events", state).Add(float64(n.TaskEvents))
}
