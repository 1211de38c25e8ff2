// Package tracing is FlowForge's OpenTelemetry tracing: the setup of a
// process's tracer provider from the standard environment variables
// (Setup), the W3C trace context a run carries from its trigger to every
// dispatch (Traceparent, Parent, FromHeader), and the span names and
// attribute keys every process uses.
//
// One trace per run. The trigger (ffctl run trigger, the HTTP API's, the
// Go client's) starts the span flowforge.trigger, continuing the caller's
// trace when its context (or the API request's traceparent header) has
// one, and stores the span's traceparent on the run. Every dispatch
// message of the run carries it (core.Dispatch.Traceparent), so the
// scheduler's flowforge.promote, the publisher's flowforge.publish and the
// worker's flowforge.claim, flowforge.handler and flowforge.finish are
// children of the trigger's span, whichever process records them. The
// handler's context carries its span: a handler's own spans nest under
// flowforge.handler.
//
// Off by default: with OTEL_TRACES_EXPORTER unset (or none) the provider is
// OpenTelemetry's no-op one, a trigger stores no traceparent, the messages
// carry none, and the daemons, which start spans only for a message that
// carries one, do nothing per task.
//
// No global is set: the provider is passed to whoever records spans, and
// the W3C propagator is used directly (propagation.TraceContext), so an
// application embedding the client keeps its own global propagator.
package tracing
