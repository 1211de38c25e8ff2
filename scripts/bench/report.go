package main

import (
	"fmt"
	"math"
	"sort"
	"strings"
)

// pick says which samples fill a cell: a workload and the variants to
// choose from (the one with the best median wins and is named).
type pick struct {
	Workload string
	Variants []string
	// Metric, when set, replaces the row's metric for this cell (a ceiling
	// beside a workload).
	Metric string
}

// rowSpec is one line of the table.
type rowSpec struct {
	Label        string
	Metric       string
	HigherBetter bool
	Cells        map[string]pick   // by system key
	NA           map[string]string // by system key: why the cell has no figure
	// Missing is the cell's text when its samples ran but lack the
	// metric (a figure that only exists in some outcomes); "not run"
	// when empty.
	Missing string
}

// cell is one computed table cell.
type cell struct {
	Summary summary `json:"summary"`
	Variant string  `json:"variant,omitempty"`
	NA      string  `json:"na,omitempty"`
}

// row is one computed line: cells by system key and the ratios.
type row struct {
	Label    string          `json:"label"`
	Metric   string          `json:"metric"`
	Cells    map[string]cell `json:"cells"`
	FFRiver  optFloat        `json:"ff_over_river"`
	FFCelery optFloat        `json:"ff_over_celery"`
	// FFCeiling is FlowForge's figure over the row's ceiling cell (W1: the
	// share of what the servers allow; see methodNotes).
	FFCeiling optFloat `json:"ff_over_ceiling"`
}

// tableColumns are the system columns, in order.
var tableColumns = []string{sysFF, sysFFBefore, sysRiver, sysCelery, sysCeiling}

// computeRows fills the table from the samples. unavailable gives, by
// system key, why a whole system could not run.
func computeRows(specs []rowSpec, samples []sample, unavailable map[string]string) []row {
	var out []row
	for _, sp := range specs {
		r := row{Label: sp.Label, Metric: sp.Metric, Cells: map[string]cell{}}
		for _, sys := range tableColumns {
			r.Cells[sys] = computeCell(sp, sys, samples, unavailable[sys])
		}
		r.FFRiver = ratio(r.Cells[sysFF], r.Cells[sysRiver])
		r.FFCelery = ratio(r.Cells[sysFF], r.Cells[sysCelery])
		r.FFCeiling = ratio(r.Cells[sysFF], r.Cells[sysCeiling])
		out = append(out, r)
	}
	return out
}

func computeCell(sp rowSpec, sys string, samples []sample, unavailable string) cell {
	pk, ok := sp.Cells[sys]
	switch {
	case !ok && sp.NA[sys] != "":
		return cell{NA: sp.NA[sys]}
	case !ok:
		return cell{NA: "-"}
	case unavailable != "":
		return cell{NA: unavailable}
	}
	metric := sp.Metric
	if pk.Metric != "" {
		metric = pk.Metric
	}
	best := cell{NA: "not run"}
	for _, v := range pk.Variants {
		var xs []float64
		var errs []string
		for _, s := range samples {
			if s.System != sys || s.Workload != pk.Workload || s.Variant != v {
				continue
			}
			if s.Err == "" && sp.Missing != "" && best.Summary.N == 0 {
				best.NA = sp.Missing
			}
			if s.Err != "" {
				errs = append(errs, s.Err)
				continue
			}
			if x, ok := s.Metrics[metric]; ok {
				xs = append(xs, x)
			}
		}
		sum := summarize(xs)
		if sum.N == 0 {
			if len(errs) > 0 && best.Summary.N == 0 {
				best = cell{NA: "failed: " + firstLine(errs[0])}
			}
			continue
		}
		if best.Summary.N == 0 || better(float64(sum.Median), float64(best.Summary.Median), sp.HigherBetter) {
			best = cell{Summary: sum, Variant: v}
		}
	}
	if len(pk.Variants) < 2 && pk.Metric == "" {
		best.Variant = ""
	}
	return best
}

func better(a, b float64, higher bool) bool {
	if higher {
		return a > b
	}
	return a < b
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	if len(s) > 70 {
		s = s[:70] + "…"
	}
	return s
}

// ratio is a's median over b's, NaN when either has no figure.
func ratio(a, b cell) optFloat {
	if a.Summary.N == 0 || b.Summary.N == 0 || b.Summary.Median == 0 {
		return optFloat(math.NaN())
	}
	return a.Summary.Median / b.Summary.Median
}

// formatFigure prints x with three significant digits (no exponent for
// the magnitudes the benchmark sees).
func formatFigure(x float64) string {
	switch ax := math.Abs(x); {
	case math.IsNaN(x):
		return "N/A"
	case ax >= 100:
		return fmt.Sprintf("%.0f", x)
	case ax >= 10:
		return fmt.Sprintf("%.1f", x)
	case ax >= 1:
		return fmt.Sprintf("%.2f", x)
	default:
		return fmt.Sprintf("%.3g", x)
	}
}

// formatCell prints "median (min–max)", just the median for one round, or
// "N/A (reason)"; a chosen variant is named in brackets.
func formatCell(c cell) string {
	if c.Summary.N == 0 {
		if c.NA == "-" {
			return "-"
		}
		return "N/A (" + c.NA + ")"
	}
	s := formatFigure(float64(c.Summary.Median))
	if c.Summary.N > 1 {
		s += " (" + formatFigure(float64(c.Summary.Min)) + "–" + formatFigure(float64(c.Summary.Max)) + ")"
	}
	if c.Variant != "" {
		s += " [" + c.Variant + "]"
	}
	return s
}

func formatRatio(x optFloat) string {
	if math.IsNaN(float64(x)) {
		return "N/A"
	}
	return formatFigure(float64(x)) + "×"
}

// renderTable lays the rows out as an aligned text table (a Markdown
// table, so the README can take it as it is).
func renderTable(rows []row) string {
	head := []string{"workload"}
	for _, sys := range tableColumns {
		head = append(head, systemLabels[sys])
	}
	head = append(head, "FF÷River", "FF÷Celery", "FF÷ceiling")
	lines := [][]string{head}
	for _, r := range rows {
		l := []string{r.Label}
		for _, sys := range tableColumns {
			l = append(l, formatCell(r.Cells[sys]))
		}
		lines = append(lines, append(l, formatRatio(r.FFRiver), formatRatio(r.FFCelery), formatRatio(r.FFCeiling)))
	}
	width := make([]int, len(head))
	for _, l := range lines {
		for i, c := range l {
			width[i] = max(width[i], len([]rune(c)))
		}
	}
	var b strings.Builder
	for i, l := range lines {
		writeTableLine(&b, l, width)
		if i == 0 {
			sep := make([]string, len(l))
			for k := range sep {
				sep[k] = strings.Repeat("-", width[k])
			}
			writeTableLine(&b, sep, width)
		}
	}
	return b.String()
}

func writeTableLine(b *strings.Builder, cells []string, width []int) {
	b.WriteString("|")
	for i, c := range cells {
		b.WriteString(" " + c + strings.Repeat(" ", width[i]-len([]rune(c))) + " |")
	}
	b.WriteString("\n")
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
