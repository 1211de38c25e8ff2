package main

import (
	"bytes"
	"context"
	"strings"
	"sync"
	"testing"

	"github.com/flowforge/flowforge/e2e/mutation"
)

// TestRunAllRunsE2EMutantsAlone checks the schedule: every mutant runs
// once, the verdicts come back in catalogue order, no e2e mutant overlaps
// another mutant, and the others do overlap (two are held until both have
// started: with one job at a time this would never return), each in a job
// of its own (two mutants running at once never share a job's database),
// the e2e mutant as job 0.
func TestRunAllRunsE2EMutantsAlone(t *testing.T) {
	ms := []mutation.Mutant{
		{ID: "a", Kill: []mutation.Kill{{Pkg: "./core/store"}}},
		{ID: "e", Kill: []mutation.Kill{{Pkg: "./cli"}, {Pkg: "./e2e"}}},
		{ID: "b", Kill: []mutation.Kill{{Pkg: "./daemon/worker"}}},
	}
	var (
		mu               sync.Mutex
		running, maxSeen int
		jobOf            = map[string]int{}
		both             sync.WaitGroup
	)
	both.Add(2)
	var out bytes.Buffer
	verdicts := runAll(context.Background(), ms, 2, func(job, i int, m mutation.Mutant) (string, string) {
		mu.Lock()
		running++
		maxSeen = max(maxSeen, running)
		jobOf[m.ID] = job
		if m.ID == "e" && running != 1 {
			t.Errorf("e2e mutant ran beside %d others", running-1)
		}
		mu.Unlock()
		if m.ID != "e" {
			both.Done()
			both.Wait()
		}
		mu.Lock()
		running--
		mu.Unlock()
		return m.ID + "\n", "v" + m.ID
	}, &out)
	if got, want := strings.Join(verdicts, ","), "va,ve,vb"; got != want {
		t.Errorf("verdicts %s, want %s", got, want)
	}
	if maxSeen != 2 {
		t.Errorf("at most %d mutants ran at once, want 2", maxSeen)
	}
	if lines := strings.Fields(out.String()); len(lines) != 3 || lines[2] != "e" {
		t.Errorf("printed %q, want the two shared mutants then e", lines)
	}
	if jobOf["a"] == jobOf["b"] || jobOf["a"] > 1 || jobOf["b"] > 1 || jobOf["e"] != 0 {
		t.Errorf("jobs %v, want a and b in jobs 0 and 1, one each, and e in job 0", jobOf)
	}
	if jobDatabase(0) == jobDatabase(1) {
		t.Errorf("jobs 0 and 1 share the database %s", jobDatabase(0))
	}
}
