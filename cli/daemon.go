package cli

import (
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/flowforge/flowforge/core"
	"github.com/flowforge/flowforge/core/broker"
	"github.com/flowforge/flowforge/core/store"
	"github.com/flowforge/flowforge/daemon"
	"github.com/flowforge/flowforge/daemon/clock"
	"github.com/flowforge/flowforge/daemon/dbhealth"
	"github.com/flowforge/flowforge/daemon/failpoint"
	"github.com/flowforge/flowforge/daemon/handlers"
	"github.com/flowforge/flowforge/daemon/metrics"
	"github.com/flowforge/flowforge/daemon/publisher"
	"github.com/flowforge/flowforge/daemon/scheduler"
	"github.com/flowforge/flowforge/daemon/supervisor"
	"github.com/flowforge/flowforge/daemon/worker"
)

func daemonCommand(env *Env) *cli.Command {
	sub := func(role supervisor.Role, usage string) *cli.Command {
		return &cli.Command{
			Name:      string(role),
			Usage:     usage,
			UsageText: fmt.Sprintf("ffctl daemon %s [flags]\n\nExample:\n  ffctl daemon %s --health-addr 127.0.0.1:9090", role, role),
			Flags:     daemonFlags(role),
			Action: func(c *cli.Context) error {
				if c.Args().Present() {
					return usageError("daemon %s takes no arguments (got %q; settings are flags, see ffctl daemon %s --help)", role, c.Args().First(), role)
				}
				return runDaemon(c, env, role)
			},
			OnUsageError: daemonUsageError(role),
		}
	}
	return &cli.Command{
		Name:      "daemon",
		Usage:     "run a FlowForge daemon: scheduler, publisher, worker, or all three in one process",
		UsageText: "ffctl daemon all|scheduler|publisher|worker|api [command options]\n\nEach role takes its own flags and the common ones; all takes every role's.\n\nExample:\n  ffctl daemon all --allow-shell\n  ffctl daemon worker --concurrency 32 --health-addr 127.0.0.1:9093\n  ffctl daemon worker --handlers http,noop\n  ffctl daemon api --listen 127.0.0.1:8090",
		Subcommands: []*cli.Command{
			sub(supervisor.RoleAll, "run scheduler, publisher and worker in one process (development default)"),
			sub(supervisor.RoleScheduler, "promote ready tasks into the outbox, retry, reap expired leases, derive run states"),
			sub(supervisor.RolePublisher, "publish outbox rows to RabbitMQ with publisher confirms"),
			sub(supervisor.RoleWorker, "consume dispatches and run task handlers"),
			sub(supervisor.RoleAPI, "serve the HTTP API (/v1: trigger, read, wait, cancel, requeue, apply) to holders of tokens (ffctl token create)"),
		},
	}
}

// daemonFlags are the flags of `ffctl daemon ROLE`: the common ones and
// those of the daemons the role runs (all: every one's).
func daemonFlags(role supervisor.Role) []cli.Flag {
	flags := commonDaemonFlags(role)
	if role.Runs(supervisor.RolePublisher) || role.Runs(supervisor.RoleWorker) {
		flags = append(flags, brokerDaemonFlags()...)
	}
	if role.Runs(supervisor.RoleScheduler) {
		flags = append(flags, schedulerFlags()...)
		flags = append(flags, retentionFlags()...)
	}
	if role.Runs(supervisor.RolePublisher) {
		flags = append(flags, publisherFlags()...)
	}
	if role.Runs(supervisor.RoleWorker) {
		flags = append(flags, workerFlags()...)
	}
	if role == supervisor.RoleAPI || role == supervisor.RoleAll {
		flags = append(flags, apiFlags(role)...)
	}
	if role.Runs(supervisor.RoleScheduler) || role.Runs(supervisor.RoleWorker) {
		flags = append(flags, &cli.StringFlag{Name: "debug-clock-skew", Hidden: true, Usage: "testing aid: shift every wall-clock reading of the scheduler and worker by this much (+3h, -3h)", EnvVars: []string{"FLOWFORGE_DEBUG_CLOCK_SKEW"}})
	}
	return flags
}

