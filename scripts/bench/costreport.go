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

// renderCosts prints FlowForge's cost per task of W1 (trigger and drain
// phases, medians over the rounds), the peak RSS of each daemon and the
// most called statements of the last round's drain.
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
				b.WriteString(renderCost(systemLabels[sys]+", W1 "+v, picked))
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
		rss := medianOf(picked, func(s sample) float64 { return s.Cost["drain"].Daemons[role].PeakRSSMB })
		fmt.Fprintf(&b, "  peak RSS of daemon %-25s %12s MB\n", role, formatFigure(rss))
	}
	fmt.Fprintf(&b, "  most called statements per task (round %d):\n", last.Round)
	for _, ph := range []string{"trigger", "drain"} {
		for i, st := range last.Cost[ph].TopStatements {
			if i == 12 {
				break
			}
			q := st.Query
			if len(q) > 90 {
				q = q[:90] + "…"
			}
			fmt.Fprintf(&b, "    %-7s %7.2f calls %7.1f buf/call  %s\n", ph, st.CallsPerTask, st.BuffersPerCall, q)
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
