package metrics

import (
	"context"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"go.opentelemetry.io/otel/trace"
)

// histogram returns the sample of histogram family name whose labels
// are want (name=value), or fails.
func histogram(t *testing.T, m *Metrics, name string, want map[string]string) *dto.Histogram {
	t.Helper()
	mfs, err := m.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	next:
		for _, s := range mf.GetMetric() {
			if len(s.GetLabel()) != len(want) {
				continue
			}
			for _, l := range s.GetLabel() {
				if want[l.GetName()] != l.GetValue() {
					continue next
				}
			}
			return s.GetHistogram()
		}
	}
	t.Fatalf("no %s%v", name, want)
	return nil
}

// exemplars returns the trace_id of every bucket's exemplar of h.
func exemplars(h *dto.Histogram) []string {
	var out []string
	for _, b := range h.GetBucket() {
		if e := b.GetExemplar(); e != nil {
			for _, l := range e.GetLabel() {
				if l.GetName() == "trace_id" {
					out = append(out, l.GetValue())
				}
			}
		}
	}
	return out
}

// TestLatencyHistogramsBoundLabelsAndCarryTraceIDs: each Observe method
// exports its series under the names the docs list, past the bound a new
// workflow or handler is "other" (a value kept stays itself), an
// observation whose context carries a valid span context has the exemplar
// {trace_id}, and one without has none.
func TestLatencyHistogramsBoundLabelsAndCarryTraceIDs(t *testing.T) {
	t.Parallel()
	m := NewBounded(1)
	l := m.Latency
	sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{1, 2, 3}, SpanID: trace.SpanID{4}, TraceFlags: trace.FlagsSampled})
	traced := trace.ContextWithSpanContext(context.Background(), sc)
	plain := context.Background()
	l.ObserveQueueWait(traced, "wf", "noop", 20*time.Millisecond)
	l.ObserveQueueWait(plain, "wf2", "noop", time.Second)
	l.ObserveQueueWait(plain, "wf", "http", time.Second)
	l.ObserveHandler(plain, "wf", "noop", time.Millisecond)
	l.ObserveRun(traced, "wf", "SUCCEEDED", 3*time.Second)
	l.ObservePublishConfirm(plain, "noop", 2*time.Millisecond)
	l.ObserveTriggerToReady(plain, "wf", "noop", -time.Second) // clocks apart: 0

	q := histogram(t, m, "flowforge_task_queue_wait_seconds", map[string]string{"workflow": "wf", "handler": "noop"})
	if q.GetSampleCount() != 1 || q.GetSampleSum() != 0.02 {
		t.Errorf("queue wait wf/noop: count %d sum %v, want 1 and 0.02", q.GetSampleCount(), q.GetSampleSum())
	}
	if got := exemplars(q); len(got) != 1 || got[0] != sc.TraceID().String() {
		t.Errorf("queue wait exemplars %q, want [%s]", got, sc.TraceID())
	}
	// Bound 1: wf2 is a second workflow, http a second handler.
	for _, labels := range []map[string]string{{"workflow": OtherLabelValue, "handler": "noop"}, {"workflow": "wf", "handler": OtherLabelValue}} {
		if o := histogram(t, m, "flowforge_task_queue_wait_seconds", labels); o.GetSampleCount() != 1 {
			t.Errorf("queue wait %v: count %d, want 1", labels, o.GetSampleCount())
		}
	}
	if h := histogram(t, m, "flowforge_task_handler_seconds", map[string]string{"workflow": "wf", "handler": "noop"}); len(exemplars(h)) != 0 {
		t.Errorf("an observation without a span has exemplars %q", exemplars(h))
	}
	if r := histogram(t, m, "flowforge_run_duration_seconds", map[string]string{"workflow": "wf", "state": "SUCCEEDED"}); r.GetSampleSum() != 3 || len(exemplars(r)) != 1 {
		t.Errorf("run duration: sum %v exemplars %q, want 3 and one", r.GetSampleSum(), exemplars(r))
	}
	histogram(t, m, "flowforge_publish_confirm_seconds", map[string]string{"handler": "noop"})
	if r := histogram(t, m, "flowforge_trigger_to_ready_seconds", map[string]string{"workflow": "wf", "handler": "noop"}); r.GetSampleSum() != 0 || r.GetSampleCount() != 1 {
		t.Errorf("trigger to ready of a negative duration: sum %v count %d, want 0 and 1", r.GetSampleSum(), r.GetSampleCount())
	}
}
