package e2e

// Failure model part 2: PostgreSQL and RabbitMQ restart or die under a
// running stack (modes 13, 14, 17). Every test here breaks a PRIVATE server
// started by e2e/harness; the shared services are only used for the
// dependency a test leaves alone.

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/flowforge/flowforge/core/store/storetest"
	"github.com/flowforge/flowforge/e2e/harness"
)

// recoveryChainYAML is a two-task chain: enough to need a promotion and two
// dispatches per run.
const recoveryChainYAML = `
name: recovery-chain
tasks:
  - {name: first, handler: noop}
  - {name: second, handler: sleep, params: {duration: 20ms}, depends_on: [first]}
`

var recoveryHTTP = &http.Client{Timeout: 5 * time.Second}

func recoveryGet(addr, path string) (int, string, error) {
	resp, err := recoveryHTTP.Get("http://" + addr + path)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

// recoveryReadiness is a decoded /health/ready answer.
type recoveryReadiness struct {
	Code   int
	Status string            `json:"status"`
	Checks map[string]string `json:"checks"`
}

func recoveryReady(addr string) (recoveryReadiness, error) {
	code, body, err := recoveryGet(addr, "/health/ready")
	if err != nil {
		return recoveryReadiness{}, err
	}
	var r recoveryReadiness
	if err := json.Unmarshal([]byte(body), &r); err != nil {
		return recoveryReadiness{}, fmt.Errorf("decode %q: %w", body, err)
	}
	r.Code = code
	return r, nil
}

// recoveryWaitReadiness polls d's readiness until cond holds.
func recoveryWaitReadiness(t *testing.T, d *harness.HealthDaemon, timeout time.Duration, what string, cond func(recoveryReadiness) bool) recoveryReadiness {
	t.Helper()
	var last recoveryReadiness
	harness.Eventually(t, timeout, d.Name+" readiness: "+what, func() (bool, error) {
		r, err := recoveryReady(d.Health)
		if err != nil {
			return false, err
		}
		last = r
		if !cond(r) {
			return false, fmt.Errorf("got %d %v", r.Code, r.Checks)
		}
		return true, nil
	})
	return last
}

// recoveryReadyOK waits until d answers 200 and its checks are exactly deps,
// all ok.
func recoveryReadyOK(t *testing.T, d *harness.HealthDaemon, timeout time.Duration, deps ...string) {
	t.Helper()
	recoveryWaitReadiness(t, d, timeout, "200 with "+strings.Join(deps, ", ")+" ok", func(r recoveryReadiness) bool {
		if r.Code != http.StatusOK || r.Status != "ok" || len(r.Checks) != len(deps) {
			return false
		}
		for _, dep := range deps {
			if r.Checks[dep] != "ok" {
				return false
			}
		}
		return true
	})
}

// recoveryReadyDown waits until d answers 503 with dep reported as an error.
func recoveryReadyDown(t *testing.T, d *harness.HealthDaemon, timeout time.Duration, dep string) recoveryReadiness {
	t.Helper()
	return recoveryWaitReadiness(t, d, timeout, "503 with "+dep+" in error", func(r recoveryReadiness) bool {
		return r.Code == http.StatusServiceUnavailable && r.Status == "error" && strings.HasPrefix(r.Checks[dep], "error")
	})
}

// recoveryLog is one JSON log line of a daemon.
type recoveryLog map[string]any

func (l recoveryLog) str(k string) string { s, _ := l[k].(string); return s }

// recoveryLogs returns the JSON log lines of p whose msg is msg (all lines
// when msg is empty).
func recoveryLogs(p *harness.Process, msg string) []recoveryLog {
	var out []recoveryLog
	sc := bufio.NewScanner(strings.NewReader(p.Logs()))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var l recoveryLog
		if json.Unmarshal(sc.Bytes(), &l) != nil {
			continue
		}
		if msg == "" || l.str("msg") == msg {
			out = append(out, l)
		}
	}
	return out
}

// recoveryCountLogs counts p's log lines with message msg whose attributes
// include every key=value of kv.
func recoveryCountLogs(p *harness.Process, msg string, kv ...string) int {
	n := 0
	for _, l := range recoveryLogs(p, msg) {
		ok := true
		for i := 0; i+1 < len(kv); i += 2 {
			if l.str(kv[i]) != kv[i+1] {
				ok = false
			}
		}
		if ok {
			n++
		}
	}
	return n
}

