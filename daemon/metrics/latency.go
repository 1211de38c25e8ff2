package metrics

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"
)

// The buckets of the latency histograms, seconds. Each spans the range its
// latency lives in on a healthy installation and the range of an incident,
// with about three buckets a decade:
//   - queueWaitBuckets: READY to claimed is milliseconds under light load
//     and grows with a backlog (or flow control's waits) to minutes;
//   - handlerBuckets: a handler runs from a millisecond (noop) to an hour;
//   - runBuckets and triggerToReadyBuckets: a run, and the path to one of
//     its tasks, last from milliseconds to a day (sleeps, waits, retries);
//   - publishConfirmBuckets: a broker confirm takes a millisecond or so,
//     and at most the publisher's confirm timeout (5 s by default).
var (
	queueWaitBuckets      = []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900}
	handlerBuckets        = []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600}
	runBuckets            = []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600, 14400, 86400}
	triggerToReadyBuckets = runBuckets
	publishConfirmBuckets = []float64{0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10}
)

// Latency holds the latency histograms, labelled by workflow and handler
// with each label bounded (LabelBound: at most --metrics-max-label-values
// distinct values per label per process, the rest "other"). Each Observe
// method attaches the exemplar {trace_id} when ctx carries a valid
// OpenTelemetry span context, and observes plainly otherwise. Safe for
// concurrent use.
type Latency struct {
	// QueueWait (flowforge_task_queue_wait_seconds{workflow,handler}) is a
	// task's READY -> claimed, observed by the worker at its claim from
	// the database's clock (the claim's start minus the task's ready_at):
	// it includes the outbox's wait, the broker's and a flow-control wait
	// for admission.
	QueueWait *prometheus.HistogramVec
	// Handler (flowforge_task_handler_seconds{workflow,handler}) is the
	// run time of a handler that ran (not of a result reused for an
	// idempotency key), worker's clock.
	Handler *prometheus.HistogramVec
	// RunDuration (flowforge_run_duration_seconds{workflow,state}) is a
	// run's trigger -> settled (created_at to finished_at, database
	// clock), state SUCCEEDED, FAILED or CANCELLED; observed where the run
	// settles: by the worker whose finish settled a run of one task, by
	// the scheduler's pass for every other run.
	RunDuration *prometheus.HistogramVec
	// PublishConfirm (flowforge_publish_confirm_seconds{handler}) is the
	// publisher's publish -> broker confirm: the time of the batch's
	// PublishBatch (first publish to last confirm), observed once for each
	// row the broker confirmed; a row's own confirm came no later.
	PublishConfirm *prometheus.HistogramVec
	// TriggerToReady (flowforge_trigger_to_ready_seconds{workflow,handler})
	// is run created -> this task READY (the task's ready_at minus its
	// run's created_at, database clock), observed by the worker at the
	// claim of a task's first attempt: the claim already reads both times
	// (no query added), whereas a promotion happens in several statements
	// (the scheduler's pass, the finish's join, the trigger itself) of
	// which only some are the scheduler's. A retry's READY is not observed
	// again: the histogram counts each task once.
	TriggerToReady *prometheus.HistogramVec

	workflows, handlers *LabelBound
}

// newLatency creates the latency histograms on r, bounding the workflow
// and handler labels to maxValues values each.
func newLatency(r *prometheus.Registry, maxValues int) *Latency {
	hist := func(name, help string, buckets []float64, labels ...string) *prometheus.HistogramVec {
		return prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: name, Help: help, Buckets: buckets}, labels)
	}
	l := &Latency{
		QueueWait: hist("flowforge_task_queue_wait_seconds",
			"Seconds from a task's READY to its claim by a worker (database clock), by workflow and handler (each at most --metrics-max-label-values values, the rest \"other\").",
			queueWaitBuckets, "workflow", "handler"),
		Handler: hist("flowforge_task_handler_seconds",
			"Seconds a handler ran (worker clock), by workflow and handler (each at most --metrics-max-label-values values, the rest \"other\").",
			handlerBuckets, "workflow", "handler"),
		RunDuration: hist("flowforge_run_duration_seconds",
			"Seconds from a run's trigger to its settle (database clock), by workflow (at most --metrics-max-label-values values, the rest \"other\") and final state.",
			runBuckets, "workflow", "state"),
		PublishConfirm: hist("flowforge_publish_confirm_seconds",
			"Seconds from the publish of an outbox batch to the broker's last confirm, once per confirmed row, by handler (at most --metrics-max-label-values values, the rest \"other\").",
			publishConfirmBuckets, "handler"),
		TriggerToReady: hist("flowforge_trigger_to_ready_seconds",
			"Seconds from a run's trigger to a task's first READY (database clock), observed at the claim of its first attempt, by workflow and handler (each at most --metrics-max-label-values values, the rest \"other\").",
			triggerToReadyBuckets, "workflow", "handler"),
		workflows: NewLabelBound(maxValues),
		handlers:  NewLabelBound(maxValues),
	}
	r.MustRegister(l.QueueWait, l.Handler, l.RunDuration, l.PublishConfirm, l.TriggerToReady)
	return l
}

// ObserveQueueWait observes d in QueueWait.
func (l *Latency) ObserveQueueWait(ctx context.Context, workflow, handler string, d time.Duration) {
	observe(ctx, l.QueueWait.WithLabelValues(l.workflows.Value(workflow), l.handlers.Value(handler)), d)
}

// ObserveHandler observes d in Handler.
func (l *Latency) ObserveHandler(ctx context.Context, workflow, handler string, d time.Duration) {
	observe(ctx, l.Handler.WithLabelValues(l.workflows.Value(workflow), l.handlers.Value(handler)), d)
}

// ObserveRun observes d in RunDuration; state is the run's final state.
func (l *Latency) ObserveRun(ctx context.Context, workflow, state string, d time.Duration) {
	observe(ctx, l.RunDuration.WithLabelValues(l.workflows.Value(workflow), state), d)
}

// ObservePublishConfirm observes d in PublishConfirm.
func (l *Latency) ObservePublishConfirm(ctx context.Context, handler string, d time.Duration) {
	observe(ctx, l.PublishConfirm.WithLabelValues(l.handlers.Value(handler)), d)
}

// ObserveTriggerToReady observes d in TriggerToReady.
func (l *Latency) ObserveTriggerToReady(ctx context.Context, workflow, handler string, d time.Duration) {
	observe(ctx, l.TriggerToReady.WithLabelValues(l.workflows.Value(workflow), l.handlers.Value(handler)), d)
}

// observe observes d in seconds (a negative d, clocks apart, as 0), with
// the exemplar {trace_id} when ctx carries a valid span context.
func observe(ctx context.Context, o prometheus.Observer, d time.Duration) {
	v := max(d, 0).Seconds()
	if sc := trace.SpanContextFromContext(ctx); sc.IsValid() {
		if eo, ok := o.(prometheus.ExemplarObserver); ok {
			eo.ObserveWithExemplar(v, prometheus.Labels{"trace_id": sc.TraceID().String()})
			return
		}
	}
	o.Observe(v)
}
