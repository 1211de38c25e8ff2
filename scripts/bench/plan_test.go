package main

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestNextN(t *testing.T) {
	tests := []struct {
		name     string
		n        int
		drain    time.Duration
		minDrain time.Duration
		maxN     int
		want     int
	}{
		{"no minimum keeps the backlog", 1000, time.Second, 0, 1e6, 1000},
		{"long enough is kept", 1000, 15 * time.Second, 10 * time.Second, 1e6, 1000},
		{"too fast grows to 1.25 × the minimum", 1000, 2 * time.Second, 10 * time.Second, 1e6, 6250},
		{"far too slow shrinks", 10000, 50 * time.Second, 10 * time.Second, 1e6, 2500},
		{"growth is capped", 1000, time.Second, 10 * time.Second, 5000, 5000},
		{"no drain measured keeps the backlog", 1000, 0, 10 * time.Second, 1e6, 1000},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := nextN(tt.n, tt.drain, tt.minDrain, tt.maxN); got != tt.want {
				t.Errorf("nextN(%d, %v, %v, %d) = %d, want %d", tt.n, tt.drain, tt.minDrain, tt.maxN, got, tt.want)
			}
		})
	}
}

func TestBurnDownSizedRerunsAShortDrain(t *testing.T) {
	p := plan{MinDrain: 10 * time.Second, MaxN: 1e6}
	var sizes []int
	run := func(n int) (sample, error) {
		sizes = append(sizes, n)
		// 1,000 tasks a second.
		return sample{Metrics: map[string]float64{metricDrainS: float64(n) / 1000}}, nil
	}
	n := 2000
	s, err := p.burnDownSized(&n, run)
	if err != nil {
		t.Fatal(err)
	}
	if len(sizes) != 2 || sizes[0] != 2000 || sizes[1] != 12500 {
		t.Errorf("ran with %v, want [2000 12500]", sizes)
	}
	if s.Metrics[metricDrainS] != 12.5 || n != 12500 {
		t.Errorf("kept the %v s drain and n %d, want 12.5 s and 12500", s.Metrics[metricDrainS], n)
	}
}

func TestBurnDownSizedGivesUpAfterTwoReruns(t *testing.T) {
	p := plan{MinDrain: 10 * time.Second, MaxN: 1e6}
	runs := 0
	run := func(n int) (sample, error) {
		runs++
		return sample{Metrics: map[string]float64{metricDrainS: 1}}, nil // never longer
	}
	n := 10
	if _, err := p.burnDownSized(&n, run); err != nil {
		t.Fatal(err)
	}
	if runs != 3 {
		t.Errorf("%d runs, want 3", runs)
	}
}

func TestBurnDownSizedReturnsTheError(t *testing.T) {
	p := plan{MinDrain: 10 * time.Second, MaxN: 1e6}
	boom := errors.New("boom")
	n := 10
	if _, err := p.burnDownSized(&n, func(int) (sample, error) { return sample{}, boom }); !errors.Is(err, boom) {
		t.Errorf("err = %v, want boom", err)
	}
}

func TestPlanWants(t *testing.T) {
	tests := []struct {
		only             []string
		system, workload string
		want             bool
	}{
		{nil, sysRiver, "W1", true},
		{[]string{"river"}, sysRiver, "W3", true},
		{[]string{"river"}, sysFF, "W1", false},
		{[]string{"W1"}, sysCelery, "W1", true},
		{[]string{"W1"}, sysCelery, "W2", false},
		{[]string{"river", "W2"}, sysRiver, "W2", true},
		{[]string{"river", "W2"}, sysRiver, "W1", false},
		{[]string{"C"}, sysCeiling, "C", true},
		{[]string{"flowforge", "W2o"}, sysFF, workloadOpen, true},
		{[]string{"flowforge", "W2o"}, sysFF, "W2", false},
		{[]string{"W2"}, sysRiver, workloadOpen, false},
	}
	for _, tt := range tests {
		p := plan{Only: tt.only}
		if got := p.wants(tt.system, tt.workload); got != tt.want {
			t.Errorf("only %v: wants(%s, %s) = %v, want %v", tt.only, tt.system, tt.workload, got, tt.want)
		}
	}
}

func TestJobsFilterMatchesWorkloadAndVariant(t *testing.T) {
	pair := `^W2 · daemon all(, transition stream)?$`
	tests := []struct {
		expr     string
		workload string
		variant  string
		want     bool
	}{
		{"", "W1", "daemon separate", true},
		{pair, "W2", "daemon all", true},
		{pair, "W2", "daemon all, transition stream", true},
		{pair, "W2", "daemon all, tracing 100%", false},
		{pair, "W5", "daemon all", false},
		{"tracing", "W2", "daemon all, tracing 100%", true},
	}
	for _, tt := range tests {
		p, err := planFor(true).withJobs(tt.expr)
		if err != nil {
			t.Fatalf("withJobs(%q): %v", tt.expr, err)
		}
		j := job{System: sysFF, Workload: tt.workload, Variant: tt.variant}
		if got := p.wantsJob(j); got != tt.want {
			t.Errorf("-jobs %q: wantsJob(%q) = %v, want %v", tt.expr, jobName(j), got, tt.want)
		}
	}
	if _, err := planFor(true).withJobs("W2 (daemon"); err == nil || !strings.Contains(err.Error(), "-jobs: error parsing regexp") {
		t.Errorf("withJobs of an unbalanced parenthesis: err %v, want the flag named and regexp's error", err)
	}
}

func TestPlansFitTheirPromises(t *testing.T) {
	full, quick := planFor(false), planFor(true)
	if full.Rounds < 3 || full.MinDrain < 10*time.Second || full.Continuous != 20*time.Second || full.History != 1_000_000 {
		t.Errorf("make bench plan %+v: want ≥ 3 rounds, 10 s drains, 20 s windows, a 1M history", full)
	}
	if quick.Rounds != 1 || !quick.Quick {
		t.Errorf("make bench-quick plan %+v: want one round", quick)
	}
	if full.OpenRate != 500 || full.OpenWindow != 60*time.Second || quick.OpenRate != 500 || quick.OpenWindow > 10*time.Second {
		t.Errorf("W2o: full %v/s for %v, quick %v/s for %v; want 500/s for 60 s, and at most 10 s quick",
			full.OpenRate, full.OpenWindow, quick.OpenRate, quick.OpenWindow)
	}
}
