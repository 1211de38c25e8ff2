package main

import (
	"strings"
	"testing"
)

func TestRenderStatements(t *testing.T) {
	long := "UPDATE task_runs SET state = 'SUCCEEDED', finished_at = now() WHERE id = ANY($1) AND fencing_token = ANY($2) RETURNING run_id"
	out := renderStatements(map[string][]statementCost{
		"drain": {
			{Query: long, CallsPerTask: 0.25, ExecMsPerCall: 0.412, PlanMsPerCall: 0.0831, PlansPerCall: 1, BuffersPerCall: 41.5, WALBytesPerCall: 1520},
			{Query: "COMMIT", CallsPerTask: 0.5},
		},
		"trigger": {{Query: "SELECT 1", CallsPerTask: 1, ExecMsPerCall: 0.01}},
	}, 1)
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if len(lines) != 3 {
		t.Fatalf("%d lines, want a header, the trigger's statement and the drain's first (limit 1):\n%s", len(lines), out)
	}
	for _, want := range []string{"calls/task", "exec ms", "plan ms", "plans", "buffers", "WAL bytes"} {
		if !strings.Contains(lines[0], want) {
			t.Errorf("header %q lacks %q", lines[0], want)
		}
	}
	if !strings.HasPrefix(strings.TrimSpace(lines[1]), "trigger") || !strings.HasPrefix(strings.TrimSpace(lines[2]), "drain") {
		t.Errorf("phases out of order:\n%s", out)
	}
	f := strings.Fields(lines[2])
	if strings.Join(f[1:7], " ") != "0.25 0.412 0.0831 1.00 41.5 1520" {
		t.Errorf("drain figures %v, want calls/task, exec ms, plan ms, plans, buffers, WAL bytes", f[1:7])
	}
	if !strings.HasSuffix(lines[2], "…") || strings.Contains(lines[2], "RETURNING") {
		t.Errorf("a long statement is not cut to 80 characters: %q", lines[2])
	}
}

// TestRenderCostsOfBothLayouts: each layout at defaults gets its block,
// with every daemon's CPU per task and the statement table.
func TestRenderCostsOfBothLayouts(t *testing.T) {
	drain := cost{Tasks: 1000, PostgresCPUms: 0.35, CommitsWAL: 0.8, Daemons: map[string]daemonUsage{
		"scheduler": {CPUSeconds: 0.2}, "publisher": {CPUSeconds: 0.1}, "worker": {CPUSeconds: 0.4, PeakRSSMB: 30},
	}, TopStatements: []statementCost{{Query: "SELECT claim", CallsPerTask: 0.1}}}
	samples := []sample{
		{System: sysFF, Workload: "W1", Variant: "daemon separate", Round: 1, Cost: map[string]cost{"trigger": {Tasks: 1000}, "drain": drain}},
		{System: sysFF, Workload: "W1", Variant: "daemon all", Round: 1, Cost: map[string]cost{"trigger": {Tasks: 1000}, "drain": {Tasks: 1000,
			Daemons: map[string]daemonUsage{"all": {CPUSeconds: 0.5}}}}},
	}
	out := renderCosts(samples)
	for _, want := range []string{
		"FlowForge, W1 daemon all (defaults): cost per task", "FlowForge, W1 daemon separate (defaults): cost per task",
		"CPU ms: daemon all", "CPU ms: daemon scheduler", "CPU ms: daemon publisher", "CPU ms: daemon worker",
		"CPU ms: PostgreSQL", "CPU ms: RabbitMQ", "SELECT claim",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("cost report lacks %q:\n%s", want, out)
		}
	}
	for _, l := range strings.Split(out, "\n") {
		if strings.Contains(l, "CPU ms: daemon worker") && !strings.HasSuffix(strings.TrimSpace(l), "0.4          0.4") {
			t.Errorf("worker CPU line %q, want 0.4 s over 1000 tasks = 0.4 ms (drain and total)", l)
		}
	}
}
