package cli_test

import (
	"bytes"
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	ffcli "github.com/flowforge/flowforge/cli"
	"github.com/flowforge/flowforge/core/broker"
	"github.com/flowforge/flowforge/core/store"
	"github.com/flowforge/flowforge/core/store/storetest"
	"github.com/flowforge/flowforge/daemon/dbhealth"
	"github.com/flowforge/flowforge/daemon/handlers"
	"github.com/flowforge/flowforge/daemon/logtest"
	"github.com/flowforge/flowforge/daemon/pruner"
	"github.com/flowforge/flowforge/daemon/publisher"
	"github.com/flowforge/flowforge/daemon/scheduler"
	"github.com/flowforge/flowforge/daemon/supervisor"
)

// ffDaemon runs `ffctl daemon ARGS...` against a database that refuses
// connections, for commands that must be refused before they connect; one
// that is not runs until the test's deadline, and fails there.
func ffDaemon(t *testing.T, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	full := append([]string{"ffctl", "--database-url", storetest.RefusedURL(t), "daemon"}, args...)
	var out, errOut bytes.Buffer
	code := ffcli.Run(ctx, full, nil, strings.NewReader(""), &out, &errOut)
	r := result{code: code, stdout: out.String(), stderr: errOut.String()}
	if ctx.Err() != nil {
		t.Fatalf("ffctl daemon %v ran until the test's deadline instead of refusing at start:\n%s", args, r)
	}
	return r
}

// roleFlags returns the names of the flags of `ffctl daemon ROLE`, by role,
// as the app defines them.
func roleFlags(t *testing.T) map[string][]string {
	t.Helper()
	app := ffcli.NewApp(&ffcli.Env{Stdout: &bytes.Buffer{}, Stderr: &bytes.Buffer{}})
	flags := map[string][]string{}
	for _, c := range app.Commands {
		if c.Name != "daemon" {
			continue
		}
		for _, s := range c.Subcommands {
			for _, f := range s.Flags {
				flags[s.Name] = append(flags[s.Name], f.Names()[0])
			}
		}
	}
	if len(flags) != 5 {
		t.Fatalf("daemon roles: %v", flags)
	}
	return flags
}

// TestDaemonRolesRefuseAnotherRolesFlag: `daemon scheduler --concurrency
// 8` was accepted and ignored. Each role takes only its own flags and the
// common ones; another role's is a usage error (exit 2) that names the
// flag and the roles that have it, before anything is reached.
func TestDaemonRolesRefuseAnotherRolesFlag(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		role string
		args []string
		want string
	}{
		{"scheduler", []string{"--concurrency", "8"}, "daemon scheduler: --concurrency is a flag of daemon worker and daemon all, not of daemon scheduler (see ffctl daemon scheduler --help)"},
		{"scheduler", []string{"--allow-shell"}, "--allow-shell is a flag of daemon worker and daemon all, not of daemon scheduler"},
		{"scheduler", []string{"--lease=2s"}, "--lease is a flag of daemon worker and daemon all, not of daemon scheduler"},
		{"scheduler", []string{"--poll-interval", "1s"}, "--poll-interval is a flag of daemon publisher and daemon all, not of daemon scheduler"},
		{"scheduler", []string{"--max-message-bytes", "10"}, "--max-message-bytes is a flag of daemon publisher and daemon all, not of daemon scheduler"},
		{"publisher", []string{"--concurrency", "8"}, "--concurrency is a flag of daemon worker and daemon all, not of daemon publisher"},
		{"publisher", []string{"--sweep-interval", "1s"}, "--sweep-interval is a flag of daemon scheduler and daemon all, not of daemon publisher"},
		{"publisher", []string{"--redispatch-after", "1m"}, "--redispatch-after is a flag of daemon scheduler and daemon all, not of daemon publisher"},
		{"publisher", []string{"--debug-clock-skew", "+3h"}, "--debug-clock-skew is a flag of daemon scheduler and daemon worker and daemon all, not of daemon publisher"},
		{"publisher", []string{"--shell-env-pass", "HTTPS_PROXY"}, "--shell-env-pass is a flag of daemon worker and daemon all, not of daemon publisher"},
		{"worker", []string{"--sweep-interval", "1s"}, "--sweep-interval is a flag of daemon scheduler and daemon all, not of daemon worker"},
		{"worker", []string{"--redispatch-after", "1m"}, "--redispatch-after is a flag of daemon scheduler and daemon all, not of daemon worker"},
		{"worker", []string{"--poll-interval", "1s"}, "--poll-interval is a flag of daemon publisher and daemon all, not of daemon worker"},
		{"worker", []string{"--max-message-bytes", "10"}, "--max-message-bytes is a flag of daemon publisher and daemon all, not of daemon worker"},
		{"worker", []string{"--bogus"}, "daemon worker: flag provided but not defined: --bogus (see ffctl daemon worker --help)"},
		// A stray argument is refused too, not ignored (the new-user trial).
		{"worker", []string{"extra-arg"}, `daemon worker takes no arguments (got "extra-arg"`},
		{"all", []string{"--concurrency", "2", "extra"}, `daemon all takes no arguments (got "extra"`},
	} {
		t.Run(tc.role+" "+tc.args[0], func(t *testing.T) {
			t.Parallel()
			r := ffDaemon(t, append([]string{tc.role, "--health-addr", ""}, tc.args...)...)
			expect(t, r, 2, tc.want)
		})
	}
	// And every flag of `daemon all` that a role lacks, so a flag added
	// to one role later is covered too.
	flags := roleFlags(t)
	for _, role := range []string{"scheduler", "publisher", "worker", "api"} {
		for _, f := range flags["all"] {
			if slices.Contains(flags[role], f) {
				continue
			}
			t.Run(role+" refuses --"+f, func(t *testing.T) {
				t.Parallel()
				r := ffDaemon(t, role, "--health-addr", "", "--"+f+"=1")
				expect(t, r, 2, "--"+f+" is a flag of ", "not of daemon "+role)
			})
		}
	}
}

