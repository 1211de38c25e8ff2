package tui

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/charmbracelet/bubbles/key"
	tea "github.com/charmbracelet/bubbletea"

	"github.com/flowforge/flowforge/core"
	"github.com/flowforge/flowforge/core/schedule"
	"github.com/flowforge/flowforge/core/store"
)

// NextFiresShown is how many next fire times a schedule's detail shows.
const NextFiresShown = 5

// scheduleGone is the detail's read of a schedule that no longer exists.
type scheduleGone struct{ name string }

// scheduleAction is one of the Schedules screen's operator actions.
type scheduleAction string

const (
	schedPause   scheduleAction = "pause"
	schedResume  scheduleAction = "resume"
	schedTrigger scheduleAction = "trigger-now"
)

// scheduleActMsg asks the root to run an action on a schedule.
type scheduleActMsg struct {
	name   string
	action scheduleAction
	reason string
}

var (
	keySchedPause   = key.NewBinding(key.WithKeys("p"), key.WithHelp("p", "pause"))
	keySchedResume  = key.NewBinding(key.WithKeys("r"), key.WithHelp("r", "resume"))
	keySchedTrigger = key.NewBinding(key.WithKeys("t"), key.WithHelp("t", "trigger now"))
	keyTickRun      = key.NewBinding(key.WithKeys("enter"), key.WithHelp("enter", "open the tick's run"))
)

// schedulesModel is the Schedules screen: the list, and one schedule's
// detail (its next fire times and last ticks) once opened with enter.
type schedulesModel struct {
	c      *shared
	data   SchedulesData
	loaded bool
	tbl    table

	// name is the schedule whose detail is shown ("" on the list).
	name    string
	detail  ScheduleData
	dloaded bool
	gone    bool // the shown schedule no longer exists
	ticks   table

	prompt  prompt
	pause   key.Binding
	resume  key.Binding
	trigger key.Binding
}

func newSchedulesModel(c *shared) *schedulesModel {
	return &schedulesModel{
		c:       c,
		pause:   disabled(keySchedPause, c.readOnly),
		resume:  disabled(keySchedResume, c.readOnly),
		trigger: disabled(keySchedTrigger, c.readOnly),
		tbl: table{
			cols: []column{
				{title: "SCHEDULE", flex: 2, min: 8, cap: 32},
				{title: "WORKFLOW", flex: 2, min: 8, cap: 28},
				{title: "CRON", flex: 2, min: 6, cap: 20},
				{title: "ZONE", flex: 1, min: 4, cap: 20},
				{title: "NEXT", width: 6, right: true},
				{title: "PAUSED", width: 6},
				{title: "LAST TICK", width: 13},
				{title: "RUN", width: 9},
				{title: "OWNER", width: 5},
			},
			empty: "no schedule: ffctl schedule create, or schedules: in a workflow file",
		},
		ticks: table{
			cols: []column{
				{title: "TICK", width: 16},
				{title: "FIRED", width: 6, right: true},
				{title: "OUTCOME", width: 7},
				{title: "RUN", width: 8},
				{title: "STATE", width: 9},
				{title: "ACTOR", flex: 1, min: 5, cap: 24},
				{title: "REASON", flex: 3, min: 6},
			},
			empty: "no tick yet",
		},
	}
}

func (m *schedulesModel) title() string { return "Schedules" }

func (m *schedulesModel) fetcher() fetchFunc {
	if name := m.name; name != "" {
		return func(ctx context.Context, src Source) (any, error) {
			d, err := src.Schedule(ctx, name)
			if errors.Is(err, store.ErrNotFound) {
				return scheduleGone{name: name}, nil
			}
			return d, err
		}
	}
	return func(ctx context.Context, src Source) (any, error) { return src.Schedules(ctx) }
}

// nextFires is the next n fire times of sc at now (the database's
// clock), in its zone, as `ffctl schedule show` gives them
// (schedule.ShownFireTimes: the ticks the scheduler fires next, from its
// last-fired point; none while it is paused). Nil when its cron no longer
// parses.
func nextFires(sc store.Schedule, now time.Time, n int) []time.Time {
	w, err := sc.Window()
	if err != nil {
		return nil
	}
	return schedule.ShownFireTimes(w, sc.Paused, now, n)
}

