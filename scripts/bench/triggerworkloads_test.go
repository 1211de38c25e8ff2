package main

import (
	"math"
	"strings"
	"testing"
)

func TestLoadFigures(t *testing.T) {
	lat := make([]float64, 100)
	for i := range lat {
		lat[i] = float64(100 - i) // 100 … 1 ms, in no order the figures rely on
	}
	m := loadFigures(1000, 2, lat)
	want := map[string]float64{metricN: 1000, metricTriggerPerS: 500, metricCallP50: 50.5, metricCallP99: 99.01}
	for k, v := range want {
		if math.Abs(m[k]-v) > 1e-9 {
			t.Errorf("%s = %v, want %v", k, m[k], v)
		}
	}
}

func TestWarmRunsCountEveryLoopsWarmUps(t *testing.T) {
	for _, c := range []struct {
		load    closedLoad
		perCall int
		want    int64
	}{
		{closedLoad{Loops: w6Loops, Warm: w6Warm}, 1, 24},
		{closedLoad{Loops: 1, Warm: 1}, w6BatchSize, 500},
		{closedLoad{Warm: 2}, 1, 2}, // no loops given: one
		{closedLoad{Loops: 8}, 1, 0},
	} {
		if got := c.load.warmRuns(c.perCall); got != c.want {
			t.Errorf("%+v.warmRuns(%d) = %d, want %d", c.load, c.perCall, got, c.want)
		}
	}
}

// TestW6SizesFitTheirBatches: the bulk loads make whole batches, and the
// serial and concurrent loads are what the notes say.
func TestW6SizesFitTheirBatches(t *testing.T) {
	for _, quick := range []bool{false, true} {
		w := w6Sizes(planFor(quick))
		if w.Bulk%w6BatchSize != 0 || w.Bulk == 0 {
			t.Errorf("quick=%v: bulk %d runs is not whole batches of %d", quick, w.Bulk, w6BatchSize)
		}
		if s := w.serial(); s.Loops != 1 || s.N != w.Serial || s.Warm != w6Warm {
			t.Errorf("quick=%v: serial load %+v", quick, s)
		}
		if c := w.concurrent(); c.Loops != w6Loops || c.N != 0 || c.Window != w.Window || c.Window <= 0 {
			t.Errorf("quick=%v: concurrent load %+v", quick, c)
		}
	}
}