func commonDaemonFlags(role supervisor.Role) []cli.Flag {
	maxConns := "default 10"
	if role.Runs(supervisor.RoleWorker) {
		maxConns = "default 10 plus --concurrency, at most 20"
	}
	flags := []cli.Flag{
		&cli.StringFlag{Name: "health-addr", Usage: "host:port of /health/live, /health/ready and /metrics; empty disables (default " + role.HealthAddrDefault() + ", or a free port when another process has it, logged as 'daemon: health server listening'; an address given here is used or the daemon exits 1)", EnvVars: []string{"FLOWFORGE_HEALTH_ADDR"}},
		&cli.StringFlag{Name: "id", Usage: "process id recorded in leases and history (default role-host-pid-random)", EnvVars: []string{"FLOWFORGE_ID"}},
		&cli.DurationFlag{Name: "stop-timeout", Usage: "after the first SIGTERM or SIGINT, wait at most this long for in-flight tasks to finish, then abort them as a second signal does (their attempts fail and are retried); must be positive", Value: supervisor.DefaultStopTimeout, EnvVars: []string{"FLOWFORGE_STOP_TIMEOUT"}},
		&cli.IntFlag{Name: "metrics-max-label-values", Usage: fmt.Sprintf("distinct values of each workflow and handler label of the latency histograms on /metrics, 1 to %d (0: the default); later values are exported as \"other\"", metrics.MaxLabelValuesMax), Value: metrics.MaxLabelValuesDefault, EnvVars: []string{"FLOWFORGE_METRICS_MAX_LABEL_VALUES"}},
		&cli.IntFlag{Name: "db-max-conns", Usage: "connections of the daemon's main database pool (" + maxConns + "); lease renewals have a pool of their own, so a small main pool never starves heartbeats", EnvVars: []string{"FLOWFORGE_DB_MAX_CONNS"}},
	}
	return append(flags, dbSessionFlags()...)
}

// brokerDaemonFlags are the flags of the roles that talk to the broker
// (publisher, worker, all).
func brokerDaemonFlags() []cli.Flag {
	return []cli.Flag{
		&cli.DurationFlag{Name: "amqp-heartbeat", Usage: "publisher and worker: AMQP heartbeat interval asked of the broker, whole seconds (the broker's own heartbeat setting caps it; a heartbeat= parameter of an --amqp-url wins): this process drops and re-dials a broker connection it heard nothing from for 1.5 intervals, the broker drops one silent for about 2 and requeues its unacknowledged deliveries", Value: broker.HeartbeatDefault, EnvVars: []string{"FLOWFORGE_AMQP_HEARTBEAT"}},
	}
}

func schedulerFlags() []cli.Flag {
	return []cli.Flag{
		&cli.DurationFlag{Name: "redispatch-after", Usage: "scheduler: dispatch a READY task again when no worker claimed it this long after its dispatch was confirmed (a lost message)", Value: scheduler.RedispatchAfterDefault, EnvVars: []string{"FLOWFORGE_REDISPATCH_AFTER"}},
		&cli.DurationFlag{Name: "misfire-grace", Usage: "scheduler: a schedule tick due longer ago than this was missed (no scheduler ran) and follows its schedule's catch-up policy", Value: store.MisfireGraceDefault, EnvVars: []string{"FLOWFORGE_MISFIRE_GRACE"}},
		&cli.DurationFlag{Name: "sweep-interval", Usage: "scheduler: period of the sweep that runs without a notification (reaps, redispatches, advances runs with retries due, promotable tasks or nothing active left)", Value: scheduler.SweepIntervalDefault, EnvVars: []string{"FLOWFORGE_SWEEP_INTERVAL"}},
		&cli.DurationFlag{Name: "full-sweep-interval", Usage: "scheduler: period of the full pass over every open run, the safety net behind notifications and the sweep (at least --sweep-interval; default " + scheduler.FullSweepIntervalDefault.String() + ", or --sweep-interval when that is longer)", EnvVars: []string{"FLOWFORGE_FULL_SWEEP_INTERVAL"}},
		&cli.IntFlag{Name: "max-child-depth", Usage: fmt.Sprintf("scheduler: how deep child runs (a task's workflow:) may nest, %d to %d; a task that would start a deeper one is DEAD", scheduler.MaxChildDepthMin, scheduler.MaxChildDepthMax), Value: store.MaxChildDepthDefault, EnvVars: []string{"FLOWFORGE_MAX_CHILD_DEPTH"}},
	}
}

