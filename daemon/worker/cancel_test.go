package worker

import (
	"go.opentelemetry.io/otel/trace"

	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"go.uber.org/goleak"

	"github.com/flowforge/flowforge/core"
	"github.com/flowforge/flowforge/core/broker"
	"github.com/flowforge/flowforge/core/store"
	"github.com/flowforge/flowforge/core/store/storetest"
	"github.com/flowforge/flowforge/daemon/logtest"
)

// finishRecorder is the Store of these tests: it records finishes; the
// worker calls nothing else once it runs a claimed task without a key.
type finishRecorder struct {
	Store
	finished chan store.FinishRequest
}

func (s *finishRecorder) FinishMany(_ context.Context, reqs []store.FinishRequest) ([]store.FinishResult, error) {
	out := make([]store.FinishResult, len(reqs))
	for i, req := range reqs {
		s.finished <- req
		out[i] = store.FinishResult{State: core.TaskCancelled, OK: true}
	}
	return out, nil
}

// stopRenewer renews every lease; once stop is set it reports the run
// cancelled (RenewResult.Stop), as the database does after CancelRun.
type stopRenewer struct {
	stop  atomic.Bool
	calls atomic.Int64
}

func (r *stopRenewer) Renew(context.Context, uuid.UUID, int64, time.Duration) (store.RenewResult, error) {
	r.calls.Add(1)
	return store.RenewResult{OK: true, Stop: r.stop.Load()}, nil
}

// cancelRig is a worker running one claimed attempt of a handler that
// blocks until its context is cancelled.
type cancelRig struct {
	w       *Worker
	renewer *stopRenewer
	store   *finishRecorder
	logs    *logtest.Buffer
	task    store.ClaimedTask
	started chan struct{}
}

// newCancelRig builds the worker (its cancel listener pointed at dbURL;
// not started) and starts the attempt; t.Cleanup waits for it to end.
func newCancelRig(t *testing.T, lease time.Duration, dbURL string) *cancelRig {
	t.Helper()
	rig := &cancelRig{
		renewer: &stopRenewer{},
		store:   &finishRecorder{finished: make(chan store.FinishRequest, 1)},
		logs:    &logtest.Buffer{},
		task:    store.ClaimedTask{ID: uuid.New(), RunID: uuid.New(), TaskName: "t", Handler: "block", Attempt: 1, MaxAttempts: 3, FencingToken: 2},
		started: make(chan struct{}),
	}
	reg := core.NewRegistry()
	reg.MustRegister("block", func(ctx context.Context, _ core.Task) (json.RawMessage, error) {
		close(rig.started)
		<-ctx.Done()
		return nil, context.Cause(ctx)
	})
	w, err := New(Config{Store: rig.store, Renewer: rig.renewer, Broker: broker.Config{URLs: []string{"amqp://127.0.0.1:1/"}},
		Registry: reg, Lease: lease, DatabaseURL: dbURL, Logger: slog.New(slog.NewTextHandler(rig.logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	rig.w = w
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		w.execute(rig.task, trace.SpanContext{})
	}()
	t.Cleanup(func() {
		w.Abort() // ends the attempt if a failed test left it running
		wg.Wait()
	})
	select {
	case <-rig.started:
	case <-time.After(10 * time.Second):
		t.Fatal("the handler did not start")
	}
	return rig
}

// awaitCancelled waits up to within for the attempt's finish and checks
// that it was recorded CANCELLED; it returns how long that took.
func (rig *cancelRig) awaitCancelled(t *testing.T, within time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	select {
	case req := <-rig.store.finished:
		if req.Outcome != store.OutcomeCancelled || !strings.Contains(req.Error, "cancelled") {
			t.Fatalf("finish %+v; want CANCELLED through core.ErrRunCancelled", req)
		}
		return time.Since(start)
	case <-time.After(within):
		t.Fatalf("the handler was not cancelled within %v (%d renewals)", within, rig.renewer.calls.Load())
		return 0
	}
}

// verifyNoLeaks checks, after every other cleanup of t, that t left no
// goroutine running.
func verifyNoLeaks(t *testing.T) {
	before := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, before) })
}

