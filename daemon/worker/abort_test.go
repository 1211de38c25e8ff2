package worker

import (
	"go.opentelemetry.io/otel/trace"

	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/flowforge/flowforge/core"
	"github.com/flowforge/flowforge/core/broker"
	"github.com/flowforge/flowforge/core/store"
	"github.com/flowforge/flowforge/daemon/logtest"
)

// TestAnAbortedWorkerRecordsAStuckHandlersAttemptFailedAfterItsGrace: a
// handler that ignores its context (it sleeps on, as a blocking call
// would) kept an aborted worker — a second stop signal, or --stop-timeout
// passed — from ever recording its attempt, so the process waited for it.
// Once aborted, the worker waits AbortGrace for it, then records the
// attempt failed with ErrAborted's message (to be retried) and returns,
// the handler still blocked; a handler that returns within the grace has
// its own outcome recorded.
func TestAnAbortedWorkerRecordsAStuckHandlersAttemptFailedAfterItsGrace(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	started := make(chan struct{}, 1)
	reg := core.NewRegistry()
	reg.MustRegister("stubborn", func(context.Context, core.Task) (json.RawMessage, error) {
		started <- struct{}{}
		<-release // ignores its context
		return json.RawMessage(`{}`), nil
	})
	rec := &finishRecorder{finished: make(chan store.FinishRequest, 1)}
	logs := &logtest.Buffer{}
	const grace = 200 * time.Millisecond
	w, err := New(Config{Store: rec, Renewer: &stopRenewer{}, Broker: broker.Config{URLs: []string{"amqp://127.0.0.1:1/"}},
		Registry: reg, Lease: 5 * time.Second, AbortGrace: grace, Logger: slog.New(slog.NewTextHandler(logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		w.execute(store.ClaimedTask{ID: uuid.New(), RunID: uuid.New(), TaskName: "t", Handler: "stubborn", Attempt: 1, MaxAttempts: 3, FencingToken: 2}, trace.SpanContext{})
	}()
	t.Cleanup(func() {
		close(release) // the stuck handler's goroutine ends with the test
		wg.Wait()
	})
	select {
	case <-started:
	case <-time.After(10 * time.Second):
		t.Fatal("the handler did not start")
	}
	aborted := time.Now()
	w.Abort()
	select {
	case req := <-rec.finished:
		took := time.Since(aborted)
		if req.Outcome != store.OutcomeFailed || !strings.Contains(req.Error, "did not return within 200ms of its cancellation") {
			t.Fatalf("the attempt was recorded %s with %q; want FAILED, the handler not returning named", req.Outcome, req.Error)
		}
		if took < grace {
			t.Fatalf("recorded %s after the abort, before its grace (%s)", took, grace)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("no attempt recorded 10s after the abort (grace %s): the worker waits for a handler that ignores its context\n%s", grace, logs.String())
	}
}
