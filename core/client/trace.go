package client

import (
	"context"

	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/flowforge/flowforge/core/store"
	"github.com/flowforge/flowforge/core/tracing"
)

// startTrigger starts the trigger's flowforge.trigger span, a child of the
// span ctx carries (the caller's trace) if any, and sets req's traceparent
// to it: the run's trace. With the no-op provider and no span in ctx the
// traceparent stays empty and the run is not traced; with the no-op
// provider and the caller's span, the run continues the caller's trace.
func (c *Client) startTrigger(ctx context.Context, req *store.TriggerRequest) (context.Context, trace.Span) {
	ctx, span := c.tracer.Start(ctx, tracing.SpanTrigger, trace.WithSpanKind(trace.SpanKindProducer),
		trace.WithAttributes(tracing.AttrWorkflow.String(req.Workflow)))
	req.Traceparent = tracing.Traceparent(ctx)
	return ctx, span
}

// endTrigger ends a trigger's span with the run it made, or its error.
func endTrigger(span trace.Span, res store.TriggerResult, err error) {
	if span.IsRecording() {
		if err != nil {
			span.RecordError(err)
			span.SetStatus(codes.Error, err.Error())
		} else {
			span.SetAttributes(tracing.AttrRunID.String(res.RunID.String()), tracing.AttrRunExisting.Bool(res.Existing))
		}
	}
	span.End()
}
