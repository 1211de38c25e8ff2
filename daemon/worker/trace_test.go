package worker

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/flowforge/flowforge/core"
	"github.com/flowforge/flowforge/core/store"
	"github.com/flowforge/flowforge/core/store/storetest"
	"github.com/flowforge/flowforge/core/tracing"
)

// TestATracedDispatchGivesClaimHandlerAndFinishSpansOfTheRunsTrace: a run
// triggered with a traceparent has it in its dispatch (the payload SQL
// copies the run's), and the worker records flowforge.claim,
// flowforge.handler and flowforge.finish as children of it, with the
// task's attributes; the handler's context carries its span, so a span
// the handler starts itself is a child of flowforge.handler. An untraced
// run's dispatch carries no traceparent and the worker records nothing.
func TestATracedDispatchGivesClaimHandlerAndFinishSpansOfTheRunsTrace(t *testing.T) {
	for _, traced := range []bool{true, false} {
		t.Run(map[bool]string{true: "traced", false: "untraced"}[traced], func(t *testing.T) {
			exp := tracetest.NewInMemoryExporter()
			tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
			t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
			reg := core.NewRegistry()
			reg.MustRegister("own", func(ctx context.Context, _ core.Task) (json.RawMessage, error) {
				// A user's own instrumentation, through the span in ctx.
				_, span := trace.SpanFromContext(ctx).TracerProvider().Tracer("user").Start(ctx, "user.work")
				span.End()
				return json.RawMessage(`{}`), nil
			})
			r := newRig(t, reg, func(c *Config) { c.TracerProvider = tp })
			storetest.Apply(t, r.st, "name: traced\ntasks:\n  - {name: a, handler: own}\n")
			req := store.TriggerRequest{Workflow: "traced"}
			var root trace.SpanContext
			if traced {
				ctx, span := tp.Tracer("test").Start(context.Background(), tracing.SpanTrigger)
				root = span.SpanContext()
				req.Traceparent = tracing.Traceparent(ctx)
				span.End()
			}
			res, err := r.st.Trigger(t.Context(), req)
			if err != nil {
				t.Fatal(err)
			}
			r.start()
			if n := r.publish(); n != 1 {
				t.Fatalf("%d dispatches, want 1", n)
			}
			if f := r.awaitFinished(30 * time.Second); f.Err != nil || f.State != core.TaskSucceeded {
				t.Fatalf("finish: %s %v, want SUCCEEDED", f.State, f.Err)
			}
			spans := map[string]tracetest.SpanStub{}
			for _, s := range exp.GetSpans() {
				spans[s.Name] = s
			}
			if !traced {
				if len(spans) != 0 {
					t.Fatalf("an untraced run recorded spans: %v", exp.GetSpans())
				}
				return
			}
			task := r.taskOf(res.RunID, "a")
			for _, name := range []string{tracing.SpanClaim, tracing.SpanHandler, tracing.SpanFinish} {
				s, ok := spans[name]
				if !ok {
					t.Fatalf("no %s span among %v", name, exp.GetSpans())
				}
				if s.Parent.SpanID() != root.SpanID() || s.SpanContext.TraceID() != root.TraceID() {
					t.Fatalf("%s: trace %s parent %s, want trace %s parent %s", name, s.SpanContext.TraceID(), s.Parent.SpanID(), root.TraceID(), root.SpanID())
				}
				want := map[attribute.Key]string{
					tracing.AttrRunID: res.RunID.String(), tracing.AttrTaskRunID: task.ID.String(),
					tracing.AttrTask: "a", tracing.AttrWorkflow: "traced",
				}
				got := map[attribute.Key]string{}
				for _, kv := range s.Attributes {
					got[kv.Key] = kv.Value.Emit()
				}
				for k, v := range want {
					if got[k] != v {
						t.Fatalf("%s: %s = %q, want %q (attributes %v)", name, k, got[k], v, got)
					}
				}
				if got[tracing.AttrAttempt] != "1" {
					t.Fatalf("%s: attempt %q, want 1", name, got[tracing.AttrAttempt])
				}
			}
			if got := spans[tracing.SpanFinish].Attributes; !hasAttr(got, tracing.AttrState.String("SUCCEEDED")) {
				t.Fatalf("finish attributes %v, want state SUCCEEDED", got)
			}
			user, ok := spans["user.work"]
			if !ok || user.Parent.SpanID() != spans[tracing.SpanHandler].SpanContext.SpanID() {
				t.Fatalf("the handler's own span %+v: want a child of flowforge.handler %s", user.Parent, spans[tracing.SpanHandler].SpanContext.SpanID())
			}
		})
	}
}

func hasAttr(attrs []attribute.KeyValue, want attribute.KeyValue) bool {
	for _, kv := range attrs {
		if kv == want {
			return true
		}
	}
	return false
}