// recoveryWaitLogCount waits until p has logged msg (with kv) at least n
// times.
func recoveryWaitLogCount(t *testing.T, p *harness.Process, timeout time.Duration, n int, msg string, kv ...string) {
	t.Helper()
	harness.Eventually(t, timeout, fmt.Sprintf("%s to log %q %v %d time(s)", p.Name, msg, kv, n), func() (bool, error) {
		if p.Exited() {
			t.Fatalf("%s exited unexpectedly:\n%s", p.Name, p.Logs())
		}
		return recoveryCountLogs(p, msg, kv...) >= n, nil
	})
}

// recoveryAssertAlive fails the test if any process has exited.
func recoveryAssertAlive(t *testing.T, ds ...*harness.HealthDaemon) {
	t.Helper()
	for _, d := range ds {
		if d.Exited() {
			code, _ := d.Wait(0)
			t.Fatalf("%s exited (status %d) but must survive the fault; log tail:\n%s", d.Name, code, d.Logs())
		}
	}
}

// recoveryAssertRanOnce checks that every task of every run SUCCEEDED in
// its first attempt and that the workers, together, started each task
// exactly once (from their "worker: running task" log lines).
func recoveryAssertRanOnce(t *testing.T, s *harness.Stack, runs []string, workers ...*harness.HealthDaemon) {
	t.Helper()
	started := map[string]int{}
	for _, w := range workers {
		for _, l := range recoveryLogs(w.Process, "worker: running task") {
			started[l.str("task_run_id")]++
		}
	}
	for _, id := range runs {
		r := s.ShowRun(t, id)
		if r.State != "SUCCEEDED" {
			t.Errorf("run %s: %s, want SUCCEEDED", id, r.State)
		}
		for _, task := range r.Tasks {
			if task.State != "SUCCEEDED" || task.Attempt != 1 {
				t.Errorf("run %s task %s: %s attempt %d, want SUCCEEDED attempt 1", id, task.Name, task.State, task.Attempt)
			}
			if n := started[task.ID]; n != 1 {
				t.Errorf("run %s task %s (%s) was started %d times by the workers, want exactly 1", id, task.Name, task.ID, n)
			}
		}
	}
}

// recoveryStopPromptly sends SIGTERM and requires a clean exit within 5 s.
func recoveryStopPromptly(t *testing.T, d *harness.HealthDaemon) time.Duration {
	t.Helper()
	start := time.Now()
	if err := d.Signal(syscall.SIGTERM); err != nil {
		t.Fatalf("SIGTERM %s: %v", d.Name, err)
	}
	code, err := d.Wait(5 * time.Second)
	if err != nil {
		t.Fatalf("%s did not exit within 5s of SIGTERM: %v\n%s", d.Name, err, d.Logs())
	}
	if code != 0 {
		t.Fatalf("%s exited %d after SIGTERM, want 0:\n%s", d.Name, code, d.Logs())
	}
	return time.Since(start)
}

