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
