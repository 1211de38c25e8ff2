package tui

import (
	"context"
	"fmt"

	"github.com/charmbracelet/bubbles/key"
	tea "github.com/charmbracelet/bubbletea"

	"github.com/flowforge/flowforge/core"
)

// leasesModel is the Leases screen: every RUNNING task and its lease.
type leasesModel struct {
	c      *shared
	data   LeasesData
	loaded bool
	tbl    table
}

func newLeasesModel(c *shared) *leasesModel {
	return &leasesModel{c: c, tbl: table{
		cols: []column{
			{title: "TASK", flex: 3, min: 10},
			{title: "WORKER", flex: 2, min: 8},
			{title: "TOKEN", width: 6, right: true},
			{title: "EXPIRES", width: 8, right: true},
			{title: "BEAT", width: 7, right: true},
		},
		empty: "no RUNNING task",
	}}
}

func (m *leasesModel) title() string { return "Leases" }

func (m *leasesModel) fetcher() fetchFunc {
	return func(ctx context.Context, src Source) (any, error) { return src.Leases(ctx) }
}

func (m *leasesModel) setData(data any) {
	d, ok := data.(LeasesData)
	if !ok {
		return
	}
	m.data, m.loaded = d, true
	rows := make([]row, 0, len(d.Leases))
	for _, t := range d.Leases {
		worker := "-"
		if t.WorkerID != nil {
			worker = core.TerminalText(*t.WorkerID)
		}
		expires := fmtLease(t.LeaseSeconds)
		r := row{
			key:   t.ID.String(),
			cells: []string{core.TerminalText(t.Workflow) + "/" + core.TerminalText(t.Name), worker, fmt.Sprint(t.FencingToken), expires, since(d.Now, t.HeartbeatAt)},
		}
		if m.expired(t.LeaseSeconds) {
			r.kind, r.flag = rowWarn, "!"
			r.cells[3] = "EXPIRED"
		}
		rows = append(rows, r)
	}
	m.tbl.setRows(rows)
}

func (m *leasesModel) expired(sec *float64) bool { return sec != nil && *sec < 0 }

func (m *leasesModel) capturing() bool { return false }

func (m *leasesModel) update(msg keyMsg) tea.Cmd {
	m.c.nav.navigate(msg, &m.tbl, max(m.c.height-6, 1))
	return nil
}

func (m *leasesModel) keys() []key.Binding { return nil }

func (m *leasesModel) view(width, height int) string {
	th := m.c.theme
	head := th.header.Render("leases") + "  "
	if !m.loaded {
		head += th.dim.Render("loading…")
	} else {
		expired := 0
		for _, t := range m.data.Leases {
			if m.expired(t.LeaseSeconds) {
				expired++
			}
		}
		head += fmt.Sprintf("%d RUNNING", len(m.data.Leases))
		if len(m.data.Leases) >= LeasesLimit {
			head += fmt.Sprintf(" (first %d)", LeasesLimit)
		}
		if expired > 0 {
			head += " · " + th.warn.Render(fmt.Sprintf("! %d expired, not yet reaped", expired))
		}
	}
	sub := th.dim.Render("soonest expiry first · EXPIRES and BEAT on the database clock")
	return clip(head, width, 1) + "\n" + clip(sub, width, 1) + "\n" + m.tbl.view(th, width, height-2)
}
