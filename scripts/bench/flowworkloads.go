package main

import (
	"context"
	"fmt"
	"slices"
	"strings"
)

// Flow control (issue 27): W1 and W2 again with a concurrency key on the
// task, and with a rate limit, each set above what the benchmark reaches,
// so that what they measure is the admission's cost (store.Admit after
// every scheduler turn) and not the limit. Current tree only (the before
// column has no flow control).

// Workflows of the flow variants: wfOne's task with a concurrency key,
// and with a rate limit.
const (
	wfConc = "bench-conc"
	wfRate = "bench-rate"
)

// flowConcLimit is the concurrency key's limit: ten times the worker's
// default --concurrency (100, daemon/worker.ConcurrencyDefault), the
// handlers a layout of this benchmark runs at once (every layout has one
// worker), so a key never holds a task back that a worker slot could take.
// What it does bound is the dispatched-but-not-started: at most
// flowConcLimit task runs READY-dispatched or RUNNING at once (W1's
// backlog is released flowConcLimit at a time, not all at once).
const flowConcLimit = 1000

// flowRateLimit per flowRatePer is the rate limit: core.MaxRateLimit per
// second, about three times the highest rate a layout reaches here.
const (
	flowRateLimit = 10000
	flowRatePer   = "1s"
)

// flowFiles are the flow variants' workflow files by name.
func flowFiles() map[string]string {
	return map[string]string{
		wfConc: fmt.Sprintf("name: %s\ntasks:\n  - {name: t, handler: noop, concurrency: {key: bench, limit: %d}}\n", wfConc, flowConcLimit),
		wfRate: fmt.Sprintf("name: %s\ntasks:\n  - {name: t, handler: noop, rate_limit: {key: bench, limit: %d, per: %s}}\n",
			wfRate, flowRateLimit, flowRatePer),
	}
}

// flowVariant is one flow-control variant: its workflow and the suffix
// its variants carry after the unlimited one's name ("daemon all" →
// "daemon all, concurrency key").
type flowVariant struct {
	Suffix string
	WF     string
}

var flowVariants = []flowVariant{
	{Suffix: "concurrency key", WF: wfConc},
	{Suffix: "rate limit", WF: wfRate},
}

// flowVariantName is the variant of base (an unlimited variant) with fv.
func flowVariantName(base string, fv flowVariant) string { return base + ", " + fv.Suffix }

// Metrics of the flow variants' samples (addFlowRatios): the flow figure
// over the unlimited variant's of the same system, workload and round.
const (
	metricTasksOverUnlimited = "tasks_per_s_over_unlimited" // W1
	metricRunsOverUnlimited  = "runs_per_s_over_unlimited"  // W2
	metricP50OverUnlimited   = "p50_over_unlimited"         // W2
)

// flowRatioMetrics are, by workload, the metrics paired and the ratio
// each gives.
var flowRatioMetrics = map[string][][2]string{
	"W1": {{metricTasksPerS, metricTasksOverUnlimited}},
	"W2": {{metricRunsPerS, metricRunsOverUnlimited}, {metricP50, metricP50OverUnlimited}},
}

// flowW1Modes are the W1 layouts the flow variants run: with -quick only
// `daemon all`, else also the separate daemons at defaults.
func flowW1Modes(p plan) []string {
	if p.Quick {
		return []string{"all"}
	}
	return []string{"all", "separate"}
}

// flowW1Jobs are the flow variants of W1 in layout mode, and flowW2Jobs
// W2's: jobs puts each right after the unlimited job it is compared with.
// None for a tree without flow control.
func (s *ffSystem) flowW1Jobs(mode string) []job {
	if s.ff == nil || !s.ff.build.HasFlow || !slices.Contains(flowW1Modes(s.env.plan), mode) {
		return nil
	}
	var out []job
	for _, fv := range flowVariants {
		v := flowVariantName("daemon "+mode, fv)
		s.w1N[v] = s.env.plan.W1N[s.sysKey]
		out = append(out, job{System: s.sysKey, Workload: "W1", Variant: v,
			run: func(ctx context.Context, _ int) (sample, error) { return s.burnDownWF(ctx, mode, v, fv.WF) }})
	}
	return out
}

func (s *ffSystem) flowW2Jobs(mode string) []job {
	if s.ff == nil || !s.ff.build.HasFlow {
		return nil
	}
	var out []job
	for _, fv := range flowVariants {
		out = append(out, job{System: s.sysKey, Workload: "W2", Variant: flowVariantName("daemon "+mode, fv),
			run: func(ctx context.Context, _ int) (sample, error) {
				return s.ff.continuous(ctx, "W2", s.ff.baseDB, mode, fv.WF, s.env.plan.Continuous)
			}})
	}
	return out
}

