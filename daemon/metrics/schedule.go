package metrics

import "github.com/prometheus/client_golang/prometheus"

// ScheduleTickOutcomes are the labels of Metrics.ScheduleTicks: the tick
// outcomes a scheduler records (fired, skipped by the overlap policy,
// dropped by a drop-mode pause of the workflow, failed: the run could not
// be created) and missed (dropped by the catch-up policy, never recorded).
func ScheduleTickOutcomes() []string {
	return []string{"fired", "skipped", "dropped", "failed", "missed"}
}

func newScheduleTicks(r *prometheus.Registry) *prometheus.CounterVec {
	c := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "flowforge_schedule_ticks_total",
		Help: labelHelp("Schedule ticks this scheduler decided, by outcome", "outcome", ScheduleTickOutcomes()),
	}, []string{"outcome"})
	r.MustRegister(c)
	for _, o := range ScheduleTickOutcomes() {
		c.WithLabelValues(o)
	}
	return c
}
