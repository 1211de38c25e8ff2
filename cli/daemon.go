package cli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/google/uuid"
	"github.com/urfave/cli/v2"

	"github.com/flowforge/flowforge/core"
	"github.com/flowforge/flowforge/core/broker"
	"github.com/flowforge/flowforge/core/store"
	"github.com/flowforge/flowforge/daemon/backoff"
	"github.com/flowforge/flowforge/daemon/clock"
	"github.com/flowforge/flowforge/daemon/failpoint"
	"github.com/flowforge/flowforge/daemon/handlers"
	"github.com/flowforge/flowforge/daemon/health"
	"github.com/flowforge/flowforge/daemon/metrics"
	"github.com/flowforge/flowforge/daemon/publisher"
	"github.com/flowforge/flowforge/daemon/scheduler"
	"github.com/flowforge/flowforge/daemon/worker"
)

var defaultHealthAddr = map[string]string{
	"all":       "127.0.0.1:8080",
	"scheduler": "127.0.0.1:8081",
	"publisher": "127.0.0.1:8082",
	"worker":    "127.0.0.1:8083",
}

func daemonCommand(env *Env) *cli.Command {
	flags := []cli.Flag{
		&cli.StringFlag{Name: "health-addr", Usage: "host:port of /health/live, /health/ready and /metrics; empty disables (default per role: all 8080, scheduler 8081, publisher 8082, worker 8083 on 127.0.0.1, or a free port when another process has it, logged as 'daemon: health server listening'; an address given here is used or the daemon exits 1)", EnvVars: []string{"FLOWFORGE_HEALTH_ADDR"}},
		&cli.IntFlag{Name: "concurrency", Usage: "worker: handlers run at once (also the prefetch)", Value: worker.ConcurrencyDefault, EnvVars: []string{"FLOWFORGE_CONCURRENCY"}},
		&cli.BoolFlag{Name: "allow-shell", Usage: "worker: enable the shell handler (runs commands as this user)", EnvVars: []string{"FLOWFORGE_ALLOW_SHELL"}},
		&cli.StringSliceFlag{Name: "shell-env-pass", Usage: "worker: pass this variable of the worker's environment to shell commands, beyond PATH, HOME, USER, LOGNAME, TMPDIR, TZ, LANG, LANGUAGE and LC_* (repeatable; FLOWFORGE_* and PG* are refused)", EnvVars: []string{"FLOWFORGE_SHELL_ENV_PASS"}},
		&cli.BoolFlag{Name: "http-deny-private", Usage: "worker: the http handler refuses loopback, private, link-local, CGNAT, multicast and reserved addresses (checked on every address dialled, redirects included; no proxy)", EnvVars: []string{"FLOWFORGE_HTTP_DENY_PRIVATE"}},
		&cli.DurationFlag{Name: "lease", Usage: "worker: lease duration; heartbeats every lease/3", Value: worker.LeaseDefault, EnvVars: []string{"FLOWFORGE_LEASE"}},
		&cli.DurationFlag{Name: "unknown-handler-grace", Usage: "worker: hand a task whose handler this worker lacks back to the queue (for a worker that has it) until it has been READY this long; then it fails permanently", Value: worker.UnknownHandlerGraceDefault, EnvVars: []string{"FLOWFORGE_UNKNOWN_HANDLER_GRACE"}},
		&cli.DurationFlag{Name: "slot-wait", Usage: "worker: how long a delivery may wait for a free slot before it is handed back (keep below the broker's consumer_timeout)", Value: worker.SlotWaitDefault, EnvVars: []string{"FLOWFORGE_SLOT_WAIT"}},
		&cli.DurationFlag{Name: "redispatch-after", Usage: "scheduler: dispatch a READY task again when no worker claimed it this long after its dispatch was confirmed (a lost message)", Value: scheduler.RedispatchAfterDefault, EnvVars: []string{"FLOWFORGE_REDISPATCH_AFTER"}},
		&cli.DurationFlag{Name: "sweep-interval", Usage: "scheduler: period of the pass that runs without a notification", Value: scheduler.SweepIntervalDefault, EnvVars: []string{"FLOWFORGE_SWEEP_INTERVAL"}},
		&cli.DurationFlag{Name: "poll-interval", Usage: "publisher: period of the outbox poll that runs without a notification", Value: publisher.PollIntervalDefault, EnvVars: []string{"FLOWFORGE_POLL_INTERVAL"}},
		&cli.IntFlag{Name: "max-message-bytes", Usage: "publisher: largest dispatch message body it publishes; a larger outbox row is quarantined (ffctl outbox quarantined). Keep it below the broker's max_message_size", Value: publisher.MaxMessageBytesDefault, EnvVars: []string{"FLOWFORGE_MAX_MESSAGE_BYTES"}},
		&cli.StringFlag{Name: "id", Usage: "process id recorded in leases and history (default role-host-pid-random)", EnvVars: []string{"FLOWFORGE_ID"}},
		&cli.IntFlag{Name: "db-max-conns", Usage: "connections of the daemon's main database pool (default 10, plus --concurrency for a worker); lease renewals have a pool of their own, so a small main pool never starves heartbeats", EnvVars: []string{"FLOWFORGE_DB_MAX_CONNS"}},
		&cli.StringFlag{Name: "debug-clock-skew", Hidden: true, Usage: "testing aid: shift every wall-clock reading of the scheduler and worker by this much (+3h, -3h)", EnvVars: []string{"FLOWFORGE_DEBUG_CLOCK_SKEW"}},
	}
	flags = append(flags, dbSessionFlags()...)
	sub := func(role, usage string) *cli.Command {
		return &cli.Command{
			Name:      role,
			Usage:     usage,
			UsageText: fmt.Sprintf("ffctl daemon %s [flags]\n\nExample:\n  ffctl daemon %s --health-addr 127.0.0.1:9090", role, role),
			Flags:     flags,
			Action:    func(c *cli.Context) error { return runDaemon(c, env, role) },
		}
	}
	return &cli.Command{
		Name:      "daemon",
		Usage:     "run a FlowForge daemon: scheduler, publisher, worker, or all three in one process",
		UsageText: "ffctl daemon all|scheduler|publisher|worker [command options]\n\nExample:\n  ffctl daemon all --allow-shell\n  ffctl daemon worker --concurrency 32 --health-addr 127.0.0.1:9093",
		Subcommands: []*cli.Command{
			sub("all", "run scheduler, publisher and worker in one process (development default)"),
			sub("scheduler", "promote ready tasks into the outbox, retry, reap expired leases, derive run states"),
			sub("publisher", "publish outbox rows to RabbitMQ with publisher confirms"),
			sub("worker", "consume dispatches and run task handlers"),
		},
	}
}

