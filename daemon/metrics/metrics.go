// Package metrics defines FlowForge's Prometheus metrics. A Metrics value
// owns its own registry (no global state); the health server exposes it at
// /metrics.
package metrics

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/flowforge/flowforge/core"
	"github.com/flowforge/flowforge/core/broker"
)

// OutboxSource reads the outbox backlog (pending rows, age in seconds of
// the oldest pending row) at scrape time.
type OutboxSource func(ctx context.Context) (pending, oldestSeconds float64, err error)

// QuarantinedSource reads the number of quarantined outbox rows at scrape
// time.
type QuarantinedSource func(ctx context.Context) (float64, error)

// OutboxScrapeTimeout bounds the OutboxSource call of one scrape.
const OutboxScrapeTimeout = time.Second

// Metrics holds every collector the daemons update.
type Metrics struct {
	Registry *prometheus.Registry

	// TasksClaimed counts successful claims (READY -> RUNNING).
	TasksClaimed prometheus.Counter
	// TasksFinished counts recorded outcomes by resulting state, one of
	// core.AttemptOutcomes: SUCCEEDED (succeeded), RETRYING (an attempt
	// failed and will be retried), DEAD (failed for good), CANCELLED.
	// Every state is exported from the start (at 0). A worker counts its
	// attempts' outcomes; the scheduler adds the tasks it made DEAD itself
	// (a reaped last attempt, a held task ended DEAD: a wait timed out, a
	// failed child run), so that DEAD counts every task that went DEAD by
	// an attempt's end, whoever recorded it.
	TasksFinished *prometheus.CounterVec
	// HandedBack counts deliveries requeued without a claim, by reason
	// (unknown_handler, no_slot, installation_unknown).
	HandedBack *prometheus.CounterVec
	// ClaimsLost counts deliveries whose claim matched nothing, by reason
	// (duplicate, stale, cancelled, paused, unknown_task, unknown).
	ClaimsLost *prometheus.CounterVec
	// WriteBatchSize observes the rows of each claim and finish statement
	// of the worker, by statement ("claim", "finish").
	WriteBatchSize *prometheus.HistogramVec
	// StaleWrites counts finishes and heartbeats rejected by the fencing
	// token (the lease was lost), by operation (finish, renew).
	StaleWrites *prometheus.CounterVec
	// PoisonMessages counts deliveries that were not valid dispatches,
	// rejected to the dead-letter queue.
	PoisonMessages prometheus.Counter
	// HandlerPanics counts recovered handler panics.
	HandlerPanics prometheus.Counter
	// ResultsRewritten counts successful results the worker had to rewrite
	// to store them, by how (core.ResultNotJSON, ResultReplaced,
	// ResultTruncated); each is noted in its task's history too.
	ResultsRewritten *prometheus.CounterVec
	// LeasesReaped counts expired leases routed to RETRYING or DEAD.
	LeasesReaped prometheus.Counter
	// TasksRedispatched counts READY tasks dispatched again because their
	// confirmed dispatch led to no claim (a lost message).
	TasksRedispatched prometheus.Counter
	// TasksPromoted counts PENDING/RETRYING -> READY promotions.
	TasksPromoted prometheus.Counter
	// TasksSkipped counts PENDING -> SKIPPED decisions of the scheduler (a
	// when that was false, a trigger rule or on_failure that skipped).
	TasksSkipped prometheus.Counter
	// TasksExpanded counts the task runs for_each expansions made (one per
	// element).
	TasksExpanded prometheus.Counter
	// HeldTasksEnded counts the held tasks the scheduler ended: a sleep
	// due, a wait timed out, a child run ended, a wait that started after
	// its event came (an event's delivery to a running wait is its
	// sender's, not counted here).
	HeldTasksEnded prometheus.Counter
	// TasksAdmitted counts the task runs flow control admitted
	// (store.Admit), by kind: "concurrency" (given a slot) and "rate"
	// (given a start within their rate limit).
	TasksAdmitted *prometheus.CounterVec
	// PublishOutcomes counts published outbox rows by outcome, labelled
	// with broker.Outcome.String of one of broker.Outcomes ("confirmed",
	// "nacked", "returned", "timed out", "not sent", "refused"). Every
	// outcome is exported from the start (at 0); the help text lists them.
	PublishOutcomes *prometheus.CounterVec
	// OutboxPending and OutboxOldestSeconds describe the backlog. The
	// publisher refreshes them after its cycles; when an OutboxSource is
	// set (SetOutboxSource) every scrape reads them from the database, so
	// they stay true while the publisher cannot publish (broker down).
	OutboxPending       prometheus.Gauge
	OutboxOldestSeconds prometheus.Gauge
	// PublisherBlocked is 1 while the broker blocks this process's
	// publishing (a memory or disk resource alarm), else 0.
	PublisherBlocked prometheus.Gauge
	// OutboxQuarantined is the number of quarantined outbox rows (refused
	// by the broker for good, waiting for `ffctl outbox retry|drop`): the
	// alert metric of mode 37. Read at scrape time when a
	// QuarantinedSource is set, else refreshed by the publisher.
	OutboxQuarantined prometheus.Gauge
	// OutboxQuarantinedTotal counts rows this process quarantined.
	OutboxQuarantinedTotal prometheus.Counter
	// StreamPending and StreamOldestSeconds describe the transition
	// stream's backlog (rows not yet published, store.StreamStatus),
	// refreshed by a publisher started with an events exchange; 0 in
	// every other process.
	StreamPending       prometheus.Gauge
	StreamOldestSeconds prometheus.Gauge
	// Reconnects counts re-established connections by dependency
	// (postgres, rabbitmq), once per outage, by the loop that noticed it.
	Reconnects *prometheus.CounterVec
	// DependencyUp is 1 while a dependency of this process answers its
	// readiness check and 0 while it does not, by dependency.
	DependencyUp *prometheus.GaugeVec
	// InFlight is the number of handlers running in this process.
	InFlight prometheus.Gauge
	// DBOldestTransactionSeconds, DBXminHorizonSeconds and
	// DBXminHorizonXIDs describe the sessions of the database that hold
	// back VACUUM (store.DBHealth, refreshed by package dbhealth): the age
	// of the oldest open transaction, the age of the oldest one holding
	// the xmin horizon back, and the horizon's lag in transaction ids.
	DBOldestTransactionSeconds prometheus.Gauge
	DBXminHorizonSeconds       prometheus.Gauge
	DBXminHorizonXIDs          prometheus.Gauge
	// DBDeadTuples is n_dead_tup of each hot table, by table.
	DBDeadTuples *prometheus.GaugeVec
	// ScheduleTicks counts schedule ticks by outcome (see ScheduleTickOutcomes).
	ScheduleTicks *prometheus.CounterVec
	// SchedulerOutages counts the scheduler's own losses of the database
	// (a failed pass, or a pass or reap delayed past its outage gap) that
	// granted lapsed leases a lease of grace.
	SchedulerOutages prometheus.Counter
	// LeasesReapedAfterOutage counts reaped leases that had lapsed during
	// such an outage: their attempt was not used up.
	LeasesReapedAfterOutage prometheus.Counter
	// LeasesReapedGivenBack counts reaped leases whose attempt the crash
	// rule gave back: in flight with other tasks of a worker that stopped
	// (store.Reap); each such task is a crash suspect.
	LeasesReapedGivenBack prometheus.Counter
	// AmbiguousWrites counts claims and finishes whose reply was lost (an
	// error after the statement was sent) and were read back, by op
	// (claim, finish) and what the row showed (committed, not_committed).
	AmbiguousWrites *prometheus.CounterVec
	// ForeignDispatches counts dispatches of another installation sent
	// back to the queue, by outcome (see ForeignDispatchOutcomes).
	ForeignDispatches *prometheus.CounterVec
	// TaskLogLinesDropped counts lines of tasks' logs not stored, by
	// reason (see TaskLogDropReasons).
	TaskLogLinesDropped *prometheus.CounterVec
	// DispatchesRedriven counts the dispatches a quorum queue's
	// delivery-limit dead-lettered that the publisher sent back, by the
	// queue the copy went to (mode 138; see redriven.go).
	DispatchesRedriven *prometheus.CounterVec
	// Latency holds the latency histograms (queue wait, handler, run
	// duration, publish confirm, trigger to READY), their workflow and
	// handler labels bounded.
	Latency *Latency

	outboxMu       sync.Mutex
	outboxSrc      OutboxSource
	quarantinedSrc QuarantinedSource

	dlqOnce sync.Once // SetDeadLetterSource registers dlq once
	dlq     *deadLetterCollector

	apiOnce sync.Once // API registers api once
	api     *APIMetrics

	taskOnce   sync.Once // SetTaskGaugeSource registers taskGauges once
	taskGauges *taskGaugeCollector
}

