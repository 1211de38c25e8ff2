package supervisor_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"go.uber.org/goleak"

	"github.com/flowforge/flowforge/core"
	"github.com/flowforge/flowforge/core/broker"
	"github.com/flowforge/flowforge/core/broker/brokertest"
	"github.com/flowforge/flowforge/core/store"
	"github.com/flowforge/flowforge/core/store/storetest"
	"github.com/flowforge/flowforge/daemon/supervisor"
	"github.com/flowforge/flowforge/daemon/worker"
)

// logs collects a Run's JSON log lines.
type logs struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *logs) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

// records returns the log records whose message is msg.
func (l *logs) records(msg string) []map[string]any {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []map[string]any
	sc := bufio.NewScanner(bytes.NewReader(l.buf.Bytes()))
	for sc.Scan() {
		var rec map[string]any
		if json.Unmarshal(sc.Bytes(), &rec) == nil && rec["msg"] == msg {
			out = append(out, rec)
		}
	}
	return out
}

func (l *logs) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

func (l *logs) logger() *slog.Logger {
	return slog.New(slog.NewJSONHandler(l, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// eventually polls cond until it holds or within has passed.
func eventually(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", within, what)
		}
		time.Sleep(20 * time.Millisecond) // poll interval, not a wait for state
	}
}

// noLeaks checks, after every other cleanup of t, that t left no
// goroutine running. The test must not run in parallel.
func noLeaks(t *testing.T) {
	t.Helper()
	before := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, before) })
}

// amqpURL returns the test broker's URL, skipping the test when it does
// not answer (failing it under CI), and a throwaway dispatch queue name,
// deleted with its dead-letter queue when the test ends.
func amqpURL(t *testing.T) (url, queue string) {
	t.Helper()
	url = os.Getenv("FLOWFORGE_TEST_AMQP_URL")
	if url == "" {
		url = "amqp://guest:guest@127.0.0.1:5672/"
	}
	conn, err := amqp.DialConfig(url, amqp.Config{Dial: amqp.DefaultDial(2 * time.Second)})
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("broker not reachable: %v", err)
		}
		t.Skipf("broker not reachable: %v", err)
	}
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	queue = "fftest.supervisor." + hex.EncodeToString(b)
	t.Cleanup(func() {
		defer conn.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = broker.DeleteTopology(ctx, broker.Config{URLs: []string{url}, Queue: queue, Handlers: brokertest.Handlers()})
	})
	return url, queue
}

// running is a Run in progress.
type running struct {
	logs *logs
	done chan error
	stop context.CancelFunc
}

// start runs a Supervisor of cfg (its Logger replaced) until the test ends
// or stop is called.
func start(t *testing.T, cfg supervisor.Config) *running {
	t.Helper()
	r := &running{logs: &logs{}, done: make(chan error, 1)}
	cfg.Logger = r.logs.logger()
	s, err := supervisor.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r.stop = cancel
	go func() { r.done <- s.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		r.wait(t)
	})
	return r
}

// wait returns Run's error, failing the test when Run does not return
// within 20 s.
func (r *running) wait(t *testing.T) error {
	t.Helper()
	select {
	case err := <-r.done:
		r.done <- err // for the next wait
		return err
	case <-time.After(20 * time.Second):
		t.Fatalf("Run did not return within 20 s of its stop\n%s", r.logs)
		return nil
	}
}

// healthAddr is the address the Run's health server listens on.
func (r *running) healthAddr(t *testing.T) string {
	t.Helper()
	var addr string
	eventually(t, 20*time.Second, "the health server", func() bool {
		recs := r.logs.records("daemon: health server listening")
		if len(recs) == 0 {
			return false
		}
		addr, _ = recs[0]["addr"].(string)
		return true
	})
	return addr
}

