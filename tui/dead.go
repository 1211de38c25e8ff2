package tui

import (
	"context"
	"fmt"

	"github.com/charmbracelet/bubbles/key"
	tea "github.com/charmbracelet/bubbletea"
	"github.com/google/uuid"
)

// deadModel is the DEAD screen: dead tasks, marks, requeue.
type deadModel struct {
	c       *shared
	data    DeadData
	loaded  bool
	tbl     table
	marked  map[string]bool
	prompt  prompt
	mark    key.Binding
	markAll key.Binding
	unmark  key.Binding
	requeue key.Binding
}

func newDeadModel(c *shared) *deadModel {
	return &deadModel{
		c:       c,
		marked:  map[string]bool{},
		mark:    disabled(keyMark, c.readOnly),
		markAll: disabled(keyMarkAll, c.readOnly),
		unmark:  disabled(keyUnmark, c.readOnly),
		requeue: disabled(keyRequeue, c.readOnly),
		tbl: table{
			cols: []column{
				{title: "TASK ID", width: 8},
				{title: "WORKFLOW", flex: 2, min: 8, cap: 24},
				{title: "TASK", flex: 2, min: 6, cap: 24},
				{title: "TRIES", width: 5, right: true},
				{title: "DIED", width: 7, right: true},
				{title: "ERROR", flex: 4, min: 8},
			},
			empty: "no DEAD task",
		},
	}
}

func (m *deadModel) title() string { return "DEAD" }

func (m *deadModel) fetcher() fetchFunc {
	return func(ctx context.Context, src Source) (any, error) { return src.Dead(ctx) }
}

func (m *deadModel) setData(data any) {
	d, ok := data.(DeadData)
	if !ok {
		return
	}
	m.data, m.loaded = d, true
	present := make(map[string]bool, len(d.Tasks))
	rows := make([]row, 0, len(d.Tasks))
	for _, t := range d.Tasks {
		k := t.ID.String()
		present[k] = true
		rows = append(rows, row{
			key:    k,
			marked: m.marked[k],
			cells:  []string{shortID(t.ID), t.Workflow, t.Name, fmt.Sprintf("%d/%d", t.Attempt, t.MaxAttempts), since(d.Now, t.FinishedAt), firstLine(t.Error)},
		})
	}
	// A task that left the list (requeued elsewhere) cannot stay marked.
	for k := range m.marked {
		if !present[k] {
			delete(m.marked, k)
		}
	}
	m.tbl.setRows(rows)
}

func (m *deadModel) refreshMarks() {
	for i := range m.tbl.all {
		m.tbl.all[i].marked = m.marked[m.tbl.all[i].key]
	}
	m.tbl.apply()
}

// targets are the marked tasks, or the selected one when none is marked.
func (m *deadModel) targets() []string {
	var out []string
	for _, r := range m.tbl.rows {
		if m.marked[r.key] {
			out = append(out, r.key)
		}
	}
	if len(out) == 0 {
		if r, ok := m.tbl.selected(); ok {
			out = append(out, r.key)
		}
	}
	return out
}

func (m *deadModel) capturing() bool { return m.prompt.active }

func (m *deadModel) update(msg keyMsg) tea.Cmd {
	if m.prompt.active {
		return m.prompt.update(msg)
	}
	if m.c.nav.navigate(msg, &m.tbl, max(m.c.height-6, 1)) {
		return nil
	}
	switch {
	case key.Matches(msg, m.mark):
		if r, ok := m.tbl.selected(); ok {
			if m.marked[r.key] {
				delete(m.marked, r.key)
			} else {
				m.marked[r.key] = true
			}
			m.refreshMarks()
			m.tbl.move(1)
		}
	case key.Matches(msg, m.markAll):
		for _, r := range m.tbl.rows {
			m.marked[r.key] = true
		}
		m.refreshMarks()
	case key.Matches(msg, m.unmark):
		clear(m.marked)
		m.refreshMarks()
	case key.Matches(msg, keyHistory):
		if r, ok := m.tbl.selected(); ok {
			id := r.key
			return func() tea.Msg { return openTaskMsg{id: id, from: scrDead} }
		}
	case key.Matches(msg, m.requeue):
		keys := m.targets()
		if len(keys) == 0 {
			return nil
		}
		ids := make([]uuid.UUID, 0, len(keys))
		for _, k := range keys {
			if id, err := uuid.Parse(k); err == nil {
				ids = append(ids, id)
			}
		}
		q := fmt.Sprintf("Requeue %s (DEAD → PENDING, fresh attempts)?", plural(len(ids), "task"))
		if len(ids) == 1 {
			q = fmt.Sprintf("Requeue task %s (DEAD → PENDING, fresh attempts)?", shortID(ids[0]))
		}
		return m.prompt.open(m.c.theme, q, "", func(reason string) tea.Cmd {
			clear(m.marked)
			m.refreshMarks()
			return func() tea.Msg { return requeueMsg{ids: ids, reason: reason} }
		})
	}
	return nil
}

func (m *deadModel) keys() []key.Binding {
	if m.prompt.active {
		return m.prompt.keys()
	}
	ks := []key.Binding{m.mark, m.requeue, keyHistory, m.markAll}
	if len(m.marked) > 0 {
		ks = append(ks, m.unmark)
	}
	return ks
}

func (m *deadModel) view(width, height int) string {
	th := m.c.theme
	head := th.header.Render("dead") + "  "
	if !m.loaded {
		head += th.dim.Render("loading…")
	} else {
		head += plural(len(m.data.Tasks), "task")
		if len(m.data.Tasks) >= DeadLimit {
			head += fmt.Sprintf(" (most recent %d)", DeadLimit)
		}
		if len(m.marked) > 0 {
			head += " · " + th.marked.Render(fmt.Sprintf("%d marked", len(m.marked)))
		}
	}
	sub := th.dim.Render("most recent death first · DIED is how long ago")
	if !m.c.readOnly {
		sub = th.dim.Render("most recent first · space marks · r requeues marked (or selected)")
	}
	tableH := height - 2
	if m.prompt.active {
		tableH -= promptLines
	}
	out := clip(head, width, 1) + "\n" + clip(sub, width, 1) + "\n" + m.tbl.view(th, width, tableH)
	if m.prompt.active {
		out = padLines(out, height-promptLines) + "\n" + m.prompt.view(th, width)
	}
	return out
}
