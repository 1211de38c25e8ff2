package tui

import (
	"strings"
	"testing"
	"time"

	"github.com/flowforge/flowforge/core/store"
)

// TestTheLimitsScreenShowsTheHottestKeys: 9 opens the Limits screen; each
// key shows its kind, effective limit (a rate with its period, an
// operator's marked "(set)"), holders, waiters and the oldest wait; a key
// full with waiters is flagged, an idle one dimmed; the header counts them.
func TestTheLimitsScreenShowsTheHottestKeys(t *testing.T) {
	t.Parallel()
	f := newFake()
	perMs := int64(60_000)
	three := 3
	f.limits = []store.FlowLimit{
		{Kind: store.FlowConcurrency, Key: "customer-42", Limit: 3, DefinitionLimit: 5, OperatorLimit: &three, InUse: 3, Waiting: 7, OldestWaitSeconds: 95},
		{Kind: store.FlowRate, Key: "stripe-api", Limit: 100, DefinitionLimit: 100, PerMs: &perMs, Per: time.Minute, InUse: 40, Waiting: 0},
		{Kind: store.FlowRun, Key: "tenant-a", Limit: 2, DefinitionLimit: 2},
	}
	h := newHarness(t, f, Options{})
	h.keys("9")
	if h.m.cur != scrLimits {
		t.Fatalf("9 opened screen %d, want the Limits screen", h.m.cur)
	}
	rows := h.m.screens[scrLimits].(*limitsModel).tbl.rows
	if len(rows) != 3 {
		t.Fatalf("%d rows, want 3", len(rows))
	}
	for i, want := range []string{
		"concurrency | customer-42 | 3 (set) | 3 | 7 | 1m35s",
		"rate | stripe-api | 100/1m0s | 40 | 0 | -",
		"run | tenant-a | 2 | 0 | 0 | -",
	} {
		if got := strings.Join(rows[i].cells, " | "); got != want {
			t.Errorf("row %d: %q, want %q", i, got, want)
		}
	}
	if rows[0].kind != rowWarn || rows[0].flag != "!" {
		t.Errorf("a key full with waiters is not flagged: %+v", rows[0])
	}
	if rows[2].kind != rowDim {
		t.Errorf("an idle key is not dimmed: %+v", rows[2])
	}
	if v := h.view(); !strings.Contains(v, "3 keys · 7 tasks or runs waiting · 1 keys full with waiters") {
		t.Errorf("the header does not count the keys:\n%s", v)
	}
}