// SetQuarantinedSource makes every scrape refresh OutboxQuarantined from
// src (bounded by OutboxScrapeTimeout). When src fails the gauge keeps its
// last value.
func (m *Metrics) SetQuarantinedSource(src QuarantinedSource) {
	m.outboxMu.Lock()
	m.quarantinedSrc = src
	m.outboxMu.Unlock()
}

// SetOutboxSource makes every scrape refresh OutboxPending and
// OutboxOldestSeconds from src (bounded by OutboxScrapeTimeout). When src
// fails the gauges keep their last value.
func (m *Metrics) SetOutboxSource(src OutboxSource) {
	m.outboxMu.Lock()
	m.outboxSrc = src
	m.outboxMu.Unlock()
}

// outboxCollector exports the outbox gauges, refreshing them first.
type outboxCollector struct{ m *Metrics }

func (c outboxCollector) Describe(ch chan<- *prometheus.Desc) {
	c.m.OutboxPending.Describe(ch)
	c.m.OutboxOldestSeconds.Describe(ch)
	c.m.OutboxQuarantined.Describe(ch)
}

func (c outboxCollector) Collect(ch chan<- prometheus.Metric) {
	c.m.outboxMu.Lock()
	src, qsrc := c.m.outboxSrc, c.m.quarantinedSrc
	c.m.outboxMu.Unlock()
	if qsrc != nil {
		ctx, cancel := context.WithTimeout(context.Background(), OutboxScrapeTimeout)
		n, err := qsrc(ctx)
		cancel()
		if err == nil {
			c.m.OutboxQuarantined.Set(n)
		}
	}
	if src != nil {
		ctx, cancel := context.WithTimeout(context.Background(), OutboxScrapeTimeout)
		pending, oldest, err := src(ctx)
		cancel()
		if err == nil {
			c.m.OutboxPending.Set(pending)
			c.m.OutboxOldestSeconds.Set(oldest)
		}
	}
	c.m.OutboxPending.Collect(ch)
	c.m.OutboxOldestSeconds.Collect(ch)
	c.m.OutboxQuarantined.Collect(ch)
}