// lastTick is a list row's LAST TICK (outcome and age) and RUN cells.
func lastTick(sc store.Schedule, now time.Time) (string, string) {
	if len(sc.Ticks) == 0 {
		return "-", "-"
	}
	t := sc.Ticks[0]
	run := "-"
	if t.RunID != nil {
		run = t.RunState
		if run == "" {
			run = "pruned"
		}
	}
	return fmt.Sprintf("%s %s", t.Outcome, fmtAge(now.Sub(t.FiredAt))), run
}

func (m *schedulesModel) setData(data any) {
	th := m.c.theme
	switch d := data.(type) {
	case SchedulesData:
		m.data, m.loaded = d, true
		rows := make([]row, 0, len(d.Schedules))
		for _, sc := range d.Schedules {
			next := "-"
			if ts := nextFires(sc, d.Now, 1); len(ts) == 1 {
				next = fmtAge(ts[0].Sub(d.Now))
			}
			paused := "no"
			if sc.Paused {
				paused = "PAUSED"
			}
			tick, run := lastTick(sc, d.Now)
			r := row{key: sc.Name,
				cells:  []string{sc.Name, sc.Workflow, sc.Cron, sc.Timezone, next, paused, tick, run, string(sc.Owner)},
				styled: []string{"", "", "", "", "", "", "", th.state(run)},
			}
			if sc.Paused {
				r.kind = rowDim
			}
			if len(sc.Ticks) > 0 && sc.Ticks[0].Outcome == store.TickFailed {
				r.kind, r.flag = rowWarn, "!"
			}
			rows = append(rows, r)
		}
		m.tbl.setRows(rows)
	case scheduleGone:
		if d.name == m.name {
			m.gone, m.dloaded = true, true
			m.ticks.setRows(nil) // its runs may be gone too: nothing to open
		}
	case ScheduleData:
		if d.Schedule.Name != m.name {
			return
		}
		m.detail, m.dloaded, m.gone = d, true, false
		rows := make([]row, 0, len(d.Schedule.Ticks))
		loc, _ := schedule.Location(d.Schedule.Timezone)
		if loc == nil {
			loc = time.UTC
		}
		for _, t := range d.Schedule.Ticks {
			run, state := "-", "-"
			if t.RunID != nil {
				run, state = shortID(*t.RunID), t.RunState
				if state == "" {
					state = "pruned"
				}
			}
			at := t.ScheduledAt.In(loc).Format("01-02 15:04:05")
			if t.Manual {
				at = "manual " + t.ScheduledAt.In(loc).Format("15:04")
			}
			k := strconv.FormatInt(t.ID, 10)
			if t.RunID != nil {
				k = t.RunID.String()
			}
			r := row{key: k,
				cells:  []string{at, fmtAge(d.Now.Sub(t.FiredAt)), string(t.Outcome), run, state, t.Actor, firstLine(&t.Reason)},
				styled: []string{"", "", "", "", th.state(state)},
			}
			if t.Outcome == store.TickFailed {
				r.kind, r.flag = rowWarn, "!"
			}
			rows = append(rows, r)
		}
		m.ticks.setRows(rows)
	}
}

// filterTable: the list, or the shown schedule's ticks.
func (m *schedulesModel) filterTable() *table {
	if m.name != "" {
		return &m.ticks
	}
	return &m.tbl
}

// selectedID: the schedule under the cursor, or the run of the tick under
// the cursor.
func (m *schedulesModel) selectedID() (string, bool) {
	if m.name != "" {
		r, ok := m.ticks.selected()
		if !ok || !strings.Contains(r.key, "-") {
			return "", false
		}
		return r.key, true
	}
	return selectedKey(&m.tbl)
}

func (m *schedulesModel) capturing() bool { return m.prompt.active }

// target is the schedule an action applies to: the one shown, or the one
// under the cursor; with whether it is paused.
func (m *schedulesModel) target() (string, bool, bool) {
	if m.name != "" {
		return m.name, m.dloaded && m.detail.Schedule.Paused, m.dloaded && !m.gone
	}
	r, ok := m.tbl.selected()
	if !ok {
		return "", false, false
	}
	for _, sc := range m.data.Schedules {
		if sc.Name == r.key {
			return sc.Name, sc.Paused, true
		}
	}
	return r.key, false, true
}

