package scheduler

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/flowforge/flowforge/core"
	"github.com/flowforge/flowforge/core/store"
	"github.com/flowforge/flowforge/core/tracing"
)

// tracePromotions records a flowforge.promote span of each promotion of a
// traced run a pass made (store.AdvanceResult.Traced: nil, and nothing
// done, when no run of the pass is traced), from start (before the pass's
// statement) to now, a child of the run's trace (the traceparent its
// dispatch carries). A promotion whose dispatch cannot be read is not
// traced: a span is never worth an error.
func (s *Scheduler) tracePromotions(traced []store.TracedPromotion, start time.Time) {
	for _, p := range traced {
		d, err := core.DecodeDispatch(p.Dispatch)
		if err != nil {
			continue
		}
		parent, ok := tracing.Parent(context.Background(), d.Traceparent)
		if !ok {
			continue
		}
		_, span := s.tracer.Start(parent, tracing.SpanPromote, trace.WithTimestamp(start), trace.WithAttributes(
			tracing.AttrRunID.String(d.RunID.String()),
			tracing.AttrTaskRunID.String(d.TaskRunID.String()),
			tracing.AttrTask.String(d.Task),
			tracing.AttrHandler.String(d.Handler),
			tracing.AttrAttempt.Int(p.Attempt),
			tracing.AttrFencingToken.Int64(d.FencingToken),
		))
		span.End()
	}
}
