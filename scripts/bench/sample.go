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
	metricTriggerPerS  = "triggers_per_s"     // W2, W5: triggers committed per second
	metricP50          = "p50_ms"             // W2, W3, W5: trigger → completion committed
	metricP99          = "p99_ms"             //
	metricStampP50     = "stamp_p50_ms"       // W2, W5: trigger → the completion's own timestamp
	metricStampP99     = "stamp_p99_ms"       //
	metricWallS        = "wall_s"             // W4: trigger → SUCCEEDED committed
	metricOpsPerS      = "ops_per_s"          // ceilings
	metricBufRatioMax  = "buffers_ratio_max"  // W5 check: worst history/fresh buffers per call
	metricBufGrowthMax = "buffers_growth_max" // W5 check: largest history−fresh buffers per call
)
