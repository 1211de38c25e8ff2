package tui

import (
	"context"
	"fmt"

	"github.com/charmbracelet/bubbles/key"
	tea "github.com/charmbracelet/bubbletea"

	"github.com/flowforge/flowforge/core"
)

// LimitsShown bounds the Limits screen's list: the hottest keys first
// (store.ListLimits' order: most waiters, then most in use, then by
// key), as `ffctl limits list` shows them.
const LimitsShown = 100

// limitsModel is the Limits screen: flow control's keys (issue 27), the
// hottest first, with their limits, holders and waiters.
type limitsModel struct {
	c      *shared
	data   LimitsData
	loaded bool
	tbl    table
}

func newLimitsModel(c *shared) *limitsModel {
	return &limitsModel{c: c, tbl: table{
		cols: []column{
			{title: "KIND", width: 11},
			{title: "KEY", flex: 3, min: 10, cap: 48},
			{title: "LIMIT", width: 14, right: true},
			{title: "IN USE", width: 6, right: true},
			{title: "WAITING", width: 7, right: true},
			{title: "OLDEST WAIT", width: 11, right: true},
		},
		empty: "no flow-control key yet: concurrency: or rate_limit: in a workflow file (docs/workflows.md)",
	}}
}

func (m *limitsModel) title() string { return "Limits" }

func (m *limitsModel) fetcher() fetchFunc {
	return func(ctx context.Context, src Source) (any, error) { return src.Limits(ctx) }
}

func (m *limitsModel) setData(data any) {
	d, ok := data.(LimitsData)
	if !ok {
		return
	}
	m.data, m.loaded = d, true
	rows := make([]row, 0, len(d.Limits))
	for _, l := range d.Limits {
		wait := "-"
		if l.Waiting > 0 {
			wait = fmtSeconds(l.OldestWaitSeconds)
		}
		r := row{
			key:   l.Kind + "/" + l.Key,
			cells: []string{l.Kind, core.TerminalText(l.Key), l.LimitText(), fmt.Sprint(l.InUse), fmt.Sprint(l.Waiting), wait},
		}
		switch {
		case l.Waiting > 0 && l.InUse >= l.Limit:
			r.kind, r.flag = rowWarn, "!"
		case l.Waiting == 0 && l.InUse == 0:
			r.kind = rowDim
		}
		rows = append(rows, r)
	}
	m.tbl.setRows(rows)
}

func (m *limitsModel) capturing() bool { return false }

func (m *limitsModel) update(msg keyMsg) tea.Cmd {
	m.c.nav.navigate(msg, &m.tbl, max(m.c.height-6, 1))
	return nil
}

func (m *limitsModel) keys() []key.Binding { return nil }

func (m *limitsModel) view(width, height int) string {
	th := m.c.theme
	head := th.header.Render("limits") + "  "
	if !m.loaded {
		head += th.dim.Render("loading…")
	} else {
		waiting, full := 0, 0
		for _, l := range m.data.Limits {
			waiting += l.Waiting
			if l.Waiting > 0 && l.InUse >= l.Limit {
				full++
			}
		}
		head += fmt.Sprintf("%d keys · %d tasks or runs waiting · %d keys full with waiters", len(m.data.Limits), waiting, full)
	}
	sub := th.dim.Render("hottest first · IN USE: slots held (a rate: starts in its window) · !: full with waiters · dimmed: idle · ffctl limits set KEY --limit N --reason R")
	return clip(head, width, 1) + "\n" + clip(sub, width, 1) + "\n" + m.tbl.view(th, width, height-2)
}