// TestPostgresRestartEveryProcessRecoversAndNoTaskIsLostOrRunTwice is mode
// 13: a private PostgreSQL is shut down (fast shutdown) and later crashed
// (SIGKILL of the postmaster and its backends) under a running stack of
// four processes. Each time: every readiness probe reports postgres down
// (503) and comes back (200), no process exits, each logs that it
// recovered, a run triggered after the restart succeeds, and across the
// whole test every task ran exactly once. Workers use pooled connections
// that died with the server: a claim on a reused dead connection would log
// "worker: claim failed", which must never happen.
func TestPostgresRestartEveryProcessRecoversAndNoTaskIsLostOrRunTwice(t *testing.T) {
	pg := harness.StartPostgres(t)
	dbURL := storetest.NewDatabaseOn(t, pg.URL("postgres"))
	s := harness.NewStack(t, harness.StackOptions{DatabaseURL: dbURL})
	sched := s.DaemonWithHealth(t, "scheduler", "scheduler")
	pub := s.DaemonWithHealth(t, "publisher", "publisher")
	wa := s.DaemonWithHealth(t, "worker-a", "worker", "--concurrency", "2")
	wb := s.DaemonWithHealth(t, "worker-b", "worker", "--concurrency", "2")
	all := []*harness.HealthDaemon{sched, pub, wa, wb}
	recoveryReadyOK(t, sched, 20*time.Second, "postgres")
	for _, d := range all[1:] {
		recoveryReadyOK(t, d, 20*time.Second, "postgres", "rabbitmq")
	}
	s.Apply(t, recoveryChainYAML)
	runs := []string{s.Trigger(t, "recovery-chain")}
	s.WaitRuns(t, "SUCCEEDED", 30*time.Second, runs[0])

	faults := []struct {
		name  string
		fault func(testing.TB)
	}{
		{"fast shutdown", pg.Stop},
		{"crash (SIGKILL)", pg.Kill},
	}
	for i, f := range faults {
		t.Logf("fault %d: %s", i+1, f.name)
		outage := time.Now()
		schedFailed := recoveryCountLogs(sched.Process, "scheduler: pass failed")
		pubFailed := recoveryCountLogs(pub.Process, "publisher: cycle failed")
		f.fault(t)
		for _, d := range all {
			r := recoveryReadyDown(t, d, 15*time.Second, "postgres")
			if d == sched {
				if _, ok := r.Checks["rabbitmq"]; ok || len(r.Checks) != 1 {
					t.Errorf("scheduler readiness claims %v; it has no broker dependency", r.Checks)
				}
			} else if r.Checks["rabbitmq"] != "ok" {
				t.Errorf("%s: rabbitmq = %q while only postgres is down", d.Name, r.Checks["rabbitmq"])
			}
		}
		// Keep the server down until every process has noticed: each loop
		// failed against it and each dependency watcher logged the loss.
		recoveryWaitLogCount(t, sched.Process, 20*time.Second, schedFailed+1, "scheduler: pass failed")
		recoveryWaitLogCount(t, pub.Process, 20*time.Second, pubFailed+1, "publisher: cycle failed")
		for _, d := range all {
			recoveryWaitLogCount(t, d.Process, 20*time.Second, i+1, "daemon: dependency lost", "dependency", "postgres")
		}
		pg.Start(t)
		recoveryReadyOK(t, sched, 30*time.Second, "postgres")
		for _, d := range all[1:] {
			recoveryReadyOK(t, d, 30*time.Second, "postgres", "rabbitmq")
		}
		recoveryWaitLogCount(t, sched.Process, 30*time.Second, i+1, "scheduler: recovered")
		recoveryWaitLogCount(t, pub.Process, 30*time.Second, i+1, "publisher: recovered", "dependency", "postgres")
		for _, d := range all {
			recoveryWaitLogCount(t, d.Process, 30*time.Second, i+1, "daemon: dependency recovered", "dependency", "postgres")
		}
		id := s.Trigger(t, "recovery-chain")
		runs = append(runs, id)
		s.WaitRuns(t, "SUCCEEDED", 30*time.Second, id)
		t.Logf("fault %d: outage to recovered run: %v", i+1, time.Since(outage).Round(time.Millisecond))
		recoveryAssertAlive(t, all...)
	}
	// A few more runs back to back: the pools must hold no dead connection.
	for range 3 {
		runs = append(runs, s.Trigger(t, "recovery-chain"))
	}
	for _, id := range runs[len(runs)-3:] {
		s.WaitRuns(t, "SUCCEEDED", 30*time.Second, id)
	}
	recoveryAssertAlive(t, all...)
	recoveryAssertRanOnce(t, s, runs, wa, wb)
	for _, w := range []*harness.HealthDaemon{wa, wb} {
		if n := recoveryCountLogs(w.Process, "worker: claim failed; requeueing the delivery"); n > 0 {
			t.Errorf("%s: %d claims failed after the restart: a dead pooled connection was reused", w.Name, n)
		}
	}
	for _, d := range all {
		if v := harness.Metric(t, d.Health, "flowforge_reconnects_total", `dependency="postgres"`); v < float64(len(faults)) {
			t.Errorf("%s: flowforge_reconnects_total{dependency=\"postgres\"} = %v, want >= %d", d.Name, v, len(faults))
		}
		if v, ok, err := harness.Scrape(d.Health, "flowforge_dependency_up", `dependency="postgres"`); err != nil || !ok || v != 1 {
			t.Errorf("%s: flowforge_dependency_up{dependency=\"postgres\"} = %v (exported %v, %v), want 1", d.Name, v, ok, err)
		}
	}
}

