package main

import (
	"math"
	"strings"
	"testing"

	"github.com/flowforge/flowforge/core"
)

func TestFlowFilesSetLimitsAboveTheBenchmarkAndParse(t *testing.T) {
	if _, ok := workflowFiles(true, false, false)[wfConc]; ok {
		t.Errorf("a tree without flow control is given the flow variants' workflows")
	}
	w := workflowFiles(false, true, false)
	conc, err := core.ParseDefinition([]byte(w[wfConc]))
	if err != nil {
		t.Fatal(err)
	}
	if c := conc.Tasks[0].Concurrency; c == nil || c.Key != "bench" || c.Limit != flowConcLimit || conc.Tasks[0].RateLimit != nil {
		t.Errorf("%s: task %+v, want concurrency {bench, %d} alone", wfConc, conc.Tasks[0], flowConcLimit)
	}
	rate, err := core.ParseDefinition([]byte(w[wfRate]))
	if err != nil {
		t.Fatal(err)
	}
	if r := rate.Tasks[0].RateLimit; r == nil || r.Key != "bench" || r.Limit != core.MaxRateLimit || rate.Tasks[0].Concurrency != nil {
		t.Errorf("%s: task %+v, want rate_limit {bench, %d, 1s} alone", wfRate, rate.Tasks[0], core.MaxRateLimit)
	}
	// The limit must stay above what a layout runs at once: one worker at
	// its default --concurrency (daemon/worker.ConcurrencyDefault, 100).
	if flowConcLimit < 5*100 {
		t.Errorf("concurrency limit %d is not clearly above the worker's 100 slots", flowConcLimit)
	}
}

func TestAddFlowRatiosPairsByRound(t *testing.T) {
	m := func(kv ...float64) map[string]float64 {
		out := map[string]float64{}
		for i := 0; i+1 < len(kv); i += 2 {
			out[[]string{metricTasksPerS, metricRunsPerS, metricP50}[int(kv[i])]] = kv[i+1]
		}
		return out
	}
	samples := []sample{
		{System: sysFF, Workload: "W1", Variant: "daemon all", Round: 1, Metrics: m(0, 1000)},
		{System: sysFF, Workload: "W1", Variant: "daemon all, concurrency key", Round: 1, Metrics: m(0, 900)},
		{System: sysFF, Workload: "W1", Variant: "daemon all", Round: 2, Metrics: m(0, 2000)},
		{System: sysFF, Workload: "W1", Variant: "daemon all, concurrency key", Round: 2, Metrics: m(0, 1000)},
		{System: sysFF, Workload: "W1", Variant: "daemon all, rate limit", Round: 3, Metrics: m(0, 500)}, // no unlimited in round 3
		{System: sysFF, Workload: "W2", Variant: "daemon all", Round: 1, Metrics: m(1, 400, 2, 10)},
		{System: sysFF, Workload: "W2", Variant: "daemon all, rate limit", Round: 1, Metrics: m(1, 360, 2, 12)},
		{System: sysFF, Workload: "W2", Variant: "daemon all c64", Round: 1, Metrics: m(1, 100, 2, 1)},
	}
	addFlowRatios(samples)
	want := []struct {
		i      int
		metric string
		x      float64 // NaN: absent
	}{
		{0, metricTasksOverUnlimited, math.NaN()},
		{1, metricTasksOverUnlimited, 0.9},
		{3, metricTasksOverUnlimited, 0.5},
		{4, metricTasksOverUnlimited, math.NaN()},
		{6, metricRunsOverUnlimited, 0.9},
		{6, metricP50OverUnlimited, 1.2},
		{7, metricRunsOverUnlimited, math.NaN()},
	}
	for _, w := range want {
		got, ok := samples[w.i].Metrics[w.metric]
		if math.IsNaN(w.x) {
			if ok {
				t.Errorf("sample %d (%s): %s = %v, want none", w.i, samples[w.i].Variant, w.metric, got)
			}
			continue
		}
		if !ok || math.Abs(got-w.x) > 1e-9 {
			t.Errorf("sample %d (%s): %s = %v (%v), want %v", w.i, samples[w.i].Variant, w.metric, got, ok, w.x)
		}
	}
}

