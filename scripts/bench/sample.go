package main

// sample is one measurement: one system, one workload (and variant), one
// round. Metrics holds the figures by name (see the metric* constants);
// Cost, where measured, what each task cost.
type sample struct {
	System   string             `json:"system"`
	Workload string             `json:"workload"`
	Variant  string             `json:"variant,omitempty"`
	Round    int                `json:"round"`
	Metrics  map[string]float64 `json:"metrics,omitempty"`
	Cost     map[string]cost    `json:"cost,omitempty"`
	Buffers  []bufferRow        `json:"buffers,omitempty"`
	Note     string             `json:"note,omitempty"`
	Err      string             `json:"error,omitempty"`
}

// Metric names of sample.Metrics.
const (
	metricTasksPerS    = "tasks_per_s"        // W1: tasks drained per second
	metricN            = "n"                  // W1: tasks in the backlog
	metricDrainS       = "drain_s"            // W1: consumers' start → last durable completion
	metricRunsPerS     = "runs_per_s"         // W2, W5: completions committed per second of the window
	metricTriggerPerS  = "triggers_per_s"     // W2, W5: triggers committed per second; W6: runs (jobs) created per second of the timed part
	metricP50          = "p50_ms"             // W2, W3, W5: trigger → completion committed
	metricP99          = "p99_ms"             //
	metricStampP50     = "stamp_p50_ms"       // W2, W5: trigger → the completion's own timestamp
	metricStampP99     = "stamp_p99_ms"       //
	metricWallS        = "wall_s"             // W4, W4e: trigger → SUCCEEDED committed
	metricOpsPerS      = "ops_per_s"          // ceilings
	metricBufRatioMax  = "buffers_ratio_max"  // W5 check: worst history/fresh buffers per call
	metricBufGrowthMax = "buffers_growth_max" // W5 check: largest history−fresh buffers per call
	// metricWorkerRSS is W1's peak resident set of the worker process of a
	// separate layout (VmHWM of /proc/PID/status just before its SIGTERM),
	// in MiB.
	metricWorkerRSS = "worker_peak_rss_mib"
	// metricPubConsPerS is the raw quorum-queue round trip of the ceiling:
	// messages published with confirms and then consumed with acks, per
	// second of both phases (n ÷ (publish s + consume s)): every dispatch
	// FlowForge sends is published once and consumed once.
	metricPubConsPerS = "pubcons_per_s"
	// metricOutboxP50/P99 are W2's and W5's trigger → outbox row stamped
	// published (published_at − created_at, database clock), in ms: the
	// part of the latency that is the publisher's.
	metricOutboxP50 = "outbox_p50_ms"
	metricOutboxP99 = "outbox_p99_ms"
	// metricOutboxSpanS is W1's first → last published_at stamp, in s: how
	// long the publisher took to publish the backlog.
	metricOutboxSpanS = "outbox_span_s"
	// metricDrainPgCPU and metricDrainCommits are FlowForge's W1 drain
	// cost per task (the daemons' work, the trigger's left out): PostgreSQL
	// CPU ms and write commits (WAL COMMIT records); the cost table below
	// the main one has the rest.
	metricDrainPgCPU   = "drain_pg_cpu_ms_per_task"
	metricDrainCommits = "drain_commits_per_task"
	// metricStaticWallS is, in W4e's sample, the wall time of W4's static
	// fan-out run on the same daemons in the same job, in s;
	// metricOverStatic the for_each's wall time over it.
	metricStaticWallS = "static_wall_s"
	metricOverStatic  = "over_static"
)
