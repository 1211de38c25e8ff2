package metrics

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/flowforge/flowforge/core/broker"
)

// gathered returns the value of every sample of family name, keyed by its
// label values joined with ",".
func gathered(t *testing.T, m *Metrics, name string) map[string]float64 {
	t.Helper()
	mfs, err := m.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, s := range mf.GetMetric() {
			var labels []string
			for _, l := range s.GetLabel() {
				labels = append(labels, l.GetValue())
			}
			v := s.GetCounter().GetValue() + s.GetGauge().GetValue()
			out[strings.Join(labels, ",")] = v
		}
	}
	return out
}

// The pre-exported publish outcomes must be the labels the publisher uses
// (broker.Outcome.String()).
func TestPublishOutcomeLabelsMatchBrokerOutcomes(t *testing.T) {
	m := New()
	got := gathered(t, m, "flowforge_publish_total")
	for _, o := range []broker.Outcome{broker.Confirmed, broker.Nacked, broker.Returned, broker.TimedOut, broker.NotSent, broker.Refused} {
		if _, ok := got[o.String()]; !ok {
			t.Errorf("outcome %q is not exported before the first publish (have %v)", o, got)
		}
	}
	if len(got) != 6 {
		t.Errorf("exported outcomes %v, want exactly the 6 broker outcomes", got)
	}
	for _, st := range []string{"SUCCEEDED", "RETRYING", "DEAD", "CANCELLED"} {
		if _, ok := gathered(t, m, "flowforge_tasks_finished_total")[st]; !ok {
			t.Errorf("tasks finished %s not exported at 0", st)
		}
	}
}

func TestOutboxGaugesAreReadAtScrapeTime(t *testing.T) {
	m := New()
	var fail bool
	m.SetOutboxSource(func(context.Context) (float64, float64, error) {
		if fail {
			return 0, 0, errors.New("database down")
		}
		return 7, 42, nil
	})
	if p, o := gathered(t, m, "flowforge_outbox_pending")[""], gathered(t, m, "flowforge_outbox_oldest_pending_seconds")[""]; p != 7 || o != 42 {
		t.Fatalf("scraped pending %v oldest %v, want 7 and 42", p, o)
	}
	fail = true
	if p := gathered(t, m, "flowforge_outbox_pending")[""]; p != 7 {
		t.Fatalf("a failing source changed the gauge to %v; it must keep the last value", p)
	}
}

func TestDependencySeriesOnlyForDeclaredDependencies(t *testing.T) {
	m := New()
	m.InitDependencies("postgres")
	got := gathered(t, m, "flowforge_reconnects_total")
	if _, ok := got["postgres"]; !ok || len(got) != 1 {
		t.Fatalf("reconnect series %v, want postgres only", got)
	}
}

// The database-health gauges (package dbhealth) are registered under the
// names the README and FAILURE_MODEL.md give.
func TestDBHealthGaugesAreRegistered(t *testing.T) {
	m := New()
	m.DBDeadTuples.WithLabelValues("task_runs").Set(3)
	m.DBXminHorizonSeconds.Set(61)
	for name, want := range map[string]map[string]float64{
		"flowforge_db_oldest_transaction_seconds": {"": 0},
		"flowforge_db_xmin_horizon_seconds":       {"": 61},
		"flowforge_db_xmin_horizon_xids":          {"": 0},
		"flowforge_db_dead_tuples":                {"task_runs": 3},
	} {
		got := gathered(t, m, name)
		for k, v := range want {
			if g, ok := got[k]; !ok || g != v {
				t.Errorf("%s{%s} = %v (present %v), want %v", name, k, g, ok, v)
			}
		}
	}
}
