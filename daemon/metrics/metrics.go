// Package metrics defines FlowForge's Prometheus metrics. A Metrics value
// owns its own registry (no global state); the health server exposes it at
// /metrics.
package metrics

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// Metrics holds every collector the daemons update.
type Metrics struct {
	Registry *prometheus.Registry

	// TasksClaimed counts successful claims (READY -> RUNNING).
	TasksClaimed prometheus.Counter
	// TasksFinished counts recorded outcomes by resulting state
	// (SUCCEEDED, RETRYING, DEAD, CANCELLED).
	TasksFinished *prometheus.CounterVec
	// ClaimsLost counts deliveries whose claim matched nothing, by reason
	// (duplicate, stale, not_ready, unknown_task).
	ClaimsLost *prometheus.CounterVec
	// StaleWrites counts finishes and heartbeats rejected by the fencing
	// token (the lease was lost), by operation (finish, renew).
	StaleWrites *prometheus.CounterVec
	// PoisonMessages counts deliveries that were not valid dispatches,
	// rejected to the dead-letter queue.
	PoisonMessages prometheus.Counter
	// HandlerPanics counts recovered handler panics.
	HandlerPanics prometheus.Counter
	// LeasesReaped counts expired leases routed to RETRYING or DEAD.
	LeasesReaped prometheus.Counter
	// TasksPromoted counts PENDING/RETRYING -> READY promotions.
	TasksPromoted prometheus.Counter
	// PublishOutcomes counts published outbox rows by outcome (confirmed,
	// nacked, returned, timeout, not_sent).
	PublishOutcomes *prometheus.CounterVec
	// OutboxPending and OutboxOldestSeconds describe the backlog, refreshed
	// by the publisher.
	OutboxPending       prometheus.Gauge
	OutboxOldestSeconds prometheus.Gauge
	// Reconnects counts re-established connections by dependency
	// (postgres, rabbitmq).
	Reconnects *prometheus.CounterVec
	// InFlight is the number of handlers running in this process.
	InFlight prometheus.Gauge
}

// New creates the collectors on a fresh registry, with Go and process
// collectors.
func New() *Metrics {
	r := prometheus.NewRegistry()
	m := &Metrics{
		Registry:            r,
		TasksClaimed:        prometheus.NewCounter(prometheus.CounterOpts{Name: "flowforge_tasks_claimed_total", Help: "Tasks claimed (READY -> RUNNING)."}),
		TasksFinished:       prometheus.NewCounterVec(prometheus.CounterOpts{Name: "flowforge_tasks_finished_total", Help: "Attempt outcomes recorded, by resulting task state."}, []string{"state"}),
		ClaimsLost:          prometheus.NewCounterVec(prometheus.CounterOpts{Name: "flowforge_claims_lost_total", Help: "Deliveries whose claim matched no READY row, by reason."}, []string{"reason"}),
		StaleWrites:         prometheus.NewCounterVec(prometheus.CounterOpts{Name: "flowforge_stale_writes_rejected_total", Help: "Writes rejected by the fencing token, by operation."}, []string{"op"}),
		PoisonMessages:      prometheus.NewCounter(prometheus.CounterOpts{Name: "flowforge_poison_messages_total", Help: "Deliveries that were not valid dispatch messages (dead-lettered)."}),
		HandlerPanics:       prometheus.NewCounter(prometheus.CounterOpts{Name: "flowforge_handler_panics_total", Help: "Handler panics recovered by the worker."}),
		LeasesReaped:        prometheus.NewCounter(prometheus.CounterOpts{Name: "flowforge_leases_reaped_total", Help: "Expired leases reaped by the scheduler."}),
		TasksPromoted:       prometheus.NewCounter(prometheus.CounterOpts{Name: "flowforge_tasks_promoted_total", Help: "Tasks promoted to READY (dependencies met or retry due)."}),
		PublishOutcomes:     prometheus.NewCounterVec(prometheus.CounterOpts{Name: "flowforge_publish_total", Help: "Outbox publishes by outcome (confirmed, nacked, returned, timeout, not_sent)."}, []string{"outcome"}),
		OutboxPending:       prometheus.NewGauge(prometheus.GaugeOpts{Name: "flowforge_outbox_pending", Help: "Outbox rows not yet confirmed by the broker."}),
		OutboxOldestSeconds: prometheus.NewGauge(prometheus.GaugeOpts{Name: "flowforge_outbox_oldest_pending_seconds", Help: "Age of the oldest pending outbox row (database clock)."}),
		Reconnects:          prometheus.NewCounterVec(prometheus.CounterOpts{Name: "flowforge_reconnects_total", Help: "Connections re-established after a failure, by dependency."}, []string{"dependency"}),
		InFlight:            prometheus.NewGauge(prometheus.GaugeOpts{Name: "flowforge_tasks_in_flight", Help: "Handlers running in this process."}),
	}
	r.MustRegister(m.TasksClaimed, m.TasksFinished, m.ClaimsLost, m.StaleWrites, m.PoisonMessages, m.HandlerPanics,
		m.LeasesReaped, m.TasksPromoted, m.PublishOutcomes, m.OutboxPending, m.OutboxOldestSeconds, m.Reconnects, m.InFlight,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}
