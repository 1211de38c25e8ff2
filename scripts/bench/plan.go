package main

import (
	"fmt"
	"regexp"
	"slices"
	"time"
)

// plan is the sizes of one benchmark run.
type plan struct {
	Quick  bool `json:"quick"`
	Rounds int  `json:"rounds"`
	// W1N is each burn-down's first backlog by system (and w1NRiverMW100
	// for River's slowest variant); MinDrain the drain time a backlog is
	// grown to reach in the following rounds (0: fixed).
	W1N      map[string]int `json:"w1_n"`
	MinDrain time.Duration  `json:"w1_min_drain_ns"`
	MaxN     int            `json:"w1_max_n"`
	// Continuous is W2's and W5's window, 8 triggerers each.
	Continuous time.Duration `json:"continuous_ns"`
	// OpenRate is W2o's offered load in runs a second, for OpenWindow; a
	// system then has OpenDrain after the window to finish what it has
	// been given (the row "finished" says whether it did).
	OpenRate   float64       `json:"w2o_rate"`
	OpenWindow time.Duration `json:"w2o_window_ns"`
	OpenDrain  time.Duration `json:"w2o_drain_ns"`
	ChainRuns  int           `json:"w3_runs"`
	// History is W5's finished task runs; BufferRuns the serial runs of
	// the buffers check.
	History    int `json:"w5_history"`
	BufferRuns int `json:"w5_buffer_check_runs"`
	// Pruned is W7's backdated finished task runs, pruned before it runs.
	Pruned  int           `json:"w7_pruned"`
	Ceiling time.Duration `json:"ceiling_ns"`
	// FFMode is the daemon layout of FlowForge's W2–W5 ("all" or
	// "separate"); W1 runs both.
	FFMode string   `json:"ff_mode"`
	Only   []string `json:"only,omitempty"`
	// Jobs is -jobs: a regular expression a job's name (jobName, e.g.
	// "W2 · daemon all, transition stream") must match to run; "" runs
	// every job -only lets through.
	Jobs   string `json:"jobs,omitempty"`
	jobsRE *regexp.Regexp
}

// withJobs returns p filtered to the jobs whose name matches expr (see
// plan.Jobs). Errors: expr is not a regular expression (regexp syntax).
func (p plan) withJobs(expr string) (plan, error) {
	if expr == "" {
		return p, nil
	}
	re, err := regexp.Compile(expr)
	if err != nil {
		return p, fmt.Errorf("-jobs: %w", err)
	}
	p.Jobs, p.jobsRE = expr, re
	return p, nil
}

// jobName is a job's name as -jobs matches it and as the results table
// labels its rows: workload, a middle dot, variant.
func jobName(j job) string { return j.Workload + " · " + j.Variant }

// wantsJob reports whether -jobs lets j run (always, without -jobs). The
// paired rows (÷ off, ÷ unlimited) need their base job in the same
// round, so a filter for a variant names its base too, e.g.
// '^W2 · daemon all(, transition stream)?$'.
func (p plan) wantsJob(j job) bool {
	return p.jobsRE == nil || p.jobsRE.MatchString(jobName(j))
}

// w1NRiverMW100 keys plan.W1N's first backlog of River at MaxWorkers 100
// with its default fetch settings: about 100 jobs per 100 ms fetch cooldown,
// a tenth of its other variants' rate.
const w1NRiverMW100 = sysRiver + " " + varRiverMW100

// planFor returns make bench's plan, or make bench-quick's.
func planFor(quick bool) plan {
	if quick {
		return plan{Quick: true, Rounds: 1,
			W1N:        map[string]int{sysFF: 1000, sysFFBefore: 1000, sysRiver: 20000, w1NRiverMW100: 5000, sysCelery: 1000},
			MaxN:       20000,
			Continuous: 2 * time.Second, ChainRuns: 5,
			OpenRate: 500, OpenWindow: 10 * time.Second, OpenDrain: 5 * time.Second,
			History: 10_000, BufferRuns: 10, Pruned: 200_000, Ceiling: 2 * time.Second, FFMode: "all"}
	}
	return plan{Rounds: 3,
		W1N:        map[string]int{sysFF: 3000, sysFFBefore: 3000, sysRiver: 150000, w1NRiverMW100: 15000, sysCelery: 8000},
		MinDrain:   10 * time.Second,
		MaxN:       1_000_000,
		Continuous: 20 * time.Second, ChainRuns: 30,
		OpenRate: 500, OpenWindow: 60 * time.Second, OpenDrain: 30 * time.Second,
		History: 1_000_000, BufferRuns: 50, Pruned: 2_000_000, Ceiling: 5 * time.Second, FFMode: "all"}
}

// workloadIDs are the workloads -only can name: W1…W7, W2o (W2's open
// loop), W4e (W4 through a for_each) and C (the ceilings).
func workloadIDs() []string {
	return []string{"W1", "W2", workloadOpen, "W3", "W4", workloadForEach, "W5", "W6", "W7", "C"}
}

// workloadForEach is W4's fan-out made by a for_each (ffworkloads.go).
const workloadForEach = "W4e"

// workloadOpen is W2's open loop: a fixed offered rate (see openworkloads.go).
const workloadOpen = "W2o"

// wants reports whether -only lets system/workload run: entries that name
// a workload (workloadIDs) filter workloads, the others systems; an empty
// filter lets everything run.
func (p plan) wants(system, workload string) bool {
	var systems, workloads []string
	for _, o := range p.Only {
		if slices.Contains(workloadIDs(), o) {
			workloads = append(workloads, o)
		} else {
			systems = append(systems, o)
		}
	}
	return (len(systems) == 0 || slices.Contains(systems, system)) &&
		(len(workloads) == 0 || slices.Contains(workloads, workload))
}

// nextN sizes the next burn-down backlog from one that drained n tasks
// in drain: one that drained faster than minDrain, or slower than twice
// that, is scaled to drain in 1.25 × minDrain, within [1, maxN]; any other
// is kept. minDrain 0 keeps every backlog.
func nextN(n int, drain, minDrain time.Duration, maxN int) int {
	if minDrain <= 0 || drain <= 0 || (drain >= minDrain && drain <= 2*minDrain) {
		return n
	}
	scaled := int(float64(n) * 1.25 * minDrain.Seconds() / drain.Seconds())
	return min(max(scaled, 1), maxN)
}

// burnDownSized runs a burn-down of *n tasks, again with a larger backlog
// (at most twice more) while it drains faster than p.MinDrain, and leaves
// in *n the size for the next round (nextN).
func (p plan) burnDownSized(n *int, run func(n int) (sample, error)) (sample, error) {
	for attempt := 0; ; attempt++ {
		s, err := run(*n)
		if err != nil {
			return s, err
		}
		drain := time.Duration(s.Metrics[metricDrainS] * float64(time.Second))
		next := nextN(*n, drain, p.MinDrain, p.MaxN)
		short := drain < p.MinDrain && next > *n
		*n = next
		if !short || attempt == 2 {
			return s, nil
		}
	}
}

// wantsSystem reports whether -only lets any workload of system run.
func (p plan) wantsSystem(system string) bool {
	for _, w := range workloadIDs() {
		if p.wants(system, w) {
			return true
		}
	}
	return false
}
