package publisher

import (
	"context"
	"strconv"

	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/flowforge/flowforge/core"
	"github.com/flowforge/flowforge/core/broker"
	"github.com/flowforge/flowforge/core/store"
	"github.com/flowforge/flowforge/core/tracing"
)

// publishSpans are the flowforge.publish spans of a batch's traced rows
// (those whose dispatch carries a traceparent), by the row's index in the
// batch: each from before the batch is sent to the broker's answer (its
// confirm), a child of the run's trace. A batch without a traced row
// holds nothing and costs nothing.
type publishSpans struct {
	at    []int
	spans []trace.Span
}

// start starts the span of row r, the i-th of the batch; a row whose
// traceparent is malformed, or whose payload is not a dispatch, is not
// traced.
func (s *publishSpans) start(tracer trace.Tracer, i int, r store.OutboxRow, traceparent string) {
	parent, ok := tracing.Parent(context.Background(), traceparent)
	if !ok {
		return
	}
	d, err := core.DecodeDispatch(r.Payload)
	if err != nil {
		return
	}
	_, span := tracer.Start(parent, tracing.SpanPublish, trace.WithSpanKind(trace.SpanKindProducer), trace.WithAttributes(
		tracing.AttrRunID.String(d.RunID.String()),
		tracing.AttrTaskRunID.String(d.TaskRunID.String()),
		tracing.AttrTask.String(d.Task),
		tracing.AttrHandler.String(d.Handler),
		tracing.AttrFencingToken.Int64(d.FencingToken),
		tracing.AttrOutboxID.String(strconv.FormatInt(r.ID, 10)),
		tracing.AttrPublishAttempts.Int(r.Attempts+1),
	))
	s.at = append(s.at, i)
	s.spans = append(s.spans, span)
}

// end ends every span with its row's outcome (outcomes by batch index:
// broker.Confirmed, or what kept the row from it).
func (s *publishSpans) end(outcomes []broker.Outcome, pubErr error) {
	for k, span := range s.spans {
		o := broker.NotSent
		if i := s.at[k]; i < len(outcomes) {
			o = outcomes[i]
		}
		span.SetAttributes(tracing.AttrPublishOutcome.String(o.String()))
		if o != broker.Confirmed {
			if pubErr != nil {
				span.RecordError(pubErr)
			}
			span.SetStatus(codes.Error, o.String())
		}
		span.End()
	}
}
