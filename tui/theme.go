package tui

import (
	"io"
	"os"

	"github.com/charmbracelet/bubbles/textinput"
	"github.com/charmbracelet/lipgloss"
	"github.com/muesli/termenv"

	"github.com/flowforge/flowforge/core"
	"github.com/flowforge/flowforge/tui/palette"
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
	// r renders the states, in palette's colours (the CLI's too).
	r *lipgloss.Renderer
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

// newTheme builds the styles from palette's colours, the ones the CLI's
// tables use.
func newTheme(r *lipgloss.Renderer) *theme {
	s := r.NewStyle
	red, yellow, green := palette.Red.Color(), palette.Yellow.Color(), palette.Green.Color()
	blue, grey := palette.Blue.Color(), palette.Grey.Color()
	return &theme{
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
		r:         r,
	}
}

// state renders a task or run state name in its palette colour; text that
// names no state is drawn plain (and terminal-safe).
func (t *theme) state(s string) string {
	if out, ok := palette.State(t.r, s); ok {
		return out
	}
	return core.TerminalText(s)
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
