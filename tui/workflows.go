package tui

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/charmbracelet/bubbles/key"
	"github.com/charmbracelet/bubbles/textinput"
	tea "github.com/charmbracelet/bubbletea"
	"github.com/google/uuid"

	"github.com/flowforge/flowforge/core"
	"github.com/flowforge/flowforge/core/store"
)

// WorkflowsLimit bounds the Workflows screen.
const WorkflowsLimit = 200

// triggerMsg asks the root to trigger a run (through Source.Trigger);
// triggeredMsg is its outcome.
type (
	triggerMsg struct {
		workflow string
		params   json.RawMessage
	}
	triggeredMsg struct {
		workflow string
		id       uuid.UUID
		err      error
	}
)

// workflowsModel is the Workflows screen: every workflow's newest version
// and whether it is paused, with "t" to trigger a run after a params
// prompt and "p" to pause or resume the workflow after a reason prompt.
type workflowsModel struct {
	c       *shared
	data    WorkflowsData
	loaded  bool
	tbl     table
	trigger key.Binding
	pause   key.Binding
	prompt  prompt

	asking  string // the workflow the params prompt is for, "" when closed
	input   textinput.Model
	problem string
}

func newWorkflowsModel(c *shared) *workflowsModel {
	return &workflowsModel{c: c, trigger: disabled(keyTrigger, c.readOnly), pause: disabled(keyPause, c.readOnly), tbl: table{
		cols: []column{
			{title: "WORKFLOW", flex: 1, min: 10, cap: 48},
			{title: "VERSION", width: 7, right: true},
			{title: "TASKS", width: 5, right: true},
			{title: "RUNS", width: 7, right: true},
			{title: "UPDATED", width: 7, right: true},
			{title: "PAUSED", width: 6},
		},
		empty: "no workflow: store one with ffctl workflow apply -f FILE",
	}}
}

// title is short so that seven tabs fit 80 columns.
func (m *workflowsModel) title() string { return "Flows" }

func (m *workflowsModel) fetcher() fetchFunc {
	return func(ctx context.Context, src Source) (any, error) { return src.Workflows(ctx) }
}

func (m *workflowsModel) setData(data any) {
	d, ok := data.(WorkflowsData)
	if !ok {
		return
	}
	m.data, m.loaded = d, true
	rows := make([]row, 0, len(d.Workflows))
	for _, w := range d.Workflows {
		created := w.CreatedAt
		paused := "-"
		r := row{key: w.Name}
		if w.Paused != nil {
			paused, r.kind, r.flag = string(w.Paused.Mode), rowWarn, "p"
		}
		r.cells = []string{core.TerminalText(w.Name), fmt.Sprint(w.Version), fmt.Sprint(w.Tasks), fmt.Sprint(w.Runs), since(d.Now, &created), paused}
		rows = append(rows, r)
	}
	m.tbl.setRows(rows)
}

func (m *workflowsModel) filterTable() *table { return &m.tbl }

// selectedID: the workflow's name.
func (m *workflowsModel) selectedID() (string, bool) { return selectedKey(&m.tbl) }

func (m *workflowsModel) capturing() bool { return m.asking != "" || m.prompt.active }

// pauseOf returns the pause of the workflow called name in the last data
// read, nil when it is not paused.
func (m *workflowsModel) pauseOf(name string) *store.Pause {
	for _, w := range m.data.Workflows {
		if w.Name == name {
			return w.Paused
		}
	}
	return nil
}

func (m *workflowsModel) update(msg keyMsg) tea.Cmd {
	if m.prompt.active {
		return m.prompt.update(msg)
	}
	if m.asking != "" {
		switch {
		case key.Matches(msg, keyAbort):
			m.asking = ""
			return nil
		case key.Matches(msg, keyConfirm):
			params, err := parseTriggerParams(m.input.Value())
			if err != nil {
				m.problem = err.Error()
				return nil
			}
			name := m.asking
			m.asking = ""
			return func() tea.Msg { return triggerMsg{workflow: name, params: params} }
		}
		var cmd tea.Cmd
		m.input, cmd = m.input.Update(msg)
		return cmd
	}
	if m.c.nav.navigate(msg, &m.tbl, max(m.c.height-6, 1)) {
		return nil
	}
	if key.Matches(msg, m.pause) {
		r, ok := m.tbl.selected()
		if !ok {
			return nil
		}
		return openPausePrompt(m.c, &m.prompt, r.key, m.pauseOf(r.key))
	}
	if key.Matches(msg, m.trigger) {
		r, ok := m.tbl.selected()
		if !ok {
			return nil
		}
		m.asking, m.problem = r.key, ""
		m.input = textinput.New()
		m.c.theme.styleInput(&m.input)
		m.input.Prompt = "params: "
		m.input.Placeholder = `key=value … or a JSON object; empty for none`
		m.input.CharLimit = 4000
		return m.input.Focus()
	}
	return nil
}

