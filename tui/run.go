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
	// childOf maps a task's id (its row's key) to the child run it started
	// (a `workflow:` task), for keyChild.
	childOf map[string]uuid.UUID
	// selectKey is the row the cursor goes to when the run is read ("":
	// the first): the task a child run was opened from, on the way back.
	selectKey string
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
	children := make(map[uuid.UUID]store.ChildRun, len(d.Run.Children))
	for _, c := range d.Run.Children {
		children[c.RunID] = c
	}
	m.childOf = map[string]uuid.UUID{}
	for _, o := range core.DAGOrder(d.Run.Tasks) {
		t := o.Node
		worker := "-"
		if t.WorkerID != nil { // the attempt's worker, also once it ended
			worker = core.TerminalText(*t.WorkerID)
		}
		errText := firstLine(t.Error)
		if held := heldCell(t, children); held != "" && (t.State == core.TaskRunning || t.Error == nil) {
			errText = held
		}
		if w := t.FlowWaitText(); w != "" { // waiting for its admission
			errText = w
		}
		if t.WaitingForHandler != nil { // handed back: say what it waits for
			errText = core.TerminalText(store.WaitingReasonPrefix + *t.WaitingForHandler)
		}
		if t.ChildRunID != nil {
			m.childOf[t.ID.String()] = *t.ChildRunID
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
	if m.selectKey != "" {
		m.tbl.selectKey(m.selectKey)
		m.selectKey = ""
	}
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
	case key.Matches(msg, keyChild):
		if child, ok := m.selectedChild(); ok {
			return func() tea.Msg { return followRunMsg{id: child.String()} }
		}
	case key.Matches(msg, keyParent):
		if m.hasParent() {
			parent := m.data.Run.ParentRunID.String()
			return func() tea.Msg { return followRunMsg{id: parent} }
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
	keys := []key.Binding{keyHistory}
	if _, ok := m.selectedChild(); ok {
		keys = append(keys, keyChild)
	}
	if m.hasParent() {
		keys = append(keys, keyParent)
	}
	return append(keys, m.cancel, m.pause, keyBack)
}

// hasParent reports whether the run shown is a child run whose parent is
// still there (keyParent).
func (m *runModel) hasParent() bool {
	return m.loaded && m.data.Run.ParentRunID != nil && m.data.Run.ParentTask != nil
}

// selectedChild is the child run of the task under the cursor, if it
// started one.
func (m *runModel) selectedChild() (uuid.UUID, bool) {
	r, ok := m.tbl.selected()
	if !ok {
		return uuid.Nil, false
	}
	id, ok := m.childOf[r.key]
	return id, ok
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
	if r.ChildrenTotal > 0 {
		info += " · " + plural(r.ChildrenTotal, "child run")
	}
	params := "params " + core.TerminalText(compactJSON(r.Params))
	lines := clip(head, width, 1) + "\n" + clip(info, width, 1) + "\n" + clip(th.dim.Render(params), width, 1) + "\n"
	tableH := height - 3
	if p := parentText(r); p != "" { // a child run: whose, and the key up
		lines += clip(p, width, 1) + "\n"
		tableH--
	}
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
