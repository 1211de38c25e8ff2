package cli_test

import (
	"strings"
	"testing"

	"github.com/flowforge/flowforge/daemon/supervisor"
)

// TestDaemonStopTimeoutMustBePositive: --stop-timeout of every role is
// refused at start (exit 2, nothing reached) when it is zero (no wait at
// all: the flag has no "0 for the default") or negative, naming the flag,
// the Config field and the default, and when it does not parse.
func TestDaemonStopTimeoutMustBePositive(t *testing.T) {
	t.Parallel()
	for _, role := range supervisor.Roles() {
		for _, tc := range []struct {
			value, want string
		}{
			{"0s", "ffctl: supervisor: --stop-timeout 0s (Config.StopTimeout): must be positive: how long the first stop signal waits for in-flight tasks before aborting them (default 30s)\n"},
			{"0", "ffctl: supervisor: --stop-timeout 0s (Config.StopTimeout): must be positive: how long the first stop signal waits for in-flight tasks before aborting them (default 30s)\n"},
			{"-1s", "ffctl: supervisor: --stop-timeout -1s (Config.StopTimeout): must be positive: how long the first stop signal waits for in-flight tasks before aborting them (default 30s)\n"},
			{"soon", "stop-timeout"},
		} {
			t.Run(string(role)+" "+tc.value, func(t *testing.T) {
				t.Parallel()
				r := ffDaemon(t, string(role), "--health-addr", "", "--stop-timeout", tc.value)
				if r.code != 2 || (strings.HasSuffix(tc.want, "\n") && r.stderr != tc.want) || !strings.Contains(r.stderr, tc.want) {
					t.Fatalf("ffctl daemon %s --stop-timeout %s:\n%s\nwant exit 2 and %q", role, tc.value, r, tc.want)
				}
			})
		}
	}
}

// TestDaemonMaxChildDepthZeroIsRefused: --max-child-depth 0, which the
// Config would take for its default, is refused at start (exit 2) by the
// scheduler and by all, naming the flag, the bounds and the default; a
// role without a scheduler does not have the flag.
func TestDaemonMaxChildDepthZeroIsRefused(t *testing.T) {
	t.Parallel()
	want := "ffctl: scheduler: --max-child-depth 0 (Config.MaxChildDepth): must be between 1 and 100 (default 10): at 0 every task that starts a child run would fail\n"
	for _, role := range []supervisor.Role{supervisor.RoleScheduler, supervisor.RoleAll} {
		if r := ffDaemon(t, string(role), "--health-addr", "", "--max-child-depth", "0"); r.code != 2 || r.stderr != want {
			t.Errorf("ffctl daemon %s --max-child-depth 0:\n%s\nwant exit 2 and %q", role, r, want)
		}
	}
	if r := ffDaemon(t, "worker", "--health-addr", "", "--max-child-depth", "3"); r.code != 2 || !strings.Contains(r.stderr, "--max-child-depth is a flag of daemon scheduler and daemon all, not of daemon worker") {
		t.Errorf("ffctl daemon worker --max-child-depth 3:\n%s", r)
	}
}

// TestDaemonAbortGraceMustBePositive: --abort-grace of the roles that run
// a worker is refused at start (exit 2) when it is zero (a handler would
// be left behind before it could see its cancellation), negative, or over
// worker.AbortGraceMax (a unit typo: 10h for 10s),
// naming the flag, the Config field and the default.
func TestDaemonAbortGraceMustBePositive(t *testing.T) {
	t.Parallel()
	for _, role := range []supervisor.Role{supervisor.RoleWorker, supervisor.RoleAll} {
		for _, tc := range []struct {
			value, want string
		}{
			{"0", "ffctl: worker: --abort-grace 0s (Config.AbortGrace): must be positive and at most 10m0s: how long an aborted handler may take to return before the worker exits without it (default 10s)\n"},
			{"-2s", "ffctl: worker: --abort-grace -2s (Config.AbortGrace): must be positive and at most 10m0s: how long an aborted handler may take to return before the worker exits without it (default 10s)\n"},
			{"10h", "ffctl: worker: --abort-grace 10h0m0s (Config.AbortGrace): must be positive and at most 10m0s: how long an aborted handler may take to return before the worker exits without it (default 10s)\n"},
		} {
			t.Run(string(role)+" "+tc.value, func(t *testing.T) {
				t.Parallel()
				if r := ffDaemon(t, string(role), "--health-addr", "", "--abort-grace", tc.value); r.code != 2 || r.stderr != tc.want {
					t.Fatalf("ffctl daemon %s --abort-grace %s:\n%s\nwant exit 2 and %q", role, tc.value, r, tc.want)
				}
			})
		}
	}
}

