package supervisor

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/flowforge/flowforge/core"
	"github.com/flowforge/flowforge/core/broker"
	"github.com/flowforge/flowforge/core/client"
	"github.com/flowforge/flowforge/core/store"
	"github.com/flowforge/flowforge/daemon/api"
	"github.com/flowforge/flowforge/daemon/dbhealth"
	"github.com/flowforge/flowforge/daemon/handlers"
	"github.com/flowforge/flowforge/daemon/health"
	"github.com/flowforge/flowforge/daemon/metrics"
	"github.com/flowforge/flowforge/daemon/pruner"
	"github.com/flowforge/flowforge/daemon/publisher"
	"github.com/flowforge/flowforge/daemon/scheduler"
	"github.com/flowforge/flowforge/daemon/worker"
)

// process is the state of one Run.
type process struct {
	*Supervisor
	m      *metrics.Metrics
	hs     *health.Server
	checks map[string]health.Check // the readiness checks, also watched
	// healthAddr is the health server's bound address, recorded with the
	// presence ("" when disabled).
	healthAddr string
	st         atomic.Pointer[store.Store] // nil until connected
	runners    []runner
	dbHealth   *dbhealth.Watcher
	// presence adds a worker's part to the heartbeat (nil for the other
	// roles).
	presence func(context.Context, *store.Presence)

	// stopRun cancels Run's ctx with a cause: the process stops as on its
	// first signal.
	stopRun context.CancelCauseFunc
	// since is the instance token of the process's claim of its ID;
	// takenOver is set when another process took the ID over. Both are
	// the heartbeat's once it runs, read by Run after it returned.
	since     time.Time
	takenOver *IDTakenOverError

	stopMu  sync.Mutex
	abort   func() // the worker's Abort, once it exists
	aborted bool   // Hard was closed
}

// setCheck registers a readiness check that the dependency watcher also
// runs.
func (p *process) setCheck(name string, c health.Check) {
	p.checks[name] = c
	p.hs.AddReadiness(name, c)
}

// brokerCheck names the broker's readiness check of the worker:
// "rabbitmq_consumer" in a process that also publishes (the publisher's
// is "rabbitmq"), else "rabbitmq".
func (p *process) brokerCheck() string {
	if p.cfg.Role == RoleAll {
		return "rabbitmq_consumer"
	}
	return "rabbitmq"
}

// startHealth registers the readiness checks, not connected yet, and
// starts the health server before any dependency is reached, so that
// /health/live answers and /health/ready reports 503 while the process
// waits for its database or broker at start. It returns the function that
// stops the server.
func (p *process) startHealth() (func(), error) {
	p.m = metrics.NewBounded(p.cfg.MetricsMaxLabelValues)
	p.hs = health.New(p.m.Registry, p.log)
	p.checks = map[string]health.Check{}
	p.setCheck("postgres", func(ctx context.Context) error {
		if s := p.st.Load(); s != nil {
			return s.Ping(ctx)
		}
		return errors.New("not connected yet")
	})
	deps := []string{"postgres"}
	if p.cfg.Role.usesBroker() {
		notYet := func(context.Context) error { return errors.New("not connected yet") }
		if p.cfg.Role == RoleAll {
			p.setCheck("rabbitmq", notYet)
		}
		p.setCheck(p.brokerCheck(), notYet)
		deps = append(deps, "rabbitmq")
	}
	p.m.InitDependencies(deps...)
	addr := p.cfg.HealthAddr
	if addr == "" {
		return func() {}, nil
	}
	// An address the operator chose is strict; the role's default falls
	// back to a free port when another daemon on this host has it, so
	// several daemons with default settings share a host.
	var bound string
	var fellBack bool
	var err error
	if p.cfg.HealthFallback {
		bound, fellBack, err = p.hs.StartPreferred(addr)
	} else {
		bound, err = p.hs.Start(addr)
	}
	if err != nil {
		return nil, fmt.Errorf("%w (choose another with --health-addr, or --health-addr '' to disable)", err)
	}
	if fellBack {
		p.log.Warn("daemon: default health port in use; listening on a free port (set --health-addr to choose one)", "default_addr", addr, "addr", bound)
	}
	p.log.Info("daemon: health server listening", "addr", bound)
	p.healthAddr = bound
	return func() {
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = p.hs.Stop(sctx)
	}, nil
}

