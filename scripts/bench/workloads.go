package main

import (
	"context"
	"fmt"
	"math"
	"time"
)

// System keys (results) and their column labels (table).
const (
	sysFF       = "flowforge"
	sysFFBefore = "flowforge-" + beforeCommit
	sysRiver    = "river"
	sysCelery   = "celery"
	sysCeiling  = "ceiling"
)

var systemLabels = map[string]string{
	sysFF: "FlowForge", sysFFBefore: "FF " + beforeCommit, sysRiver: "River", sysCelery: "Celery", sysCeiling: "ceiling",
}

// job is one workload (variant) of one system; run measures it once.
type job struct {
	System, Workload, Variant string
	// FirstRoundOnly marks deterministic checks, measured once.
	FirstRoundOnly bool
	run            func(ctx context.Context, round int) (sample, error)
}

// step is a job in its round.
type step struct {
	Round int
	Job   job
}

// schedule interleaves the rounds: every system's jobs of round 1, then of
// round 2, and so on, so that a drift of the shared machine spreads over
// all systems. The order of the systems rotates by one each round (no
// system always runs first, right after another's load); a system's own
// jobs keep their order.
func schedule(rounds int, systems []string, jobs []job) []step {
	var out []step
	for r := 1; r <= rounds; r++ {
		for i := range systems {
			sys := systems[(i+r-1)%len(systems)]
			for _, j := range jobs {
				if j.System == sys && (r == 1 || !j.FirstRoundOnly) {
					out = append(out, step{Round: r, Job: j})
				}
			}
		}
	}
	return out
}

// runSteps runs the schedule one job at a time; a failed job is recorded
// with its error and the run goes on.
func runSteps(ctx context.Context, env *benchEnv, steps []step) []sample {
	var out []sample
	for i, st := range steps {
		if ctx.Err() != nil {
			break
		}
		j := st.Job
		env.log("round %d, %d/%d: %s %s %s", st.Round, i+1, len(steps), j.System, j.Workload, j.Variant)
		t := time.Now()
		s, err := j.run(ctx, st.Round)
		s.System, s.Workload, s.Variant, s.Round = j.System, j.Workload, j.Variant, st.Round
		for k, v := range s.Metrics {
			if math.IsNaN(v) || math.IsInf(v, 0) {
				delete(s.Metrics, k)
			}
		}
		if err != nil {
			s.Err = err.Error()
			env.log("  failed: %v", err)
		} else {
			env.log("  %s (%.1f s)", formatMetrics(s.Metrics), time.Since(t).Seconds())
		}
		out = append(out, s)
	}
	return out
}

func formatMetrics(m map[string]float64) string {
	s := ""
	for _, k := range sortedKeys(m) {
		s += fmt.Sprintf("%s=%.4g ", k, m[k])
	}
	return s
}
