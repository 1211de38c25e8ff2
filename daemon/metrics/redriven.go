package metrics

import "github.com/prometheus/client_golang/prometheus"

// newDispatchesRedriven returns flowforge_dispatches_redriven_total, label
// queue: the dispatch queue (the shared one or a handler's) each copy was
// confirmed in. Its values are bounded by the dispatch queues that exist:
// a copy the broker cannot route goes to the shared queue or stays in the
// dead-letter queue (broker.Publisher.RedriveDeadLetters). A publisher
// exports it once it re-drove something; any increase means a
// delivery-limit applies to the dispatch queues (docs/operating.md, "The
// dead-letter queue policy").
func newDispatchesRedriven(r *prometheus.Registry) *prometheus.CounterVec {
	c := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "flowforge_dispatches_redriven_total",
		Help: "Dispatches a quorum queue's delivery-limit dead-lettered that the publisher sent back to the queue they died in, by that queue; any increase means a delivery-limit applies to the dispatch queues: remove it.",
	}, []string{"queue"})
	r.MustRegister(c)
	return c
}
