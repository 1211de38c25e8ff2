package cli

import (
	"strings"
	"testing"

	"github.com/flowforge/flowforge/tui/palette"
)

// TestTablesColourEveryStateFromThePalette: the CLI colours every task and
// run state (palette.States, core.TaskStates and core.RunStates) as
// tui/palette does, as the dashboard does (see the tui
// package's TestDashboardColoursEveryStateFromThePalette): READY and
// CANCELLED once had other colours in the CLI than in the dashboard.
func TestTablesColourEveryStateFromThePalette(t *testing.T) {
	t.Parallel()
	on, off := newColours(true), newColours(false)
	for _, s := range palette.States() {
		want, ok := palette.State(on.r, s)
		if !ok {
			t.Fatalf("palette has no colour for %s", s)
		}
		if got := on.state(s); got != want || !strings.Contains(got, "\x1b[") {
			t.Errorf("state %s is drawn %q, want %q", s, got, want)
		}
		if got := off.state(s); got != s {
			t.Errorf("state %s without colour is drawn %q", s, got)
		}
	}
}
