package tui

import (
	"context"
	"fmt"

	"github.com/charmbracelet/bubbles/key"
	tea "github.com/charmbracelet/bubbletea"
	"github.com/google/uuid"
)

// taskModel shows one task and its attempt history (task_events).
type taskModel struct {
	c      *shared
	id     string
	data   TaskData
	loaded bool
	tbl    table
}

func newTaskModel(c *shared) *taskModel {
	return &taskModel{c: c, tbl: table{
		cols: []column{
			{title: "AGO", width: 7, right: true},
			{title: "TRANSITION", width: 20},
			{title: "TRY", width: 3, right: true},
			{title: "TOKEN", width: 5, right: true},
			{title: "BY", flex: 2, min: 6},
			{title: "REASON", flex: 3, min: 6},
		},
		empty: "no history",
	}}
}

func (m *taskModel) title() string { return "Task" }

func (m *taskModel) open(id string) {
	if id != m.id {
		m.id, m.loaded = id, false
		m.tbl.setRows(nil)
	}
}

func (m *taskModel) fetcher() fetchFunc {
	id, err := uuid.Parse(m.id)
	if err != nil {
		return nil
	}
	return func(ctx context.Context, src Source) (any, error) {
		return src.Task(ctx, id)
	}
}

func (m *taskModel) setData(data any) {
	d, ok := data.(TaskData)
	if !ok || d.Task.ID.String() != m.id {
		return
	}
	m.data, m.loaded = d, true
	rows := make([]row, 0, len(d.Task.Events))
	// Newest first: the last attempt is what an operator looks for.
	for i := len(d.Task.Events) - 1; i >= 0; i-- {
		e := d.Task.Events[i]
		from := "∅"
		if e.FromState != nil {
			from = Sanitize(*e.FromState)
		}
		by := Sanitize(e.Actor)
		if e.WorkerID != nil && *e.WorkerID != "" && *e.WorkerID != e.Actor {
			by += " (" + Sanitize(*e.WorkerID) + ")"
		}
		at := e.At
		rows = append(rows, row{
			key:   fmt.Sprint(e.ID),
			cells: []string{since(d.Now, &at), from + "→" + Sanitize(e.ToState), fmt.Sprint(e.Attempt), fmt.Sprint(e.FencingToken), by, firstLine(e.Reason)},
		})
	}
	m.tbl.setRows(rows)
}

func (m *taskModel) capturing() bool { return false }

func (m *taskModel) update(msg keyMsg) tea.Cmd {
	if m.c.nav.navigate(msg, &m.tbl, max(m.c.height-10, 1)) {
		return nil
	}
	if key.Matches(msg, keyBack) {
		return func() tea.Msg { return backMsg{} }
	}
	return nil
}

func (m *taskModel) keys() []key.Binding { return []key.Binding{keyBack} }

func (m *taskModel) view(width, height int) string {
	th := m.c.theme
	if !m.loaded {
		return th.dim.Render("task " + m.id + ": loading…")
	}
	t := m.data.Task
	worker := "-"
	if t.WorkerID != nil {
		worker = Sanitize(*t.WorkerID)
	}
	died := ""
	if t.State == "DEAD" && t.FinishedAt != nil {
		died = "died " + t.FinishedAt.Local().Format("2006-01-02 15:04:05") + " (" + since(m.data.Now, t.FinishedAt) + " ago) · "
	}
	lines := []string{
		th.header.Render("task "+t.ID.String()) + "  " + th.state(t.State),
		fmt.Sprintf("%s / %s · handler %s · run %s", Sanitize(t.Workflow), Sanitize(t.Name), Sanitize(t.Handler), shortID(t.RunID)),
		fmt.Sprintf("attempt %d/%d · token %d · worker %s · lease %s", t.Attempt, t.MaxAttempts, t.FencingToken, worker, fmtLease(t.LeaseSeconds)),
		died + "error " + firstLine(t.Error) + reusedNote(t.ReusedFrom),
		th.dim.Render("params " + Sanitize(compactJSON(t.Params))),
	}
	out := ""
	for _, l := range lines {
		out += clip(l, width, 1) + "\n"
	}
	return out + m.tbl.view(th, width, height-len(lines))
}