// schedulerConfig maps the scheduler's flags and the retention flags to
// cfg. Errors (usage): --max-child-depth 0, which the Config would take
// for its default (the flag's default is that already, so a 0 given is a
// mistake: it would fail every workflow task); retentionConfig's.
func schedulerConfig(c *cli.Context, cfg *supervisor.Config) error {
	cfg.Scheduler = scheduler.Config{SweepInterval: c.Duration("sweep-interval"), FullSweepInterval: c.Duration("full-sweep-interval"),
		RedispatchAfter: c.Duration("redispatch-after"), MaxChildDepth: c.Int("max-child-depth")}
	if c.IsSet("misfire-grace") {
		// Unset: the Config's default, which a long --sweep-interval
		// lifts (the grace is at least two sweeps).
		cfg.Scheduler.MisfireGrace = c.Duration("misfire-grace")
	}
	if cfg.Scheduler.MaxChildDepth == 0 {
		return usageError("%w", &daemon.SettingError{Component: "scheduler", Field: "MaxChildDepth", Flag: "max-child-depth", Value: 0,
			Want: fmt.Sprintf("between %d and %d (default %d): at 0 every task that starts a child run would fail", scheduler.MaxChildDepthMin, scheduler.MaxChildDepthMax, store.MaxChildDepthDefault)})
	}
	return retentionConfig(c, cfg)
}

func publisherFlags() []cli.Flag {
	return []cli.Flag{
		&cli.DurationFlag{Name: "poll-interval", Usage: "publisher: period of the outbox poll that runs without a notification", Value: publisher.PollIntervalDefault, EnvVars: []string{"FLOWFORGE_POLL_INTERVAL"}},
		&cli.StringFlag{Name: "events-exchange", Usage: "publisher: turn the transition stream on (in the database) and publish every run and task transition to this topic exchange, such as flowforge.events (ffctl events tail; ffctl events off turns it off)", EnvVars: []string{"FLOWFORGE_EVENTS_EXCHANGE"}},
		&cli.IntFlag{Name: "batches-in-flight", Usage: fmt.Sprintf("publisher: outbox batches published at once, 1 to %d, each on a broker connection and a database connection of its own; the next batch goes out while the last waits for its confirms", publisher.LanesMax), Value: publisher.LanesDefault, EnvVars: []string{"FLOWFORGE_BATCHES_IN_FLIGHT"}},
		&cli.IntFlag{Name: "max-message-bytes", Usage: "publisher: largest dispatch message body it publishes; a larger outbox row is quarantined (ffctl outbox quarantined). Keep it below the broker's max_message_size", Value: publisher.MaxMessageBytesDefault, EnvVars: []string{"FLOWFORGE_MAX_MESSAGE_BYTES"}},
	}
}

