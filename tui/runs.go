package tui

import (
	"context"
	"fmt"
	"strings"

	"github.com/charmbracelet/bubbles/key"
	"github.com/charmbracelet/bubbles/textinput"
	tea "github.com/charmbracelet/bubbletea"

	"github.com/flowforge/flowforge/core"
)

// runsModel is the Runs screen: state counts, newest runs, a filter.
type runsModel struct {
	c       *shared
	data    RunsData
	loaded  bool
	filter  RunFilter
	editing bool
	input   textinput.Model
	tbl     table
}

// runsResult is a read of the Runs screen for one filter.
type runsResult struct {
	filter RunFilter
	data   RunsData
}

func newRunsModel(c *shared) *runsModel {
	m := &runsModel{c: c}
	m.tbl = table{
		cols: []column{
			{title: "RUN", width: 8},
			{title: "WORKFLOW", flex: 1, min: 8},
			{title: "STATE", width: 9},
			{title: "TASKS", width: 7, right: true},
			{title: "AGE", width: 7, right: true},
			{title: "DURATION", width: 8, right: true},
		},
		empty: "no runs",
	}
	return m
}

func (m *runsModel) title() string { return "Runs" }

func (m *runsModel) fetcher() fetchFunc {
	f := m.filter
	return func(ctx context.Context, src Source) (any, error) {
		d, err := src.Runs(ctx, f)
		return runsResult{filter: f, data: d}, err
	}
}

func (m *runsModel) setData(data any) {
	r, ok := data.(runsResult)
	if !ok || r.filter != m.filter {
		return
	}
	m.data, m.loaded = r.data, true
	rows := make([]row, 0, len(r.data.Runs))
	for _, run := range r.data.Runs {
		dur := "-"
		if run.StartedAt != nil {
			end := r.data.Now
			if run.FinishedAt != nil {
				end = *run.FinishedAt
			}
			dur = fmtAge(end.Sub(*run.StartedAt))
		}
		rows = append(rows, row{
			key: run.ID.String(),
			cells: []string{shortID(run.ID), core.TerminalText(run.Workflow), string(run.State),
				fmt.Sprintf("%d/%d", run.TasksDone, run.TasksTotal), fmtAge(r.data.Now.Sub(run.CreatedAt)), dur},
			styled: []string{"", "", m.c.theme.state(string(run.State))},
		})
	}
	m.tbl.setRows(rows)
}

// parseFilter reads "WORKFLOW", "STATE" or both (in any order): a word that
// names a run state filters by state, any other by workflow name.
func parseFilter(s string) RunFilter {
	var f RunFilter
	for _, w := range strings.Fields(s) {
		if st := core.RunState(strings.ToUpper(w)); st.Valid() {
			f.State = st
		} else {
			f.Workflow = w
		}
	}
	return f
}

func (f RunFilter) String() string { return joinNonEmpty(" ", f.Workflow, string(f.State)) }

func (m *runsModel) capturing() bool { return m.editing }

func (m *runsModel) update(msg keyMsg) tea.Cmd {
	if m.editing {
		switch {
		case key.Matches(msg, keyApply):
			m.editing = false
			m.input.Blur()
			return m.setFilter(parseFilter(m.input.Value()))
		case key.Matches(msg, keyDiscard):
			m.editing = false
			m.input.Blur()
			return nil
		}
		var cmd tea.Cmd
		m.input, cmd = m.input.Update(msg)
		return cmd
	}
	if m.c.nav.navigate(msg, &m.tbl, m.page()) {
		return nil
	}
	switch {
	case key.Matches(msg, keyFilter):
		m.editing = true
		m.input = textinput.New()
		m.c.theme.styleInput(&m.input)
		m.input.Prompt = "filter: "
		m.input.Placeholder = "workflow name and/or state (e.g. FAILED)"
		m.input.CharLimit = 200
		m.input.SetValue(m.filter.String())
		m.input.CursorEnd()
		return m.input.Focus()
	case key.Matches(msg, keyClear):
		if m.filter != (RunFilter{}) {
			return m.setFilter(RunFilter{})
		}
	case key.Matches(msg, keyOpen):
		if r, ok := m.tbl.selected(); ok {
			id := r.key
			return func() tea.Msg { return openRunMsg{id: id} }
		}
	}
	return nil
}

// setFilter changes the filter and asks for a read at once.
func (m *runsModel) setFilter(f RunFilter) tea.Cmd {
	if f == m.filter {
		return nil
	}
	m.filter = f
	m.loaded = false
	m.tbl.setRows(nil)
	m.tbl.cursor = 0
	return func() tea.Msg { return refreshMsg{} }
}

func (m *runsModel) page() int { return max(m.c.height-6, 1) }

func (m *runsModel) keys() []key.Binding {
	if m.editing {
		return []key.Binding{keyApply, keyDiscard}
	}
	ks := []key.Binding{keyOpen, keyFilter}
	if m.filter != (RunFilter{}) {
		ks = append(ks, keyClear)
	}
	return ks
}

func (m *runsModel) view(width, height int) string {
	th := m.c.theme
	var parts []string
	for _, st := range core.RunStates {
		n := "…"
		if m.loaded {
			n = fmtCount(m.data.Counts[st], m.data.CountCap)
		}
		parts = append(parts, th.state(string(st))+" "+n)
	}
	head := th.header.Render("runs") + "  " + strings.Join(parts, "  ")
	var second string
	switch {
	case m.editing:
		m.input.Width = max(width-len(m.input.Prompt)-2, 10)
		second = clip(m.input.View(), width, 1)
	case m.filter != (RunFilter{}):
		second = th.warn.Render("filter: "+core.TerminalText(m.filter.String())) + th.dim.Render("  (esc clears)")
	default:
		second = th.dim.Render(fmt.Sprintf("newest %d runs · / filters by workflow or state", RunsLimit))
	}
	return clip(head, width, 1) + "\n" + clip(second, width, 1) + "\n" + m.tbl.view(th, width, height-2)
}
