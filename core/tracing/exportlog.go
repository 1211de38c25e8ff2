package tracing

import (
	"context"
	"log/slog"
	"sync"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// loggedExporter reports its exporter's failures on the process's own
// logger, once when exports start failing and once when they succeed
// again (a collector that is down fails every batch, every few seconds),
// and returns nil to the batch span processor: the SDK would otherwise
// hand the error to OpenTelemetry's global error handler, which prints it
// in the standard library's log format beside the daemon's JSON lines.
// The spans of a failed batch are dropped (the SDK retries none either).
type loggedExporter struct {
	sdktrace.SpanExporter
	name string
	log  *slog.Logger

	mu      sync.Mutex
	failing bool
	dropped int // spans dropped since exports started failing
}

// ExportSpans exports spans through the wrapped exporter; see
// loggedExporter.
func (e *loggedExporter) ExportSpans(ctx context.Context, spans []sdktrace.ReadOnlySpan) error {
	err := e.SpanExporter.ExportSpans(ctx, spans)
	e.mu.Lock()
	defer e.mu.Unlock()
	switch {
	case err != nil && !e.failing:
		e.failing, e.dropped = true, len(spans)
		e.log.Warn("tracing: exporting spans failed; they are dropped until it works again (logged once)", "exporter", e.name, "err", err.Error(), "spans", len(spans))
	case err != nil:
		e.dropped += len(spans)
	case e.failing:
		e.log.Info("tracing: exporting spans works again", "exporter", e.name, "spans_dropped", e.dropped)
		e.failing, e.dropped = false, 0
	}
	return nil
}