func (m *schedulesModel) update(msg keyMsg) tea.Cmd {
	if m.prompt.active {
		return m.prompt.update(msg)
	}
	tbl := m.filterTable()
	if m.c.nav.navigate(msg, tbl, max(m.c.height-6, 1)) {
		return nil
	}
	switch {
	case m.name != "" && key.Matches(msg, keyBack):
		m.name, m.dloaded = "", false
		return func() tea.Msg { return refreshMsg{} }
	case m.name == "" && key.Matches(msg, keyOpen):
		if r, ok := m.tbl.selected(); ok {
			m.name, m.dloaded = r.key, false
			m.ticks.setRows(nil)
			m.ticks.cursor = 0
			return func() tea.Msg { return refreshMsg{} }
		}
	case m.name != "" && key.Matches(msg, keyTickRun):
		if id, ok := m.selectedID(); ok {
			return func() tea.Msg { return openRunMsg{id: id} }
		}
	case key.Matches(msg, m.pause), key.Matches(msg, m.resume), key.Matches(msg, m.trigger):
		name, paused, ok := m.target()
		if !ok {
			return nil
		}
		var action scheduleAction
		var q string
		switch {
		case key.Matches(msg, m.pause):
			if paused {
				return func() tea.Msg { return actionMsg{text: "schedule " + name + " is already paused"} }
			}
			action, q = schedPause, fmt.Sprintf("Pause schedule %s (it fires no tick until resumed)?", name)
		case key.Matches(msg, m.resume):
			if !paused {
				return func() tea.Msg { return actionMsg{text: "schedule " + name + " is not paused"} }
			}
			action, q = schedResume, fmt.Sprintf("Resume schedule %s (the ticks missed while paused are not caught up)?", name)
		default:
			action, q = schedTrigger, fmt.Sprintf("Start a run of schedule %s now (a manual tick, outside its cron)?", name)
		}
		return m.prompt.open(m.c.theme, core.TerminalText(q), "", func(reason string) tea.Cmd {
			return func() tea.Msg { return scheduleActMsg{name: name, action: action, reason: reason} }
		})
	}
	return nil
}

func (m *schedulesModel) keys() []key.Binding {
	if m.prompt.active {
		return m.prompt.keys()
	}
	switch {
	case m.name != "" && m.gone:
		return []key.Binding{keyBack}
	case m.name != "":
		return []key.Binding{keyTickRun, m.pause, m.resume, m.trigger, keyBack}
	}
	return []key.Binding{keyOpen, m.pause, m.resume, m.trigger}
}

func (m *schedulesModel) view(width, height int) string {
	var out string
	if m.name != "" {
		out = m.detailView(width, height)
	} else {
		out = m.listView(width, height)
	}
	if m.prompt.active {
		out = padLines(out, height-promptLines) + "\n" + m.prompt.view(m.c.theme, width)
	}
	return out
}

func (m *schedulesModel) tableHeight(h int) int {
	if m.prompt.active {
		h -= promptLines
	}
	return h
}

func (m *schedulesModel) listView(width, height int) string {
	th := m.c.theme
	head := th.header.Render("schedules") + "  "
	if !m.loaded {
		head += th.dim.Render("loading…")
	} else {
		head += plural(len(m.data.Schedules), "schedule")
		if len(m.data.Schedules) >= SchedulesLimit {
			head += fmt.Sprintf(" (first %d)", SchedulesLimit)
		}
		paused := 0
		for _, sc := range m.data.Schedules {
			if sc.Paused {
				paused++
			}
		}
		if paused > 0 {
			head += " · " + th.warn.Render(fmt.Sprintf("%d paused", paused))
		}
	}
	sub := th.dim.Render("NEXT is the time to the next fire · enter shows fire times and ticks")
	if !m.c.readOnly {
		sub = th.dim.Render("enter shows fire times and ticks · p pause · r resume · t trigger now")
	}
	return clip(head, width, 1) + "\n" + clip(sub, width, 1) + "\n" + m.tbl.view(th, width, m.tableHeight(height-2))
}