// TestW6ApplicationRows: each application row takes its FlowForge variant
// beside River's twin (FF÷River from them), the before column is N/A for
// want of a client or an API, and the HTTP rows have no River cell.
func TestW6ApplicationRows(t *testing.T) {
	s := func(sys, variant string, m map[string]float64) sample {
		return sample{System: sys, Workload: "W6", Variant: variant, Round: 1, Metrics: m}
	}
	samples := []sample{
		s(sysFF, varTriggerTx, map[string]float64{metricCallP50: 2, metricCallP99: 9}),
		s(sysRiver, varInsertTx, map[string]float64{metricCallP50: 4, metricCallP99: 12}),
		s(sysFF, varTriggerTxN, map[string]float64{metricTriggerPerS: 600, metricCallP50: 13}),
		s(sysRiver, varInsertTxN, map[string]float64{metricTriggerPerS: 1500, metricCallP50: 5}),
		s(sysFF, varTriggerMany, map[string]float64{metricTriggerPerS: 9000, metricCallP50: 50}),
		s(sysFF, varBulkTrigger, map[string]float64{metricTriggerPerS: 8000}),
		s(sysFFBefore, varBulkTrigger, map[string]float64{metricTriggerPerS: 7000}),
		s(sysRiver, varInsertMany, map[string]float64{metricTriggerPerS: 18000, metricCallP50: 25}),
		s(sysFF, varAPI, map[string]float64{metricCallP50: 2.5}),
		s(sysFF, varAPIN, map[string]float64{metricTriggerPerS: 800, metricCallP50: 7, metricCallP99: 30}),
	}
	byLabel := map[string]row{}
	for _, r := range computeRows(triggerRows(), samples, nil) {
		byLabel[r.Label] = r
	}
	for _, c := range []struct {
		label      string
		ff, before float64
		river      float64 // 0: N/A
		na         string  // the before column's reason
		riverNA    string
	}{
		{"W6 bulk trigger --runs-file (River: InsertMany), batches of 500, runs/s", 8000, 7000, 18000, "", ""},
		{"W6 TriggerTx in the caller's transaction (River: InsertTx), serial, p50 ms begin → commit", 2, 0, 4, "no core/client before issue 25", ""},
		{"W6 TriggerTx in the caller's transaction (River: InsertTx), serial, p99 ms begin → commit", 9, 0, 12, "no core/client before issue 25", ""},
		{"W6 TriggerTx in the caller's transaction (River: InsertTx), 8 loops, runs/s", 600, 0, 1500, "no core/client before issue 25", ""},
		{"W6 TriggerTx in the caller's transaction (River: InsertTx), 8 loops, p50 ms", 13, 0, 5, "no core/client before issue 25", ""},
		{"W6 TriggerMany (River: InsertMany), batches of 500, runs/s", 9000, 0, 18000, "no core/client before issue 25", ""},
		{"W6 TriggerMany (River: InsertMany), p50 ms per batch of 500", 50, 0, 25, "no core/client before issue 25", ""},
		{"W6 HTTP API trigger, serial, p50 ms", 2.5, 0, 0, "no HTTP API before issue 25", "no HTTP API"},
		{"W6 HTTP API trigger, 8 clients, runs/s", 800, 0, 0, "no HTTP API before issue 25", "no HTTP API"},
		{"W6 HTTP API trigger, 8 clients, p50 ms", 7, 0, 0, "no HTTP API before issue 25", "no HTTP API"},
		{"W6 HTTP API trigger, 8 clients, p99 ms", 30, 0, 0, "no HTTP API before issue 25", "no HTTP API"},
	} {
		r, ok := byLabel[c.label]
		if !ok {
			t.Errorf("no row %q", c.label)
			continue
		}
		if got := float64(r.Cells[sysFF].Summary.Median); got != c.ff {
			t.Errorf("%s: FlowForge %v, want %v", c.label, got, c.ff)
		}
		if b := r.Cells[sysFFBefore]; c.na != "" && b.NA != c.na || c.na == "" && float64(b.Summary.Median) != c.before {
			t.Errorf("%s: before column %+v, want %v or N/A %q", c.label, b, c.before, c.na)
		}
		rc := r.Cells[sysRiver]
		switch {
		case c.river == 0 && rc.NA != c.riverNA:
			t.Errorf("%s: River %+v, want N/A %q", c.label, rc, c.riverNA)
		case c.river != 0 && (float64(rc.Summary.Median) != c.river || math.Abs(float64(r.FFRiver)-c.ff/c.river) > 1e-9):
			t.Errorf("%s: River %+v, FF÷River %v; want %v and %v", c.label, rc, r.FFRiver, c.river, c.ff/c.river)
		}
	}
	table := renderTable(computeRows(triggerRows(), samples, nil))
	for _, want := range []string{
		"| W6 HTTP API trigger, 8 clients, runs/s ", "N/A (no HTTP API before issue 25)", "N/A (no HTTP API) ",
		"| 0.4× ", // TriggerTx ×8 ÷ InsertTx ×8
	} {
		if !strings.Contains(table, want) {
			t.Errorf("table lacks %q:\n%s", want, table)
		}
	}
}

// TestW6NoteNamesItsSizes: the note under the table says how much each
// load did, quick or not.
func TestW6NoteNamesItsSizes(t *testing.T) {
	for _, c := range []struct {
		quick bool
		want  []string
	}{
		{false, []string{"200 `ffctl run trigger`", "100000 runs", "1000 transactions", "8 loops for 10s", "1000 requests", "8 clients for 10s"}},
		{true, []string{"40 `ffctl run trigger`", "20000 runs", "200 transactions", "8 loops for 2s", "200 requests"}},
	} {
		n := w6Note(planFor(c.quick))
		for _, w := range c.want {
			if !strings.Contains(n, w) {
				t.Errorf("quick=%v: the note lacks %q:\n%s", c.quick, w, n)
			}
		}
	}
}
