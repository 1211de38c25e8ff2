package tui

import (
	"io"

	"github.com/charmbracelet/bubbles/textinput"
	"os"

	"github.com/charmbracelet/lipgloss"
	"github.com/muesli/termenv"
)

// theme holds every style the views use, built once per program from one
// renderer. With colour off (NO_COLOR, or tests) the renderer has the Ascii
// profile and every style renders as plain text; the views never rely on
// colour alone (the cursor is ">", marks are "*", expired leases "!").
type theme struct {
	brand     lipgloss.Style
	tab       lipgloss.Style
	tabActive lipgloss.Style
	header    lipgloss.Style
	colHeader lipgloss.Style
	cursor    lipgloss.Style
	marked    lipgloss.Style
	warn      lipgloss.Style
	bad       lipgloss.Style
	dim       lipgloss.Style
	good      lipgloss.Style
	prompt    lipgloss.Style
	plain     lipgloss.Style
	states    map[string]lipgloss.Style
}

// newRenderer returns the renderer for out (nil: standard output); noColor
// forces the Ascii profile.
func newRenderer(out io.Writer, noColor bool) *lipgloss.Renderer {
	if out == nil {
		out = os.Stdout
	}
	r := lipgloss.NewRenderer(out)
	if noColor {
		r.SetColorProfile(termenv.Ascii)
	}
	return r
}

func newTheme(r *lipgloss.Renderer) *theme {
	s := r.NewStyle
	red := lipgloss.AdaptiveColor{Light: "160", Dark: "203"}
	yellow := lipgloss.AdaptiveColor{Light: "136", Dark: "221"}
	green := lipgloss.AdaptiveColor{Light: "28", Dark: "114"}
	blue := lipgloss.AdaptiveColor{Light: "25", Dark: "75"}
	grey := lipgloss.AdaptiveColor{Light: "245", Dark: "243"}
	t := &theme{
		brand:     s().Bold(true).Foreground(blue),
		tab:       s().Foreground(grey),
		tabActive: s().Bold(true).Reverse(true),
		header:    s().Bold(true),
		colHeader: s().Bold(true).Underline(true),
		cursor:    s().Reverse(true),
		marked:    s().Foreground(yellow).Bold(true),
		warn:      s().Foreground(yellow),
		bad:       s().Foreground(red).Bold(true),
		dim:       s().Foreground(grey),
		good:      s().Foreground(green),
		prompt:    s().Bold(true).Foreground(yellow),
		plain:     s(),
	}
	t.states = map[string]lipgloss.Style{
		"PENDING":   s().Foreground(grey),
		"READY":     s().Foreground(blue),
		"RUNNING":   s().Foreground(blue).Bold(true),
		"RETRYING":  s().Foreground(yellow),
		"SUCCEEDED": s().Foreground(green),
		"FAILED":    s().Foreground(red).Bold(true),
		"DEAD":      s().Foreground(red).Bold(true),
		"CANCELLED": s().Foreground(grey),
		// a DEAD ancestor stopped it: red like DEAD, not bold
		"UPSTREAM_FAILED": s().Foreground(red),
	}
	return t
}

// state renders a state name in its colour.
func (t *theme) state(s string) string {
	if st, ok := t.states[s]; ok {
		return st.Render(s)
	}
	return Sanitize(s)
}

// styleInput gives a text field the theme's styles (textinput's defaults
// come from lipgloss's global renderer, which would ignore NoColor).
func (t *theme) styleInput(in *textinput.Model) {
	in.PromptStyle = t.header
	in.TextStyle = t.plain
	in.PlaceholderStyle = t.dim
	in.CompletionStyle = t.dim
	in.Cursor.Style = t.cursor
	in.Cursor.TextStyle = t.plain
}
