package main

import (
	"math"
	"slices"
	"strings"
	"testing"
	"time"
)

// openRuns makes n runs created every interval from t0, each completed
// latency after its creation; the runs listed in open have not completed.
func openRuns(t0 time.Time, n int, interval, latency time.Duration, open ...int) []openRun {
	runs := make([]openRun, n)
	for i := range runs {
		c := t0.Add(time.Duration(i) * interval)
		runs[i] = openRun{Created: c, Completed: c.Add(latency)}
	}
	for _, i := range open {
		runs[i].Completed = time.Time{}
	}
	return runs
}

func TestOpenLoopMetricsOfASystemThatKeepsUp(t *testing.T) {
	sched := openSchedule{Rate: 100, Window: time.Second}
	t0 := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	runs := openRuns(t0, 100, 10*time.Millisecond, 20*time.Millisecond)
	lags := make([]float64, 100)
	lags[50] = 4
	m := openLoopMetrics(sched, lags, runs, t0.Add(5*time.Second))
	want := map[string]float64{
		metricOfferedPerS: 100, metricN: 100,
		metricTriggerPerS: 100, // the last trigger on time: the offered rate
		metricLagMax:      4,
		// Run i completes at 10·i + 20 ms: those up to i = 98 inside the 1 s window.
		metricRunsPerS: 99, metricFinished: 1, metricUnfinished: 0, metricAfterWindow: 1,
		metricAfterWindowS: 0.01, // the last at 990 + 20 ms
		metricP50:          20, metricP99: 20, metricP999: 20,
	}
	for k, v := range want {
		if math.Abs(m[k]-v) > 1e-6 {
			t.Errorf("%s = %v, want %v", k, m[k], v)
		}
	}
}

func TestOpenLoopMetricsCountOpenRunsAsLowerBounds(t *testing.T) {
	sched := openSchedule{Rate: 10, Window: time.Second}
	t0 := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	runs := openRuns(t0, 10, 100*time.Millisecond, 50*time.Millisecond, 8, 9)
	// The last trigger went out 400 ms late: 10 in 0.9 + 0.4 + 0.1 s.
	lags := []float64{0, 0, 0, 0, 0, 0, 0, 0, 0, 400}
	cutoff := t0.Add(3 * time.Second)
	m := openLoopMetrics(sched, lags, runs, cutoff)
	if got := m[metricTriggerPerS]; math.Abs(got-10/1.4) > 1e-9 {
		t.Errorf("triggers/s = %v, want 10 ÷ 1.4 s", got)
	}
	if m[metricFinished] != 0.8 || m[metricUnfinished] != 2 {
		t.Errorf("finished %v, unfinished %v; want 0.8 and 2", m[metricFinished], m[metricUnfinished])
	}
	if _, ok := m[metricAfterWindowS]; ok {
		t.Errorf("finished_after_window_s = %v with runs open, want none", m[metricAfterWindowS])
	}
	// Runs 8 and 9 count with their age at the cutoff: 2200 and 2100 ms.
	if got := m[metricP999]; got < 2100 || got > 2200 {
		t.Errorf("p99.9 = %v, want between the open runs' ages 2100 and 2200", got)
	}
	if m[metricP50] != 50 {
		t.Errorf("p50 = %v, want 50", m[metricP50])
	}
}

func TestOpenLoopMetricsOfNothing(t *testing.T) {
	m := openLoopMetrics(openSchedule{Rate: 500, Window: time.Second}, nil, nil, time.Now())
	if m[metricOfferedPerS] != 500 || m[metricN] != 0 {
		t.Errorf("metrics %v: want the offered rate and n 0", m)
	}
	if _, ok := m[metricP50]; ok {
		t.Errorf("p50 without runs: %v", m[metricP50])
	}
}

// TestOpenRowsInTheTable: W2o's rows read separate daemons and River's
// defaults; the "after the window" cell of a system that left runs open
// says so instead of "not run".
func TestOpenRowsInTheTable(t *testing.T) {
	p := planFor(false)
	samples := []sample{
		{System: sysFF, Workload: workloadOpen, Variant: "daemon separate", Round: 1,
			Metrics: map[string]float64{metricTriggerPerS: 499, metricP50: 12, metricP99: 90, metricP999: 140, metricAfterWindowS: 0.2, metricFinished: 1}},
		{System: sysRiver, Workload: workloadOpen, Variant: varRiverDefaults, Round: 1,
			Metrics: map[string]float64{metricTriggerPerS: 500, metricP50: 60, metricP99: 120, metricFinished: 1, metricAfterWindowS: 0.1}},
		{System: sysFFBefore, Workload: workloadOpen, Variant: "daemon separate", Round: 1,
			Metrics: map[string]float64{metricTriggerPerS: 480, metricP50: 9000, metricFinished: 0.4, metricUnfinished: 18000}},
	}
	rows := computeRows(openRows(p), samples, nil)
	byLabel := map[string]row{}
	for _, r := range rows {
		byLabel[r.Label] = r
	}
	head := byLabel["W2o open loop, 500 runs/s offered for 60 s: triggers issued/s"]
	if float64(head.Cells[sysFF].Summary.Median) != 499 || float64(head.Cells[sysRiver].Summary.Median) != 500 {
		t.Errorf("head row %+v: want FlowForge 499, River 500", head.Cells)
	}
	p50 := byLabel["W2o · p50 trigger→completion committed, ms"]
	if math.Abs(float64(p50.FFRiver)-0.2) > 1e-9 {
		t.Errorf("p50 FF÷River = %v, want 12/60", p50.FFRiver)
	}
	after := byLabel["W2o · last run finished, s after the window"]
	if c := after.Cells[sysFFBefore]; c.NA != "not all finished within 30 s" {
		t.Errorf("before column's cell %+v, want 'not all finished within 30 s'", c)
	}
	if c := after.Cells[sysCelery]; formatCell(c) != "-" {
		t.Errorf("Celery's cell %q, want -", formatCell(c))
	}
	out := renderTable(rows)
	for _, want := range []string{"W2o · runs finished ÷ triggered, 30 s after the window", "| 0.4 ", "N/A (not all finished within 30 s)", "0.2×"} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
	var all []string
	for _, r := range computeRows(tableRows(p), nil, nil) {
		all = append(all, r.Label)
	}
	// W2's rows end with the flow variants' (flowRows); W2o's follow.
	i := slices.IndexFunc(all, func(l string) bool { return strings.HasPrefix(l, "W2o open loop") })
	if i < 1 || !strings.HasPrefix(all[i-1], "W2 ") ||
		!strings.Contains(strings.Join(all, "\n"), "W2 p99 trigger→completion stamp, ms\nW2 · daemon all, concurrency key") {
		t.Errorf("W2o's rows do not follow W2's:\n%s", strings.Join(all, "\n"))
	}
}