// finishedStates are the label values of TasksFinished: the states an
// attempt can end in, which the worker counts (exported at 0 before they
// first happen, so that dashboards and alerts see every series).
func finishedStates() []string {
	var out []string
	for _, s := range core.AttemptOutcomes() {
		out = append(out, string(s))
	}
	return out
}

// publishOutcomes are the label values of PublishOutcomes: the name of
// every broker outcome, which the publisher counts under that name.
func publishOutcomes() []string {
	var out []string
	for _, o := range broker.Outcomes() {
		out = append(out, o.String())
	}
	return out
}

// labelHelp is help followed by the label values a metric is exported
// with: `help (label "a", "b" or "c").`.
func labelHelp(help, label string, values []string) string {
	q := make([]string, len(values))
	for i, v := range values {
		q[i] = strconv.Quote(v)
	}
	list := q[len(q)-1]
	if len(q) > 1 {
		list = strings.Join(q[:len(q)-1], ", ") + " or " + list
	}
	return help + " (" + label + " " + list + ")."
}

// staleWriteOps are the label values of StaleWrites.
var staleWriteOps = []string{"finish", "renew"}

// InitDependencies exports Reconnects (at 0) and DependencyUp (at 0 until
// the first check) for each named dependency of this process.
func (m *Metrics) InitDependencies(deps ...string) {
	for _, d := range deps {
		m.Reconnects.WithLabelValues(d)
		m.DependencyUp.WithLabelValues(d)
	}
}

// New creates the collectors on a fresh registry, with Go and process
// collectors, the latency histograms' labels bounded to
// MaxLabelValuesDefault values each (NewBounded).
func New() *Metrics { return NewBounded(MaxLabelValuesDefault) }

