package metrics

import "github.com/prometheus/client_golang/prometheus"

// TaskLogDropReasons are the labels of Metrics.TaskLogLinesDropped: why a
// worker did not store a line of a task's log. cap: the attempt had used
// its --task-log-max-bytes; buffer: the worker's buffer of unwritten lines
// was full (the database slow or away); stop: the worker stopped and could
// not write what it held. Each drop past the cap or the buffer also leaves
// one marker line in the attempt's log saying how much was dropped.
func TaskLogDropReasons() []string {
	return []string{"cap", "buffer", "stop"}
}

func newTaskLogLinesDropped(r *prometheus.Registry) *prometheus.CounterVec {
	c := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "flowforge_task_log_lines_dropped_total",
		Help: labelHelp("Lines of tasks' logs a worker did not store, by reason", "reason", TaskLogDropReasons()),
	}, []string{"reason"})
	r.MustRegister(c)
	for _, o := range TaskLogDropReasons() {
		c.WithLabelValues(o)
	}
	return c
}
