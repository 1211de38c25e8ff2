package supervisor

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/flowforge/flowforge/core"
	"github.com/flowforge/flowforge/core/store"
	"github.com/flowforge/flowforge/daemon/clock"
	"github.com/flowforge/flowforge/daemon/failpoint"
)

// Supervisor runs one daemon process; see the package doc.
type Supervisor struct {
	cfg   Config
	log   *slog.Logger
	dbURL string // DatabaseURL with the session bounds
	host  string
	clock clock.Clock
}

// New validates cfg (the error is Validate's) and gives its zero fields
// their defaults.
func New(cfg Config) (*Supervisor, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	dbURL, err := cfg.sessionURL()
	if err != nil {
		return nil, err // checked by Validate
	}
	host, _ := os.Hostname()
	if cfg.ID == "" {
		cfg.ID = fmt.Sprintf("%s-%s-%d-%s", cfg.Role, host, os.Getpid(), uuid.NewString()[:4])
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Worker.Registry == nil {
		cfg.Worker.Registry = core.NewRegistry()
	}
	cfg.DBMaxConns = cfg.dbMaxConns()
	var clk clock.Clock = clock.System{}
	if cfg.ClockSkew != 0 {
		clk = clock.Skewed{Skew: cfg.ClockSkew}
	}
	return &Supervisor{cfg: cfg, log: cfg.Logger.With("process_id", cfg.ID), dbURL: dbURL, host: host, clock: clk}, nil
}

// ID returns the process id (Config.ID, or the one New chose).
func (s *Supervisor) ID() string { return s.cfg.ID }

// Run runs the process until ctx ends (the graceful stop; see Config.Hard
// and Config.StopTimeout for the hard one) or one of its daemons fails,
// and returns once every goroutine it started has returned and its
// connections are closed. It returns nil after a stop through ctx, also
// one while it was still connecting; otherwise the error that ended it:
// the health server could not listen, the database or the broker refused
// the login, the database schema is not this binary's, the broker's queue
// is declared with other arguments, Config.ID is held by a live process
// (*IDInUseError) or was taken over by another (*IDTakenOverError), or a
// daemon's loop failed.
func (s *Supervisor) Run(ctx context.Context) error {
	ctx, stopRun := context.WithCancelCause(ctx)
	defer stopRun(nil)
	p := &process{Supervisor: s, stopRun: stopRun}
	done := make(chan struct{})
	var stages sync.WaitGroup
	stages.Go(func() { p.watchStop(ctx, done) })
	defer stages.Wait()
	defer close(done)
	if s.cfg.ClockSkew != 0 {
		s.log.Warn("daemon: DEBUG process clock skewed", "skew", s.cfg.ClockSkew.String(), "process_clock", s.clock.Now().UTC().Format(time.RFC3339))
	}
	stopHealth, err := p.startHealth()
	if err != nil {
		return err
	}
	defer stopHealth()
	st, err := openStoreRetrying(ctx, s.dbURL, s.storeOptions())
	if err != nil {
		return ignoreStop(ctx, err)
	}
	defer st.Close()
	if err := p.checkBrokerLogin(ctx); err != nil {
		return ignoreStop(ctx, err)
	}
	if p.since, err = p.claimID(ctx, st); err != nil {
		return ignoreStop(ctx, err)
	}
	defer p.releaseID(st)
	p.useStore(st)
	closeDaemons, err := p.build(ctx, st)
	defer closeDaemons()
	if err != nil {
		return ignoreStop(ctx, err)
	}
	if ctx.Err() != nil {
		return nil // stopped while connecting
	}
	if err := p.serve(ctx, st); err != nil || p.takenOver == nil {
		return err
	}
	return p.takenOver
}

// storeOptions are the Options of the process's store: the main pool's
// size, the process's logger, the failpoint that ends a scheduler pass
// mid-expansion, and the scheduler's MaxChildDepth (the pass that starts
// a child run is the store's; 0, the store's default, for a role that
// runs no scheduler, which starts none).
func (s *Supervisor) storeOptions() store.Options {
	fps := s.cfg.Scheduler.Failpoints
	opt := store.Options{MaxConns: s.cfg.DBMaxConns, Logger: s.log,
		MidExpansion:  func() { fps.ExitIf(failpoint.SchedulerExitMidExpansion) },
		MidChildStart: func() { fps.ExitIf(failpoint.SchedulerExitMidChildStart) }}
	if s.cfg.Role.Runs(RoleScheduler) {
		opt.MaxChildDepth = s.cfg.Scheduler.MaxChildDepth
	}
	return opt
}

// ignoreStop is err, or nil when ctx has ended (a stop while connecting).
func ignoreStop(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return nil
	}
	return err
}

// serve runs the daemons' loops with the watchers and the heartbeat
// beside them until the loops return, then stops and joins the rest. The
// presence heartbeat goes on while the loops drain, so the ID stays held
// until they have returned.
func (p *process) serve(ctx context.Context, st *store.Store) error {
	ctx, stop := context.WithCancel(ctx)
	defer stop()
	hbCtx, stopHeartbeat := context.WithCancel(context.WithoutCancel(ctx))
	defer stopHeartbeat()
	var bg sync.WaitGroup
	// The worker touches the database only when work arrives; the watcher
	// is what notices (and counts) its database outages.
	var countReconnects []string
	if p.cfg.Role == RoleWorker {
		countReconnects = []string{"postgres"}
	}
	bg.Go(func() { watchDependencies(ctx, p.checks, countReconnects, p.m, p.log) })
	bg.Go(func() { _ = p.dbHealth.Run(ctx) })
	bg.Go(func() { p.heartbeat(hbCtx, st) })
	p.log.Info("daemon: started", "role", string(p.cfg.Role))
	err := runAll(ctx, stop, p.runners)
	stop()
	stopHeartbeat()
	bg.Wait()
	if err != nil {
		return err
	}
	p.log.Info("daemon: stopped", "role", string(p.cfg.Role))
	return nil
}

// runner is one daemon's loop.
type runner struct {
	name string
	run  func(context.Context) error
}

// runAll runs every runner until all have returned; the first to fail
// stops the others (stop cancels their ctx) and its error is returned.
func runAll(ctx context.Context, stop func(), runners []runner) error {
	var wg sync.WaitGroup
	errs := make(chan error, len(runners))
	for _, r := range runners {
		wg.Go(func() {
			if err := r.run(ctx); err != nil {
				errs <- fmt.Errorf("%s: %w", r.name, err)
				stop()
			}
		})
	}
	wg.Wait()
	close(errs)
	return <-errs
}
