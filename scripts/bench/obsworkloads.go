package main

import (
	"context"
	"fmt"
)

// Observability overhead (issue 28): W2 with `daemon all` again, once with
// the transition stream on (the publisher's --events-exchange: every
// transition written to the stream table by the database's triggers in its
// own transaction, and published to a topic exchange no queue is bound
// to), once with every span traced (OTEL_TRACES_EXPORTER=console,
// OTEL_TRACES_SAMPLER=always_on, the daemon's standard output, where the
// console exporter writes, to /dev/null). Each is paired with W2's
// `daemon all` of the same round (addFlowRatios); the target is
// each within 15 %. Current tree only (the before column has neither).

// The layouts of the two variants: `daemon all` with the variant's
// environment (obsEnv).
const (
	modeAllStream = "all, transition stream"
	modeAllTraced = "all, tracing 100%"
)

// obsEnv is the environment each variant's daemon adds to the default.
var obsEnv = map[string][]string{
	modeAllStream: {"FLOWFORGE_EVENTS_EXCHANGE=ffbench.events"},
	modeAllTraced: {"OTEL_TRACES_EXPORTER=console", "OTEL_TRACES_SAMPLER=always_on"},
}

// obsVariants are the two variants, named like flow variants ("daemon
// all, transition stream") so that addFlowRatios pairs them with "daemon
// all".
var obsVariants = []flowVariant{
	{Suffix: "transition stream", WF: wfOne},
	{Suffix: "tracing 100%", WF: wfOne},
}

// obsModes maps each variant to its layout.
var obsModes = map[string]string{"transition stream": modeAllStream, "tracing 100%": modeAllTraced}

// obsW2Jobs are the two variants of W2, for a tree that has the stream
// and tracing, when W2's layout is `daemon all`.
func (s *ffSystem) obsW2Jobs(mode string) []job {
	if s.ff == nil || !s.ff.build.HasStream || mode != "all" {
		return nil
	}
	var out []job
	for _, ov := range obsVariants {
		m := obsModes[ov.Suffix]
		out = append(out, job{System: s.sysKey, Workload: "W2", Variant: flowVariantName("daemon "+mode, ov),
			run: func(ctx context.Context, _ int) (sample, error) {
				return s.ff.continuous(ctx, "W2", s.ff.baseDB, m, wfOne, s.env.plan.Continuous)
			}})
	}
	return out
}

// obsRows are the variants' W2 lines: runs/s and p50, and their ratios to
// `daemon all`'s, paired by round.
func obsRows() []rowSpec {
	na := map[string]string{sysFFBefore: "no stream nor tracing before issue 28", sysRiver: "-", sysCelery: "-", sysCeiling: "-"}
	var rows []rowSpec
	for _, ov := range obsVariants {
		v := flowVariantName("daemon all", ov)
		cell := map[string]pick{sysFF: pickOf("W2", v)}
		rows = append(rows,
			rowSpec{Label: fmt.Sprintf("W2 · daemon all, %s, runs/s", ov.Suffix), Metric: metricRunsPerS, HigherBetter: true, Cells: cell, NA: na},
			rowSpec{Label: fmt.Sprintf("W2 · daemon all, %s ÷ off, runs/s, paired", ov.Suffix), Metric: metricRunsOverUnlimited, HigherBetter: true, Cells: cell, NA: na},
			rowSpec{Label: fmt.Sprintf("W2 · daemon all, %s, p50 trigger→completion committed, ms", ov.Suffix), Metric: metricP50, Cells: cell, NA: na},
			rowSpec{Label: fmt.Sprintf("W2 · daemon all, %s ÷ off, p50, paired", ov.Suffix), Metric: metricP50OverUnlimited, Cells: cell, NA: na},
		)
	}
	return rows
}

// obsNote explains the observability rows.
func obsNote() string {
	return "W2 transition stream and tracing (issue 28; current tree only): W2 with `daemon all` and FLOWFORGE_EVENTS_EXCHANGE=ffbench.events " +
		"(every task and run transition written to the stream table by triggers, in its transaction, and published by the publisher to a topic exchange " +
		"no queue is bound to), and again with OTEL_TRACES_EXPORTER=console and OTEL_TRACES_SAMPLER=always_on (every span of every run recorded " +
		"and written as JSON to the daemon's standard output, sent to /dev/null). Each job runs right after W2's `daemon all` job in the same round; " +
		"the ÷ off rows are their ratios, round by round (target: throughput at least 0.85)."
}
