package e2e

// Health endpoints of the daemons: readiness while a dependency is
// unreachable at start, prompt SIGTERM while connecting, and the metrics the
// failure model relies on.

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/flowforge/flowforge/e2e/harness"
)

// TestDaemonStartingWithoutDependencyIsNotReadyAndStopsPromptly starts each
// role with its database or its broker unreachable (a closed port: nothing
// to break, so no private server is needed). The health server answers at
// once: live 200, ready 503 naming the missing dependency; a scheduler
// without a broker is ready, since it has no broker dependency. SIGTERM
// while the daemon is still connecting ends it with status 0 within 5 s.
func TestDaemonStartingWithoutDependencyIsNotReadyAndStopsPromptly(t *testing.T) {
	s := harness.NewStack(t, harness.StackOptions{})
	closed := harness.FreePort(t) // nothing listens there
	deadDB := fmt.Sprintf("postgres://postgres@127.0.0.1:%d/x?sslmode=disable&connect_timeout=2", closed)
	deadMQ := fmt.Sprintf("amqp://guest:guest@127.0.0.1:%d/", closed)
	cases := []struct {
		role, down string
		wantReady  bool // the role does not depend on what is down
		waitLog    string
	}{
		{"scheduler", "postgres", false, "daemon: database not available; retrying"},
		{"publisher", "postgres", false, "daemon: database not available; retrying"},
		{"worker", "postgres", false, "daemon: database not available; retrying"},
		{"all", "postgres", false, "daemon: database not available; retrying"},
		{"scheduler", "rabbitmq", true, "scheduler: started"},
		{"publisher", "rabbitmq", false, "publisher: connect to broker"},
		{"worker", "rabbitmq", false, "worker: connect to broker"},
		{"all", "rabbitmq", false, "worker: connect to broker"},
	}
	for _, tc := range cases {
		t.Run(tc.role+" without "+tc.down, func(t *testing.T) {
			addr := fmt.Sprintf("127.0.0.1:%d", harness.FreePort(t))
			env := s.Env()
			if tc.down == "postgres" {
				env = append(env, "FLOWFORGE_DATABASE_URL="+deadDB)
			} else {
				env = append(env, "FLOWFORGE_AMQP_URL="+deadMQ)
			}
			p := harness.StartProcess(t, tc.role, s.Bin, []string{"daemon", tc.role, "--health-addr", addr}, env)
			d := &harness.HealthDaemon{Process: p, Health: addr}
			p.WaitForLog(t, tc.waitLog, 20*time.Second)
			if code, _, err := recoveryGet(addr, "/health/live"); err != nil || code != http.StatusOK {
				t.Fatalf("/health/live = %d %v, want 200 while connecting", code, err)
			}
			if tc.wantReady {
				recoveryReadyOK(t, d, 10*time.Second, "postgres")
			} else {
				r := recoveryReadyDown(t, d, 10*time.Second, tc.down)
				if tc.down == "rabbitmq" && r.Checks["postgres"] != "ok" {
					t.Errorf("postgres = %q; only the broker is down", r.Checks["postgres"])
				}
			}
			took := recoveryStopPromptly(t, d)
			t.Logf("%s without %s: stopped %v after SIGTERM", tc.role, tc.down, took.Round(time.Millisecond))
		})
	}
}

