package main

import (
	"fmt"
	"math"
	"strings"
	"testing"
)

func testSamples() []sample {
	m := func(v float64) map[string]float64 { return map[string]float64{metricTasksPerS: v} }
	return []sample{
		{System: sysFF, Workload: "W1", Variant: "daemon all", Round: 1, Metrics: m(100)},
		{System: sysFF, Workload: "W1", Variant: "daemon all", Round: 2, Metrics: m(300)},
		{System: sysFF, Workload: "W1", Variant: "daemon all", Round: 3, Metrics: m(200)},
		{System: sysFF, Workload: "W1", Variant: "daemon separate", Round: 1, Metrics: m(250)},
		{System: sysFF, Workload: "W1", Variant: "daemon separate", Round: 2, Metrics: m(260)},
		{System: sysRiver, Workload: "W1", Variant: varRiverBench, Round: 1, Metrics: m(5000)},
		{System: sysCelery, Workload: "W1", Variant: varCelery, Round: 1, Err: "worker died\nlong log"},
		{System: sysCeiling, Workload: "C", Variant: varPgbench8, Round: 1, Metrics: map[string]float64{metricOpsPerS: 3000}},
	}
}

func testSpec() rowSpec {
	return rowSpec{Label: "W1", Metric: metricTasksPerS, HigherBetter: true, Cells: map[string]pick{
		sysFF:       pickOf("W1", "daemon all", "daemon separate"),
		sysFFBefore: pickOf("W1", "daemon all"),
		sysRiver:    pickOf("W1", varRiverBench),
		sysCelery:   pickOf("W1", varCelery),
		sysCeiling:  pickMetric(metricOpsPerS, "C", varPgbench8),
	}}
}

func TestComputeRows(t *testing.T) {
	rows := computeRows([]rowSpec{testSpec()}, testSamples(), map[string]string{sysFFBefore: "build failed"})
	r := rows[0]
	ff := r.Cells[sysFF]
	if ff.Variant != "daemon separate" || float64(ff.Summary.Median) != 255 || ff.Summary.N != 2 {
		t.Errorf("FlowForge cell %+v: want the better median (separate, 255 over 2 rounds)", ff)
	}
	if c := r.Cells[sysFFBefore]; c.NA != "build failed" {
		t.Errorf("unavailable system's cell %+v, want its reason", c)
	}
	if c := r.Cells[sysCelery]; c.NA != "failed: worker died" {
		t.Errorf("failed cell %+v, want the error's first line", c)
	}
	if c := r.Cells[sysCeiling]; float64(c.Summary.Median) != 3000 || c.Variant != varPgbench8 {
		t.Errorf("ceiling cell %+v, want 3000 from its own metric, named", c)
	}
	if math.Abs(float64(r.FFRiver)-0.051) > 1e-9 {
		t.Errorf("FF÷River = %v, want 0.051", r.FFRiver)
	}
	if !math.IsNaN(float64(r.FFCelery)) {
		t.Errorf("FF÷Celery = %v, want NaN (Celery failed)", r.FFCelery)
	}
	if math.Abs(float64(r.FFCeiling)-0.085) > 1e-9 {
		t.Errorf("FF÷ceiling = %v, want 0.085 (255 over the ceiling cell's 3000)", r.FFCeiling)
	}
}

// TestTheW1CeilingAndRSSRowsReadTheirOwnMetrics: the publish+consume row
// divides FlowForge's W1 rate by the consume sample's pubcons_per_s, and
// the RSS row reads the c64 variant's worker_peak_rss_mib (lower better).
func TestTheW1CeilingAndRSSRowsReadTheirOwnMetrics(t *testing.T) {
	samples := append(testSamples(),
		sample{System: sysCeiling, Workload: "C", Variant: varConsume, Round: 1,
			Metrics: map[string]float64{metricOpsPerS: 50000, metricPubConsPerS: 2550}},
		sample{System: sysFF, Workload: "W1", Variant: "daemon " + modeSeparate64, Round: 1,
			Metrics: map[string]float64{metricTasksPerS: 1, metricWorkerRSS: 31.5}})
	byLabel := map[string]row{}
	for _, r := range computeRows(tableRows(planFor(true)), samples, nil) {
		byLabel[r.Label] = r
	}
	c := byLabel["W1 ÷ quorum queue publish+consume ceiling, tasks/s"]
	if got := float64(c.Cells[sysCeiling].Summary.Median); got != 2550 {
		t.Errorf("ceiling cell = %v, want the consume sample's pubcons_per_s 2550", got)
	}
	if math.Abs(float64(c.FFCeiling)-0.1) > 1e-9 {
		t.Errorf("FF÷ceiling = %v, want 255/2550 = 0.1", c.FFCeiling)
	}
	rss := byLabel["W1 peak worker RSS, --concurrency 64, MiB"]
	if got := float64(rss.Cells[sysFF].Summary.Median); got != 31.5 {
		t.Errorf("RSS cell = %v, want 31.5 MiB", got)
	}
	if !strings.Contains(renderTable([]row{c}), "0.1×") {
		t.Errorf("table lacks the FF÷ceiling figure:\n%s", renderTable([]row{c}))
	}
}

func TestComputeRowsLowerIsBetter(t *testing.T) {
	sp := testSpec()
	sp.HigherBetter = false
	r := computeRows([]rowSpec{sp}, testSamples(), nil)[0]
	if c := r.Cells[sysFF]; c.Variant != "daemon all" || float64(c.Summary.Median) != 200 {
		t.Errorf("FlowForge cell %+v, want daemon all's median 200", c)
	}
}

