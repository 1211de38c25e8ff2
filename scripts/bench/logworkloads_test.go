package main

import (
	"strings"
	"testing"
)

// TestTheTaskLogVariantRunsAfterW1AllAndIsPaired: a tree with task logs
// gets W1 "daemon all, task log 10 lines" right after W1 daemon all's
// flow variants (daemon all only), its workflow file logs 10 lines with
// the noop handler, and its ratio is paired with "daemon all" of its round.
func TestTheTaskLogVariantRunsAfterW1AllAndIsPaired(t *testing.T) {
	s := &ffSystem{sysKey: sysFF, env: &benchEnv{plan: planFor(true)}, ff: &flowforge{build: ffBuild{HasFlow: true, HasTaskLogs: true}}}
	var got []string
	for _, j := range s.jobs() {
		if j.Workload == "W1" {
			got = append(got, j.Variant)
		}
	}
	want := "daemon all|daemon all, concurrency key|daemon all, rate limit|daemon all, task log 10 lines|daemon separate|daemon separate c64"
	if g := strings.Join(got, "|"); g != want {
		t.Fatalf("W1 jobs %s, want %s", g, want)
	}
	if f := workflowFiles(false, false, true)[wfLog]; !strings.Contains(f, "handler: noop, params: {log_lines: 10}") {
		t.Fatalf("the task-log workflow: %q", f)
	}
	if _, ok := workflowFiles(true, true, false)[wfLog]; ok {
		t.Fatal("a tree without task logs gets the task-log workflow")
	}
	samples := []sample{
		{System: sysFF, Workload: "W1", Variant: "daemon all", Round: 1, Metrics: map[string]float64{metricTasksPerS: 1000}},
		{System: sysFF, Workload: "W1", Variant: "daemon all, task log 10 lines", Round: 1, Metrics: map[string]float64{metricTasksPerS: 800}},
	}
	addFlowRatios(samples)
	if r := samples[1].Metrics[metricTasksOverUnlimited]; r != 0.8 {
		t.Fatalf("ratio %v, want 0.8", r)
	}
}