// TestDaemonFlagsThatAreBadInputExitTwo: a malformed --health-addr (no
// port, a port above 65535), a broker URL that is no AMQP URL, a reserved
// queue name, an --amqp-heartbeat that is no whole number of seconds, and
// a --task-log-max-bytes out of bounds are
// refused at start with exit 2 and a message that says what is wanted —
// for the log bound, that its 0 turns task logs off (not "the default").
// A well-formed address that cannot be listened on is the start's error
// (exit 1), not a usage error.
func TestDaemonFlagsThatAreBadInputExitTwo(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--health-addr", "nonsense"}, "ffctl: --health-addr \"nonsense\": address nonsense: missing port in address: want host:port (e.g. 127.0.0.1:9101, or :9101 for every interface), or '' to disable\n"},
		{[]string{"--health-addr", "127.0.0.1:99999"}, "ffctl: --health-addr \"127.0.0.1:99999\": port 99999 is above 65535: want host:port (e.g. 127.0.0.1:9101, or :9101 for every interface), or '' to disable\n"},
		{[]string{"--health-addr", "", "--amqp-url", "http://broker.example/"}, "ffctl: --amqp-url, --queue: config: invalid url: scheme \"http\" is not amqp or amqps\n"},
		{[]string{"--health-addr", "", "--queue", "amq.mine"}, "ffctl: --amqp-url, --queue: config: queue name \"amq.mine\" uses the reserved prefix \"amq.\"\n"},
		{[]string{"--health-addr", "", "--amqp-heartbeat", "1500ms"}, "ffctl: broker: --amqp-heartbeat 1.5s (Config.Broker.Heartbeat): must be whole seconds from 1s to 65535s, or 0 for the default (10s)\n"},
		{[]string{"--health-addr", "", "--task-log-max-bytes", "-1"}, "ffctl: worker: --task-log-max-bytes -1 (Config.TaskLogMaxBytes): must be between 1 and 67108864 bytes, or 0 to turn task logs off (default 65536)\n"},
		{[]string{"--health-addr", "", "--task-log-max-bytes", "67108865"}, "ffctl: worker: --task-log-max-bytes 67108865 (Config.TaskLogMaxBytes): must be between 1 and 67108864 bytes, or 0 to turn task logs off (default 65536)\n"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			t.Parallel()
			if r := ffDaemon(t, append([]string{"worker"}, tc.args...)...); r.code != 2 || r.stderr != tc.want {
				t.Fatalf("ffctl daemon worker %s:\n%s\nwant exit 2 and %q", strings.Join(tc.args, " "), r, tc.want)
			}
		})
	}
}

