package supervisor_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/flowforge/flowforge/core/broker"
	"github.com/flowforge/flowforge/core/store"
	"github.com/flowforge/flowforge/daemon"
	"github.com/flowforge/flowforge/daemon/api"
	"github.com/flowforge/flowforge/daemon/dbhealth"
	"github.com/flowforge/flowforge/daemon/handlers"
	"github.com/flowforge/flowforge/daemon/publisher"
	"github.com/flowforge/flowforge/daemon/scheduler"
	"github.com/flowforge/flowforge/daemon/supervisor"
	"github.com/flowforge/flowforge/daemon/worker"
)

// validConfig is a Config of role that Validate accepts.
func validConfig(role supervisor.Role) supervisor.Config {
	return supervisor.Config{Role: role, DatabaseURL: "postgres://db.invalid/flowforge", Broker: broker.Config{URLs: []string{"amqp://broker.invalid/"}}}
}

// TestConfigValidate: each setting out of its bounds is refused with an
// error naming the Config field, ffctl's flag for it and the bound; the
// zero value of every setting is its default; the settings of a daemon the
// role does not run are not looked at.
func TestConfigValidate(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		role supervisor.Role
		set  func(*supervisor.Config)
		want []string // pieces of the error; none: valid
	}{
		{"zero settings are the defaults", supervisor.RoleAll, func(*supervisor.Config) {}, nil},
		{"the scheduler needs no broker", supervisor.RoleScheduler, func(c *supervisor.Config) { c.Broker = broker.Config{} }, nil},
		{"lease at the minimum", supervisor.RoleWorker, func(c *supervisor.Config) { c.Worker.Lease = worker.LeaseMin }, nil},
		{"another role's settings are ignored", supervisor.RolePublisher, func(c *supervisor.Config) { c.Worker.Lease = time.Millisecond }, nil},
		{"unknown role", "janitor", func(*supervisor.Config) {}, []string{`role "janitor"`, "all, scheduler, publisher, worker or api"}},
		{"the api needs no broker", supervisor.RoleAPI, func(c *supervisor.Config) { c.Broker = broker.Config{} }, nil},
		{"the api anonymous beyond loopback", supervisor.RoleAPI, func(c *supervisor.Config) { c.API = api.Config{Listen: "0.0.0.0:8090", InsecureNoAuth: true} },
			[]string{"api: --insecure-no-auth 0.0.0.0:8090 (Config.InsecureNoAuth)"}},
		{"all's api anonymous beyond loopback", supervisor.RoleAll, func(c *supervisor.Config) { c.API = api.Config{Listen: ":8090", InsecureNoAuth: true} },
			[]string{"--insecure-no-auth"}},
		{"all without an api ignores its settings", supervisor.RoleAll, func(c *supervisor.Config) { c.API = api.Config{TLSCert: "c.pem"} }, nil},
		{"no database", supervisor.RoleScheduler, func(c *supervisor.Config) { c.DatabaseURL = "" }, []string{"--database-url", "Config.DatabaseURL"}},
		{"no broker", supervisor.RoleWorker, func(c *supervisor.Config) { c.Broker = broker.Config{} }, []string{"--amqp-url", "Config.Broker.URLs", "for the worker"}},
		{"lease below the minimum", supervisor.RoleWorker, func(c *supervisor.Config) { c.Worker.Lease = 299 * time.Millisecond },
			[]string{"worker: --lease 299ms (Config.Lease): must be at least 300ms, or 0 for the default (30s)"}},
		{"negative concurrency", supervisor.RoleAll, func(c *supervisor.Config) { c.Worker.Concurrency = -2 },
			[]string{"worker: --concurrency -2 (Config.Concurrency): must be positive, or 0 for the default (100)"}},
		{"negative slot wait", supervisor.RoleWorker, func(c *supervisor.Config) { c.Worker.SlotWait = -time.Second }, []string{"--slot-wait -1s (Config.SlotWait)"}},
		{"negative unknown-handler grace", supervisor.RoleWorker, func(c *supervisor.Config) { c.Worker.UnknownHandlerGrace = -time.Second }, []string{"--unknown-handler-grace -1s (Config.UnknownHandlerGrace)"}},
		{"negative sweep interval", supervisor.RoleScheduler, func(c *supervisor.Config) { c.Scheduler = scheduler.Config{SweepInterval: -time.Second} }, []string{"scheduler: --sweep-interval -1s (Config.SweepInterval)"}},
		{"child depth at its bounds", supervisor.RoleScheduler, func(c *supervisor.Config) { c.Scheduler = scheduler.Config{MaxChildDepth: scheduler.MaxChildDepthMax} }, nil},
		{"child depth past its bound", supervisor.RoleAll, func(c *supervisor.Config) { c.Scheduler = scheduler.Config{MaxChildDepth: 101} },
			[]string{"scheduler: --max-child-depth 101 (Config.MaxChildDepth): must be between 1 and 100, or 0 for the default (10)"}},
		{"negative child depth", supervisor.RoleScheduler, func(c *supervisor.Config) { c.Scheduler = scheduler.Config{MaxChildDepth: -1} }, []string{"--max-child-depth -1"}},
		{"negative batch size", supervisor.RoleScheduler, func(c *supervisor.Config) { c.Scheduler = scheduler.Config{BatchSize: -1} }, []string{"scheduler: Config.BatchSize -1: must be positive"}},
		{"negative redispatch-after", supervisor.RoleAll, func(c *supervisor.Config) { c.Scheduler = scheduler.Config{RedispatchAfter: -time.Minute} }, []string{"--redispatch-after -1m0s (Config.RedispatchAfter)"}},
		{"negative poll interval", supervisor.RolePublisher, func(c *supervisor.Config) { c.Publisher = publisher.Config{PollInterval: -time.Second} }, []string{"publisher: --poll-interval -1s (Config.PollInterval)"}},
		{"negative max message bytes", supervisor.RolePublisher, func(c *supervisor.Config) { c.Publisher = publisher.Config{MaxMessageBytes: -1} }, []string{"publisher: --max-message-bytes -1 (Config.MaxMessageBytes)", "default (1048576)"}},
		{"negative pool", supervisor.RoleScheduler, func(c *supervisor.Config) { c.DBMaxConns = -1 }, []string{"supervisor: --db-max-conns -1 (Config.DBMaxConns)"}},
		{"label bound past its maximum", supervisor.RoleWorker, func(c *supervisor.Config) { c.MetricsMaxLabelValues = 10001 },
			[]string{"supervisor: --metrics-max-label-values 10001 (Config.MetricsMaxLabelValues): must be between 1 and 10000, or 0 for the default (100)"}},
		{"label bound at its bounds", supervisor.RoleWorker, func(c *supervisor.Config) { c.MetricsMaxLabelValues = 10000 }, nil},
		{"negative label bound", supervisor.RoleScheduler, func(c *supervisor.Config) { c.MetricsMaxLabelValues = -1 }, []string{"supervisor: --metrics-max-label-values -1 (Config.MetricsMaxLabelValues)"}},
		{"negative stop timeout", supervisor.RoleWorker, func(c *supervisor.Config) { c.StopTimeout = -time.Second },
			[]string{"supervisor: --stop-timeout -1s (Config.StopTimeout): must be positive, or 0 for the default (30s)"}},
		{"negative id lease", supervisor.RolePublisher, func(c *supervisor.Config) { c.IDLease = -time.Second },
			[]string{"supervisor: Config.IDLease -1s: must be positive, or 0 for the default (15s)"}},
		{"negative xmin warn", supervisor.RoleScheduler, func(c *supervisor.Config) { c.DBHealth = dbhealth.Config{Warn: -time.Second} }, []string{"dbhealth: --xmin-horizon-warn -1s (Config.Warn)"}},
		{"negative db health interval", supervisor.RoleWorker, func(c *supervisor.Config) { c.DBHealth = dbhealth.Config{Interval: -time.Second} }, []string{"dbhealth: --db-health-interval -1s (Config.Interval)"}},
		{"bad id", supervisor.RoleScheduler, func(c *supervisor.Config) { c.ID = "a b" }, []string{"supervisor: --id (Config.ID)", "U+0020"}},
		{"env pass of a secret", supervisor.RoleWorker, func(c *supervisor.Config) {
			c.Handlers = handlers.Options{ShellEnvPass: []string{"FLOWFORGE_DATABASE_URL"}}
		},
			[]string{"--shell-env-pass (Config.Handlers.ShellEnvPass)", "never reach a task"}},
		{"lock above statement", supervisor.RoleScheduler, func(c *supervisor.Config) {
			c.Session = store.Options{StatementTimeout: time.Second, LockTimeout: 2 * time.Second}
		}, []string{"--db-lock-timeout", "(Config.Session)", "lock timeout (2s) exceeds the statement timeout (1s)"}},
		{"idle below the publisher's confirm wait", supervisor.RoleAll, func(c *supervisor.Config) { c.Session = store.Options{IdleInTxTimeout: 8 * time.Second} },
			[]string{"--db-idle-in-transaction-timeout", "must be at least 15s"}},
		{"the worker holds no transaction idle", supervisor.RoleWorker, func(c *supervisor.Config) { c.Session = store.Options{IdleInTxTimeout: 8 * time.Second} }, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cfg := validConfig(tc.role)
			tc.set(&cfg)
			err := cfg.Validate()
			if len(tc.want) == 0 {
				if err != nil {
					t.Fatalf("Validate: %v, want nil", err)
				}
				if _, err := supervisor.New(cfg); err != nil {
					t.Fatalf("New: %v, want nil", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("Validate accepted %+v", cfg)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Fatalf("Validate: %q, want it to contain %q", err, w)
				}
			}
			if _, nerr := supervisor.New(cfg); nerr == nil || nerr.Error() != err.Error() {
				t.Fatalf("New: %v, want Validate's error %v", nerr, err)
			}
		})
	}
}

// TestBoundErrorsAreSettingErrors: a bound is reported as a
// *daemon.SettingError that names the field and the flag, for callers
// that want more than the message.
func TestBoundErrorsAreSettingErrors(t *testing.T) {
	t.Parallel()
	cfg := validConfig(supervisor.RoleWorker)
	cfg.Worker.Lease = time.Millisecond
	var se *daemon.SettingError
	if err := cfg.Validate(); !errors.As(err, &se) || se.Field != "Lease" || se.Flag != "lease" || se.Component != "worker" {
		t.Fatalf("Validate: %#v, want a *daemon.SettingError for worker Lease (--lease)", err)
	}
}

// TestNewDefaultsTheID: without an ID, New chooses role-host-pid-random,
// one that CheckID accepts.
func TestNewDefaultsTheID(t *testing.T) {
	t.Parallel()
	for _, role := range supervisor.Roles() {
		s, err := supervisor.New(validConfig(role))
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(s.ID(), string(role)+"-") || worker.CheckID(s.ID()) != nil {
			t.Fatalf("%s: default id %q", role, s.ID())
		}
	}
}
