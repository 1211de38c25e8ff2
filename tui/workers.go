package tui

import (
	"context"
	"fmt"
	"strings"

	"github.com/charmbracelet/bubbles/key"
	tea "github.com/charmbracelet/bubbletea"

	"github.com/flowforge/flowforge/core"
)

// staleAfter: a process not seen for this long is shown dimmed.
const staleAfter = 30 // seconds

// workersModel is the Workers screen: daemon processes seen recently.
type workersModel struct {
	c      *shared
	data   WorkersData
	loaded bool
	tbl    table
}

func newWorkersModel(c *shared) *workersModel {
	return &workersModel{c: c, tbl: table{
		cols: []column{
			{title: "PROCESS", flex: 3, min: 14, cap: 32},
			{title: "ROLE", width: 9},
			{title: "HOST", flex: 1, min: 5, cap: 20},
			{title: "PID", width: 6, right: true},
			{title: "SEEN", width: 6, right: true},
			{title: "TASKS", width: 5, right: true},
			{title: "BROKER", width: 6},
			{title: "QUEUE", flex: 2, min: 6, cap: 24},
			{title: "HANDLERS", flex: 3, min: 8},
			{title: "HEALTH", flex: 2, min: 6, cap: 21},
		},
		empty: "no daemon seen in the last " + withinText(),
	}}
}

func (m *workersModel) title() string { return "Workers" }

func (m *workersModel) fetcher() fetchFunc {
	return func(ctx context.Context, src Source) (any, error) { return src.Workers(ctx) }
}

func (m *workersModel) setData(data any) {
	d, ok := data.(WorkersData)
	if !ok {
		return
	}
	m.data, m.loaded = d, true
	rows := make([]row, 0, len(d.Workers))
	for _, w := range d.Workers {
		r := row{
			key: w.ID,
			cells: []string{core.TerminalText(w.ID), core.TerminalText(w.Role), core.TerminalText(w.Hostname), fmt.Sprint(w.PID), fmtSeconds(w.SecondsSinceSeen), fmt.Sprint(w.InFlight),
				brokerCell(w.BrokerConnected), orDash(w.Queue), handlersCell(w.Handlers), orDash(w.HealthAddr)},
		}
		if w.BrokerConnected != nil && !*w.BrokerConnected {
			r.kind, r.flag = rowWarn, "!"
		}
		if w.SecondsSinceSeen > staleAfter {
			r.kind = rowDim
		}
		rows = append(rows, r)
	}
	m.tbl.setRows(rows)
}

func (m *workersModel) capturing() bool { return false }

func (m *workersModel) update(msg keyMsg) tea.Cmd {
	m.c.nav.navigate(msg, &m.tbl, max(m.c.height-6, 1))
	return nil
}

func (m *workersModel) keys() []key.Binding { return nil }

func (m *workersModel) view(width, height int) string {
	th := m.c.theme
	head := th.header.Render("workers") + "  "
	if !m.loaded {
		head += th.dim.Render("loading…")
	} else {
		inflight := 0
		for _, w := range m.data.Workers {
			inflight += w.InFlight
		}
		n := fmt.Sprintf("%d processes", len(m.data.Workers))
		if len(m.data.Workers) == 1 {
			n = "1 process"
		}
		head += fmt.Sprintf("%s seen in the last %s · %d tasks in flight", n, withinText(), inflight)
	}
	sub := th.dim.Render(fmt.Sprintf("most recent first · SEEN: since its last heartbeat · dimmed: not seen for %ds · !: broker down", staleAfter))
	return clip(head, width, 1) + "\n" + clip(sub, width, 1) + "\n" + m.tbl.view(th, width, height-2)
}

func withinText() string { return fmt.Sprintf("%d min", int(WorkersWithin.Minutes())) }

// brokerCell shows a worker's broker connection at its last heartbeat:
// "ok" while it consumes its queue, "down" when it does not, "-" for a
// process that does not consume (or an older binary that does not say).
func brokerCell(connected *bool) string {
	switch {
	case connected == nil:
		return "-"
	case *connected:
		return "ok"
	}
	return "down"
}

func orDash(s *string) string {
	if s == nil || *s == "" {
		return "-"
	}
	return core.TerminalText(*s)
}

func handlersCell(hs []string) string {
	if hs == nil {
		return "-"
	}
	if len(hs) == 0 {
		return "(none)"
	}
	out := make([]string, len(hs))
	for i, h := range hs {
		out[i] = core.TerminalText(h)
	}
	return strings.Join(out, ",")
}
