package store

import (
	"fmt"
	"strings"
	"testing"
)

// TestAgedPriorityAgesByPriorityAging: the SQL's aging step is
// PriorityAging, in seconds.
func TestAgedPriorityAgesByPriorityAging(t *testing.T) {
	if want := fmt.Sprintf("/ %d)", int(PriorityAging.Seconds())); !strings.Contains(agedPriority, want) {
		t.Fatalf("agedPriority %q does not divide by PriorityAging (%v): want %q", agedPriority, PriorityAging, want)
	}
}

// AdmitQueries are the statements of an admission round that read a
// key's waiters, by kind, for admit_plan_test.go's EXPLAINs.
func AdmitQueries() map[string]string {
	return map[string]string{"concurrency": qAdmitConcurrency, "rate": qAdmitRate, "run": qAdmitRuns}
}