func workerFlags() []cli.Flag {
	return []cli.Flag{
		&cli.IntFlag{Name: "concurrency", Usage: "worker: handlers run at once (also the prefetch)", Value: worker.ConcurrencyDefault, EnvVars: []string{"FLOWFORGE_CONCURRENCY"}},
		&cli.StringSliceFlag{Name: "handlers", Usage: "worker: run only these handlers (comma-separated or repeated; default every registered one): the worker registers, consumes the queues of and reports only these, e.g. --handlers http,noop", EnvVars: []string{"FLOWFORGE_HANDLERS"}},
		&cli.BoolFlag{Name: "allow-shell", Usage: "worker: enable the shell handler (runs commands as this user)", EnvVars: []string{"FLOWFORGE_ALLOW_SHELL"}},
		&cli.IntFlag{Name: "shell-concurrency", Usage: "worker: shell commands run at once, at most (a shell task waits for a turn inside its attempt: its lease renewed, its timeout running); 0: twice the CPUs", EnvVars: []string{"FLOWFORGE_SHELL_CONCURRENCY"}},
		&cli.StringSliceFlag{Name: "shell-env-pass", Usage: "worker: pass this variable of the worker's environment to shell commands, beyond PATH, HOME, USER, LOGNAME, TMPDIR, TZ, LANG, LANGUAGE and LC_* (repeatable; FLOWFORGE_* and PG* are refused)", EnvVars: []string{"FLOWFORGE_SHELL_ENV_PASS"}},
		&cli.BoolFlag{Name: "http-deny-private", Usage: "worker: the http handler refuses loopback, private, link-local, CGNAT, multicast and reserved addresses (checked on every address dialled, redirects included; no proxy)", EnvVars: []string{"FLOWFORGE_HTTP_DENY_PRIVATE"}},
		&cli.DurationFlag{Name: "lease", Usage: "worker: lease duration (at least " + worker.LeaseMin.String() + "); heartbeats every lease/3", Value: worker.LeaseDefault, EnvVars: []string{"FLOWFORGE_LEASE"}},
		&cli.DurationFlag{Name: "unknown-handler-grace", Usage: "worker: hand a task whose handler this worker lacks back to the queue (for a worker that has it) until it has been READY this long; then it fails permanently", Value: worker.UnknownHandlerGraceDefault, EnvVars: []string{"FLOWFORGE_UNKNOWN_HANDLER_GRACE"}},
		&cli.IntFlag{Name: "task-log-max-bytes", Usage: "worker: bytes of one attempt's task log (its handler's core.Logger lines, a shell command's stdout and stderr) stored, at most; past them one line says what was dropped; 0 turns task logs off", Value: worker.TaskLogMaxBytesDefault, EnvVars: []string{"FLOWFORGE_TASK_LOG_MAX_BYTES"}},
		&cli.DurationFlag{Name: "abort-grace", Usage: "worker: once in-flight handlers are aborted (a second stop signal, or --stop-timeout passed), how long to wait for a handler that ignores its cancelled context; then its attempt is recorded failed (retried elsewhere), lease renewal stops and the process exits without it; positive, at most 10m", Value: worker.AbortGraceDefault, EnvVars: []string{"FLOWFORGE_ABORT_GRACE"}},
		&cli.DurationFlag{Name: "slot-wait", Usage: "worker: how long a delivery may wait for a free slot before it is handed back (keep below the broker's consumer_timeout)", Value: worker.SlotWaitDefault, EnvVars: []string{"FLOWFORGE_SLOT_WAIT"}},
	}
}

// handlerSet returns the handler names of --handlers (trimmed, empty ones
// dropped; nil when none is given), or a usage error naming one that
// neither reg nor the built-ins of opt register.
func handlerSet(names []string, reg *core.Registry, opt handlers.Options) ([]string, error) {
	var set []string
	for _, n := range names {
		if n = strings.TrimSpace(n); n != "" {
			set = append(set, n)
		}
	}
	if len(set) == 0 {
		if len(names) > 0 {
			return nil, usageError("--handlers: no handler named (want e.g. --handlers http,noop)")
		}
		return nil, nil
	}
	known := core.NewRegistry()
	for _, n := range reg.Names() {
		h, _ := reg.Lookup(n)
		_ = known.Register(n, h)
	}
	handlers.Register(known, opt)
	if _, err := known.Only(set); err != nil {
		return nil, usageError("--handlers: %v", err)
	}
	return set, nil
}