// NewBounded is New with at most maxLabelValues distinct values of each
// workflow and handler label (--metrics-max-label-values; < 1 means
// MaxLabelValuesDefault), the rest exported as "other".
func NewBounded(maxLabelValues int) *Metrics {
	r := prometheus.NewRegistry()
	m := &Metrics{
		Registry:      r,
		TasksClaimed:  prometheus.NewCounter(prometheus.CounterOpts{Name: "flowforge_tasks_claimed_total", Help: "Tasks claimed (READY -> RUNNING)."}),
		TasksFinished: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "flowforge_tasks_finished_total", Help: labelHelp("Attempt outcomes recorded, by resulting task state", "state", finishedStates())}, []string{"state"}),
		HandedBack:    prometheus.NewCounterVec(prometheus.CounterOpts{Name: "flowforge_deliveries_handed_back_total", Help: "Deliveries requeued without a claim, by reason (unknown_handler, no_slot, installation_unknown)."}, []string{"reason"}),
		WriteBatchSize: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "flowforge_worker_batch_rows", Help: "Rows of each claim and finish statement of the worker.",
			Buckets: []float64{1, 2, 4, 8, 16, 32, 64}}, []string{"statement"}),
		ClaimsLost:          prometheus.NewCounterVec(prometheus.CounterOpts{Name: "flowforge_claims_lost_total", Help: "Deliveries whose claim matched no READY row, by reason."}, []string{"reason"}),
		StaleWrites:         prometheus.NewCounterVec(prometheus.CounterOpts{Name: "flowforge_stale_writes_rejected_total", Help: "Writes rejected by the fencing token, by operation."}, []string{"op"}),
		PoisonMessages:      prometheus.NewCounter(prometheus.CounterOpts{Name: "flowforge_poison_messages_total", Help: "Deliveries that were not valid dispatch messages (dead-lettered)."}),
		HandlerPanics:       prometheus.NewCounter(prometheus.CounterOpts{Name: "flowforge_handler_panics_total", Help: "Handler panics recovered by the worker."}),
		ResultsRewritten:    prometheus.NewCounterVec(prometheus.CounterOpts{Name: "flowforge_results_rewritten_total", Help: "Successful results rewritten to be stored, by how: not_json (stored as a JSON string), replaced (NUL or invalid UTF-8 replaced with U+FFFD), truncated (over 256 KiB); noted in the task's history."}, []string{"how"}),
		LeasesReaped:        prometheus.NewCounter(prometheus.CounterOpts{Name: "flowforge_leases_reaped_total", Help: "Expired leases reaped by the scheduler."}),
		TasksRedispatched:   prometheus.NewCounter(prometheus.CounterOpts{Name: "flowforge_tasks_redispatched_total", Help: "READY tasks dispatched again after their confirmed dispatch led to no claim."}),
		TasksPromoted:       prometheus.NewCounter(prometheus.CounterOpts{Name: "flowforge_tasks_promoted_total", Help: "Tasks promoted to READY (dependencies met or retry due)."}),
		TasksSkipped:        prometheus.NewCounter(prometheus.CounterOpts{Name: "flowforge_tasks_skipped_total", Help: "Tasks the scheduler decided not to run (SKIPPED: a when that was false, a trigger rule or on_failure)."}),
		TasksExpanded:       prometheus.NewCounter(prometheus.CounterOpts{Name: "flowforge_tasks_expanded_total", Help: "Task runs made by for_each expansions, one per element."}),
		HeldTasksEnded:      prometheus.NewCounter(prometheus.CounterOpts{Name: "flowforge_held_tasks_ended_total", Help: "Held tasks (sleep, wait_for, workflow) the scheduler ended: a sleep due, a wait timed out or matched at its start, a child run ended."}),
		TasksAdmitted:       prometheus.NewCounterVec(prometheus.CounterOpts{Name: "flowforge_tasks_admitted_total", Help: "Task runs flow control admitted, by kind: concurrency (a slot of their concurrency key), rate (a start within their rate limit)."}, []string{"kind"}),
		PublishOutcomes:     prometheus.NewCounterVec(prometheus.CounterOpts{Name: "flowforge_publish_total", Help: labelHelp("Outbox publishes by outcome", "outcome", publishOutcomes())}, []string{"outcome"}),
		OutboxPending:       prometheus.NewGauge(prometheus.GaugeOpts{Name: "flowforge_outbox_pending", Help: "Outbox rows not yet confirmed by the broker."}),
		OutboxOldestSeconds: prometheus.NewGauge(prometheus.GaugeOpts{Name: "flowforge_outbox_oldest_pending_seconds", Help: "Age of the oldest pending outbox row (database clock)."}),
		StreamPending:       prometheus.NewGauge(prometheus.GaugeOpts{Name: "flowforge_stream_pending", Help: "Transition stream rows not yet published (every publisher reads it while the stream is on)."}),
		StreamOldestSeconds: prometheus.NewGauge(prometheus.GaugeOpts{Name: "flowforge_stream_oldest_pending_seconds", Help: "Age of the oldest unpublished transition stream row (database clock)."}),
		OutboxQuarantined:   prometheus.NewGauge(prometheus.GaugeOpts{Name: "flowforge_outbox_quarantined", Help: "Outbox rows the broker refuses permanently, set aside until ffctl outbox retry or drop (alert when > 0)."}),
		Reconnects:          prometheus.NewCounterVec(prometheus.CounterOpts{Name: "flowforge_reconnects_total", Help: "Connections re-established after a failure, by dependency."}, []string{"dependency"}),
		DependencyUp:        prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "flowforge_dependency_up", Help: "1 while the dependency answers the readiness check, 0 while it does not."}, []string{"dependency"}),
		InFlight:            prometheus.NewGauge(prometheus.GaugeOpts{Name: "flowforge_tasks_in_flight", Help: "Handlers running in this process."}),
	}
	m.DBOldestTransactionSeconds = prometheus.NewGauge(prometheus.GaugeOpts{Name: "flowforge_db_oldest_transaction_seconds", Help: "Age of the oldest open transaction of another session of the database (database clock)."})
	m.DBXminHorizonSeconds = prometheus.NewGauge(prometheus.GaugeOpts{Name: "flowforge_db_xmin_horizon_seconds", Help: "Age of the oldest transaction holding the xmin horizon back (VACUUM removes no newer dead row)."})
	m.DBXminHorizonXIDs = prometheus.NewGauge(prometheus.GaugeOpts{Name: "flowforge_db_xmin_horizon_xids", Help: "Transaction ids the xmin horizon lags behind (sessions, prepared transactions, replication slots)."})
	m.DBDeadTuples = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "flowforge_db_dead_tuples", Help: "Dead tuples (n_dead_tup) of FlowForge's hot tables, by table."}, []string{"table"})
	m.OutboxQuarantinedTotal = prometheus.NewCounter(prometheus.CounterOpts{Name: "flowforge_outbox_quarantined_total", Help: "Outbox rows this process quarantined."})
	m.PublisherBlocked = prometheus.NewGauge(prometheus.GaugeOpts{Name: "flowforge_publisher_blocked", Help: "1 while the broker blocks this process's publishing (a memory or disk resource alarm: rows stay pending), else 0."})
	r.MustRegister(m.OutboxQuarantinedTotal, m.StreamPending, m.StreamOldestSeconds, m.PublisherBlocked)
	r.MustRegister(m.TasksClaimed, m.TasksFinished, m.HandedBack, m.ClaimsLost, m.WriteBatchSize, m.StaleWrites, m.PoisonMessages, m.HandlerPanics, m.ResultsRewritten,
		m.LeasesReaped, m.TasksRedispatched, m.TasksPromoted, m.TasksSkipped, m.TasksExpanded, m.HeldTasksEnded, m.TasksAdmitted,
		m.PublishOutcomes, outboxCollector{m}, m.Reconnects, m.DependencyUp, m.InFlight,
		m.DBOldestTransactionSeconds, m.DBXminHorizonSeconds, m.DBXminHorizonXIDs, m.DBDeadTuples,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	m.SchedulerOutages = prometheus.NewCounter(prometheus.CounterOpts{Name: "flowforge_scheduler_outages_total", Help: "Losses of the database seen by the scheduler, each granting lapsed leases one lease of grace."})
	m.LeasesReapedAfterOutage = prometheus.NewCounter(prometheus.CounterOpts{Name: "flowforge_leases_reaped_after_outage_total", Help: "Reaped leases that lapsed during a database outage; their attempt was not used up."})
	m.AmbiguousWrites = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "flowforge_ambiguous_writes_total", Help: "Claims and finishes whose reply was lost and were read back, by op and outcome (committed, not_committed)."}, []string{"op", "outcome"})
	m.LeasesReapedGivenBack = prometheus.NewCounter(prometheus.CounterOpts{Name: "flowforge_leases_reaped_given_back_total", Help: "Reaped leases of a worker that stopped with other tasks in flight: their attempt was given back and each became a crash suspect that runs alone."})
	r.MustRegister(m.SchedulerOutages, m.LeasesReapedAfterOutage, m.LeasesReapedGivenBack, m.AmbiguousWrites)
	m.ScheduleTicks = newScheduleTicks(r)
	m.ForeignDispatches = newForeignDispatches(r)
	m.TaskLogLinesDropped = newTaskLogLinesDropped(r)
	m.DispatchesRedriven = newDispatchesRedriven(r)
	m.Latency = newLatency(r, maxLabelValues)
	for _, s := range finishedStates() {
		m.TasksFinished.WithLabelValues(s)
	}
	for _, o := range publishOutcomes() {
		m.PublishOutcomes.WithLabelValues(o)
	}
	for _, op := range staleWriteOps {
		m.StaleWrites.WithLabelValues(op)
	}
	return m
}