// useStore makes st the store of the readiness check and of the outbox
// gauges.
func (p *process) useStore(st *store.Store) {
	p.st.Store(st)
	p.m.SetOutboxSource(func(ctx context.Context) (float64, float64, error) {
		o, err := st.OutboxStatus(ctx)
		return float64(o.Pending), o.OldestPendingSeconds, err
	})
	p.m.SetQuarantinedSource(func(ctx context.Context) (float64, error) {
		o, err := st.OutboxStatus(ctx)
		return float64(o.Quarantined), err
	})
	if p.cfg.Role.Runs(RoleScheduler) {
		// One process per installation's scheduler role reads the task
		// gauges, not every worker.
		p.m.SetTaskGaugeSource(store.TaskCountCap, taskGauges(st, p.cfg.idLease()))
	}
}

// taskGauges is the source of the task gauges: st.TaskGauges by label, a
// worker seen when its presence is younger than within (the presence
// lease).
func taskGauges(st *store.Store, within time.Duration) metrics.TaskGaugeSource {
	return func(ctx context.Context) (metrics.TaskGauges, error) {
		g, err := st.TaskGauges(ctx, within)
		return metrics.TaskGauges{
			ByState: map[string]float64{"PENDING": float64(g.Pending), "READY": float64(g.Ready), "RUNNING": float64(g.Running), "RETRYING": float64(g.Retrying)},
			Waiting: map[string]float64{"concurrency": float64(g.WaitConcurrency), "rate": float64(g.WaitRate),
				"sleep": float64(g.Sleeping), "wait": float64(g.Waiting), "workflow": float64(g.Children)},
			OldestReadySeconds: g.OldestReadySeconds, WorkersSeen: float64(g.WorkersSeen),
		}, err
	}
}

// build makes the daemons of the role and the xmin-horizon watcher. It
// returns the function that closes what they opened (call it also after
// an error).
func (p *process) build(ctx context.Context, st *store.Store) (func(), error) {
	closeAll := func() {}
	dcfg := p.cfg.DBHealth
	dcfg.Store, dcfg.Logger, dcfg.Metrics = st, p.log, p.m
	w, err := dbhealth.New(dcfg)
	if err != nil {
		return closeAll, err
	}
	p.dbHealth = w
	if p.cfg.Role.Runs(RoleScheduler) {
		if err := p.buildScheduler(st); err != nil {
			return closeAll, err
		}
	}
	if p.cfg.Role.Runs(RolePublisher) {
		if err := p.buildPublisher(ctx, st); err != nil {
			return closeAll, err
		}
	}
	if p.cfg.Role.Runs(RoleWorker) {
		if closeAll, err = p.buildWorker(ctx, st); err != nil {
			return closeAll, err
		}
	}
	if p.cfg.servesAPI() {
		err = p.buildAPI(st)
	}
	return closeAll, err
}

// buildAPI makes the HTTP API server on a client of st and listens, so
// that a port taken ends the process at start.
func (p *process) buildAPI(st *store.Store) error {
	cfg := p.cfg.API
	cfg.Client = client.FromStore(st, client.Options{TracerProvider: p.cfg.TracerProvider})
	cfg.Logger, cfg.Metrics, cfg.CheckParams = p.log, p.m, handlers.ValidateParams
	srv, err := api.New(cfg)
	if err != nil {
		return err
	}
	if err := srv.Start(); err != nil {
		return fmt.Errorf("%w (choose another with --listen, or --api-listen with daemon all)", err)
	}
	scheme := "http"
	if srv.TLS() {
		scheme = "https"
	}
	p.log.Info("daemon: api listening", "addr", srv.Addr(), "url", scheme+"://"+srv.Addr()+"/v1", "auth", !cfg.InsecureNoAuth)
	p.runners = append(p.runners, runner{"api", srv.Run})
	return nil
}