// daemonUsageError is the usage-error handler of `ffctl daemon ROLE`: a
// flag of another role is named as such.
func daemonUsageError(role supervisor.Role) cli.OnUsageErrorFunc {
	path := "daemon " + string(role)
	return func(_ *cli.Context, err error, _ bool) error {
		// The standard library's flag package words an unknown flag so.
		if name, ok := strings.CutPrefix(err.Error(), "flag provided but not defined: -"); ok {
			if roles := rolesWithFlag(name); len(roles) > 0 {
				return usageError("%s: --%s is a flag of %s, not of %s (see ffctl %s --help)", path, name, strings.Join(roles, " and "), path, path)
			}
		}
		return usageError("%s: %s (see ffctl %s --help)", path, flagErrorText(err), path)
	}
}

// rolesWithFlag lists the `daemon ROLE` commands that have the flag name.
func rolesWithFlag(name string) []string {
	var roles []string
	for _, r := range []supervisor.Role{supervisor.RoleScheduler, supervisor.RolePublisher, supervisor.RoleWorker, supervisor.RoleAPI, supervisor.RoleAll} {
		if slices.ContainsFunc(daemonFlags(r), func(f cli.Flag) bool { return slices.Contains(f.Names(), name) }) {
			roles = append(roles, "daemon "+string(r))
		}
	}
	return roles
}

// runDaemon maps the flags to a supervisor.Config (a bad value is a usage
// error, exit 2, with the Config's message) and runs it; the process's
// SIGINT and SIGTERM are its two-stage stop.
func runDaemon(c *cli.Context, env *Env, role supervisor.Role) error {
	log, err := logger(c, env)
	if err != nil {
		return err
	}
	cfg, err := daemonConfig(c, env, role)
	if err != nil {
		return err
	}
	cfg.Logger = log
	tp, err := startTracing(c.Context, env, "flowforge-"+string(role), env.Stdout, log)
	if err != nil {
		return err
	}
	// Deferred first, so it runs last: the daemons have stopped and their
	// last spans ended when the provider flushes.
	defer stopTracing(env, tp)
	cfg.TracerProvider = tp.TracerProvider()
	ctx, hard, release := supervisor.SignalStop(c.Context)
	defer release()
	cfg.Hard = hard
	sup, err := supervisor.New(cfg)
	if err != nil {
		return usageError("%w", err) // Config.Validate's
	}
	err = sup.Run(ctx)
	if inUse := (*supervisor.IDInUseError)(nil); errors.As(err, &inUse) {
		return usageError("daemon %s: %w", role, err)
	}
	return failure(err)
}