func TestFlowRowsAndJobs(t *testing.T) {
	samples := []sample{
		{System: sysFF, Workload: "W1", Variant: "daemon all", Round: 1, Metrics: map[string]float64{metricTasksPerS: 1000}},
		{System: sysFF, Workload: "W1", Variant: "daemon all, rate limit", Round: 1, Metrics: map[string]float64{metricTasksPerS: 850}},
	}
	addFlowRatios(samples)
	var labels []string
	byLabel := map[string]row{}
	for _, r := range computeRows(tableRows(planFor(true)), samples, nil) {
		labels = append(labels, r.Label)
		byLabel[r.Label] = r
	}
	r := byLabel["W1 · daemon all, rate limit ÷ unlimited, tasks/s, paired"]
	if got := float64(r.Cells[sysFF].Summary.Median); math.Abs(got-0.85) > 1e-9 {
		t.Errorf("ratio cell = %v, want 0.85", got)
	}
	if c := r.Cells[sysFFBefore]; !strings.Contains(c.NA, "issue 27") {
		t.Errorf("before column's cell %+v, want N/A (no flow control)", c)
	}
	all := strings.Join(labels, "\n")
	for _, want := range []string{
		"W1 · daemon all, concurrency key (limit 1000), tasks/s",
		"W2 · daemon all, rate limit (10000 per 1s), runs/s",
		"W2 · daemon all, concurrency key ÷ unlimited, runs/s, paired",
		"W2 · daemon all, rate limit ÷ unlimited, p50, paired",
	} {
		if !strings.Contains(all, want) {
			t.Errorf("no row %q:\n%s", want, all)
		}
	}
	if strings.Contains(all, "W1 · daemon separate, concurrency key") {
		t.Errorf("-quick has a separate layout's flow row:\n%s", all)
	}
	if !strings.Contains(strings.Join(rowLabels(tableRows(planFor(false))), "\n"), "W1 · daemon separate, rate limit ÷ unlimited") {
		t.Errorf("make bench lacks the separate layout's flow rows")
	}

	// Jobs: the flow variants follow their unlimited job, only where the
	// tree has flow control, and -quick runs W1's only with daemon all.
	for _, tt := range []struct {
		quick, flow bool
		want        string
	}{
		{true, true, "W1 daemon all|W1 daemon all, concurrency key|W1 daemon all, rate limit|W1 daemon separate|W1 daemon separate c64|" +
			"W2 daemon all|W2 daemon all, concurrency key|W2 daemon all, rate limit|W2 daemon all c64"},
		{false, true, "W1 daemon all|W1 daemon all, concurrency key|W1 daemon all, rate limit|" +
			"W1 daemon separate|W1 daemon separate, concurrency key|W1 daemon separate, rate limit|W1 daemon separate c64|" +
			"W2 daemon all|W2 daemon all, concurrency key|W2 daemon all, rate limit|W2 daemon all c64"},
		{true, false, "W1 daemon all|W1 daemon separate|W1 daemon separate c64|W2 daemon all|W2 daemon all c64"},
	} {
		s := &ffSystem{sysKey: sysFF, env: &benchEnv{plan: planFor(tt.quick)}, ff: &flowforge{build: ffBuild{HasFlow: tt.flow}}}
		var got []string
		for _, j := range s.jobs() {
			if j.Workload == "W1" || j.Workload == "W2" {
				got = append(got, j.Workload+" "+j.Variant)
			}
		}
		if g := strings.Join(got, "|"); g != tt.want {
			t.Errorf("quick %v, flow %v: jobs\n%s\nwant\n%s", tt.quick, tt.flow, g, tt.want)
		}
	}
}

func rowLabels(specs []rowSpec) []string {
	var out []string
	for _, s := range specs {
		out = append(out, s.Label)
	}
	return out
}