// addFlowRatios gives every flow variant's sample its ratios to the
// unlimited variant of the same system, workload and round (the variant
// its name extends): the jobs run one after the other in the same round,
// on the same machine's state, so the ratio is paired.
func addFlowRatios(samples []sample) {
	type key struct {
		sys, w, v string
		round     int
	}
	base := map[key]map[string]float64{}
	for _, s := range samples {
		if s.Err == "" {
			base[key{s.System, s.Workload, s.Variant, s.Round}] = s.Metrics
		}
	}
	for i, s := range samples {
		pairs := flowRatioMetrics[s.Workload]
		if s.Err != "" || pairs == nil {
			continue
		}
		for _, fv := range pairedVariants() {
			b, ok := strings.CutSuffix(s.Variant, ", "+fv.Suffix)
			if !ok {
				continue
			}
			um := base[key{s.System, s.Workload, b, s.Round}]
			for _, p := range pairs {
				if x, y := s.Metrics[p[0]], um[p[0]]; x > 0 && y > 0 {
					samples[i].Metrics[p[1]] = x / y
				}
			}
		}
	}
}

// flowRows are the flow variants' lines of workload (W1, W2): each variant's figure beside the
// unlimited one's of the same layout (its own row, above them), and their
// ratio, paired by round (addFlowRatios; the issue-27 target: each at
// least 0.8 for the throughputs).
func flowRows(p plan, workload string) []rowSpec {
	na := map[string]string{sysFFBefore: "no flow control before issue 27", sysRiver: "-", sysCelery: "-", sysCeiling: "-"}
	ff := func(w, v, metric string) rowSpec {
		return rowSpec{Metric: metric, Cells: map[string]pick{sysFF: pickOf(w, v)}, NA: na}
	}
	var rows []rowSpec
	add := func(label string, r rowSpec, higher bool) {
		r.Label, r.HigherBetter = label, higher
		rows = append(rows, r)
	}
	flowLabel := map[string]string{
		wfConc: fmt.Sprintf("concurrency key (limit %d)", flowConcLimit),
		wfRate: fmt.Sprintf("rate limit (%d per %s)", flowRateLimit, flowRatePer),
	}
	for _, mode := range flowW1Modes(p) {
		if workload != "W1" {
			break
		}
		for _, fv := range flowVariants {
			v := flowVariantName("daemon "+mode, fv)
			add(fmt.Sprintf("W1 · daemon %s, %s, tasks/s", mode, flowLabel[fv.WF]), ff("W1", v, metricTasksPerS), true)
			add(fmt.Sprintf("W1 · daemon %s, %s ÷ unlimited, tasks/s, paired", mode, fv.Suffix), ff("W1", v, metricTasksOverUnlimited), true)
		}
	}
	mode := "daemon " + p.FFMode
	for _, fv := range flowVariants {
		if workload != "W2" {
			break
		}
		v := flowVariantName(mode, fv)
		add(fmt.Sprintf("W2 · %s, %s, runs/s", mode, flowLabel[fv.WF]), ff("W2", v, metricRunsPerS), true)
		add(fmt.Sprintf("W2 · %s, %s ÷ unlimited, runs/s, paired", mode, fv.Suffix), ff("W2", v, metricRunsOverUnlimited), true)
		add(fmt.Sprintf("W2 · %s, %s, p50 trigger→completion committed, ms", mode, fv.Suffix), ff("W2", v, metricP50), false)
		add(fmt.Sprintf("W2 · %s, %s ÷ unlimited, p50, paired", mode, fv.Suffix), ff("W2", v, metricP50OverUnlimited), false)
	}
	return rows
}

// flowNote explains the flow rows.
func flowNote(p plan) string {
	return fmt.Sprintf("W1/W2 flow control (issue 27; current tree only): the same workloads with wfOne's task given "+
		"`concurrency: {key: bench, limit: %d}` (%s) or `rate_limit: {key: bench, limit: %d, per: %s}` (%s), one key for every run. "+
		"The limit is ten times the worker's default --concurrency (100: every layout runs one worker), and the rate core.MaxRateLimit a second, "+
		"above the rate any layout reaches, so neither binds: what differs is the scheduler's admission (store.Admit after each turn; "+
		"a task waits READY without a dispatch until it admits it). W1's flow variants run `daemon all`%s; W2's `daemon %s`. "+
		"Each flow job runs right after the unlimited job of its layout in the same round; the ÷ unlimited rows are the ratios of the two, "+
		"round by round (target: throughput within 20 %%, a ratio ≥ 0.8).",
		flowConcLimit, wfConc, flowRateLimit, flowRatePer, wfRate, map[bool]string{true: "", false: " and separate daemons at defaults"}[p.Quick], p.FFMode)
}