func (p *process) buildScheduler(st *store.Store) error {
	cfg := p.cfg.Scheduler
	cfg.Store, cfg.DatabaseURL, cfg.ID, cfg.Logger, cfg.Metrics, cfg.Clock = st, p.dbURL, p.cfg.ID, p.log, p.m, p.clock
	cfg.TracerProvider = p.cfg.TracerProvider
	cfg.Schedules = st
	s, err := scheduler.New(cfg)
	if err != nil {
		return err
	}
	p.hs.AddLiveness("scheduler", s.Live)
	p.runners = append(p.runners, runner{"scheduler", s.Run})
	return p.buildPruner(st)
}

// buildPruner makes the retention pruner that runs beside the scheduler
// (none with NoPrune).
func (p *process) buildPruner(st *store.Store) error {
	if p.cfg.NoPrune {
		return nil
	}
	cfg := p.cfg.Pruner
	cfg.Store, cfg.Logger, cfg.Metrics = st, p.log, p.m
	pr, err := pruner.New(cfg)
	if err != nil {
		return err
	}
	p.runners = append(p.runners, runner{"pruner", pr.Run})
	return nil
}

func (p *process) buildPublisher(ctx context.Context, st *store.Store) error {
	cfg := p.cfg.Publisher
	cfg.Store, cfg.DatabaseURL, cfg.Broker, cfg.Logger, cfg.Metrics = st, p.dbURL, p.cfg.Broker, p.log, p.m
	cfg.TracerProvider, cfg.ID = p.cfg.TracerProvider, p.cfg.ID
	pub, err := publisher.New(cfg)
	if err != nil {
		return err
	}
	if err := pub.Start(ctx); err != nil {
		return fmt.Errorf("publisher: %w", err)
	}
	p.setCheck("rabbitmq", pub.BrokerReady)
	p.runners = append(p.runners, runner{"publisher", pub.Run})
	return nil
}

// buildWorker opens the worker's lease-renewal pool and makes the worker;
// it returns the function that closes the pool.
func (p *process) buildWorker(ctx context.Context, st *store.Store) (func(), error) {
	hbStore, err := openStoreRetrying(ctx, p.dbURL, store.Options{MaxConns: RenewerMaxConns, Logger: p.log})
	if err != nil {
		return func() {}, err
	}
	closePool := func() { _ = hbStore.Close() }
	cfg := p.cfg.Worker
	cfg.TracerProvider = p.cfg.TracerProvider
	handlers.Register(cfg.Registry, p.cfg.Handlers)
	if len(p.cfg.WorkerHandlers) > 0 {
		if cfg.Registry, err = cfg.Registry.Only(p.cfg.WorkerHandlers); err != nil {
			return closePool, fmt.Errorf("worker: --handlers: %w", err)
		}
	}
	// The worker's broker cursor is its own, apart from the publisher's.
	cfg.Broker = p.cfg.Broker
	cfg.Broker.Cursor = &broker.Cursor{}
	cfg.Store, cfg.ID, cfg.Logger, cfg.Metrics, cfg.Clock, cfg.DatabaseURL = st, p.cfg.ID, p.log, p.m, p.clock, p.dbURL
	cfg.Renewer = hbStore // lease renewals go through a pool of their own
	w, err := worker.New(cfg)
	if err != nil {
		return closePool, err
	}
	if err := w.Start(ctx); err != nil {
		return closePool, fmt.Errorf("worker: %w", err)
	}
	p.setAbort(w.Abort)
	p.setCheck(p.brokerCheck(), w.BrokerReady)
	p.runners = append(p.runners, runner{"worker", w.Run})
	p.presence = workerPresence(cfg.Registry, cfg.Broker.Queue, w)
	return closePool, nil
}

// workerPresence returns what a worker process adds to its presence
// heartbeat: its handler set, its queue and whether it is consuming from the
// broker right now (the worker's readiness, so "connected" means a live
// consumer on the queue, not merely an open connection).
func workerPresence(reg *core.Registry, queue string, w *worker.Worker) func(context.Context, *store.Presence) {
	queue = cmp.Or(queue, broker.QueueDefault)
	return func(ctx context.Context, p *store.Presence) {
		p.Handlers = reg.Names()
		p.Queue = queue
		connected := w.BrokerReady(ctx) == nil
		p.BrokerConnected = &connected
	}
}