// TestASettingFromTheEnvironmentIsNamedByItsVariable: a daemon setting
// out of bounds that came from its FLOWFORGE_ variable is reported by the
// variable the operator wrote (with the flag and the Config field after
// it); given as a flag, by the flag, even when the variable is set too.
func TestASettingFromTheEnvironmentIsNamedByItsVariable(t *testing.T) {
	t.Setenv("FLOWFORGE_LEASE", "100ms")
	t.Setenv("FLOWFORGE_STOP_TIMEOUT", "0")
	want := "ffctl: worker: FLOWFORGE_LEASE=100ms (--lease, Config.Lease): must be at least 300ms, or 0 for the default (30s)\n"
	if r := ffDaemon(t, "worker", "--health-addr", "", "--stop-timeout", "5s"); r.code != 2 || r.stderr != want {
		t.Errorf("FLOWFORGE_LEASE=100ms:\n%s\nwant exit 2 and %q", r, want)
	}
	want = "ffctl: supervisor: FLOWFORGE_STOP_TIMEOUT=0s (--stop-timeout, Config.StopTimeout): must be positive: how long the first stop signal waits for in-flight tasks before aborting them (default 30s)\n"
	if r := ffDaemon(t, "worker", "--health-addr", ""); r.code != 2 || r.stderr != want {
		t.Errorf("FLOWFORGE_STOP_TIMEOUT=0:\n%s\nwant exit 2 and %q", r, want)
	}
	want = "ffctl: worker: --lease 200ms (Config.Lease): must be at least 300ms, or 0 for the default (30s)\n"
	if r := ffDaemon(t, "worker", "--health-addr", "", "--stop-timeout", "5s", "--lease", "200ms"); r.code != 2 || r.stderr != want {
		t.Errorf("--lease 200ms beside FLOWFORGE_LEASE:\n%s\nwant exit 2 and %q", r, want)
	}
}

// TestADatabaseURLThatDoesNotParseIsBadInput: a command (run list) and a
// daemon given a database URL that does not parse exit 2 at once, with a
// message that never holds the password — a daemon used to retry it for
// ever as an outage, logging the password in the driver's error, and a
// command exited 1 as if the database had not answered.
func TestADatabaseURLThatDoesNotParseIsBadInput(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		url, want string
	}{
		{"mysql://u:secret@db.example/x", "ffctl: --database-url (FLOWFORGE_DATABASE_URL): cannot parse `mysql://u:xxxxxx@db.example/x`: failed to parse as keyword/value (invalid keyword/value)\n"},
		{"host=db.example password=secret junk", "ffctl: --database-url (FLOWFORGE_DATABASE_URL): cannot parse `host=db.example password=xxxxx junk`: failed to parse as keyword/value (invalid keyword/value)\n"},
		{"postgres://u:secret@127.0.0.1:notaport/x", "ffctl: --database-url (FLOWFORGE_DATABASE_URL): cannot parse `postgres://u:xxxxx@127.0.0.1:notaport/x`: invalid port\n"},
	} {
		for _, args := range [][]string{{"run", "list"}, {"daemon", "worker", "--health-addr", ""}} {
			t.Run(tc.url+" "+args[0], func(t *testing.T) {
				t.Parallel()
				r := runFFCTL(t, append([]string{"--database-url", tc.url}, args...)...)
				if r.code != 2 || r.stderr != tc.want || strings.Contains(r.stderr+r.stdout, "secret") {
					t.Fatalf("ffctl --database-url %q %v:\n%s\nwant exit 2 and %q, and no password", tc.url, args, r, tc.want)
				}
			})
		}
	}
}

// TestALogLevelThatIsNoLevelIsBadInput: --log-level (or
// FLOWFORGE_LOG_LEVEL) other than a slog level is exit 2 for every
// command, one that logs nothing included (a trial saw `loud` ignored with
// exit 0).
func TestALogLevelThatIsNoLevelIsBadInput(t *testing.T) {
	t.Parallel()
	const want = "ffctl: --log-level (FLOWFORGE_LOG_LEVEL): \"loud\" is not debug, info, warn or error\n"
	for _, args := range [][]string{{"version"}, {"workflow", "list"}, {"daemon", "worker", "--health-addr", ""}} {
		t.Run(args[0], func(t *testing.T) {
			t.Parallel()
			r := runFFCTL(t, append([]string{"--log-level", "loud"}, args...)...)
			if r.code != 2 || r.stderr != want {
				t.Fatalf("ffctl --log-level loud %v:\n%s\nwant exit 2 and %q", args, r, want)
			}
		})
	}
}