// TestDaemonWorkerHandlersMustBeRegistered: --handlers names handlers the
// binary registers (the built-ins, --allow-shell's shell, a program's own);
// another name, or none, is a usage error (exit 2) naming it and what is
// registered, before anything is reached.
func TestDaemonWorkerHandlersMustBeRegistered(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		args []string
		want []string
	}{
		{"unknown", []string{"--handlers", "noop,nope"}, []string{`--handlers: handler set: "nope" is not a registered handler`, "registered: fail, http, noop, sleep"}},
		{"shell without --allow-shell", []string{"--handlers", "shell"}, []string{`"shell" is not a registered handler`}},
		{"empty", []string{"--handlers", " , "}, []string{"--handlers: no handler named"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := ffDaemon(t, append([]string{"worker", "--health-addr", ""}, tc.args...)...)
			expect(t, r, 2, tc.want...)
		})
	}
}

// TestDaemonAllTakesTheUnionOfTheRolesFlags: `daemon all` runs every
// daemon, so it takes every role's flags (the API's --listen as
// --api-listen), and each role takes its own:
// given all of them at once, each gets past its flags and their bounds to
// the database (which refuses it here), and stops cleanly when cancelled.
func TestDaemonAllTakesTheUnionOfTheRolesFlags(t *testing.T) {
	t.Parallel()
	flags := roleFlags(t)
	var union []string
	for _, role := range []string{"scheduler", "publisher", "worker", "api"} {
		for _, f := range flags[role] {
			if f == "listen" {
				f = "api-listen"
			}
			if !slices.Contains(union, f) {
				union = append(union, f)
			}
		}
	}
	slices.Sort(union)
	all := slices.Sorted(slices.Values(flags["all"]))
	if !slices.Equal(all, union) {
		t.Fatalf("daemon all flags %v, want the union of the roles' %v", all, union)
	}
	// A valid value for every daemon flag.
	values := map[string][]string{
		"health-addr": {"--health-addr", ""}, "id": {"--id", "test-daemon"}, "db-max-conns": {"--db-max-conns", "3"}, "metrics-max-label-values": {"--metrics-max-label-values", "50"},
		"db-statement-timeout": {"--db-statement-timeout", "20s"}, "db-lock-timeout": {"--db-lock-timeout", "10s"},
		"db-idle-in-transaction-timeout": {"--db-idle-in-transaction-timeout", "40s"}, "xmin-horizon-warn": {"--xmin-horizon-warn", "1m"},
		"db-health-interval": {"--db-health-interval", "5s"}, "redispatch-after": {"--redispatch-after", "1m"},
		"sweep-interval": {"--sweep-interval", "500ms"}, "full-sweep-interval": {"--full-sweep-interval", "1m"}, "poll-interval": {"--poll-interval", "500ms"},
		"max-message-bytes": {"--max-message-bytes", "4096"}, "batches-in-flight": {"--batches-in-flight", "3"}, "events-exchange": {"--events-exchange", "flowforge.events"}, "concurrency": {"--concurrency", "2"}, "allow-shell": {"--allow-shell"}, "shell-concurrency": {"--shell-concurrency", "3"},
		"shell-env-pass": {"--shell-env-pass", "HTTPS_PROXY"}, "http-deny-private": {"--http-deny-private"}, "lease": {"--lease", "2s"},
		"unknown-handler-grace": {"--unknown-handler-grace", "30s"}, "slot-wait": {"--slot-wait", "30s"}, "abort-grace": {"--abort-grace", "3s"}, "task-log-max-bytes": {"--task-log-max-bytes", "0"}, "debug-clock-skew": {"--debug-clock-skew", "+1h"},
		"prune": {"--prune"}, "prune-interval": {"--prune-interval", "30s"}, "retain-succeeded": {"--retain-succeeded", "3d"},
		"retain-cancelled": {"--retain-cancelled", "1d12h"}, "retain-dead": {"--retain-dead", "30d"}, "retain-outbox": {"--retain-outbox", "6h"},
		"misfire-grace": {"--misfire-grace", "2m"}, "stop-timeout": {"--stop-timeout", "45s"}, "max-child-depth": {"--max-child-depth", "3"},
		"listen": {"--listen", "127.0.0.1:0"}, "api-listen": {"--api-listen", "127.0.0.1:0"}, "tls-cert": {"--tls-cert", "cert.pem"},
		"tls-key": {"--tls-key", "key.pem"}, "insecure-no-auth": {"--insecure-no-auth"}, "handlers": {"--handlers", "noop,http"}, "amqp-heartbeat": {"--amqp-heartbeat", "5s"},
	}
	for _, role := range []string{"all", "scheduler", "publisher", "worker", "api"} {
		t.Run(role, func(t *testing.T) {
			t.Parallel()
			args := []string{"ffctl", "--database-url", storetest.RefusedURL(t), "daemon", role}
			for _, f := range flags[role] {
				v, ok := values[f]
				if !ok {
					t.Fatalf("no test value for --%s", f)
				}
				args = append(args, v...)
			}
			ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
			defer cancel()
			var out, errOut logtest.Buffer
			done := make(chan int)
			go func() { done <- ffcli.Run(ctx, args, nil, strings.NewReader(""), &out, &errOut) }()
			eventually(t, 20*time.Second, "the daemon retrying the database", func() bool {
				return strings.Contains(errOut.String(), "daemon: database not available; retrying")
			})
			cancel()
			if code := <-done; code != 0 {
				t.Fatalf("ffctl %v: exit %d after a stop, want 0\n%s", args, code, errOut.String())
			}
		})
	}
}

