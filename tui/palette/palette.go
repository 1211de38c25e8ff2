// Package palette is the one colour scheme of FlowForge's terminal output:
// `ffctl`'s tables and the dashboard (`ffctl tui`) colour every run and
// task state from State, so a state looks the same in both, and the
// dashboard builds its other styles from the same Colours.
//
// Each Colour has a value for each terminal colour profile: one of the 16
// basic ANSI colours (every terminal has them, and each user's theme maps
// them to something readable; the CLI renders with this profile) and a
// 256-colour value for light and for dark backgrounds (the dashboard, on
// a capable terminal). Colour alone never carries meaning: the state's
// name is always written.
package palette

import (
	"github.com/charmbracelet/lipgloss"

	"github.com/flowforge/flowforge/core"
)

// Colour is one colour of the palette.
type Colour int

// The palette's colours. The zero Colour is no colour (the terminal's
// default foreground).
const (
	Default Colour = iota
	Grey
	Red
	Yellow
	Green
	Blue
	Cyan
	Magenta
	// Pink is SKIPPED's alone: a task the scheduler decided not to run.
	Pink
)

// Color returns c as a lipgloss colour: its ANSI value on a 16-colour
// profile, its 256-colour value (light or dark background) otherwise.
func (c Colour) Color() lipgloss.TerminalColor {
	ansi, light, dark := c.values()
	if ansi == "" {
		return lipgloss.NoColor{}
	}
	return lipgloss.CompleteAdaptiveColor{
		Light: lipgloss.CompleteColor{ANSI: ansi, ANSI256: light, TrueColor: light},
		Dark:  lipgloss.CompleteColor{ANSI: ansi, ANSI256: dark, TrueColor: dark},
	}
}

// values returns c's ANSI colour and its 256-colour values for light and
// dark backgrounds; "" for Default.
func (c Colour) values() (ansi, light, dark string) {
	switch c {
	case Grey:
		return "8", "245", "243"
	case Red:
		return "1", "160", "203"
	case Yellow:
		return "3", "136", "221"
	case Green:
		return "2", "28", "114"
	case Blue:
		return "4", "25", "75"
	case Cyan:
		return "6", "30", "80"
	case Magenta:
		return "5", "127", "176"
	case Pink:
		return "13", "168", "211"
	default:
		return "", "", ""
	}
}

// Spec is how a state is drawn: a colour, bold or not.
type Spec struct {
	Colour Colour
	Bold   bool
}

// Style returns s as a style of renderer r (whose colour profile decides
// which of the colour's values is used; none under the Ascii profile).
func (s Spec) Style(r *lipgloss.Renderer) lipgloss.Style {
	return r.NewStyle().Foreground(s.Colour.Color()).Bold(s.Bold)
}

// Of returns the Spec of a task or run state, given by name (a run and a
// task state of the same name, such as RUNNING, look the same); ok is
// false when state names no state (draw it plain).
//
// Waiting states are quiet (PENDING grey), queued and running ones blue
// (READY cyan, RUNNING bold blue), a failed attempt waiting for its retry
// yellow, success green, failure red (DEAD and a FAILED run bold;
// UPSTREAM_FAILED, stopped by a DEAD ancestor, not bold: the cause is the
// DEAD task), a cancellation magenta, a task the scheduler skipped
// (SKIPPED: its when was false, or its trigger rule skipped it) pink, a
// colour no other state has.
func Of(state string) (spec Spec, ok bool) {
	switch core.TaskState(state) {
	case core.TaskPending:
		return Spec{Colour: Grey}, true
	case core.TaskReady:
		return Spec{Colour: Cyan}, true
	case core.TaskRunning:
		return Spec{Colour: Blue, Bold: true}, true
	case core.TaskRetrying:
		return Spec{Colour: Yellow}, true
	case core.TaskSucceeded:
		return Spec{Colour: Green}, true
	case core.TaskDead:
		return Spec{Colour: Red, Bold: true}, true
	case core.TaskUpstreamFailed:
		return Spec{Colour: Red}, true
	case core.TaskCancelled:
		return Spec{Colour: Magenta}, true
	case core.TaskSkipped:
		return Spec{Colour: Pink}, true
	}
	if core.RunState(state) == core.RunFailed {
		return Spec{Colour: Red, Bold: true}, true
	}
	return Spec{}, false
}

// States returns the name of every task and run state, each once (a run
// and a task state of the same name are one): the names Of colours, in
// core.TaskStates' order, then the run states that are no task state.
func States() []string {
	var out []string
	for _, s := range core.TaskStates {
		out = append(out, string(s))
	}
	for _, s := range core.RunStates {
		if !core.TaskState(s).Valid() {
			out = append(out, string(s))
		}
	}
	return out
}

// State renders state in its colour on renderer r; ok is false, and s
// is returned unchanged, when state names no state.
func State(r *lipgloss.Renderer, state string) (s string, ok bool) {
	spec, ok := Of(state)
	if !ok {
		return state, false
	}
	return spec.Style(r).Render(state), true
}