func TestFormatCell(t *testing.T) {
	tests := []struct {
		c    cell
		want string
	}{
		{cell{Summary: summary{Median: 1234.4, Min: 1000, Max: 1500, N: 3}}, "1234 (1000–1500)"},
		{cell{Summary: summary{Median: 12.34, N: 1}}, "12.3"},
		{cell{Summary: summary{Median: 0.01234, Min: 0.01, Max: 0.02, N: 2}, Variant: "daemon all"}, "0.0123 (0.01–0.02) [daemon all]"},
		{cell{NA: "no result backend"}, "N/A (no result backend)"},
		{cell{NA: "-"}, "-"},
	}
	for _, tt := range tests {
		if got := formatCell(tt.c); got != tt.want {
			t.Errorf("formatCell(%+v) = %q, want %q", tt.c, got, tt.want)
		}
	}
}

func TestRenderTableAligns(t *testing.T) {
	rows := computeRows([]rowSpec{testSpec()}, testSamples(), nil)
	out := renderTable(rows)
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if len(lines) != 3 {
		t.Fatalf("%d lines, want header, rule and one row:\n%s", len(lines), out)
	}
	width := len([]rune(lines[0]))
	for _, l := range lines {
		if len([]rune(l)) != width || !strings.HasPrefix(l, "| ") || !strings.HasSuffix(l, " |") {
			t.Errorf("line %q is not %d runes wide between pipes", l, width)
		}
	}
	for _, want := range []string{"FlowForge", "FF " + beforeCommit, "FF÷River", "255 (250–260) [daemon separate]", "N/A (failed: worker died)", "0.051×"} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
}

func TestEveryCellOfTheRealTableSaysSomething(t *testing.T) {
	for _, quick := range []bool{false, true} {
		rows := computeRows(tableRows(planFor(quick)), nil, nil)
		for _, r := range rows {
			for _, sys := range tableColumns {
				if s := formatCell(r.Cells[sys]); s == "" || s == "N/A ()" {
					t.Errorf("row %q, %s: empty cell %q", r.Label, sys, s)
				}
			}
		}
	}
}

// TestTheW1SeparateDefaultsRows: the issue-24 W1 rows divide the separate
// layout at defaults by River at its benchmark settings, by River at
// MaxWorkers 100 with default fetch, and by the publish+consume ceiling.
func TestTheW1SeparateDefaultsRows(t *testing.T) {
	samples := append(testSamples(),
		sample{System: sysRiver, Workload: "W1", Variant: varRiverMW100, Round: 1, Metrics: map[string]float64{metricTasksPerS: 850}},
		sample{System: sysCeiling, Workload: "C", Variant: varConsume, Round: 1, Metrics: map[string]float64{metricPubConsPerS: 2550}})
	byLabel := map[string]row{}
	for _, r := range computeRows(tableRows(planFor(false)), samples, nil) {
		byLabel[r.Label] = r
	}
	for label, want := range map[string]struct {
		cell   string
		ratio  float64
		ceiled bool
	}{
		"W1 · separate daemons (defaults) ÷ River benchmark settings, tasks/s":             {sysRiver, 255.0 / 5000, false},
		"W1 · separate daemons (defaults) ÷ River MaxWorkers 100, default fetch, tasks/s":  {sysRiver, 255.0 / 850, false},
		"W1 · separate daemons (defaults) ÷ quorum queue publish+consume ceiling, tasks/s": {sysCeiling, 0.1, true},
	} {
		r, ok := byLabel[label]
		if !ok {
			t.Errorf("no row %q", label)
			continue
		}
		if got := float64(r.Cells[sysFF].Summary.Median); got != 255 {
			t.Errorf("%s: FlowForge cell %v, want the separate layout's 255 (not the best layout's)", label, got)
		}
		got := r.FFRiver
		if want.ceiled {
			got = r.FFCeiling
		}
		if math.Abs(float64(got)-want.ratio) > 1e-9 {
			t.Errorf("%s: ratio %v, want %v", label, got, want.ratio)
		}
	}
}

// TestTheW4eRows: the for_each row puts FlowForge's W4e beside River's W4
// (FF÷River), and the paired row shows W4e's own ratio to the static
// fan-out; the before column and the peers say why they have none.
func TestTheW4eRows(t *testing.T) {
	samples := []sample{
		{System: sysFF, Workload: workloadForEach, Variant: "daemon all", Round: 1,
			Metrics: map[string]float64{metricWallS: 1.5, metricStaticWallS: 1.0, metricOverStatic: 1.5}},
		{System: sysRiver, Workload: "W4", Variant: varRiverBench, Round: 1, Metrics: map[string]float64{metricWallS: 0.5}},
	}
	byLabel := map[string]row{}
	for _, r := range computeRows(tableRows(planFor(false)), samples, nil) {
		byLabel[r.Label] = r
	}
	wall, ok := byLabel[fmt.Sprintf("W4e for_each %d + join (River: its W4 static fan-out), s", forEachWidth)]
	if !ok || float64(wall.Cells[sysFF].Summary.Median) != 1.5 || math.Abs(float64(wall.FFRiver)-3) > 1e-9 {
		t.Errorf("W4e row: %+v, want FlowForge 1.5 s and FF÷River 3", wall)
	}
	paired, ok := byLabel[fmt.Sprintf("W4e for_each %d ÷ W4 static fan-out %d, same daemons, paired", forEachWidth, fanWidth)]
	if !ok || float64(paired.Cells[sysFF].Summary.Median) != 1.5 {
		t.Errorf("W4e ÷ W4 row: %+v, want 1.5", paired)
	}
	for _, r := range []row{wall, paired} {
		if c := r.Cells[sysFFBefore]; c.NA != naNoForEach {
			t.Errorf("%s: before column %+v, want %q", r.Label, c, naNoForEach)
		}
	}
}
