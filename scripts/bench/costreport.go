package main

import (
	"fmt"
	"strings"
)

// costLine is one figure of the cost table: its label and how to read it
// from a phase's cost.
type costLine struct {
	label string
	get   func(c cost) float64
}

var costLines = []costLine{
	{"write commits (WAL COMMIT records)", func(c cost) float64 { return c.CommitsWAL }},
	{"transactions (xact_commit, read-only too)", func(c cost) float64 { return c.CommitsAll }},
	{"statements (pg_stat_statements calls)", func(c cost) float64 { return c.Statements }},
	{"rows written (ins+upd+del)", func(c cost) float64 { return c.Rows }},
	{"WAL bytes", func(c cost) float64 { return c.WALBytes }},
	{"AMQP messages published", func(c cost) float64 { return c.AMQPPublished }},
	{"AMQP messages delivered", func(c cost) float64 { return c.AMQPDelivered }},
	{"AMQP acks", func(c cost) float64 { return c.AMQPAcked }},
	{"AMQP publisher confirms", func(c cost) float64 { return c.AMQPConfirmed }},
	{"CPU ms: ffctl processes / fftrigger", func(c cost) float64 { return c.ClientCPUms }},
	{"CPU ms: PostgreSQL", func(c cost) float64 { return c.PostgresCPUms }},
	{"CPU ms: RabbitMQ", func(c cost) float64 { return c.RabbitCPUms }},
}

// renderCosts prints FlowForge's cost per task of W1 in both layouts at
// the tree's defaults (trigger and drain phases, medians over the
// rounds), each daemon's CPU and peak RSS, and the statements of the last
// round.
func renderCosts(samples []sample) string {
	var b strings.Builder
	for _, sys := range []string{sysFF, sysFFBefore} {
		for _, v := range []string{"daemon all", "daemon separate"} {
			var picked []sample
			for _, s := range samples {
				if s.System == sys && s.Workload == "W1" && s.Variant == v && s.Err == "" && s.Cost != nil {
					picked = append(picked, s)
				}
			}
			if len(picked) > 0 {
				b.WriteString(renderCost(systemLabels[sys]+", W1 "+v+" (defaults)", picked))
			}
		}
	}
	return b.String()
}

func renderCost(title string, picked []sample) string {
	var b strings.Builder
	fmt.Fprintf(&b, "\n%s: cost per task (median of %d rounds)\n", title, len(picked))
	fmt.Fprintf(&b, "  %-44s %12s %12s %12s\n", "", "trigger", "drain", "total")
	for _, l := range costLines {
		t := medianOf(picked, func(s sample) float64 { return l.get(s.Cost["trigger"]) })
		d := medianOf(picked, func(s sample) float64 { return l.get(s.Cost["drain"]) })
		fmt.Fprintf(&b, "  %-44s %12s %12s %12s\n", l.label, formatFigure(t), formatFigure(d), formatFigure(t+d))
	}
	last := picked[len(picked)-1]
	for _, role := range sortedKeys(last.Cost["drain"].Daemons) {
		cpu := medianOf(picked, func(s sample) float64 {
			c := s.Cost["drain"]
			return c.Daemons[role].CPUSeconds * 1000 / float64(max(c.Tasks, 1))
		})
		fmt.Fprintf(&b, "  %-44s %12s %12s %12s\n", "CPU ms: daemon "+role, "-", formatFigure(cpu), formatFigure(cpu))
	}
	for _, role := range sortedKeys(last.Cost["drain"].Daemons) {
		rss := medianOf(picked, func(s sample) float64 { return s.Cost["drain"].Daemons[role].PeakRSSMB })
		fmt.Fprintf(&b, "  peak RSS of daemon %-25s %12s MB\n", role, formatFigure(rss))
	}
	fmt.Fprintf(&b, "  statements per task (round %d), the most called first:\n", last.Round)
	b.WriteString(renderStatements(map[string][]statementCost{
		"trigger": last.Cost["trigger"].TopStatements, "drain": last.Cost["drain"].TopStatements}, 12))
	return b.String()
}

// renderStatements lays out the statements of each phase (trigger, then
// drain; at most limit each) as a table: calls per task and, per call,
// execution and planning ms, plans, shared buffers and WAL bytes, then the
// statement's text cut to 80 characters.
func renderStatements(phases map[string][]statementCost, limit int) string {
	var b strings.Builder
	line := "    %-7s %10s %10s %10s %10s %10s %10s  %s\n"
	fmt.Fprintf(&b, line, "phase", "calls/task", "exec ms", "plan ms", "plans", "buffers", "WAL bytes", "statement (per call)")
	for _, ph := range []string{"trigger", "drain"} {
		for i, st := range phases[ph] {
			if i == limit {
				break
			}
			q := st.Query
			if r := []rune(q); len(r) > 80 {
				q = string(r[:80]) + "…"
			}
			fmt.Fprintf(&b, line, ph, formatFigure(st.CallsPerTask), formatFigure(st.ExecMsPerCall), formatFigure(st.PlanMsPerCall),
				formatFigure(st.PlansPerCall), formatFigure(st.BuffersPerCall), formatFigure(st.WALBytesPerCall), q)
		}
	}
	return b.String()
}

func medianOf(ss []sample, f func(sample) float64) float64 {
	xs := make([]float64, len(ss))
	for i, s := range ss {
		xs[i] = f(s)
	}
	return float64(summarize(xs).Median)
}
