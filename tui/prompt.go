package tui

import (
	"errors"
	"strings"

	"github.com/charmbracelet/bubbles/key"
	"github.com/charmbracelet/bubbles/textinput"
	tea "github.com/charmbracelet/bubbletea"

	"github.com/flowforge/flowforge/core"
)

// prompt asks for a reason before an action; enter confirms, esc aborts.
// A reason core.ValidateReason refuses (empty, too long, a NUL) is refused
// here, before the action: every action is audited with one.
type prompt struct {
	active   bool
	question string
	input    textinput.Model
	problem  string
	submit   func(reason string) tea.Cmd
}

func (p *prompt) open(th *theme, question, initial string, submit func(reason string) tea.Cmd) tea.Cmd {
	p.active, p.question, p.problem, p.submit = true, question, "", submit
	p.input = textinput.New()
	th.styleInput(&p.input)
	p.input.Prompt = "reason: "
	p.input.Placeholder = "why (recorded in the audit trail)"
	p.input.CharLimit = 500
	p.input.SetValue(initial)
	p.input.CursorEnd()
	return p.input.Focus()
}

func (p *prompt) update(msg keyMsg) tea.Cmd {
	switch {
	case key.Matches(msg, keyAbort):
		p.active = false
		return nil
	case key.Matches(msg, keyConfirm):
		reason := strings.TrimSpace(p.input.Value())
		if err := core.ValidateReason(reason); errors.Is(err, core.ErrNoReason) {
			p.problem = "a reason is required (it is audited)"
			return nil
		} else if err != nil {
			p.problem = core.TerminalText(err.Error())
			return nil
		}
		p.active = false
		return p.submit(reason)
	}
	var cmd tea.Cmd
	p.input, cmd = p.input.Update(msg)
	return cmd
}

// lines is the prompt's height on screen.
const promptLines = 3

func (p *prompt) view(th *theme, width int) string {
	p.input.Width = max(width-len(p.input.Prompt)-2, 10)
	help := "enter confirm · esc cancel"
	if p.problem != "" {
		help = p.problem + " · " + help
	}
	return fit(th.prompt.Render(p.question), width) + "\n" +
		clip(p.input.View(), width, 1) + "\n" +
		fit(th.dim.Render(help), width)
}

func (p *prompt) keys() []key.Binding { return []key.Binding{keyConfirm, keyAbort} }