// TestDaemonBoundsAreTheConfigs: every bound of a daemon flag is checked
// in one place, the Config's Validate (the worker's --lease had 300ms in
// the CLI and 30ms in the worker); ffctl maps the flag to the field and
// reports exactly the Config's error as a usage error. One exception:
// --task-log-max-bytes, whose 0 turns task logs off where the Config's 0
// is its default, is worded by ffctl (TestDaemonFlagsThatAreBadInputExitTwo).
func TestDaemonBoundsAreTheConfigs(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		role supervisor.Role
		args []string
		cfg  func(*supervisor.Config)
	}{
		{"lease below the minimum", supervisor.RoleWorker, []string{"--lease", "100ms"}, func(c *supervisor.Config) { c.Worker.Lease = 100 * time.Millisecond }},
		{"negative lease", supervisor.RoleAll, []string{"--lease", "-1s"}, func(c *supervisor.Config) { c.Worker.Lease = -time.Second }},
		{"negative concurrency", supervisor.RoleWorker, []string{"--concurrency", "-1"}, func(c *supervisor.Config) { c.Worker.Concurrency = -1 }},
		{"negative slot wait", supervisor.RoleWorker, []string{"--slot-wait", "-1s"}, func(c *supervisor.Config) { c.Worker.SlotWait = -time.Second }},
		{"negative unknown-handler grace", supervisor.RoleWorker, []string{"--unknown-handler-grace", "-1s"}, func(c *supervisor.Config) { c.Worker.UnknownHandlerGrace = -time.Second }},
		{"id over 255 bytes", supervisor.RoleScheduler, []string{"--id", strings.Repeat("s", 256)}, func(c *supervisor.Config) { c.ID = strings.Repeat("s", 256) }},
		{"env pass of PGPASSWORD", supervisor.RoleWorker, []string{"--shell-env-pass", "PGPASSWORD"}, func(c *supervisor.Config) { c.Handlers = handlers.Options{ShellEnvPass: []string{"PGPASSWORD"}} }},
		{"negative sweep interval", supervisor.RoleScheduler, []string{"--sweep-interval", "-1s"}, func(c *supervisor.Config) { c.Scheduler = scheduler.Config{SweepInterval: -time.Second} }},
		{"a misfire grace below two sweeps", supervisor.RoleScheduler, []string{"--misfire-grace", "1ms"}, func(c *supervisor.Config) { c.Scheduler = scheduler.Config{MisfireGrace: time.Millisecond} }},
		{"negative redispatch-after", supervisor.RoleAll, []string{"--redispatch-after", "-1s"}, func(c *supervisor.Config) { c.Scheduler = scheduler.Config{RedispatchAfter: -time.Second} }},
		{"a child depth past the bound", supervisor.RoleScheduler, []string{"--max-child-depth", "101"}, func(c *supervisor.Config) { c.Scheduler = scheduler.Config{MaxChildDepth: 101} }},
		{"a negative child depth", supervisor.RoleAll, []string{"--max-child-depth", "-1"}, func(c *supervisor.Config) { c.Scheduler = scheduler.Config{MaxChildDepth: -1} }},
		{"negative poll interval", supervisor.RolePublisher, []string{"--poll-interval", "-1s"}, func(c *supervisor.Config) { c.Publisher = publisher.Config{PollInterval: -time.Second} }},
		{"negative max message bytes", supervisor.RolePublisher, []string{"--max-message-bytes", "-1"}, func(c *supervisor.Config) { c.Publisher = publisher.Config{MaxMessageBytes: -1} }},
		{"batches in flight past the bound", supervisor.RolePublisher, []string{"--batches-in-flight", "17"}, func(c *supervisor.Config) { c.Publisher = publisher.Config{Lanes: 17} }},
		{"negative batches in flight", supervisor.RoleAll, []string{"--batches-in-flight", "-1"}, func(c *supervisor.Config) { c.Publisher = publisher.Config{Lanes: -1} }},
		{"negative pool size", supervisor.RoleWorker, []string{"--db-max-conns", "-1"}, func(c *supervisor.Config) { c.DBMaxConns = -1 }},
		{"negative label bound", supervisor.RoleScheduler, []string{"--metrics-max-label-values", "-1"}, func(c *supervisor.Config) { c.MetricsMaxLabelValues = -1 }},
		{"a label bound past the maximum", supervisor.RoleAll, []string{"--metrics-max-label-values", "10001"}, func(c *supervisor.Config) { c.MetricsMaxLabelValues = 10001 }},
		{"negative warn threshold", supervisor.RoleScheduler, []string{"--xmin-horizon-warn", "-1s"}, func(c *supervisor.Config) { c.DBHealth = dbhealth.Config{Warn: -time.Second} }},
		{"negative db health interval", supervisor.RolePublisher, []string{"--db-health-interval", "-1s"}, func(c *supervisor.Config) { c.DBHealth = dbhealth.Config{Interval: -time.Second} }},
		{"idle below the confirm timeout", supervisor.RolePublisher, []string{"--db-idle-in-transaction-timeout", "8s"}, func(c *supervisor.Config) { c.Session.IdleInTxTimeout = 8 * time.Second }},
		{"concurrency past the prefetch the broker allows", supervisor.RoleWorker, []string{"--concurrency", "100000"}, func(c *supervisor.Config) { c.Worker.Concurrency = 100000 }},
		{"a sweep that busy-loops the database", supervisor.RoleScheduler, []string{"--sweep-interval", "1ns"}, func(c *supervisor.Config) { c.Scheduler = scheduler.Config{SweepInterval: time.Nanosecond} }},
		{"a sweep that stalls retries and reaping", supervisor.RoleAll, []string{"--sweep-interval", "1000h"}, func(c *supervisor.Config) { c.Scheduler = scheduler.Config{SweepInterval: 1000 * time.Hour} }},
		{"a poll that busy-loops the database", supervisor.RolePublisher, []string{"--poll-interval", "1ms"}, func(c *supervisor.Config) { c.Publisher = publisher.Config{PollInterval: time.Millisecond} }},
		{"a retention age below the minimum", supervisor.RoleScheduler, []string{"--retain-succeeded", "30s"}, func(c *supervisor.Config) { c.Pruner = pruner.Config{RetainSucceeded: 30 * time.Second} }},
		{"a retention age past the maximum", supervisor.RoleAll, []string{"--retain-cancelled", "4000d"}, func(c *supervisor.Config) { c.Pruner = pruner.Config{RetainCancelled: 4000 * 24 * time.Hour} }},
		{"a retain-dead below the minimum", supervisor.RoleScheduler, []string{"--retain-dead", "1s"}, func(c *supervisor.Config) { c.Pruner = pruner.Config{RetainDead: time.Second} }},
		{"an outbox age below the minimum", supervisor.RoleScheduler, []string{"--retain-outbox", "10s"}, func(c *supervisor.Config) { c.Pruner = pruner.Config{RetainOutbox: 10 * time.Second} }},
		{"a prune interval that busy-loops the database", supervisor.RoleScheduler, []string{"--prune-interval", "1ms"}, func(c *supervisor.Config) { c.Pruner = pruner.Config{Interval: time.Millisecond} }},
		{"no broker", supervisor.RoleWorker, []string{"--amqp-url", ""}, func(c *supervisor.Config) { c.Broker.URLs = nil }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cfg := supervisor.Config{Role: tc.role, DatabaseURL: "postgres://db.invalid/flowforge", Broker: broker.Config{URLs: []string{"amqp://broker.invalid/"}},
				Session: store.Options{StatementTimeout: store.StatementTimeoutDefault, LockTimeout: store.LockTimeoutDefault, IdleInTxTimeout: store.IdleInTxTimeoutDefault}}
			tc.cfg(&cfg)
			cerr := cfg.Validate()
			if cerr == nil {
				t.Fatalf("Config.Validate accepted %+v", cfg)
			}
			r := ffDaemon(t, append([]string{string(tc.role), "--health-addr", ""}, tc.args...)...)
			if want := "ffctl: " + cerr.Error() + "\n"; r.code != 2 || r.stderr != want {
				t.Fatalf("ffctl daemon %s %v:\n%s\nwant exit 2 and stderr %q (Config.Validate's)", tc.role, tc.args, r, want)
			}
			if want := "--" + strings.TrimPrefix(tc.args[0], "--"); !strings.Contains(r.stderr, want) {
				t.Fatalf("the message does not name %s: %s", want, r.stderr)
			}
		})
	}
}

