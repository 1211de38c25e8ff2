package client_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/flowforge/flowforge/core"
	"github.com/flowforge/flowforge/core/client"
	"github.com/flowforge/flowforge/core/store"
	"github.com/flowforge/flowforge/core/store/storetest"
	"github.com/flowforge/flowforge/core/tracing"
)

// TestATriggerStoresItsTraceAndEveryDispatchCarriesIt: the run's
// traceparent is the client's flowforge.trigger span, a child of the
// caller's span when ctx has one; with no provider a caller's span is
// still continued (the run stores it) and without either nothing is
// stored. The root's dispatch (the trigger's statement) and the next
// task's (the finish's promotion) carry the run's traceparent, and an
// untraced run's carry none.
func TestATriggerStoresItsTraceAndEveryDispatchCarriesIt(t *testing.T) {
	f := newFixture(t)
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	traced := client.FromStore(f.s, client.Options{TracerProvider: tp})
	caller := func() (context.Context, trace.SpanContext) {
		ctx, span := tp.Tracer("caller").Start(f.ctx, "request")
		span.End()
		return ctx, span.SpanContext()
	}
	for _, tc := range []struct {
		name       string
		c          *client.Client
		withCaller bool
		inTx       bool
	}{
		{"provider, no caller span", traced, false, false},
		{"provider, caller span", traced, true, false},
		{"provider, caller span, in a transaction", traced, true, true},
		{"no provider, caller span", f.c, true, false},
		{"no provider, no caller span", f.c, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			exp.Reset()
			ctx, parent := f.ctx, trace.SpanContext{}
			if tc.withCaller {
				ctx, parent = caller()
				exp.Reset()
			}
			var res client.TriggerResult
			var err error
			if tc.inTx {
				tx, terr := f.db.BeginTx(ctx, nil)
				if terr != nil {
					t.Fatal(terr)
				}
				if res, err = tc.c.TriggerSQLTx(ctx, tx, "pair", nil, client.TriggerOptions{}); err == nil {
					err = tx.Commit()
				}
			} else {
				res, err = tc.c.Trigger(ctx, "pair", nil, client.TriggerOptions{})
			}
			if err != nil {
				t.Fatal(err)
			}
			stored := runTraceparent(t, f, res.RunID)
			spans := exp.GetSpans()
			var want string
			switch {
			case tc.c == traced:
				if len(spans) != 1 || spans[0].Name != tracing.SpanTrigger || spans[0].Parent.SpanID() != parent.SpanID() {
					t.Fatalf("spans %v: want one flowforge.trigger, child of %s", spans, parent.SpanID())
				}
				want = "00-" + spans[0].SpanContext.TraceID().String() + "-" + spans[0].SpanContext.SpanID().String() + "-01"
				if tc.withCaller && spans[0].SpanContext.TraceID() != parent.TraceID() {
					t.Fatalf("the trigger's trace %s, want the caller's %s", spans[0].SpanContext.TraceID(), parent.TraceID())
				}
			case tc.withCaller:
				want = "00-" + parent.TraceID().String() + "-" + parent.SpanID().String() + "-01"
			}
			if stored != want {
				t.Fatalf("the run's traceparent %q, want %q", stored, want)
			}
			if got := dispatchTraceparent(t, f, res.RunID, "a"); got != want {
				t.Fatalf("the root's dispatch carries %q, want %q", got, want)
			}
			finishRoot(t, f, res.RunID)
			if got := dispatchTraceparent(t, f, res.RunID, "b"); got != want {
				t.Fatalf("the promoted task's dispatch carries %q, want %q", got, want)
			}
		})
	}
}

// runTraceparent reads the run's stored traceparent ("" for NULL).
func runTraceparent(t *testing.T, f *fixture, run uuid.UUID) string {
	t.Helper()
	var tp *string
	if err := f.db.QueryRowContext(f.ctx, `SELECT traceparent FROM workflow_runs WHERE id = $1`, run).Scan(&tp); err != nil {
		t.Fatal(err)
	}
	if tp == nil {
		return ""
	}
	return *tp
}

// dispatchTraceparent decodes the outbox payload of the run's task and
// returns its traceparent.
func dispatchTraceparent(t *testing.T, f *fixture, run uuid.UUID, task string) string {
	t.Helper()
	var body []byte
	if err := f.db.QueryRowContext(f.ctx, `SELECT o.payload FROM outbox o JOIN task_runs t ON t.id = o.task_run_id
	  WHERE t.run_id = $1 AND t.task_name = $2 ORDER BY o.id DESC LIMIT 1`, run, task).Scan(&body); err != nil {
		t.Fatalf("the dispatch of %s: %v", task, err)
	}
	d, err := core.DecodeDispatch(body)
	if err != nil {
		t.Fatal(err)
	}
	return d.Traceparent
}

// finishRoot claims and succeeds the run's task a, which promotes b.
func finishRoot(t *testing.T, f *fixture, run uuid.UUID) {
	t.Helper()
	id := storetest.Task(t, f.s, run, "a").ID
	_, tok, err := f.s.TaskStateOf(f.ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	c, ok := storetest.Claim(t, f.s, id, tok, "w", time.Minute)
	if !ok {
		t.Fatal("claim lost")
	}
	if st, _ := storetest.Finish(t, f.s, store.FinishRequest{ID: id, Token: c.FencingToken, Outcome: store.OutcomeSucceeded, Result: []byte(`{}`)}); st != core.TaskSucceeded {
		t.Fatalf("finish: %s", st)
	}
}
