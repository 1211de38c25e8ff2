package cli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/google/uuid"
	"github.com/urfave/cli/v2"

	"github.com/flowforge/flowforge/core/store"
	"github.com/flowforge/flowforge/daemon/backoff"
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
		&cli.StringFlag{Name: "health-addr", Usage: "host:port of /health/live, /health/ready and /metrics; empty disables (default per role: all 8080, scheduler 8081, publisher 8082, worker 8083 on 127.0.0.1)", EnvVars: []string{"FLOWFORGE_HEALTH_ADDR"}},
		&cli.IntFlag{Name: "concurrency", Usage: "worker: handlers run at once (also the prefetch)", Value: worker.ConcurrencyDefault, EnvVars: []string{"FLOWFORGE_CONCURRENCY"}},
		&cli.BoolFlag{Name: "allow-shell", Usage: "worker: enable the shell handler (runs commands as this user)", EnvVars: []string{"FLOWFORGE_ALLOW_SHELL"}},
		&cli.DurationFlag{Name: "lease", Usage: "worker: lease duration; heartbeats every lease/3", Value: worker.LeaseDefault, EnvVars: []string{"FLOWFORGE_LEASE"}},
		&cli.DurationFlag{Name: "slot-wait", Usage: "worker: how long a delivery may wait for a free slot before it is handed back (keep below the broker's consumer_timeout)", Value: worker.SlotWaitDefault, EnvVars: []string{"FLOWFORGE_SLOT_WAIT"}},
		&cli.DurationFlag{Name: "sweep-interval", Usage: "scheduler: period of the pass that runs without a notification", Value: scheduler.SweepIntervalDefault, EnvVars: []string{"FLOWFORGE_SWEEP_INTERVAL"}},
		&cli.DurationFlag{Name: "poll-interval", Usage: "publisher: period of the outbox poll that runs without a notification", Value: publisher.PollIntervalDefault, EnvVars: []string{"FLOWFORGE_POLL_INTERVAL"}},
		&cli.StringFlag{Name: "id", Usage: "process id recorded in leases and history (default role-host-pid-random)", EnvVars: []string{"FLOWFORGE_ID"}},
	}
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
		Name:  "daemon",
		Usage: "run a FlowForge daemon: scheduler, publisher, worker, or all three in one process",
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
	host, _ := os.Hostname()
	id := c.String("id")
	if id == "" {
		id = fmt.Sprintf("%s-%s-%d-%s", role, host, os.Getpid(), uuid.NewString()[:4])
	}
	log = log.With("process_id", id)

	ctx, stop := context.WithCancel(c.Context)
	defer stop()
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	defer signal.Stop(sigs)
	var abort func()
	var abortMu sync.Mutex
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

	dbURL := databaseURL(c)
	st, err := openStoreRetrying(ctx, dbURL, 10+c.Int("concurrency"), log)
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return failure(err)
	}
	defer st.Close()

	m := metrics.New()
	hs := health.New(m.Registry, log)
	hs.AddReadiness("postgres", st.Ping)
	bcfg := brokerConfig(c, log)
	if len(bcfg.URLs) == 0 && role != "scheduler" {
		return usageError("--amqp-url is empty")
	}

	type runner struct {
		name string
		run  func(context.Context) error
	}
	var runners []runner
	if role == "scheduler" || role == "all" {
		s, err := scheduler.New(scheduler.Config{Store: st, DatabaseURL: dbURL, ID: id, SweepInterval: c.Duration("sweep-interval"), Logger: log, Metrics: m})
		if err != nil {
			return failure(err)
		}
		hs.AddLiveness("scheduler", s.Live)
		runners = append(runners, runner{"scheduler", s.Run})
	}
	if role == "publisher" || role == "all" {
		p, err := publisher.New(publisher.Config{Store: st, DatabaseURL: dbURL, Broker: bcfg, PollInterval: c.Duration("poll-interval"), Logger: log, Metrics: m})
		if err != nil {
			return failure(err)
		}
		if err := p.Start(ctx); err != nil {
			return failure(err)
		}
		hs.AddReadiness("rabbitmq", p.BrokerReady)
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
		handlers.Register(reg, handlers.Options{AllowShell: c.Bool("allow-shell")})
		wcfg := worker.Config{Store: st, Renewer: hbStore, Broker: brokerConfig(c, log), Registry: reg,
			Concurrency: c.Int("concurrency"), Lease: c.Duration("lease"), SlotWait: c.Duration("slot-wait"),
			ID: id, Logger: log, Metrics: m}
		w, err := worker.New(wcfg)
		if err != nil {
			return failure(err)
		}
		if err := w.Start(ctx); err != nil {
			return failure(err)
		}
		abortMu.Lock()
		abort = w.Abort
		abortMu.Unlock()
		if role == "worker" {
			hs.AddReadiness("rabbitmq", w.BrokerReady)
		} else {
			hs.AddReadiness("rabbitmq_consumer", w.BrokerReady)
		}
		runners = append(runners, runner{"worker", w.Run})
	}

	addr := c.String("health-addr")
	if !c.IsSet("health-addr") {
		addr = defaultHealthAddr[role]
	}
	if addr != "" {
		bound, err := hs.Start(addr)
		if err != nil {
			return failure(fmt.Errorf("%w (choose another with --health-addr, or --health-addr '' to disable)", err))
		}
		log.Info("daemon: health server listening", "addr", bound)
		defer func() {
			sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			_ = hs.Stop(sctx)
		}()
	}

	// Presence for the dashboard's Workers screen; failures are ignored (the
	// loops report database trouble themselves).
	go func() {
		t := time.NewTicker(5 * time.Second)
		defer t.Stop()
		for {
			tctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			_ = st.TouchWorker(tctx, id, role, host, os.Getpid())
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
