package tui

import (
	"context"
	"fmt"

	"github.com/charmbracelet/bubbles/key"
	tea "github.com/charmbracelet/bubbletea"

	"github.com/flowforge/flowforge/core"
)

// outboxModel is the Outbox screen: backlog, its age, the publish rate,
// failing and quarantined rows, the database's xmin horizon (a warning line
// while it is held back past OutboxData.HorizonWarn) and the oldest pending
// rows.
type outboxModel struct {
	c      *shared
	data   OutboxData
	loaded bool
	tbl    table
}

func newOutboxModel(c *shared) *outboxModel {
	return &outboxModel{c: c, tbl: table{
		cols: []column{
			{title: "ID", width: 8, right: true},
			{title: "TASK", flex: 2, min: 10, cap: 40},
			{title: "TOKEN", width: 5, right: true},
			{title: "AGE", width: 7, right: true},
			{title: "TRIES", width: 5, right: true},
			{title: "LAST ERROR", flex: 2, min: 6},
		},
		empty: "nothing pending: every dispatch was confirmed by the broker",
	}}
}

func (m *outboxModel) title() string { return "Outbox" }

func (m *outboxModel) fetcher() fetchFunc {
	return func(ctx context.Context, src Source) (any, error) { return src.Outbox(ctx) }
}

func (m *outboxModel) setData(data any) {
	d, ok := data.(OutboxData)
	if !ok {
		return
	}
	m.data, m.loaded = d, true
	rows := make([]row, 0, len(d.Oldest))
	for _, o := range d.Oldest {
		r := row{
			key:   fmt.Sprint(o.ID),
			cells: []string{fmt.Sprint(o.ID), core.TerminalText(o.Workflow) + "/" + core.TerminalText(o.TaskName), fmt.Sprint(o.FencingToken), fmtSeconds(o.AgeSeconds), fmt.Sprint(o.Attempts), firstLine(o.LastError)},
		}
		if o.LastError != nil {
			r.kind, r.flag = rowWarn, "!"
		}
		rows = append(rows, r)
	}
	m.tbl.setRows(rows)
}

func (m *outboxModel) capturing() bool { return false }

func (m *outboxModel) update(msg keyMsg) tea.Cmd {
	m.c.nav.navigate(msg, &m.tbl, max(m.c.height-6, 1))
	return nil
}

func (m *outboxModel) keys() []key.Binding { return nil }

func (m *outboxModel) view(width, height int) string {
	th := m.c.theme
	head := th.header.Render("outbox") + "  "
	var sub string
	if !m.loaded {
		head += th.dim.Render("loading…")
	} else {
		st := m.data.Status
		pending := fmt.Sprintf("pending %d", st.Pending)
		if st.Pending > 0 {
			pending = th.warn.Render(pending)
		}
		head += pending + " · oldest " + fmtSeconds(st.OldestPendingSeconds) +
			" · publish rate " + fmtRate(float64(st.PublishedLastMinute)/60)
		failing := fmt.Sprintf("%d published in the last minute · %d pending rows failing to publish", st.PublishedLastMinute, st.FailingRows)
		if st.Quarantined > 0 {
			// Refused by the broker for good: only an operator can act,
			// so it comes first, where a narrow terminal does not clip it.
			failing = fmt.Sprintf("%d quarantined (ffctl outbox quarantined) · ", st.Quarantined) + failing
		}
		if st.FailingRows > 0 || st.Quarantined > 0 {
			sub = th.bad.Render(failing)
		} else {
			sub = th.dim.Render(failing)
		}
	}
	return clip(head, width, 1) + "\n" + clip(sub, width, 1) + "\n" + clip(m.horizonView(), width, 1) + "\n" + m.tbl.view(th, width, height-3)
}

// horizonView is the database line: a warning naming the holder while the
// xmin horizon is held back past the threshold, else the oldest
// transaction and the hot tables' dead tuples, dimmed.
func (m *outboxModel) horizonView() string {
	th := m.c.theme
	if !m.loaded {
		return ""
	}
	db := m.data.DB
	if db.Holder != nil && m.data.HorizonWarn > 0 && db.HorizonSeconds >= m.data.HorizonWarn.Seconds() {
		h := db.Holder
		who := h.Kind + " " + h.Name
		if h.Application != "" {
			who += " " + h.Application
		}
		return th.bad.Render(core.TerminalText(fmt.Sprintf("! xmin horizon held back %s (dead rows pile up) by %s, %s: %s",
			fmtSeconds(db.HorizonSeconds), who, h.State, h.Query)))
	}
	var dead int64
	for _, n := range db.DeadTuples {
		dead += n
	}
	return th.dim.Render(fmt.Sprintf("database: oldest transaction %s · xmin horizon %s · %d dead tuples in the hot tables",
		fmtSeconds(db.OldestTransactionSeconds), fmtSeconds(db.HorizonSeconds), dead))
}
