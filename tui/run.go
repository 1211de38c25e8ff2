package tui

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/charmbracelet/bubbles/key"
	tea "github.com/charmbracelet/bubbletea"
	"github.com/google/uuid"

	"github.com/flowforge/flowforge/core"
	"github.com/flowforge/flowforge/core/store"
)

// runModel is the Run screen: one run's tasks in DAG order.
type runModel struct {
	c      *shared
	id     string
	data   RunData
	loaded bool
	tbl    table
	prompt prompt
	cancel key.Binding
	pause  key.Binding
}

func newRunModel(c *shared) *runModel {
	return &runModel{
		c:      c,
		cancel: disabled(keyCancel, c.readOnly),
		pause:  disabled(keyPause, c.readOnly),
		tbl: table{
			cols: []column{
				{title: "TASK", flex: 2, min: 10, cap: 28},
				{title: "STATE", width: 9},
				{title: "TRIES", width: 5, right: true},
				{title: "WORKER", flex: 2, min: 6, cap: 24},
				{title: "LEASE", width: 6, right: true},
				{title: "ERROR", flex: 6, min: 5},
			},
			empty: "no tasks",
		},
	}
}

func (m *runModel) title() string { return "Run" }

// open selects the run to show.
func (m *runModel) open(id string) {
	if id != m.id {
		m.id, m.loaded = id, false
		m.tbl.setRows(nil)
		m.tbl.cursor = 0
	}
	m.prompt.active = false
}

func (m *runModel) fetcher() fetchFunc {
	id, err := uuid.Parse(m.id)
	if err != nil {
		return nil
	}
	return func(ctx context.Context, src Source) (any, error) {
		d, err := src.Run(ctx, id)
		return d, err
	}
}

func (m *runModel) setData(data any) {
	d, ok := data.(RunData)
	if !ok || d.Run.ID.String() != m.id {
		return
	}
	m.data, m.loaded = d, true
	th := m.c.theme
	var rows []row
	for _, o := range core.DAGOrder(d.Run.Tasks) {
		t := o.Node
		worker := "-"
		if t.WorkerID != nil { // the attempt's worker, also once it ended
			worker = core.TerminalText(*t.WorkerID)
		}
		errText := firstLine(t.Error)
		if t.WaitingForHandler != nil { // handed back: say what it waits for
			errText = core.TerminalText(store.WaitingReasonPrefix + *t.WaitingForHandler)
		}
		r := row{
			key: t.ID.String(),
			cells: []string{strings.Repeat("  ", o.Depth) + core.TerminalText(t.Name), string(t.State),
				fmt.Sprintf("%d/%d", t.Attempt, t.MaxAttempts), worker, fmtLease(t.LeaseSeconds), errText},
			styled: []string{"", th.state(string(t.State))},
		}
		if t.WaitingForHandler != nil {
			r.flag = "?"
		}
		if t.LeaseSeconds != nil && *t.LeaseSeconds < 0 {
			r.kind, r.flag = rowWarn, "!"
		}
		rows = append(rows, r)
	}
	m.tbl.setRows(rows)
}

func (m *runModel) capturing() bool { return m.prompt.active }

func (m *runModel) update(msg keyMsg) tea.Cmd {
	if m.prompt.active {
		return m.prompt.update(msg)
	}
	if m.c.nav.navigate(msg, &m.tbl, max(m.c.height-8, 1)) {
		return nil
	}
	switch {
	case key.Matches(msg, keyBack):
		return func() tea.Msg { return backMsg{} }
	case key.Matches(msg, keyHistory):
		if r, ok := m.tbl.selected(); ok {
			id := r.key
			return func() tea.Msg { return openTaskMsg{id: id, from: scrRun} }
		}
	case key.Matches(msg, m.pause):
		if !m.loaded {
			return nil
		}
		return openPausePrompt(m.c, &m.prompt, m.data.Run.Workflow, m.data.Run.Paused)
	case key.Matches(msg, m.cancel):
		if !m.loaded || m.data.Run.State == core.RunSucceeded || m.data.Run.CancelRequestedAt != nil {
			return func() tea.Msg {
				return actionMsg{text: "nothing to cancel: the run has finished or is already being cancelled"}
			}
		}
		run := m.data.Run
		q := fmt.Sprintf("Cancel run %s (%s, %s)?", shortID(run.ID), core.TerminalText(run.Workflow), run.State)
		return m.prompt.open(m.c.theme, q, "", func(reason string) tea.Cmd {
			return func() tea.Msg { return cancelRunMsg{id: run.ID, reason: reason} }
		})
	}
	return nil
}

func (m *runModel) keys() []key.Binding {
	if m.prompt.active {
		return m.prompt.keys()
	}
	if !m.loaded {
		return []key.Binding{keyBack}
	}
	return []key.Binding{keyHistory, m.cancel, m.pause, keyBack}
}

func (m *runModel) view(width, height int) string {
	th := m.c.theme
	if m.id == "" {
		return th.dim.Render("no run selected: pick one on the Runs screen (1) and press enter")
	}
	if !m.loaded {
		return th.dim.Render("run " + m.id + ": loading…")
	}
	r := m.data.Run
	head := th.header.Render("run "+r.ID.String()) + "  " + th.state(string(r.State))
	if r.CancelRequestedAt != nil {
		head += " " + th.warn.Render("(cancel requested)")
	}
	info := fmt.Sprintf("%s v%d · %d/%d done · age %s", core.TerminalText(r.Workflow), r.WorkflowVersion, r.TasksDone, r.TasksTotal, fmtAge(m.data.Now.Sub(r.CreatedAt)))
	params := "params " + core.TerminalText(compactJSON(r.Params))
	lines := clip(head, width, 1) + "\n" + clip(info, width, 1) + "\n" + clip(th.dim.Render(params), width, 1) + "\n"
	tableH := height - 3
	if r.Paused != nil { // its tasks wait: say why, and who can end it
		lines += clip(th.warn.Render(pauseText(m.data.Now, r.Paused)+" · p resumes"), width, 1) + "\n"
		tableH--
	}
	if m.prompt.active {
		tableH -= promptLines
	}
	out := lines + m.tbl.view(th, width, tableH)
	if m.prompt.active {
		out = padLines(out, height-promptLines) + "\n" + m.prompt.view(th, width)
	}
	return out
}

// compactJSON renders a JSON document on one line.
func compactJSON(j store.JSON) string {
	if len(j) == 0 {
		return "{}"
	}
	var v any
	if err := json.Unmarshal(j, &v); err != nil {
		return string(j)
	}
	b, err := json.Marshal(v)
	if err != nil {
		return string(j)
	}
	return string(b)
}

// padLines pads a block to exactly n lines (cutting extra ones).
func padLines(s string, n int) string {
	lines := strings.Split(s, "\n")
	if len(lines) > n {
		lines = lines[:n]
	}
	for len(lines) < n {
		lines = append(lines, "")
	}
	return strings.Join(lines, "\n")
}
