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
			{title: "BY", flex: 2, min: 6, cap: 32},
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
			from = core.TerminalText(string(*e.FromState))
		}
		by := core.TerminalText(e.Actor)
		if e.WorkerID != nil && *e.WorkerID != "" && *e.WorkerID != e.Actor {
			by += " (" + core.TerminalText(*e.WorkerID) + ")"
		}
		at := e.At
		rows = append(rows, row{
			key:   fmt.Sprint(e.ID),
			cells: []string{since(d.Now, &at), from + "→" + core.TerminalText(string(e.ToState)), fmt.Sprint(e.Attempt), fmt.Sprint(e.FencingToken), by, firstLine(e.Reason)},
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
		worker = core.TerminalText(*t.WorkerID)
	}
	died := ""
	if t.State == core.TaskDead && t.FinishedAt != nil {
		died = "died " + t.FinishedAt.Local().Format("2006-01-02 15:04:05") + " (" + since(m.data.Now, t.FinishedAt) + " ago) · "
	}
	handler := core.TerminalText(t.Handler)
	if handler == "" { // a held task: the scheduler runs it
		handler = "-"
	}
	lines := []string{
		th.header.Render("task "+t.ID.String()) + "  " + th.state(string(t.State)),
		fmt.Sprintf("%s / %s · handler %s · run %s", core.TerminalText(t.Workflow), core.TerminalText(t.Name), handler, shortID(t.RunID)),
		fmt.Sprintf("attempt %d/%d · token %d · worker %s · lease %s", t.Attempt, t.MaxAttempts, t.FencingToken, worker, fmtLease(t.LeaseSeconds)),
		died + "error " + firstLine(t.Error) + reusedNote(t.ReusedFrom),
		th.dim.Render("params " + core.TerminalText(compactJSON(t.Params))),
	}
	if t.WaitingForHandler != nil {
		lines = append(lines, th.warn.Render(core.TerminalText(store.WaitingReasonPrefix+*t.WaitingForHandler)+" (a worker handed it back)"))
	}
	if w := t.FlowWaitText(); w != "" { // waiting for flow control's admission
		lines = append(lines, th.warn.Render(w))
	}
	if held := heldLine(t); held != "" { // a sleep, a wait, a child run: what it holds
		lines = append(lines, held)
	}
	// The result, and a shell result's output tails, get what the history
	// table can spare (it keeps at least historyMinLines).
	spare := max(height-len(lines)-historyMinLines, 0)
	res := resultLines(th, t.Result, spare)
	lines = append(lines, res...)
	lines = append(lines, logLines(th, m.data.Logs, spare-len(res))...)
	out := ""
	for _, l := range lines {
		out += clip(l, width, 1) + "\n"
	}
	return out + m.tbl.view(th, width, height-len(lines))
}

// historyMinLines is the least the task screen leaves its history table
// (header included).
const historyMinLines = 4

// resultLines renders a task's result in at most n lines: one line of
// compact JSON, then, for a result with "stdout"/"stderr" strings (the
// shell handler's), the last lines of each.
func resultLines(th *theme, res store.JSON, n int) []string {
	if n <= 0 || len(res) == 0 {
		return nil
	}
	var out struct {
		Stdout *string `json:"stdout"`
		Stderr *string `json:"stderr"`
	}
	_ = json.Unmarshal(res, &out) // any other shape: the JSON line only
	lines := []string{"result " + core.TerminalText(compactJSON(res))}
	n--
	tails := []struct {
		name string
		text *string
	}{{"stdout", out.Stdout}, {"stderr", out.Stderr}}
	shown := 0
	for _, tl := range tails {
		if tl.text != nil && strings.TrimSpace(*tl.text) != "" {
			shown++
		}
	}
	for _, tl := range tails {
		if tl.text == nil || strings.TrimSpace(*tl.text) == "" || n < 2 {
			continue
		}
		budget := max(n/shown, 2)
		all := strings.Split(strings.TrimRight(*tl.text, "\n"), "\n")
		keep := min(len(all), budget-1)
		lines = append(lines, th.header.Render(fmt.Sprintf("%s (last %d of %d lines)", tl.name, keep, len(all))))
		for _, l := range all[len(all)-keep:] {
			lines = append(lines, "  "+core.TerminalText(l))
		}
		n -= keep + 1
		shown--
	}
	return lines
}

// logLines renders the last lines of a task's log in at most n lines: a
// header, then "#ATTEMPT STREAM [LEVEL] text" per line, terminal-safe.
func logLines(th *theme, logs []store.TaskLogLine, n int) []string {
	if n < 2 || len(logs) == 0 {
		return nil
	}
	keep := min(len(logs), n-1)
	out := []string{th.header.Render(fmt.Sprintf("log (last %d lines; ffctl task logs for all)", keep))}
	for _, l := range logs[len(logs)-keep:] {
		level := ""
		if l.Level != "" {
			level = " " + core.TerminalText(l.Level)
		}
		out = append(out, fmt.Sprintf("  #%d %s%s  %s", l.Attempt, l.Stream, level, core.TerminalText(l.Line)))
	}
	return out
}
