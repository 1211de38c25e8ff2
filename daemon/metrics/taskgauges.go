package metrics

import (
	"context"
	"strconv"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// TaskGaugeStates are the state labels of flowforge_tasks: the active task
// states. The terminal ones (SUCCEEDED, DEAD, CANCELLED, SKIPPED,
// UPSTREAM_FAILED) grow for ever with the history and are never counted at
// scrape time: their rates are flowforge_tasks_finished_total's.
func TaskGaugeStates() []string {
	return []string{"PENDING", "READY", "RUNNING", "RETRYING"}
}

// TaskGaugeWaits are the kind labels of flowforge_tasks_waiting: READY
// tasks waiting for their flow-control admission (concurrency, rate) and
// RUNNING tasks the scheduler holds without a worker (sleep, wait,
// workflow: a child run).
func TaskGaugeWaits() []string {
	return []string{"concurrency", "rate", "sleep", "wait", "workflow"}
}

// TaskGauges is what a TaskGaugeSource reads: the tasks in each active
// state (keys of TaskGaugeStates), the waiting ones by kind (keys of
// TaskGaugeWaits), each count capped by the source, and the age in
// seconds of the oldest READY task (0 when none).
type TaskGauges struct {
	ByState            map[string]float64
	Waiting            map[string]float64
	OldestReadySeconds float64
	// WorkersSeen is the number of worker processes whose presence
	// heartbeat is recent.
	WorkersSeen float64
}

// TaskGaugeSource reads the task gauges at scrape time (store.TaskGauges).
type TaskGaugeSource func(ctx context.Context) (TaskGauges, error)

// taskGaugeCollector exports the task gauges, refreshed from its source on
// every scrape (bounded by OutboxScrapeTimeout); when the source fails the
// gauges keep their last values.
type taskGaugeCollector struct {
	byState *prometheus.GaugeVec
	waiting *prometheus.GaugeVec
	oldest  prometheus.Gauge
	workers prometheus.Gauge
	mu      sync.Mutex
	src     TaskGaugeSource
}

func (c *taskGaugeCollector) Describe(ch chan<- *prometheus.Desc) {
	c.byState.Describe(ch)
	c.waiting.Describe(ch)
	c.oldest.Describe(ch)
	c.workers.Describe(ch)
}

func (c *taskGaugeCollector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	src := c.src
	c.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), OutboxScrapeTimeout)
	g, err := src(ctx)
	cancel()
	if err == nil {
		for _, s := range TaskGaugeStates() {
			c.byState.WithLabelValues(s).Set(g.ByState[s])
		}
		for _, k := range TaskGaugeWaits() {
			c.waiting.WithLabelValues(k).Set(g.Waiting[k])
		}
		c.oldest.Set(g.OldestReadySeconds)
		c.workers.Set(g.WorkersSeen)
	}
	c.byState.Collect(ch)
	c.waiting.Collect(ch)
	c.oldest.Collect(ch)
	c.workers.Collect(ch)
}

// SetTaskGaugeSource exports, from this process, flowforge_tasks{state},
// flowforge_tasks_waiting{kind}, flowforge_task_oldest_ready_seconds and
// flowforge_workers_seen,
// read from src on every scrape (bounded by OutboxScrapeTimeout); a later
// call replaces src. Only the process that runs the scheduler role calls
// it, so that N workers do not multiply the scrape's queries. capped is
// the source's cap on each count, named in the help.
func (m *Metrics) SetTaskGaugeSource(capped int, src TaskGaugeSource) {
	m.taskOnce.Do(func() {
		note := " Counted at scrape time through the partial index of each active state (never over the history), at most " +
			strconv.Itoa(capped) + " per series: at the cap, the true number is at least that."
		m.taskGauges = &taskGaugeCollector{
			byState: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "flowforge_tasks",
				Help: labelHelp("Tasks in each active state (READY includes those waiting for flow control, RUNNING those the scheduler holds)."+note, "state", TaskGaugeStates())}, []string{"state"}),
			waiting: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "flowforge_tasks_waiting",
				Help: labelHelp("Tasks waiting without a worker: READY for their flow-control admission (concurrency, rate), RUNNING held by the scheduler (sleep, wait, workflow)."+note, "kind", TaskGaugeWaits())}, []string{"kind"}),
			oldest: prometheus.NewGauge(prometheus.GaugeOpts{Name: "flowforge_task_oldest_ready_seconds",
				Help: "Age of the oldest READY task, seconds (database clock; 0 when none), read at scrape time through the partial index of READY tasks."}),
			workers: prometheus.NewGauge(prometheus.GaugeOpts{Name: "flowforge_workers_seen",
				Help: "Worker processes (daemon worker or all) whose presence heartbeat is recent (within the presence lease), read at scrape time; 0: no worker is up."}),
		}
		m.Registry.MustRegister(m.taskGauges)
	})
	m.taskGauges.mu.Lock()
	m.taskGauges.src = src
	m.taskGauges.mu.Unlock()
}