// daemonConfig maps the flags of `ffctl daemon ROLE` to the Config; the
// error is a usage error for a flag that does not parse. Bounds are the
// Config's to check.
func daemonConfig(c *cli.Context, env *Env, role supervisor.Role) (supervisor.Config, error) {
	cfg := supervisor.Config{
		Role:        role,
		ID:          c.String("id"),
		DatabaseURL: databaseURL(c),
		Session: store.Options{
			StatementTimeout: c.Duration("db-statement-timeout"),
			LockTimeout:      c.Duration("db-lock-timeout"),
			IdleInTxTimeout:  c.Duration("db-idle-in-transaction-timeout"),
		},
		DBMaxConns:            c.Int("db-max-conns"),
		MetricsMaxLabelValues: c.Int("metrics-max-label-values"),
		StopTimeout:           c.Duration("stop-timeout"),
		Broker:                brokerConfig(c, nil),
		HealthAddr:            c.String("health-addr"),
		HealthFallback:        !c.IsSet("health-addr"),
		DBHealth:              dbhealth.Config{Interval: c.Duration("db-health-interval"), Warn: c.Duration("xmin-horizon-warn")},
	}
	if !c.IsSet("health-addr") {
		cfg.HealthAddr = role.HealthAddrDefault()
	}
	if err := checkHealthAddr(cfg.HealthAddr); err != nil {
		return cfg, err
	}
	if cfg.DatabaseURL != "" {
		if err := checkDatabaseURL(cfg.DatabaseURL); err != nil {
			return cfg, err
		}
	}
	if role.Runs(supervisor.RolePublisher) || role.Runs(supervisor.RoleWorker) {
		if err := brokerDaemonConfig(c, &cfg); err != nil {
			return cfg, err
		}
	}
	if cfg.StopTimeout <= 0 {
		// The Config's 0 is its default and Validate refuses a negative
		// one; the flag's 0 would be no wait at all, so it is refused here.
		return cfg, usageError("%w", &daemon.SettingError{Component: "supervisor", Field: "StopTimeout", Flag: "stop-timeout", Value: cfg.StopTimeout,
			Want: "positive: how long the first stop signal waits for in-flight tasks before aborting them (default " + supervisor.DefaultStopTimeout.String() + ")"})
	}
	if role.Runs(supervisor.RoleScheduler) {
		if err := schedulerConfig(c, &cfg); err != nil {
			return cfg, err
		}
	}
	// Failpoints are a testing aid (package failpoint).
	fps, err := failpoint.Parse(env.env(failpoint.EnvVar))
	if err != nil {
		return cfg, usageError("%s: %v", failpoint.EnvVar, err)
	}
	cfg.Scheduler.Failpoints = fps
	if role.Runs(supervisor.RolePublisher) {
		cfg.Publisher = publisher.Config{PollInterval: c.Duration("poll-interval"), MaxMessageBytes: c.Int("max-message-bytes"), Failpoints: fps, Lanes: c.Int("batches-in-flight"),
			EventsExchange: c.String("events-exchange")}
		if x := cfg.Publisher.EventsExchange; x != "" {
			if err := broker.CheckExchangeName(x); err != nil {
				return cfg, usageError("--events-exchange: %v", err)
			}
		}
	}
	if role.Runs(supervisor.RoleWorker) {
		if err := workerConfig(c, env, fps, &cfg); err != nil {
			return cfg, err
		}
	}
	if role == supervisor.RoleAPI || role == supervisor.RoleAll {
		cfg.API = apiConfig(c, role)
	}
	if role.Runs(supervisor.RoleScheduler) || role.Runs(supervisor.RoleWorker) {
		skew, err := clock.ParseSkew(c.String("debug-clock-skew"))
		if err != nil {
			return cfg, usageError("--debug-clock-skew: %v", err)
		}
		cfg.ClockSkew = skew
	}
	return cfg, nil
}

// brokerDaemonConfig maps the broker flags of the roles that talk to the
// broker (brokerDaemonFlags) to cfg.Broker and checks it: a heartbeat
// that is no whole number of seconds, a URL that is no AMQP URL or a
// reserved queue name is bad input (a usage error), since dialling would
// retry it as an outage for ever.
func brokerDaemonConfig(c *cli.Context, cfg *supervisor.Config) error {
	cfg.Broker.Heartbeat = c.Duration("amqp-heartbeat")
	if broker.CheckHeartbeat(cfg.Broker.Heartbeat) != nil {
		return usageError("%w", &daemon.SettingError{Component: "broker", Field: "Broker.Heartbeat", Flag: "amqp-heartbeat", Value: cfg.Broker.Heartbeat,
			Want: fmt.Sprintf("whole seconds from 1s to %ds, or 0 for the default (%v)", broker.HeartbeatMax/time.Second, broker.HeartbeatDefault)})
	}
	if len(cfg.Broker.URLs) == 0 {
		return nil
	}
	if err := cfg.Broker.Check(); err != nil {
		return usageError("--amqp-url, --queue: %v", err)
	}
	return nil
}

