package supervisor_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/flowforge/flowforge/core"
	"github.com/flowforge/flowforge/core/broker"
	"github.com/flowforge/flowforge/core/store"
	"github.com/flowforge/flowforge/core/store/storetest"
	"github.com/flowforge/flowforge/daemon/supervisor"
	"github.com/flowforge/flowforge/daemon/worker"
)

// TestStopTimeoutAbortsInFlightHandlersAsHardDoes: with a handler running
// and no second signal (Hard never closed), the graceful stop waits
// Config.StopTimeout and then cancels the handler with worker.ErrAborted,
// as closing Hard does; Run returns nil.
func TestStopTimeoutAbortsInFlightHandlersAsHardDoes(t *testing.T) {
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
	const limit = time.Second
	cfg := supervisor.Config{Role: supervisor.RoleAll, DatabaseURL: dbURL, Broker: broker.Config{URLs: []string{url}, Queue: queue}, StopTimeout: limit}
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
	stopping := time.Now()
	r.stop()
	select {
	case err := <-stopped:
		if d := time.Since(stopping); err != worker.ErrAborted || d < limit {
			t.Fatalf("the handler's cause %v after %s; want worker.ErrAborted no sooner than the stop timeout (%s)", err, d, limit)
		}
	case <-time.After(limit + 10*time.Second):
		t.Fatalf("the stop timeout did not cancel the handler\n%s", r.logs)
	}
	if err := r.wait(t); err != nil {
		t.Fatalf("Run after the stop timeout: %v", err)
	}
	recs := r.logs.records("daemon: stop timeout passed; aborting in-flight tasks (as on a second signal)")
	if len(recs) != 1 || recs[0]["stop_timeout"] != "1s" {
		t.Fatalf("the stop timeout is not logged once with its value: %v\n%s", recs, r.logs)
	}
	if len(r.logs.records("daemon: second signal; aborting in-flight tasks")) != 0 {
		t.Fatalf("a second signal is logged without one\n%s", r.logs)
	}
}