// TestMetricsExportFailureModelCounters scrapes each role's /metrics after a
// workflow with a success, a retried failure and a dead task, and checks the
// series the failure model relies on: claimed and finished tasks by state,
// stale writes, outbox backlog and its age, publish outcomes (confirmed,
// nacked, returned...), reconnects and dependency state per dependency,
// the latency histograms each where it is observed, and the task gauges
// and workers seen from the scheduler only. The scheduler exports no
// broker series.
func TestMetricsExportFailureModelCounters(t *testing.T) {
	s := harness.NewStack(t, harness.StackOptions{})
	sched := s.DaemonWithHealth(t, "scheduler", "scheduler")
	pub := s.DaemonWithHealth(t, "publisher", "publisher")
	w := s.DaemonWithHealth(t, "worker", "worker")
	s.Apply(t, `
name: metrics-mix
fail_fast: false
tasks:
  - {name: ok, handler: noop}
  - name: doomed
    handler: fail
    retry: {max_attempts: 2, initial_backoff: 50ms, max_backoff: 50ms}
`)
	id := s.Trigger(t, "metrics-mix")
	harness.Eventually(t, 30*time.Second, "the run to settle", func() (bool, error) {
		r := s.ShowRun(t, id)
		return r.State == "FAILED", fmt.Errorf("state %s", r.State)
	})
	type want struct {
		d     *harness.HealthDaemon
		name  string
		label string // `k="v"`, or empty
		min   float64
	}
	wants := []want{
		{w, "flowforge_tasks_claimed_total", ``, 3},
		{w, "flowforge_tasks_finished_total", `state="SUCCEEDED"`, 1},
		{w, "flowforge_tasks_finished_total", `state="RETRYING"`, 1},
		{w, "flowforge_tasks_finished_total", `state="DEAD"`, 1},
		{w, "flowforge_stale_writes_rejected_total", `op="finish"`, 0},
		{w, "flowforge_stale_writes_rejected_total", `op="renew"`, 0},
		{w, "flowforge_reconnects_total", `dependency="postgres"`, 0},
		{w, "flowforge_reconnects_total", `dependency="rabbitmq"`, 0},
		{w, "flowforge_dependency_up", `dependency="rabbitmq"`, 1},
		{pub, "flowforge_outbox_pending", ``, 0},
		{pub, "flowforge_outbox_oldest_pending_seconds", ``, 0},
		{pub, "flowforge_publish_total", `outcome="confirmed"`, 3},
		{pub, "flowforge_publish_total", `outcome="nacked"`, 0},
		{pub, "flowforge_publish_total", `outcome="returned"`, 0},
		{pub, "flowforge_publish_total", `outcome="timed out"`, 0},
		{pub, "flowforge_reconnects_total", `dependency="rabbitmq"`, 0},
		{pub, "flowforge_dependency_up", `dependency="postgres"`, 1},
		{sched, "flowforge_reconnects_total", `dependency="postgres"`, 0},
		{sched, "flowforge_dependency_up", `dependency="postgres"`, 1},
		{sched, "flowforge_tasks_promoted_total", ``, 1},
		// The latency histograms, each where it is observed: the claims
		// and handlers (three attempts), the first attempts' trigger ->
		// READY, the confirms, and the FAILED run the scheduler settled.
		{w, "flowforge_task_queue_wait_seconds_count", `workflow="metrics-mix"`, 3},
		{w, "flowforge_task_handler_seconds_count", `handler="fail"`, 2},
		{w, "flowforge_trigger_to_ready_seconds_count", `workflow="metrics-mix"`, 2},
		{pub, "flowforge_publish_confirm_seconds_count", `handler="noop"`, 1},
		{sched, "flowforge_run_duration_seconds_count", `state="FAILED"`, 1},
		// The task gauges: the scheduler's process only.
		{sched, "flowforge_tasks", `state="READY"`, 0},
		{sched, "flowforge_workers_seen", ``, 1},
	}
	// The gauges are set by each daemon's dependency watcher, every
	// DependencyWatchInterval: a check made before the worker's consumer
	// was up reads 0 until the next one, however soon the run settled.
	harness.Eventually(t, 30*time.Second, "the dependency gauges and the run's duration to be set", func() (bool, error) {
		for _, x := range wants {
			if x.name != "flowforge_dependency_up" && x.name != "flowforge_run_duration_seconds_count" {
				continue // (the scheduler observes a run just after its settle commits)
			}
			if v, ok, err := harness.Scrape(x.d.Health, x.name, x.label); err != nil || !ok || v < x.min {
				return false, fmt.Errorf("%s: %s{%s} = %v (%v, %v)", x.d.Name, x.name, x.label, v, ok, err)
			}
		}
		return true, nil
	})
	for _, x := range wants {
		v, ok, err := harness.Scrape(x.d.Health, x.name, x.label)
		switch {
		case err != nil:
			t.Fatal(err)
		case !ok:
			t.Errorf("%s does not export %s{%s}", x.d.Name, x.name, x.label)
		case v < x.min:
			t.Errorf("%s: %s{%s} = %v, want >= %v", x.d.Name, x.name, x.label, v, x.min)
		}
	}
	body, err := harness.MetricsText(sched.Health)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(body, `dependency="rabbitmq"`) {
		t.Errorf("the scheduler exports rabbitmq series; it has no broker dependency")
	}
	for _, d := range []*harness.HealthDaemon{pub, w} {
		body, err := harness.MetricsText(d.Health)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(body, "\nflowforge_tasks{") {
			t.Errorf("%s exports flowforge_tasks; only the scheduler's process reads the task gauges", d.Name)
		}
	}
	// Readiness of the scheduler names postgres only.
	recoveryReadyOK(t, sched, 5*time.Second, "postgres")
}
