package metrics

import "github.com/prometheus/client_golang/prometheus"

// ForeignDispatchOutcomes are the labels of Metrics.ForeignDispatches:
// what a worker did with a dispatch of another installation (mode 89):
// forwarded (a copy confirmed at the tail of the queue, then the original
// acked) or requeued (no copy could be confirmed, or the worker was
// stopping: the original was nacked with requeue). Neither loses it.
func ForeignDispatchOutcomes() []string {
	return []string{"forwarded", "requeued"}
}

func newForeignDispatches(r *prometheus.Registry) *prometheus.CounterVec {
	c := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "flowforge_foreign_dispatches_total",
		Help: labelHelp("Dispatches of another installation (another database) that reached this worker's queue and were sent back to it, by outcome; alert when it grows: two installations share a queue", "outcome", ForeignDispatchOutcomes()),
	}, []string{"outcome"})
	r.MustRegister(c)
	for _, o := range ForeignDispatchOutcomes() {
		c.WithLabelValues(o)
	}
	return c
}