func (m *schedulesModel) detailView(width, height int) string {
	th := m.c.theme
	if !m.dloaded {
		return th.dim.Render("schedule " + core.TerminalText(m.name) + ": loading…")
	}
	if m.gone {
		return th.warn.Render("schedule "+core.TerminalText(m.name)+" no longer exists (deleted, or removed from its workflow file)") + "\n" +
			th.dim.Render("esc goes back to the list")
	}
	d := m.detail
	sc := d.Schedule
	head := th.header.Render("schedule "+core.TerminalText(sc.Name)) + "  "
	if sc.Paused {
		head += th.warn.Render("PAUSED")
	} else {
		head += th.good.Render("active")
	}
	info := fmt.Sprintf("workflow %s · cron %s · %s · owner %s", core.TerminalText(sc.Workflow), core.TerminalText(sc.Cron), core.TerminalText(sc.Timezone), sc.Owner)
	policy := fmt.Sprintf("overlap %s · catch-up %s", sc.Overlap, sc.Catchup)
	if sc.Owner == schedule.OwnerFile {
		policy = "declared in the workflow file of " + core.TerminalText(sc.Workflow) + " (changed there) · " + policy
	}
	if sc.CatchupWindow > 0 {
		policy += " within " + fmtAge(sc.CatchupWindow)
	}
	if sc.Jitter > 0 {
		policy += " · jitter " + fmtAge(sc.Jitter)
	}
	policy += " · params " + core.TerminalText(compactJSON(store.JSON(sc.Params)))
	lines := []string{clip(head, width, 1), clip(info, width, 1), clip(th.dim.Render(policy), width, 1)}

	next := nextFires(sc, d.Now, NextFiresShown)
	label := "next fire times"
	if sc.Paused {
		label += " (paused: none fires until resumed)"
	}
	lines = append(lines, th.header.Render(label))
	for _, t := range next {
		lines = append(lines, clip(fmt.Sprintf("  %s  in %s", t.Format("Mon 2006-01-02 15:04:05 MST"), fmtAge(t.Sub(d.Now))), width, 1))
	}
	if len(next) == 0 {
		lines = append(lines, th.dim.Render("  none"))
	}
	lines = append(lines, th.header.Render(fmt.Sprintf("last %d ticks, newest first", store.ScheduleTicksShown)))
	out := strings.Join(lines, "\n") + "\n"
	return out + m.ticks.view(th, width, m.tableHeight(height-len(lines)))
}

// scheduleAct runs a schedule action through Source, bounded by
// ActionTimeout, and reports it on the status line.
func (m *Model) scheduleAct(msg scheduleActMsg) tea.Cmd {
	return m.act(func(ctx context.Context, src Source) tea.Msg {
		text := fmt.Sprintf("schedule %s: %s", msg.name, msg.action)
		var err error
		var changed bool
		switch msg.action {
		case schedPause:
			changed, err = src.PauseSchedule(ctx, msg.name, msg.reason)
			text = fmt.Sprintf("schedule %s: paused", msg.name)
			if !changed {
				// Paused meanwhile (another operator): nothing changed.
				text = fmt.Sprintf("schedule %s is already paused; nothing changed", msg.name)
			}
		case schedResume:
			changed, err = src.ResumeSchedule(ctx, msg.name, msg.reason)
			text = fmt.Sprintf("schedule %s: resumed", msg.name)
			if !changed {
				text = fmt.Sprintf("schedule %s is not paused; nothing to resume", msg.name)
			}
		case schedTrigger:
			var t store.Tick
			t, err = src.TriggerScheduleNow(ctx, msg.name, msg.reason)
			switch {
			case err != nil:
			case t.RunID != nil:
				text = fmt.Sprintf("schedule %s: triggered run %s", msg.name, t.RunID)
			default:
				text = fmt.Sprintf("schedule %s: tick %s (%s)", msg.name, t.Outcome, t.Reason)
			}
		default:
			err = errors.New("unknown action")
		}
		if err != nil {
			return actionMsg{text: fmt.Sprintf("schedule %s: %s", msg.name, msg.action), err: err}
		}
		return actionMsg{text: text}
	})
}
