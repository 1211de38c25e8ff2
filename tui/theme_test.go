package tui

import (
	"io"
	"strings"
	"testing"

	"github.com/charmbracelet/lipgloss"
	"github.com/muesli/termenv"

	"github.com/flowforge/flowforge/tui/palette"
)

// TestDashboardColoursEveryStateFromThePalette: the dashboard colours
// every task and run state (palette.States, core.TaskStates and
// core.RunStates) as tui/palette does, on every colour profile,
// as the CLI does (see the cli package's
// TestTablesColourEveryStateFromThePalette); text that names no state is
// drawn plain and terminal-safe.
func TestDashboardColoursEveryStateFromThePalette(t *testing.T) {
	t.Parallel()
	for _, profile := range []termenv.Profile{termenv.ANSI, termenv.ANSI256, termenv.TrueColor} {
		r := lipgloss.NewRenderer(io.Discard)
		r.SetColorProfile(profile)
		th := newTheme(r)
		for _, s := range palette.States() {
			want, ok := palette.State(r, s)
			if !ok {
				t.Fatalf("palette has no colour for %s", s)
			}
			if got := th.state(s); got != want || !strings.Contains(got, "\x1b[") {
				t.Errorf("profile %v: state %s is drawn %q, want %q", profile, s, got, want)
			}
		}
		if got := th.state("\x1b[2Jx"); got != `\x1b[2Jx` {
			t.Errorf("profile %v: a non-state is drawn %q", profile, got)
		}
	}
}