// checkHealthAddr refuses a malformed --health-addr (no port, a port
// above 65535) as bad input (exit 2); one that is well formed and taken
// is the listen's error at start (exit 1). "" (disabled) is fine.
func checkHealthAddr(addr string) error {
	if addr == "" {
		return nil
	}
	_, port, err := net.SplitHostPort(addr)
	if err == nil {
		if n, perr := strconv.ParseUint(port, 10, 64); perr == nil && n > 65535 {
			err = fmt.Errorf("port %s is above 65535", port)
		}
	}
	if err != nil {
		return usageError("--health-addr %q: %v: want host:port (e.g. 127.0.0.1:9101, or :9101 for every interface), or '' to disable", addr, err)
	}
	return nil
}

// workerConfig maps the worker's flags to cfg.Worker, cfg.Handlers and
// cfg.WorkerHandlers. Errors (usage): --task-log-max-bytes out of bounds
// and --abort-grace not positive (the flags' 0 means something other
// than the Config's default), --shell-concurrency out of bounds, and
// handlerSet's.
func workerConfig(c *cli.Context, env *Env, fps *failpoint.Failpoints, cfg *supervisor.Config) error {
	cfg.Worker = worker.Config{Registry: env.Registry, Concurrency: c.Int("concurrency"), Lease: c.Duration("lease"),
		SlotWait: c.Duration("slot-wait"), UnknownHandlerGrace: c.Duration("unknown-handler-grace"), Failpoints: fps,
		TaskLogMaxBytes: c.Int("task-log-max-bytes"), TaskLogsOff: c.Int("task-log-max-bytes") == 0, AbortGrace: c.Duration("abort-grace")}
	if n := c.Int("task-log-max-bytes"); n < 0 || n > worker.TaskLogMaxBytesMax {
		// The flag's 0 turns task logs off (TaskLogsOff), where the
		// Config's 0 is its default: Validate's wording would mislead.
		return usageError("%w", &daemon.SettingError{Component: "worker", Field: "TaskLogMaxBytes", Flag: "task-log-max-bytes", Value: n,
			Want: fmt.Sprintf("between 1 and %d bytes, or 0 to turn task logs off (default %d)", worker.TaskLogMaxBytesMax, worker.TaskLogMaxBytesDefault)})
	}
	if cfg.Worker.AbortGrace <= 0 || cfg.Worker.AbortGrace > worker.AbortGraceMax {
		// The Config's 0 is its default; the flag's 0 would abandon a
		// handler at once, before it could see its cancellation.
		return usageError("%w", &daemon.SettingError{Component: "worker", Field: "AbortGrace", Flag: "abort-grace", Value: cfg.Worker.AbortGrace,
			Want: "positive and at most " + worker.AbortGraceMax.String() + ": how long an aborted handler may take to return before the worker exits without it (default " + worker.AbortGraceDefault.String() + ")"})
	}
	if n := c.Int("shell-concurrency"); n < 0 || n > worker.ConcurrencyMax {
		return usageError("--shell-concurrency %d: want 0 (twice the CPUs) to %d", n, worker.ConcurrencyMax)
	}
	cfg.Handlers = handlers.Options{AllowShell: c.Bool("allow-shell"), ShellEnvPass: c.StringSlice("shell-env-pass"),
		ShellSupervisor: shellSupervisor(), ShellConcurrency: c.Int("shell-concurrency"), HTTPDenyPrivate: c.Bool("http-deny-private")}
	only, err := handlerSet(c.StringSlice("handlers"), env.Registry, cfg.Handlers)
	if err != nil {
		return err
	}
	cfg.WorkerHandlers = only
	return nil
}