func get(addr, path string) int {
	c := http.Client{Timeout: 2 * time.Second}
	resp, err := c.Get("http://" + addr + path)
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

// TestRunStopsWhenCtxEndsAndLeavesNoGoroutine: a process of each role
// comes up (ready, its presence recorded), and once its ctx ends Run
// returns nil with every goroutine it started joined: the loops, the
// watchers, the heartbeat, the health server and the LISTEN connections.
func TestRunStopsWhenCtxEndsAndLeavesNoGoroutine(t *testing.T) {
	for _, role := range supervisor.Roles() {
		t.Run(string(role), func(t *testing.T) {
			st, dbURL := storetest.New(t)
			cfg := supervisor.Config{Role: role, ID: "sup-" + string(role), DatabaseURL: dbURL, HealthAddr: "127.0.0.1:0"}
			if role == supervisor.RoleAPI || role == supervisor.RoleAll {
				cfg.API.Listen = "127.0.0.1:0" // all serves the API too
			}
			if role != supervisor.RoleScheduler && role != supervisor.RoleAPI {
				url, queue := amqpURL(t)
				cfg.Broker = broker.Config{URLs: []string{url}, Queue: queue}
			}
			noLeaks(t)
			r := start(t, cfg)
			addr := r.healthAddr(t)
			eventually(t, 20*time.Second, "/health/ready 200", func() bool { return get(addr, "/health/ready") == http.StatusOK })
			eventually(t, 20*time.Second, "the presence row", func() bool {
				ws, err := st.ListWorkers(t.Context(), time.Minute)
				return err == nil && slices.ContainsFunc(ws, func(w store.Worker) bool { return w.ID == cfg.ID && w.Role == string(role) })
			})
			if n := len(r.logs.records("daemon: started")); n != 1 {
				t.Fatalf("%d 'daemon: started' lines\n%s", n, r.logs)
			}
			r.stop()
			if err := r.wait(t); err != nil {
				t.Fatalf("Run after its ctx ended: %v", err)
			}
			if n := len(r.logs.records("daemon: stopped")); n != 1 {
				t.Fatalf("%d 'daemon: stopped' lines\n%s", n, r.logs)
			}
			if get(addr, "/health/live") != 0 {
				t.Fatal("the health server still answers after Run returned")
			}
		})
	}
}

// TestRunRetriesAnUnreachableDatabaseUntilStopped: PostgreSQL does not
// answer at start (a closed port). The process does not give up: it
// serves /health/live, reports /health/ready 503, retries with backoff,
// and returns nil as soon as its ctx ends, leaving no goroutine behind.
func TestRunRetriesAnUnreachableDatabaseUntilStopped(t *testing.T) {
	noLeaks(t)
	r := start(t, supervisor.Config{Role: supervisor.RoleScheduler, DatabaseURL: storetest.RefusedURL(t), HealthAddr: "127.0.0.1:0"})
	addr := r.healthAddr(t)
	eventually(t, 20*time.Second, "three retries", func() bool {
		return len(r.logs.records("daemon: database not available; retrying")) >= 3
	})
	if code := get(addr, "/health/live"); code != http.StatusOK {
		t.Fatalf("/health/live while connecting: %d, want 200", code)
	}
	if code := get(addr, "/health/ready"); code != http.StatusServiceUnavailable {
		t.Fatalf("/health/ready while connecting: %d, want 503", code)
	}
	stopped := time.Now()
	r.stop()
	if err := r.wait(t); err != nil {
		t.Fatalf("Run stopped while connecting: %v, want nil", err)
	}
	if d := time.Since(stopped); d > 5*time.Second {
		t.Fatalf("Run returned %s after its stop, want promptly", d)
	}
	if n := len(r.logs.records("daemon: started")); n != 0 {
		t.Fatal("'daemon: started' logged without a database")
	}
}

// TestRunFailsAtOnceOnAHealthAddressInUse: an address the operator chose
// is strict (HealthFallback false): taken, Run fails naming it before it
// reaches anything; with HealthFallback it listens on a free port.
func TestRunFailsAtOnceOnAHealthAddressInUse(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	noLeaks(t)
	cfg := supervisor.Config{Role: supervisor.RoleScheduler, DatabaseURL: storetest.RefusedURL(t), HealthAddr: l.Addr().String()}
	r := start(t, cfg)
	if err := r.wait(t); err == nil || !strings.Contains(err.Error(), l.Addr().String()) || !strings.Contains(err.Error(), "--health-addr") {
		t.Fatalf("Run on a taken health address: %v", err)
	}
	cfg.HealthFallback = true
	r = start(t, cfg)
	if addr := r.healthAddr(t); addr == l.Addr().String() || get(addr, "/health/live") != http.StatusOK {
		t.Fatalf("fallback address %s", addr)
	}
	if len(r.logs.records("daemon: default health port in use; listening on a free port (set --health-addr to choose one)")) != 1 {
		t.Fatalf("the fallback is not logged\n%s", r.logs)
	}
}

// TestHardStopAbortsInFlightHandlers: the two-stage stop. With a task's
// handler running, ctx ending drains (the handler keeps running and Run
// waits for it); closing Hard then cancels the handler with
// worker.ErrAborted, and Run returns nil.
func TestHardStopAbortsInFlightHandlers(t *testing.T) {
	st, dbURL := storetest.New(t)
	url, queue := amqpURL(t)
	noLeaks(t)
	started := make(chan struct{})
	stopped := make(chan error, 1)
	reg := core.NewRegistry()
	reg.MustRegister("block", func(ctx context.Context, _ core.Task) (json.RawMessage, error) {
		close(started)
		<-ctx.Done()
		stopped <- context.Cause(ctx)
		return nil, context.Cause(ctx)
	})
	def, err := core.ParseDefinition([]byte("name: blocked\ntasks:\n  - {name: a, handler: block}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := st.ApplyWorkflow(t.Context(), def); err != nil {
		t.Fatal(err)
	}
	hard := make(chan struct{})
	cfg := supervisor.Config{Role: supervisor.RoleAll, DatabaseURL: dbURL, Broker: broker.Config{URLs: []string{url}, Queue: queue}, Hard: hard}
	cfg.Worker.Registry = reg
	cfg.Worker.Lease = 5 * time.Second
	r := start(t, cfg)
	if _, err := st.Trigger(t.Context(), store.TriggerRequest{Workflow: "blocked"}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-started:
	case <-time.After(30 * time.Second):
		t.Fatalf("the handler never started\n%s", r.logs)
	}
	r.stop()
	eventually(t, 10*time.Second, "the graceful stop", func() bool {
		return len(r.logs.records("daemon: stopping gracefully (signal again to abort in-flight tasks)")) == 1
	})
	select {
	case err := <-stopped:
		t.Fatalf("the graceful stop cancelled the handler: %v", err)
	case err := <-r.done:
		t.Fatalf("Run returned (%v) with a handler in flight", err)
	default:
	}
	close(hard)
	select {
	case err := <-stopped:
		if err != worker.ErrAborted {
			t.Fatalf("the handler's cause: %v, want worker.ErrAborted", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("closing Hard did not cancel the handler\n%s", r.logs)
	}
	if err := r.wait(t); err != nil {
		t.Fatalf("Run after the hard stop: %v", err)
	}
	if len(r.logs.records("daemon: second signal; aborting in-flight tasks")) != 1 {
		t.Fatalf("the hard stop is not logged\n%s", r.logs)
	}
}

// TestSignalStop: the first signal cancels ctx with a *SignalError cause,
// the second closes hard, and release joins the goroutine that counts
// them. SIGUSR1 stands in for SIGTERM.
func TestSignalStop(t *testing.T) {
	noLeaks(t)
	ctx, hard, release := supervisor.SignalStop(context.Background(), sigusr1)
	defer release()
	first := time.Now() // before the signal: the window is measured from no later than its arrival
	raise(t)
	select {
	case <-ctx.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the first signal did not cancel ctx")
	}
	want := fmt.Sprint(&supervisor.SignalError{Signal: sigusr1})
	if got := fmt.Sprint(context.Cause(ctx)); got != want {
		t.Fatalf("cause %q, want %q", got, want)
	}
	select {
	case <-hard:
		t.Fatal("hard closed by the first signal")
	default:
	}
	// A duplicate right after the first (a signal sent to the process and
	// to its group) must not abort; a signal SecondSignalAfter later does.
	raise(t)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(10 * time.Second)
	for closed := false; !closed; {
		select {
		case <-hard:
			closed = true
		case <-tick.C:
			raise(t)
		case <-deadline:
			t.Fatal("a second signal did not close hard")
		}
	}
	if d := time.Since(first); d < supervisor.SecondSignalAfter {
		t.Fatalf("hard closed %s after the first signal, by its duplicate; want a second signal at least %s later", d, supervisor.SecondSignalAfter)
	}
	release()
}

const sigusr1 = syscall.SIGUSR1

// raise sends this process SIGUSR1.
func raise(t *testing.T) {
	t.Helper()
	if err := syscall.Kill(os.Getpid(), sigusr1); err != nil {
		t.Fatal(err)
	}
}