// openStoreRetrying connects with backoff until the database answers or ctx
// ends; a schema that is not this binary's is fatal.
func openStoreRetrying(ctx context.Context, url string, maxConns int, log *slog.Logger) (*store.Store, error) {
	var bo backoff.Backoff
	for {
		s, err := store.Open(ctx, url, store.Options{MaxConns: maxConns, Logger: log})
		if err == nil {
			if err = s.CheckSchema(ctx); err == nil {
				if bo.Reset() {
					log.Info("daemon: recovered", "dependency", "postgres")
				}
				return s, nil
			}
			s.Close()
			if errors.Is(err, store.ErrSchemaOutdated) || errors.Is(err, store.ErrSchemaTooNew) {
				return nil, err
			}
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		d := bo.Fail()
		log.Error("daemon: database not available; retrying", "err", err, "retry_in", d.String())
		if backoff.Sleep(ctx, d) != nil {
			return nil, ctx.Err()
		}
	}
}

// DependencyWatchInterval is how often a daemon checks its dependencies
// for flowforge_dependency_up and the "dependency lost/recovered" log lines.
const DependencyWatchInterval = time.Second

// watchDependencies runs every readiness check each DependencyWatchInterval
// until ctx ends. It sets flowforge_dependency_up, logs "daemon: dependency
// lost" when a dependency that answered stops answering and "daemon:
// dependency recovered" when it answers again, and counts the recovery in
// flowforge_reconnects_total for the dependencies in countReconnects (those
// no loop of this process counts itself).
func watchDependencies(ctx context.Context, checks map[string]health.Check, countReconnects []string, m *metrics.Metrics, log *slog.Logger) {
	down := map[string]time.Time{}
	everUp := map[string]bool{} // a dependency not yet up at start is "not ready yet", not "lost"
	t := time.NewTicker(DependencyWatchInterval)
	defer t.Stop()
	for {
		for name, check := range checks {
			cctx, cancel := context.WithTimeout(ctx, health.CheckTimeout)
			err := check(cctx)
			cancel()
			if ctx.Err() != nil {
				return
			}
			dep := name
			if name == "rabbitmq_consumer" {
				dep = "rabbitmq"
			}
			since, wasDown := down[name]
			switch {
			case err != nil && !wasDown:
				down[name] = time.Now()
				m.DependencyUp.WithLabelValues(name).Set(0)
				if everUp[name] {
					log.Warn("daemon: dependency lost", "dependency", name, "err", err)
				} else {
					log.Debug("daemon: dependency not ready yet", "dependency", name, "err", err)
				}
			case err == nil && wasDown:
				delete(down, name)
				m.DependencyUp.WithLabelValues(name).Set(1)
				if !everUp[name] {
					everUp[name] = true
					break
				}
				if slices.Contains(countReconnects, dep) {
					m.Reconnects.WithLabelValues(dep).Inc()
				}
				log.Info("daemon: dependency recovered", "dependency", name, "down_for", time.Since(since).Round(time.Millisecond).String())
			case err == nil:
				everUp[name] = true
				m.DependencyUp.WithLabelValues(name).Set(1)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func runDaemon(c *cli.Context, env *Env, role string) error {
	log, err := logger(c, env)
	if err != nil {
		return err
	}
	if c.Int("concurrency") < 1 {
		return usageError("--concurrency must be at least 1")
	}
	if c.Duration("lease") < 300*time.Millisecond {
		return usageError("--lease must be at least 300ms")
	}
	if c.Int("max-message-bytes") < 1 {
		return usageError("--max-message-bytes must be at least 1")
	}
	host, _ := os.Hostname()
	id := c.String("id")
	if id == "" {
		id = fmt.Sprintf("%s-%s-%d-%s", role, host, os.Getpid(), uuid.NewString()[:4])
	}
	if err := worker.CheckID(id); err != nil {
		return usageError("--id: %v", err)
	}
	if err := handlers.CheckShellEnvPass(c.StringSlice("shell-env-pass")); err != nil {
		return usageError("--shell-env-pass: %v", err)
	}
	log = log.With("process_id", id)

	ctx, stop := context.WithCancel(c.Context)
	defer stop()
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	defer signal.Stop(sigs)
	var abort func()
	var abortMu sync.Mutex
	var presence func(context.Context, *store.Presence) // a worker's part of its heartbeat
	go func() {
		sig, ok := <-sigs
		if !ok {
			return
		}
		log.Info("daemon: stopping gracefully (signal again to abort in-flight tasks)", "signal", sig.String())
		stop()
		if _, ok := <-sigs; ok {
			log.Warn("daemon: second signal; aborting in-flight tasks")
			abortMu.Lock()
			if abort != nil {
				abort()
			}
			abortMu.Unlock()
		}
	}()

	// Failpoints are a testing aid (package failpoint), read once here.
	fps, err := failpoint.Parse(env.env(failpoint.EnvVar))
	if err != nil {
		return usageError("%s: %v", failpoint.EnvVar, err)
	}
	// Clock skew is a testing aid too (package clock): every wall-clock
	// reading of the scheduler and worker is shifted by it.
	skew, err := clock.ParseSkew(c.String("debug-clock-skew"))
	if err != nil {
		return usageError("--debug-clock-skew: %v", err)
	}
	var clk clock.Clock = clock.System{}
	if skew != 0 {
		clk = clock.Skewed{Skew: skew}
		log.Warn("daemon: DEBUG process clock skewed", "skew", skew.String(), "process_clock", clk.Now().UTC().Format(time.RFC3339))
	}

	bcfg := brokerConfig(c, log)
	if len(bcfg.URLs) == 0 && role != "scheduler" {
		return usageError("--amqp-url is empty")
	}
	dbURL, err := sessionURL(c, role, bcfg)
	if err != nil {
		return err
	}

	// The health server comes up before any dependency is reached, so that
	// /health/live answers and /health/ready reports 503 while the daemon
	// is still waiting for its database or broker at start.
	m := metrics.New()
	hs := health.New(m.Registry, log)
	checks := map[string]health.Check{}
	setCheck := func(name string, c health.Check) {
		checks[name] = c
		hs.AddReadiness(name, c)
	}
	maxConns := 10 + c.Int("concurrency")
	if c.IsSet("db-max-conns") {
		if maxConns = c.Int("db-max-conns"); maxConns < 1 {
			return usageError("--db-max-conns must be at least 1, got %d", maxConns)
		}
	}
	var stRef atomic.Pointer[store.Store]
	setCheck("postgres", func(ctx context.Context) error {
		if s := stRef.Load(); s != nil {
			return s.Ping(ctx)
		}
		return errors.New("not connected yet")
	})
	deps := []string{"postgres"}
	brokerCheck := "rabbitmq"
	if role == "all" {
		brokerCheck = "rabbitmq_consumer"
	}
	if role != "scheduler" {
		notYet := func(context.Context) error { return errors.New("not connected yet") }
		if role == "all" {
			setCheck("rabbitmq", notYet)
		}
		setCheck(brokerCheck, notYet)
		deps = append(deps, "rabbitmq")
	}
	m.InitDependencies(deps...)
	addr := c.String("health-addr")
	explicit := c.IsSet("health-addr")
	if !explicit {
		addr = defaultHealthAddr[role]
	}
	var healthAddr string // the bound address, recorded with the presence
	if addr != "" {
		// An address the operator chose is strict; the role's default
		// falls back to a free port when another daemon on this host has
		// it, so several daemons with default settings share a host.
		var bound string
		var fellBack bool
		if explicit {
			bound, err = hs.Start(addr)
		} else {
			bound, fellBack, err = hs.StartPreferred(addr)
		}
		if err != nil {
			return failure(fmt.Errorf("%w (choose another with --health-addr, or --health-addr '' to disable)", err))
		}
		if fellBack {
			log.Warn("daemon: default health port in use; listening on a free port (set --health-addr to choose one)", "default_addr", addr, "addr", bound)
		}
		log.Info("daemon: health server listening", "addr", bound)
		healthAddr = bound
		defer func() {
			sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			_ = hs.Stop(sctx)
		}()
	}

	st, err := openStoreRetrying(ctx, dbURL, maxConns, log)
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return failure(err)
	}
	defer st.Close()
	stRef.Store(st)
	m.SetOutboxSource(func(ctx context.Context) (float64, float64, error) {
		o, err := st.OutboxStatus(ctx)
		return float64(o.Pending), o.OldestPendingSeconds, err
	})
	m.SetQuarantinedSource(func(ctx context.Context) (float64, error) {
		o, err := st.OutboxStatus(ctx)
		return float64(o.Quarantined), err
	})

	type runner struct {
		name string
		run  func(context.Context) error
	}
	var runners []runner
	if role == "scheduler" || role == "all" {
		s, err := scheduler.New(scheduler.Config{Store: st, DatabaseURL: dbURL, ID: id, SweepInterval: c.Duration("sweep-interval"), RedispatchAfter: c.Duration("redispatch-after"), Logger: log, Metrics: m, Clock: clk})
		if err != nil {
			return failure(err)
		}
		hs.AddLiveness("scheduler", s.Live)
		runners = append(runners, runner{"scheduler", s.Run})
	}
	if role == "publisher" || role == "all" {
		p, err := publisher.New(publisher.Config{Store: st, DatabaseURL: dbURL, Broker: bcfg, PollInterval: c.Duration("poll-interval"), MaxMessageBytes: c.Int("max-message-bytes"), Logger: log, Metrics: m, Failpoints: fps})
		if err != nil {
			return failure(err)
		}
		if err := p.Start(ctx); err != nil {
			return failure(fmt.Errorf("publisher: %w", err))
		}
		setCheck("rabbitmq", p.BrokerReady)
		runners = append(runners, runner{"publisher", p.Run})
	}
	if role == "worker" || role == "all" {
		hbStore, err := openStoreRetrying(ctx, dbURL, 3, log)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return failure(err)
		}
		defer hbStore.Close()
		reg := env.Registry
		handlers.Register(reg, handlers.Options{AllowShell: c.Bool("allow-shell"), ShellEnvPass: c.StringSlice("shell-env-pass"), ShellSupervisor: shellSupervisor(), HTTPDenyPrivate: c.Bool("http-deny-private")})
		wcfg := worker.Config{Store: st, Renewer: hbStore, Broker: brokerConfig(c, log), Registry: reg,
			Concurrency: c.Int("concurrency"), Lease: c.Duration("lease"), SlotWait: c.Duration("slot-wait"), UnknownHandlerGrace: c.Duration("unknown-handler-grace"),
			ID: id, Logger: log, Metrics: m, Clock: clk, DatabaseURL: dbURL}
		w, err := worker.New(wcfg)
		if err != nil {
			return failure(err)
		}
		if err := w.Start(ctx); err != nil {
			return failure(fmt.Errorf("worker: %w", err))
		}
		abortMu.Lock()
		abort = w.Abort
		abortMu.Unlock()
		setCheck(brokerCheck, w.BrokerReady)
		runners = append(runners, runner{"worker", w.Run})
		presence = workerPresence(reg, wcfg.Broker.Queue, w)
	}

	if ctx.Err() != nil {
		return nil // stopped while connecting
	}
	// The worker touches the database only when work arrives; the watcher
	// is what notices (and counts) its database outages.
	var countReconnects []string
	if role == "worker" {
		countReconnects = []string{"postgres"}
	}
	go watchDependencies(ctx, checks, countReconnects, m, log)
	go watchDBHealth(ctx, c, st, m, log)

	// Presence for the dashboard's Workers screen; failures are ignored (the
	// loops report database trouble themselves).
	go func() {
		t := time.NewTicker(5 * time.Second)
		defer t.Stop()
		for {
			tctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			p := store.Presence{ID: id, Role: role, Hostname: host, PID: os.Getpid(), HealthAddr: healthAddr}
			if presence != nil {
				presence(tctx, &p)
			}
			_ = st.RecordPresence(tctx, p)
			cancel()
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()

	log.Info("daemon: started", "role", role)
	var wg sync.WaitGroup
	errs := make(chan error, len(runners))
	for _, r := range runners {
		wg.Add(1)
		go func(r runner) {
			defer wg.Done()
			if err := r.run(ctx); err != nil {
				errs <- fmt.Errorf("%s: %w", r.name, err)
				stop()
			}
		}(r)
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return failure(err)
	}
	log.Info("daemon: stopped", "role", role)
	return nil
}

// workerPresence returns what a worker process adds to its presence
// heartbeat: its handler set, its queue and whether it is consuming from the
// broker right now (the worker's readiness, so "connected" means a live
// consumer on the queue, not merely an open connection).
func workerPresence(reg *core.Registry, queue string, w *worker.Worker) func(context.Context, *store.Presence) {
	if queue == "" {
		queue = broker.DefaultQueue
	}
	return func(ctx context.Context, p *store.Presence) {
		p.Handlers = reg.Names()
		p.Queue = queue
		connected := w.BrokerReady(ctx) == nil
		p.BrokerConnected = &connected
	}
}