// TestDaemonHelpListsOnlyTheRolesFlags: `ffctl daemon worker --help` shows
// the worker's flags and the common ones, not the scheduler's or the
// publisher's.
func TestDaemonHelpListsOnlyTheRolesFlags(t *testing.T) {
	t.Parallel()
	common := []string{"--health-addr", "--id", "--db-max-conns", "--metrics-max-label-values", "--db-statement-timeout", "--xmin-horizon-warn"}
	sched := []string{"--sweep-interval", "--full-sweep-interval", "--redispatch-after"}
	pub := []string{"--poll-interval", "--max-message-bytes"}
	work := []string{"--concurrency", "--lease", "--allow-shell", "--shell-env-pass", "--slot-wait"}
	for _, tc := range []struct {
		role      string
		has, lack []string
	}{
		{"scheduler", append(slices.Clone(common), sched...), append(slices.Clone(pub), work...)},
		{"publisher", append(slices.Clone(common), pub...), append(slices.Clone(sched), work...)},
		{"worker", append(slices.Clone(common), work...), append(slices.Clone(sched), pub...)},
		{"all", slices.Concat(common, sched, pub, work), nil},
	} {
		t.Run(tc.role, func(t *testing.T) {
			t.Parallel()
			r := ffNoDB("daemon", tc.role, "--help")
			if r.code != 0 {
				t.Fatal(r)
			}
			for _, f := range tc.has {
				if !strings.Contains(r.stdout, f+" ") {
					t.Errorf("daemon %s --help lacks %s", tc.role, f)
				}
			}
			for _, f := range tc.lack {
				if strings.Contains(r.stdout, f+" ") {
					t.Errorf("daemon %s --help lists %s, another role's flag", tc.role, f)
				}
			}
			if strings.Contains(r.stdout, "--debug-clock-skew") {
				t.Errorf("the hidden --debug-clock-skew is listed:\n%s", r.stdout)
			}
			if t.Failed() {
				t.Log(r.stdout)
			}
		})
	}
}