// TestRabbitRestartWorkerAndPublisherReconnectSchedulerUnaffected is mode
// 14: a private RabbitMQ node is stopped under a running stack. Publisher
// and workers report 503 (rabbitmq) and the scheduler stays 200 with
// postgres as its only dependency; a run triggered during the outage waits
// in the outbox (the backlog gauge shows it); daemons that get SIGTERM
// during the outage, one that was connected and ones still connecting at
// start, exit within 5 s; when the node is back, publisher and worker log
// that they recovered, re-declare the queue and consume again, and the run
// completes with every task run exactly once.
func TestRabbitRestartWorkerAndPublisherReconnectSchedulerUnaffected(t *testing.T) {
	rabbit := harness.StartRabbit(t, harness.RabbitOptions{})
	s := harness.NewStack(t, harness.StackOptions{AMQPURLs: []string{rabbit.URL()}})
	sched := s.DaemonWithHealth(t, "scheduler", "scheduler")
	pub := s.DaemonWithHealth(t, "publisher", "publisher")
	wa := s.DaemonWithHealth(t, "worker-a", "worker")
	wb := s.DaemonWithHealth(t, "worker-b", "worker")
	recoveryReadyOK(t, sched, 20*time.Second, "postgres")
	for _, d := range []*harness.HealthDaemon{pub, wa, wb} {
		recoveryReadyOK(t, d, 20*time.Second, "postgres", "rabbitmq")
	}
	s.Apply(t, recoveryChainYAML)
	runs := []string{s.Trigger(t, "recovery-chain")}
	s.WaitRuns(t, "SUCCEEDED", 30*time.Second, runs[0])

	rabbit.Stop(t)
	outage := time.Now()
	for _, d := range []*harness.HealthDaemon{pub, wa, wb} {
		r := recoveryReadyDown(t, d, 20*time.Second, "rabbitmq")
		if r.Checks["postgres"] != "ok" {
			t.Errorf("%s: postgres = %q while only the broker is down", d.Name, r.Checks["postgres"])
		}
	}
	recoveryReadyOK(t, sched, 5*time.Second, "postgres")

	during := s.Trigger(t, "recovery-chain")
	runs = append(runs, during)
	harness.Eventually(t, 15*time.Second, "the outbox backlog gauge to show the parked dispatch", func() (bool, error) {
		v := harness.Metric(t, pub.Health, "flowforge_outbox_pending")
		return v >= 1, fmt.Errorf("flowforge_outbox_pending = %v", v)
	})

	// SIGTERM during the outage: a worker that was connected, and a worker
	// and a publisher that are still trying to connect at start.
	wc := s.DaemonWithHealth(t, "worker-c", "worker")
	pub2 := s.DaemonWithHealth(t, "publisher-2", "publisher")
	recoveryWaitLogCount(t, wc.Process, 10*time.Second, 1, "worker: broker not reachable at start; will retry")
	recoveryWaitLogCount(t, pub2.Process, 10*time.Second, 1, "publisher: broker not reachable at start; will retry")
	for _, d := range []*harness.HealthDaemon{wb, wc, pub2} {
		t.Logf("%s stopped %v after SIGTERM during the broker outage", d.Name, recoveryStopPromptly(t, d).Round(time.Millisecond))
	}

	rabbit.Start(t)
	recoveryReadyOK(t, pub, 40*time.Second, "postgres", "rabbitmq")
	recoveryReadyOK(t, wa, 40*time.Second, "postgres", "rabbitmq")
	recoveryWaitLogCount(t, pub.Process, 10*time.Second, 1, "publisher: recovered", "dependency", "rabbitmq")
	recoveryWaitLogCount(t, wa.Process, 10*time.Second, 1, "worker: recovered", "dependency", "rabbitmq")
	s.WaitRuns(t, "SUCCEEDED", 40*time.Second, during)
	t.Logf("broker outage to completed run: %v", time.Since(outage).Round(time.Millisecond))
	after := s.Trigger(t, "recovery-chain")
	runs = append(runs, after)
	s.WaitRuns(t, "SUCCEEDED", 30*time.Second, after)
	if _, consumers, err := s.QueueDepth(s.Queue); err != nil || consumers != 1 {
		t.Errorf("dispatch queue after the restart: %d consumers (err %v), want worker-a alone", consumers, err)
	}

	recoveryAssertAlive(t, sched, pub, wa)
	recoveryAssertRanOnce(t, s, runs, wa, wb)
	// The scheduler never talked to the broker and never noticed.
	for _, l := range recoveryLogs(sched.Process, "") {
		if l.str("level") == "ERROR" || strings.Contains(strings.ToLower(l.str("msg")), "broker") {
			t.Errorf("scheduler was affected by the broker outage: %v", l)
		}
	}
	if _, ok, err := harness.Scrape(sched.Health, "flowforge_reconnects_total", `dependency="rabbitmq"`); err != nil {
		t.Fatal(err)
	} else if ok {
		t.Errorf("scheduler exports a rabbitmq reconnect series; it has no broker dependency")
	}
	for _, d := range []*harness.HealthDaemon{pub, wa} {
		if v := harness.Metric(t, d.Health, "flowforge_reconnects_total", `dependency="rabbitmq"`); v < 1 {
			t.Errorf("%s: flowforge_reconnects_total{dependency=\"rabbitmq\"} = %v, want >= 1", d.Name, v)
		}
	}
	// Reconnect pacing: capped at 30 s and jittered (not a fixed delay).
	var delays []time.Duration
	for _, l := range recoveryLogs(wa.Process, "worker: connect to broker") {
		d, err := time.ParseDuration(l.str("retry_in"))
		if err != nil {
			t.Fatalf("bad retry_in in %v", l)
		}
		delays = append(delays, d)
	}
	if len(delays) < 2 {
		t.Fatalf("worker-a logged %d reconnect attempts during a multi-second outage; want several", len(delays))
	}
	distinct := map[time.Duration]bool{}
	for _, d := range delays {
		if d > 30*time.Second {
			t.Errorf("reconnect delay %v exceeds the 30s cap", d)
		}
		distinct[d] = true
	}
	if len(distinct) < 2 {
		t.Errorf("reconnect delays %v are all equal: no jitter", delays)
	}
}

