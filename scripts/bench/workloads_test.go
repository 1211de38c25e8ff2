package main

import (
	"fmt"
	"strings"
	"testing"
)

func TestScheduleInterleavesRoundsAndRotatesSystems(t *testing.T) {
	jobs := []job{
		{System: "a", Workload: "W1"}, {System: "a", Workload: "W2"},
		{System: "b", Workload: "W1"},
		{System: "c", Workload: "W1"}, {System: "c", Workload: "W5", FirstRoundOnly: true},
	}
	var got []string
	for _, s := range schedule(3, []string{"a", "b", "c"}, jobs) {
		got = append(got, fmt.Sprintf("%d%s%s", s.Round, s.Job.System, s.Job.Workload))
	}
	want := "1aW1 1aW2 1bW1 1cW1 1cW5 " + // round 1: a, b, c
		"2bW1 2cW1 2aW1 2aW2 " + // round 2 starts with b; c's check only in round 1
		"3cW1 3aW1 3aW2 3bW1"
	if strings.Join(got, " ") != want {
		t.Errorf("schedule:\n got %s\nwant %s", strings.Join(got, " "), want)
	}
}

func TestScheduleRunsEveryRoundOfEverySystemBeforeTheNextRound(t *testing.T) {
	jobs := []job{{System: "x", Workload: "W1"}, {System: "y", Workload: "W1"}}
	last := 0
	for _, s := range schedule(4, []string{"x", "y"}, jobs) {
		if s.Round < last {
			t.Fatalf("round %d after round %d", s.Round, last)
		}
		last = s.Round
	}
	if n := len(schedule(4, []string{"x", "y"}, jobs)); n != 8 {
		t.Errorf("%d steps, want 8", n)
	}
}
