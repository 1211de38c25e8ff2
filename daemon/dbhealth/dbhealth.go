package dbhealth

import (
	"cmp"
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/flowforge/flowforge/core/store"
	"github.com/flowforge/flowforge/daemon"
	"github.com/flowforge/flowforge/daemon/metrics"
)

// Defaults for Config.
const (
	// IntervalDefault is the period of the read: two catalog queries.
	IntervalDefault = 15 * time.Second
	// WarnDefault is the hold that earns a warning.
	WarnDefault = store.XminHorizonWarnDefault
	// WarnEveryDefault is the pause between repeated warnings while the
	// horizon stays held.
	WarnEveryDefault = time.Minute
	// ReadTimeoutDefault bounds one read.
	ReadTimeoutDefault = 5 * time.Second
)

// Store is what the Watcher needs from the database.
type Store interface {
	DBHealth(ctx context.Context) (store.DBHealth, error)
}

// Config configures a Watcher.
type Config struct {
	Store Store
	// Interval is the period of the read (default IntervalDefault).
	Interval time.Duration
	// Warn is how long the xmin horizon may be held before a warning
	// (default WarnDefault).
	Warn time.Duration
	// WarnEvery is the pause between warnings while it stays held
	// (default WarnEveryDefault).
	WarnEvery time.Duration
	Logger    *slog.Logger
	// Metrics receives the gauges; nil makes a private set.
	Metrics *metrics.Metrics
}

// Validate checks the settings of c against their bounds, the one place
// they are checked (ffctl maps its flags to a Config and reports this
// error as a usage error): Interval, Warn and WarnEvery must not be
// negative; zero ones take their defaults in New. The error is a
// *daemon.SettingError. The Store is New's to check.
func (c Config) Validate() error {
	for _, err := range []error{
		daemon.CheckNotNegative("dbhealth", "Interval", "db-health-interval", c.Interval, IntervalDefault),
		daemon.CheckNotNegative("dbhealth", "Warn", "xmin-horizon-warn", c.Warn, WarnDefault),
		daemon.CheckNotNegative("dbhealth", "WarnEvery", "", c.WarnEvery, WarnEveryDefault),
	} {
		if err != nil {
			return err
		}
	}
	return nil
}

func (c *Config) validate() error {
	if c.Store == nil {
		return errors.New("dbhealth: Store is required")
	}
	if err := c.Validate(); err != nil {
		return err
	}
	c.Interval = cmp.Or(c.Interval, IntervalDefault)
	c.Warn = cmp.Or(c.Warn, WarnDefault)
	c.WarnEvery = cmp.Or(c.WarnEvery, WarnEveryDefault)
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Metrics == nil {
		c.Metrics = metrics.New()
	}
	return nil
}

// Watcher reads store.DBHealth periodically; see the package doc.
type Watcher struct {
	cfg Config
	log *slog.Logger

	held       bool      // the last read found the horizon held ≥ Warn
	lastWarned time.Time // database clock of the last warning
}

// New validates cfg and returns a Watcher. Errors: no Store, a negative
// duration.
func New(cfg Config) (*Watcher, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	return &Watcher{cfg: cfg, log: cfg.Logger}, nil
}

// Run reads every Interval until ctx ends; it returns nil then.
func (w *Watcher) Run(ctx context.Context) error {
	t := time.NewTicker(w.cfg.Interval)
	defer t.Stop()
	for {
		w.runOnce(ctx)
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// runOnce reads once, exports the gauges and logs; it returns the reading
// (zero and false when the read failed).
func (w *Watcher) runOnce(ctx context.Context) (store.DBHealth, bool) {
	rctx, cancel := context.WithTimeout(ctx, ReadTimeoutDefault)
	defer cancel()
	h, err := w.cfg.Store.DBHealth(rctx)
	if err != nil {
		if ctx.Err() == nil {
			w.log.Debug("dbhealth: read failed", "error", err)
		}
		return store.DBHealth{}, false
	}
	m := w.cfg.Metrics
	m.DBOldestTransactionSeconds.Set(h.OldestTransactionSeconds)
	m.DBXminHorizonSeconds.Set(h.HorizonSeconds)
	m.DBXminHorizonXIDs.Set(float64(h.HorizonXIDs))
	for table, n := range h.DeadTuples {
		m.DBDeadTuples.WithLabelValues(table).Set(float64(n))
	}
	w.judge(h)
	return h, true
}

// judge logs the transitions of the held state (see the package doc).
func (w *Watcher) judge(h store.DBHealth) {
	held := h.Holder != nil && h.HorizonSeconds >= w.cfg.Warn.Seconds()
	switch {
	case held && (!w.held || h.Now.Sub(w.lastWarned) >= w.cfg.WarnEvery):
		w.lastWarned = h.Now
		w.log.Warn("dbhealth: xmin horizon held back; VACUUM cannot remove dead rows and daemon queries slow down",
			"held_for", secs(h.HorizonSeconds).String(), "threshold", w.cfg.Warn.String(),
			"holder", h.Holder.String(), "holder_kind", h.Holder.Kind, "holder_name", h.Holder.Name,
			"horizon_xids", h.HorizonXIDs, "dead_tuples", h.DeadTuples)
	case !held && w.held:
		w.log.Info("dbhealth: xmin horizon released", "horizon_seconds", h.HorizonSeconds)
	}
	w.held = held
}

func secs(s float64) time.Duration {
	return time.Duration(s * float64(time.Second)).Round(time.Second)
}