// TestConfirmedDispatchSurvivesBrokerSIGKILL is mode 17: a dispatch the
// broker confirmed is parked in the quorum queue while no worker runs; the
// publisher is stopped (so nothing can publish it again); the node is
// SIGKILLed and started again; the message is still in the queue and a
// worker started afterwards completes the run in its first attempt.
func TestConfirmedDispatchSurvivesBrokerSIGKILL(t *testing.T) {
	rabbit := harness.StartRabbit(t, harness.RabbitOptions{})
	s := harness.NewStack(t, harness.StackOptions{AMQPURLs: []string{rabbit.URL()}})
	s.DaemonWithHealth(t, "scheduler", "scheduler")
	pub := s.DaemonWithHealth(t, "publisher", "publisher")
	s.Apply(t, `
name: parked
tasks:
  - {name: only, handler: noop}
`)
	id := s.Trigger(t, "parked")
	harness.Eventually(t, 20*time.Second, "the dispatch to be confirmed and parked in the queue", func() (bool, error) {
		st, err := s.Store.OutboxStatus(context.Background())
		if err != nil || st.Pending != 0 {
			return false, fmt.Errorf("outbox %+v err %v", st, err)
		}
		n, _, err := s.QueueDepth(s.Queue)
		return n == 1, fmt.Errorf("queue depth %d err %v", n, err)
	})
	if out := rabbit.Ctl(t, "list_queues", "name", "type", "durable"); !strings.Contains(out, s.Queue+"\tquorum\ttrue") {
		t.Fatalf("dispatch queue is not a durable quorum queue:\n%s", out)
	}
	recoveryStopPromptly(t, pub)

	// RabbitMQ 3.10 writes its registry of quorum-queue servers to disk
	// periodically (every few minutes): a queue declared seconds before a
	// node crash can come back without its Ra server, empty. A dispatch
	// queue in production outlives that window; this test's is seconds
	// old, so it forces the write the broker would have done by itself.
	// (FAILURE_MODEL.md mode 17 lists the window under "Not claimed"; mode
	// 31's redispatch recovers the task even then.)
	rabbit.SyncDurableState(t)
	rabbit.Kill(t)
	rabbit.Start(t)
	harness.Eventually(t, 30*time.Second, "the parked dispatch after the crash", func() (bool, error) {
		n, _, err := s.QueueDepth(s.Queue)
		return n == 1, fmt.Errorf("queue depth %d err %v", n, err)
	})
	if st, err := s.Store.OutboxStatus(context.Background()); err != nil || st.Pending != 0 {
		t.Fatalf("outbox after the crash: %+v %v; the row must have stayed published", st, err)
	}
	w := s.DaemonWithHealth(t, "worker", "worker")
	s.WaitRuns(t, "SUCCEEDED", 30*time.Second, id)
	recoveryAssertRanOnce(t, s, []string{id}, w)
}
