package worker

import (
	"context"
	"encoding/json"
	"log/slog"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/flowforge/flowforge/core"
	"github.com/flowforge/flowforge/core/store"
	"github.com/flowforge/flowforge/core/tracing"
)

// The worker's spans (package tracing): flowforge.claim, from the
// delivery's arrival to its claim's answer, then flowforge.handler around
// the handler (its context carries the span) and flowforge.finish around
// recording the outcome, each a child of the dispatch's traceparent (the
// run's trace). A delivery without a traceparent, or with a malformed one,
// starts no span: an untraced run costs nothing here.

// noSpan is the span of an untraced delivery: every method does nothing.
var noSpan = trace.SpanFromContext(context.Background())

// traceParent returns the span context of disp's traceparent, the parent
// of the delivery's spans; an invalid one (the zero value) when it has
// none or a malformed one.
func traceParent(disp core.Dispatch) trace.SpanContext {
	if disp.Traceparent == "" {
		return trace.SpanContext{}
	}
	ctx, ok := tracing.Parent(context.Background(), disp.Traceparent)
	if !ok {
		return trace.SpanContext{}
	}
	return trace.SpanContextFromContext(ctx)
}

// startSpan starts the span name as a child of parent, at start when it is
// not zero; noSpan when parent is invalid (the delivery is not traced).
func (w *Worker) startSpan(parent trace.SpanContext, name string, start time.Time, attrs ...attribute.KeyValue) trace.Span {
	if !parent.IsValid() {
		return noSpan
	}
	opts := []trace.SpanStartOption{trace.WithAttributes(attrs...), trace.WithSpanKind(trace.SpanKindConsumer)}
	if !start.IsZero() {
		opts = append(opts, trace.WithTimestamp(start))
	}
	_, span := w.tracer.Start(trace.ContextWithRemoteSpanContext(context.Background(), parent), name, opts...)
	return span
}

// startClaimSpan starts p's claim span at its arrival, with the
// attributes its dispatch gives; noSpan when p is not traced.
func (w *Worker) startClaimSpan(p pendingDelivery) trace.Span {
	if !p.parent.IsValid() {
		return noSpan
	}
	return w.startSpan(p.parent, tracing.SpanClaim, p.arrived,
		tracing.AttrRunID.String(p.disp.RunID.String()),
		tracing.AttrTaskRunID.String(p.disp.TaskRunID.String()),
		tracing.AttrTask.String(p.disp.Task),
		tracing.AttrHandler.String(p.disp.Handler),
		tracing.AttrFencingToken.Int64(p.disp.FencingToken))
}

// startAttemptSpan starts the span name (flowforge.handler or
// flowforge.finish) of claimed attempt c; noSpan when it is not traced.
func (w *Worker) startAttemptSpan(parent trace.SpanContext, name string, c store.ClaimedTask) trace.Span {
	if !parent.IsValid() {
		return noSpan
	}
	return w.startSpan(parent, name, time.Time{}, claimedAttrs(c)...)
}

// claimedAttrs are the attributes of a claimed attempt's spans.
func claimedAttrs(c store.ClaimedTask) []attribute.KeyValue {
	return []attribute.KeyValue{
		tracing.AttrRunID.String(c.RunID.String()),
		tracing.AttrTaskRunID.String(c.ID.String()),
		tracing.AttrTask.String(c.TaskName),
		tracing.AttrWorkflow.String(c.Workflow),
		tracing.AttrAttempt.Int(c.Attempt),
		tracing.AttrHandler.String(c.Handler),
		tracing.AttrFencingToken.Int64(c.FencingToken),
	}
}

// endClaimSpan ends a delivery's claim span with what the claim answered:
// won (the claimed attempt's attributes) or lost (why).
func endClaimSpan(span trace.Span, c store.ClaimedTask, won bool, lost string) {
	if !span.IsRecording() {
		return
	}
	if won {
		span.SetAttributes(claimedAttrs(c)...)
	} else {
		span.SetAttributes(tracing.AttrClaimLost.String(lost))
	}
	span.End()
}

// endFinishSpan ends an attempt's finish span with the state it recorded,
// or the error or fencing rejection that kept it from recording one.
func endFinishSpan(span trace.Span, state core.TaskState, ok bool, err error) {
	if !span.IsRecording() {
		return
	}
	switch {
	case err != nil:
		span.RecordError(err)
		span.SetStatus(codes.Error, "the outcome was not recorded")
	case !ok:
		span.SetStatus(codes.Error, "stale finish rejected by fencing token")
	default:
		span.SetAttributes(tracing.AttrState.String(string(state)))
	}
	span.End()
}

// endHandlerSpan ends an attempt's handler span with its error, if any.
func endHandlerSpan(span trace.Span, runErr error) {
	if !span.IsRecording() {
		return
	}
	if runErr != nil {
		span.RecordError(runErr)
		span.SetStatus(codes.Error, runErr.Error())
	}
	span.End()
}

// invokeTraced is invoke inside the attempt's flowforge.handler span when
// it is traced: the handler's context carries the span, so the handler's
// own spans nest under it.
func (w *Worker) invokeTraced(ctx context.Context, c store.ClaimedTask, parent trace.SpanContext, log *slog.Logger) (json.RawMessage, *store.KeySource, error) {
	span := w.startAttemptSpan(parent, tracing.SpanHandler, c)
	if span.IsRecording() {
		ctx = trace.ContextWithSpan(ctx, span)
	}
	res, from, err := w.invoke(ctx, c, log)
	endHandlerSpan(span, err)
	return res, from, err
}

// finishTraced is finish inside the attempt's flowforge.finish span when
// it is traced.
func (w *Worker) finishTraced(req store.FinishRequest, c store.ClaimedTask, parent trace.SpanContext, log *slog.Logger) (core.TaskState, bool, error) {
	span := w.startAttemptSpan(parent, tracing.SpanFinish, c)
	state, ok, err := w.finish(req, log)
	endFinishSpan(span, state, ok, err)
	return state, ok, err
}