// parseTriggerParams reads the params prompt: empty (no params), a JSON
// object, or space-separated key=value pairs (string values), as
// `ffctl run trigger --param key=value` takes them.
func parseTriggerParams(s string) (json.RawMessage, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return nil, nil
	}
	if strings.HasPrefix(s, "{") {
		if err := core.ValidateParams([]byte(s)); err != nil {
			return nil, err
		}
		return json.RawMessage(s), nil
	}
	params := map[string]string{}
	for _, kv := range strings.Fields(s) {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("%q: want key=value (or a JSON object)", kv)
		}
		params[k] = v
	}
	raw, err := json.Marshal(params)
	if err != nil {
		return nil, fmt.Errorf("params: %w", err)
	}
	if err := core.ValidateParams(raw); err != nil {
		return nil, err
	}
	return raw, nil
}

func (m *workflowsModel) keys() []key.Binding {
	if m.asking != "" || m.prompt.active {
		return []key.Binding{keyConfirm, keyAbort}
	}
	return []key.Binding{m.trigger, m.pause}
}

// openPausePrompt opens p to pause the workflow called name (mode queue),
// or to resume it when paused is its pause; confirming sends a pauseMsg.
func openPausePrompt(c *shared, p *prompt, name string, paused *store.Pause) tea.Cmd {
	q := "Pause workflow " + core.TerminalText(name) + "? (its tasks wait, new runs queue; --mode drop from ffctl)"
	if paused != nil {
		q = "Resume workflow " + core.TerminalText(name) + "? (its waiting tasks are dispatched at once)"
	}
	resume := paused != nil
	return p.open(c.theme, q, "", func(reason string) tea.Cmd {
		return func() tea.Msg { return pauseMsg{workflow: name, resume: resume, reason: reason} }
	})
}

// pauseText is the line saying a workflow is paused: "paused since … by …
// because …", its times relative to now (the database clock).
func pauseText(now time.Time, p *store.Pause) string {
	s := fmt.Sprintf("paused %s ago by %s because %q (mode %s", fmtAge(now.Sub(p.Since)), core.TerminalText(p.Actor), core.TerminalText(p.Reason), p.Mode)
	if p.Mode == core.PauseDrop || p.Dropped > 0 {
		s += fmt.Sprintf(", %d dropped", p.Dropped)
	}
	return s + ")"
}

func (m *workflowsModel) view(width, height int) string {
	th := m.c.theme
	head := th.header.Render("workflows") + "  "
	if !m.loaded {
		head += th.dim.Render("loading…")
	} else {
		head += fmt.Sprintf("%d stored (newest version of each)", len(m.data.Workflows))
	}
	sub := th.dim.Render("t triggers a run of the selected workflow (asks for params) · p pauses/resumes")
	if r, ok := m.tbl.selected(); ok {
		if p := m.pauseOf(r.key); p != nil {
			sub = th.warn.Render(pauseText(m.data.Now, p))
		}
	}
	tableH := height - 2
	if m.asking != "" || m.prompt.active {
		tableH -= promptLines
	}
	out := clip(head, width, 1) + "\n" + clip(sub, width, 1) + "\n" + m.tbl.view(th, width, tableH)
	if m.prompt.active {
		return padLines(out, height-promptLines) + "\n" + m.prompt.view(th, width)
	}
	if m.asking != "" {
		m.input.Width = max(width-len(m.input.Prompt)-2, 10)
		help := "enter trigger · esc cancel"
		if m.problem != "" {
			help = core.TerminalText(m.problem) + " · " + help
		}
		out = padLines(out, height-promptLines) + "\n" +
			fit(th.prompt.Render("Trigger a run of "+core.TerminalText(m.asking)+"?"), width) + "\n" +
			clip(m.input.View(), width, 1) + "\n" + fit(th.dim.Render(help), width)
	}
	return out
}

func (m *Model) triggerRun(msg triggerMsg) tea.Cmd {
	return m.act(func(ctx context.Context, src Source) tea.Msg {
		id, err := src.Trigger(ctx, msg.workflow, msg.params)
		return triggeredMsg{workflow: msg.workflow, id: id, err: err}
	})
}

func (m *Model) onTriggered(msg triggeredMsg) tea.Cmd {
	if msg.err != nil {
		m.notice, m.noticeErr = core.TerminalText(fmt.Sprintf("trigger %s: %v", msg.workflow, msg.err)), true
		return nil
	}
	m.notice, m.noticeErr = core.TerminalText(fmt.Sprintf("triggered %s: run %s", msg.workflow, msg.id)), false
	id := msg.id.String()
	return func() tea.Msg { return openRunMsg{id: id} }
}
