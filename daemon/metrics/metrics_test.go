package metrics

import (
	"context"
	"errors"
	"maps"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/flowforge/flowforge/core"
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

// help returns the help text of family name.
func help(t *testing.T, m *Metrics, name string) string {
	t.Helper()
	mfs, err := m.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			return mf.GetHelp()
		}
	}
	t.Fatalf("no metric %s", name)
	return ""
}

// TestLabelledCountersExportAndDocumentWhatIsEmitted: the publish
// outcomes pre-exported at 0 and the ones the help text names (quoted) are
// exactly the labels the publisher emits (broker.Outcome.String() of every
// outcome; the help once said timeout and not_sent where "timed out" and
// "not sent" were emitted), and likewise the finished-task states are the
// worker's (core.AttemptOutcomes).
func TestLabelledCountersExportAndDocumentWhatIsEmitted(t *testing.T) {
	t.Parallel()
	var outcomes []string
	for _, o := range broker.Outcomes() {
		outcomes = append(outcomes, o.String())
	}
	var states []string
	for _, s := range core.AttemptOutcomes() {
		states = append(states, string(s))
	}
	quoted := regexp.MustCompile(`"([^"]*)"`)
	m := New()
	for _, tc := range []struct {
		metric  string
		emitted []string
	}{
		{"flowforge_publish_total", outcomes},
		{"flowforge_tasks_finished_total", states},
	} {
		t.Run(tc.metric, func(t *testing.T) {
			want := slices.Sorted(slices.Values(tc.emitted))
			exported := slices.Sorted(maps.Keys(gathered(t, m, tc.metric)))
			if !slices.Equal(exported, want) {
				t.Errorf("exported at 0: %q, want %q", exported, want)
			}
			h := help(t, m, tc.metric)
			var named []string
			for _, g := range quoted.FindAllStringSubmatch(h, -1) {
				named = append(named, g[1])
			}
			if slices.Sort(named); !slices.Equal(named, want) {
				t.Errorf("help %q names %q, want %q", h, named, want)
			}
		})
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

// TestPruneStateLabelsAreTheFinalRunStates: the state labels the pruner's
// row counter exports at 0 and its help names are the final run states
// (core.FinalRunStates) and "published", the outbox rows pruned by age.
func TestPruneStateLabelsAreTheFinalRunStates(t *testing.T) {
	t.Parallel()
	want := []string{PrunePublished, PruneLookbackEnded}
	for _, s := range core.FinalRunStates() {
		want = append(want, string(s))
	}
	slices.Sort(want)
	m := New()
	if _, err := NewPrune(m); err != nil {
		t.Fatal(err)
	}
	states := map[string]bool{}
	for key := range gathered(t, m, "flowforge_pruned_rows_total") {
		state, _, _ := strings.Cut(key, ",") // labels in name order: state, table
		states[state] = true
	}
	if got := slices.Sorted(maps.Keys(states)); !slices.Equal(got, want) {
		t.Errorf("exported states %q, want %q", got, want)
	}
	var named []string
	for _, g := range regexp.MustCompile(`"([^"]*)"`).FindAllStringSubmatch(help(t, m, "flowforge_pruned_rows_total"), -1) {
		named = append(named, g[1])
	}
	if slices.Sort(named); !slices.Equal(named, want) {
		t.Errorf("help names %q, want %q", named, want)
	}
}
