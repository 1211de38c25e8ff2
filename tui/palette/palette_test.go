package palette

import (
	"io"
	"slices"
	"strings"
	"testing"

	"github.com/charmbracelet/lipgloss"
	"github.com/muesli/termenv"

	"github.com/flowforge/flowforge/core"
)

func renderer(p termenv.Profile) *lipgloss.Renderer {
	r := lipgloss.NewRenderer(io.Discard)
	r.SetColorProfile(p)
	return r
}

// TestEveryStateHasAColour: every task and run state is coloured, on the
// 16-colour profile with its own ANSI colour, and plain under Ascii.
func TestEveryStateHasAColour(t *testing.T) {
	t.Parallel()
	states := States()
	if want := len(core.TaskStates) + 1; len(states) != want { // FAILED is a run state only
		t.Fatalf("States() = %v, want %d names", states, want)
	}
	for _, s := range core.RunStates {
		if !slices.Contains(states, string(s)) {
			t.Errorf("States() = %v lacks run state %s", states, s)
		}
	}
	ansi, plain := renderer(termenv.ANSI), renderer(termenv.Ascii)
	for _, s := range states {
		spec, ok := Of(s)
		if !ok || spec.Colour == Default {
			t.Errorf("state %s has no colour (%+v, %v)", s, spec, ok)
			continue
		}
		code, _, _ := spec.Colour.values()
		got, _ := State(ansi, s)
		if !strings.Contains(got, "\x1b[") || !strings.Contains(got, s) {
			t.Errorf("State(ANSI, %s) = %q: not coloured", s, got)
		}
		if want := spec.Style(ansi).Render(s); got != want {
			t.Errorf("State(ANSI, %s) = %q, want %q", s, got, want)
		}
		sgr := termenv.ANSI.Color(code).Sequence(false) + "m"
		if !strings.Contains(got, "["+sgr) && !strings.Contains(got, ";"+sgr) {
			t.Errorf("State(ANSI, %s) = %q: not in ANSI colour %s (SGR %s)", s, got, code, sgr)
		}
		if got, _ := State(plain, s); got != s {
			t.Errorf("State(Ascii, %s) = %q, want it plain", s, got)
		}
	}
	if got, ok := State(ansi, "\x1b[2Jnot a state"); ok || got != "\x1b[2Jnot a state" {
		t.Errorf("State of a non-state = %q, %v: want it unchanged and not ok", got, ok)
	}
}

// TestColoursAreDistinct: no two colours share a value on any profile.
func TestColoursAreDistinct(t *testing.T) {
	t.Parallel()
	seen := map[string]Colour{}
	for c := Grey; c <= Pink; c++ {
		ansi, light, dark := c.values()
		for _, v := range []string{"ansi " + ansi, "light " + light, "dark " + dark} {
			if strings.HasSuffix(v, " ") {
				t.Errorf("colour %d has no %s value", c, v)
			}
			if o, dup := seen[v]; dup {
				t.Errorf("colours %d and %d share %s", o, c, v)
			}
			seen[v] = c
		}
	}
	if _, ok := Default.Color().(lipgloss.NoColor); !ok {
		t.Errorf("Default is %T, want NoColor", Default.Color())
	}
}
