package tracing

import (
	"context"
	"net/http"

	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// headerTraceparent is the W3C trace context's header (and carrier key).
const headerTraceparent = "traceparent"

// w3c is the W3C trace-context propagator, used directly rather than
// through otel's global propagator: FlowForge sets no global.
var w3c propagation.TraceContext

// Traceparent returns the W3C traceparent of the span ctx carries
// ("00-<32 hex trace id>-<16 hex span id>-<2 hex flags>"), or "" when ctx
// carries no valid span context.
func Traceparent(ctx context.Context) string {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return ""
	}
	c := propagation.MapCarrier{}
	w3c.Inject(ctx, c)
	return c[headerTraceparent]
}

// Parent returns ctx carrying the remote span context traceparent names,
// the parent of the spans started from it, and true; ctx unchanged and
// false when traceparent is empty or malformed (it is then ignored: a
// message's trace context never fails its work).
func Parent(ctx context.Context, traceparent string) (context.Context, bool) {
	if traceparent == "" {
		return ctx, false
	}
	out := w3c.Extract(ctx, propagation.MapCarrier{headerTraceparent: traceparent})
	if !trace.SpanContextFromContext(out).IsValid() {
		return ctx, false
	}
	return out, true
}

// FromHeader returns ctx carrying the span context of an HTTP request's
// traceparent header (and its tracestate), or ctx unchanged when it has
// none or a malformed one.
func FromHeader(ctx context.Context, h http.Header) context.Context {
	return w3c.Extract(ctx, propagation.HeaderCarrier(h))
}
