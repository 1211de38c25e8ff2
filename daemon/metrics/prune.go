package metrics

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/flowforge/flowforge/core"
)

// PruneTables are the label values of Prune.Rows's table label: the tables
// a prune deletes from (outbox rows of pruned runs and published outbox rows
// pruned by age both count as outbox; events are pruned once their
// lookback ended; transition_stream counts the published stream rows
// pruned by age, not those that go with a pruned run).
var PruneTables = []string{"workflow_runs", "task_runs", "outbox", "task_events", "events", "transition_stream"}

// PrunePublished is Prune.Rows's state label for the published outbox and
// transition stream rows pruned by age.
const PrunePublished = "published"

// PruneLookbackEnded is Prune.Rows's state label for the events pruned
// once their lookback ended (store.PruneEvents).
const PruneLookbackEnded = "lookback_ended"

// PruneStates returns the label values of Prune.Rows's state label: the
// final state of the pruned run (core.FinalRunStates), PrunePublished for
// outbox rows pruned by age, or PruneLookbackEnded for events. The slice
// is the caller's.
func PruneStates() []string {
	var out []string
	for _, s := range core.FinalRunStates() {
		out = append(out, string(s))
	}
	return append(out, PrunePublished, PruneLookbackEnded)
}

// Prune holds the collectors of the scheduler's pruner (package
// daemon/pruner), registered on a Metrics registry by NewPrune.
type Prune struct {
	// Rows counts rows deleted, by table (PruneTables) and by the final
	// state of the run they belonged to (PruneStates).
	Rows *prometheus.CounterVec
	// PassSeconds observes the duration of each prune pass, seconds.
	PassSeconds prometheus.Histogram
	// PassFailures counts prune passes that ended with an error.
	PassFailures prometheus.Counter
}

// NewPrune creates the pruner's collectors and registers them on m's
// registry, every series of Rows exported at 0. The error is the
// registry's (NewPrune called twice on one Metrics).
func NewPrune(m *Metrics) (*Prune, error) {
	p := &Prune{
		Rows: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "flowforge_pruned_rows_total",
			Help: labelHelp("Rows deleted by the retention pruner, by table and by the final state of their run", "state", PruneStates())}, []string{"table", "state"}),
		PassSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "flowforge_prune_pass_seconds", Help: "Duration of each retention prune pass, seconds.",
			Buckets: []float64{0.005, 0.02, 0.1, 0.5, 2, 10, 60, 300}}),
		PassFailures: prometheus.NewCounter(prometheus.CounterOpts{Name: "flowforge_prune_pass_failures_total", Help: "Retention prune passes that ended with an error (retried at the next interval)."}),
	}
	for _, c := range []prometheus.Collector{p.Rows, p.PassSeconds, p.PassFailures} {
		if err := m.Registry.Register(c); err != nil {
			return nil, fmt.Errorf("register prune metrics: %w", err)
		}
	}
	for _, t := range PruneTables {
		for _, s := range PruneStates() {
			// published: outbox rows only; lookback_ended: events only, and
			// events by nothing else.
			stream := t == "transition_stream"
			if (s == PrunePublished && t != "outbox" && !stream) || (s == PruneLookbackEnded) != (t == "events") || (stream && s != PrunePublished) {
				continue
			}
			p.Rows.WithLabelValues(t, s)
		}
	}
	return p, nil
}
