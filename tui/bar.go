package tui

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	osc52lib "github.com/aymanbagabas/go-osc52/v2"
	"github.com/charmbracelet/bubbles/key"
	"github.com/charmbracelet/bubbles/textinput"
	tea "github.com/charmbracelet/bubbletea"

	"github.com/flowforge/flowforge/core"
	"github.com/flowforge/flowforge/core/store"
)

// The command bar takes the status line while the operator types a list
// filter ("/" on every list screen but Runs, which filters in the
// database) or an id to jump to (":").

// filterable is a screen whose table "/" filters (on the rows read, by
// substring of any cell, ignoring case).
type filterable interface {
	filterTable() *table
}

// copyable is a screen with an id under the cursor that "y" copies.
type copyable interface {
	selectedID() (string, bool)
}

type barMode int

const (
	barNone barMode = iota
	barFilter
	barJump
)

// bar is the command bar's state.
type bar struct {
	mode  barMode
	input textinput.Model
}

// Messages of the bar.
type (
	// jumpMsg is the outcome of a ":" look-up.
	jumpMsg struct {
		ref   string
		match store.IDMatch
		err   error
	}
	// copiedMsg reports that "y" wrote id to the terminal's clipboard.
	copiedMsg struct {
		id  string
		err error
	}
)

func (m *Model) openBar(mode barMode, value string) tea.Cmd {
	m.bar.mode = mode
	m.bar.input = textinput.New()
	m.c.theme.styleInput(&m.bar.input)
	m.bar.input.CharLimit = 200
	switch mode {
	case barFilter:
		m.bar.input.Prompt = "/"
		m.bar.input.Placeholder = "text in any column"
	case barJump:
		m.bar.input.Prompt = ":"
		m.bar.input.Placeholder = fmt.Sprintf("run or task id (or its first %d+ characters)", core.IDPrefixMinDefault)
	}
	m.bar.input.SetValue(value)
	m.bar.input.CursorEnd()
	return m.bar.input.Focus()
}

// barKey handles a key while the bar has the focus: a filter applies as it
// is typed (enter keeps it, esc clears it); a jump looks up on enter (esc
// abandons it).
func (m *Model) barKey(msg tea.KeyMsg) tea.Cmd {
	mode := m.bar.mode
	switch {
	case key.Matches(msg, keyApply):
		m.bar.mode = barNone
		if mode == barJump {
			return m.jump(strings.TrimSpace(m.bar.input.Value()))
		}
		return nil
	case key.Matches(msg, keyDiscard):
		m.bar.mode = barNone
		if t := m.curTable(); mode == barFilter && t != nil {
			t.setFilter("")
		}
		return nil
	}
	var cmd tea.Cmd
	m.bar.input, cmd = m.bar.input.Update(msg)
	if t := m.curTable(); mode == barFilter && t != nil {
		t.setFilter(m.bar.input.Value())
	}
	return cmd
}

// curTable returns the current screen's filterable table, or nil.
func (m *Model) curTable() *table {
	if f, ok := m.screens[m.cur].(filterable); ok {
		return f.filterTable()
	}
	return nil
}

// jump looks ref up through Source.Find.
func (m *Model) jump(ref string) tea.Cmd {
	if ref == "" {
		return nil
	}
	src := m.src
	return func() tea.Msg {
		ctx, cancel := context.WithTimeout(context.Background(), ActionTimeout)
		defer cancel()
		match, err := src.Find(ctx, ref)
		return jumpMsg{ref: ref, match: match, err: err}
	}
}

func (m *Model) onJump(msg jumpMsg) tea.Cmd {
	if msg.err != nil {
		m.notice, m.noticeErr = core.TerminalText(fmt.Sprintf(":%s: %v", msg.ref, msg.err)), true
		if errors.Is(msg.err, store.ErrNotFound) {
			m.notice = core.TerminalText(fmt.Sprintf(":%s: no run or task has that id", msg.ref))
		}
		return nil
	}
	m.notice = ""
	id := msg.match.ID.String()
	if msg.match.Kind == "task" {
		from := m.cur
		if from == scrTask {
			from = m.back
		}
		return func() tea.Msg { return openTaskMsg{id: id, from: from} }
	}
	return func() tea.Msg { return openRunMsg{id: id} }
}

// copyID writes id to the terminal's clipboard with OSC 52 (the terminal,
// not this process, owns the clipboard: it works over ssh; tmux passes it
// on with set-clipboard on).
func (m *Model) copyID(id string) tea.Cmd {
	out := m.out
	return func() tea.Msg {
		_, err := io.WriteString(out, osc52(id))
		return copiedMsg{id: id, err: err}
	}
}

// osc52 is the escape sequence that sets the system clipboard to s
// ("\x1b]52;c;" + base64(s) + BEL).
func osc52(s string) string { return osc52lib.New(s).String() }

// barView is the status line while the bar has the focus.
func (m *Model) barView(w int) string {
	m.bar.input.Width = max(w-len(m.bar.input.Prompt)-2, 10)
	return clip(m.bar.input.View(), w, 1)
}