// TestHeartbeatCancelsWhenTheCancelListenerCannotConnect: mode 47's
// backstop. The worker's LISTEN connection is refused (it keeps retrying,
// logging "listen: connect"), so no notification can arrive; a cancelled
// run's handler is still cancelled, with core.ErrRunCancelled, by the next
// heartbeat, within Lease/3.
func TestHeartbeatCancelsWhenTheCancelListenerCannotConnect(t *testing.T) {
	verifyNoLeaks(t)
	const lease = 900 * time.Millisecond
	rig := newCancelRig(t, lease, storetest.RefusedURL(t))
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		rig.w.listenForCancels(ctx)
	}()
	defer wg.Wait()
	defer cancel()
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(rig.logs.String(), "listen: connect") {
		if time.Now().After(deadline) {
			t.Fatalf("the cancel listener never tried to connect; logs:\n%s", rig.logs.String())
		}
		time.Sleep(5 * time.Millisecond) // poll interval, not a wait for state
	}
	rig.renewer.stop.Store(true) // the run is cancelled; nobody is told
	took := rig.awaitCancelled(t, lease/3+time.Second)
	t.Logf("cancelled by the heartbeat %v after the cancel (Lease/3 = %v)", took, lease/3)
}

// TestACancelNotificationRenewsAtOnce: a cancel notification for the run
// (by id, for every run, or the "may have missed some" of a reconnect)
// makes the attempt renew at once, and the renewal's Stop flag cancels the
// handler, long before the next heartbeat (10 s with a 30 s lease).
func TestACancelNotificationRenewsAtOnce(t *testing.T) {
	verifyNoLeaks(t)
	cases := []struct {
		name  string
		items func(run uuid.UUID) []string
	}{
		{"the run's id among others", func(run uuid.UUID) []string { return []string{uuid.NewString(), "not-an-id", run.String()} }},
		{"every run", func(uuid.UUID) []string { return []string{store.CancelAllRuns} }},
		{"after a reconnect", func(uuid.UUID) []string { return nil }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			rig := newCancelRig(t, 30*time.Second, "")
			rig.renewer.stop.Store(true)
			rig.w.cancelNotified(c.items(rig.task.RunID))
			took := rig.awaitCancelled(t, 2*time.Second)
			t.Logf("cancelled %v after the notification", took)
		})
	}
}

// TestACancelNotificationChecksOnlyTheNamedRuns: a notification naming run
// A asks A's attempts, and no other run's, to renew; an id that does not
// parse is ignored.
func TestACancelNotificationChecksOnlyTheNamedRuns(t *testing.T) {
	w := &Worker{log: slog.New(slog.DiscardHandler)}
	a, b := uuid.New(), uuid.New()
	hbA1, hbA2, hbB := &heartbeatLoop{check: make(chan struct{}, 1)}, &heartbeatLoop{check: make(chan struct{}, 1)}, &heartbeatLoop{check: make(chan struct{}, 1)}
	w.track(a, hbA1)
	w.track(a, hbA2)
	w.track(b, hbB)
	w.cancelNotified([]string{a.String(), "garbage", ""})
	if len(hbA1.check) != 1 || len(hbA2.check) != 1 || len(hbB.check) != 0 {
		t.Fatalf("checks pending: A %d %d, B %d; want A's two, not B", len(hbA1.check), len(hbA2.check), len(hbB.check))
	}
	w.cancelNotified([]string{a.String()}) // a check already pending: not blocked, not doubled
	if len(hbA1.check) != 1 {
		t.Fatalf("A has %d checks pending, want 1", len(hbA1.check))
	}
	w.untrack(a, hbA1)
	w.untrack(a, hbA2)
	w.untrack(b, hbB)
	if len(w.running) != 0 {
		t.Fatalf("running after untrack: %v", w.running)
	}
}
