package tui

import (
	"fmt"
	"strings"
	"time"

	"github.com/charmbracelet/bubbles/key"
	"github.com/charmbracelet/lipgloss"
	"github.com/google/uuid"

	"github.com/flowforge/flowforge/core"
)

// View draws the whole terminal: tabs, the screen, the status line and the
// short help.
func (m *Model) View() string {
	if m.quitting {
		return ""
	}
	w, h := m.c.width, m.c.height
	if w < 20 || h < 6 {
		return fit("terminal too small", max(w, 1))
	}
	header := m.tabsView(w)
	bodyH := h - 3
	if line := m.installationView(w); line != "" {
		header += "\n" + line
		bodyH--
	}
	var body string
	if m.showHelp {
		body = m.fullHelp(w, bodyH)
	} else {
		body = m.screens[m.cur].view(w, bodyH)
	}
	body = clip(body, w, bodyH)
	if n := strings.Count(body, "\n") + 1; n < bodyH {
		body += strings.Repeat("\n", bodyH-n)
	}
	return header + "\n" + body + "\n" + m.statusView(w) + "\n" + m.shortHelp(w)
}

// installationView is the header's second line in w columns: which
// installation this is (its id's first 8 hex digits, as ids are shown;
// "unknown" when it could not be read), its database, queue and vhost; ""
// when Options gave none. A default database is named so in full when the
// line fits, else as "(default)"; what does not fit is clipped.
func (m *Model) installationView(w int) string {
	in := m.c.installation
	if in == (Installation{}) {
		return ""
	}
	th := m.c.theme
	id := "unknown"
	if in.ID != uuid.Nil {
		id = in.ID.String()[:8]
	}
	line := func(defaultNote string) string {
		db := in.Database
		if in.DefaultDatabase {
			db += " " + defaultNote
		}
		return th.header.Render("installation "+id) + th.dim.Render(" · db ") + core.TerminalText(db) +
			th.dim.Render(" · queue ") + core.TerminalText(in.Queue) + th.dim.Render(" (vhost ") + core.TerminalText(in.Vhost) + th.dim.Render(")")
	}
	if s := line("(default: FLOWFORGE_DATABASE_URL is unset)"); lipgloss.Width(s) <= w {
		return s
	}
	return clip(line("(default)"), w, 1)
}

// tabsView is the tabs line in w columns: spaced, or compact when that
// does not fit.
func (m *Model) tabsView(w int) string {
	if s := m.tabsLine(false); lipgloss.Width(s) <= w {
		return s
	}
	// Too narrow for the spaced tabs: the compact ones fit 80 columns.
	return clip(m.tabsLine(true), w, 1)
}

// tabsLine draws the tabs, padded (" 1 Runs ") or compact ("1 Runs").
func (m *Model) tabsLine(compact bool) string {
	th := m.c.theme
	var b strings.Builder
	b.WriteString(th.brand.Render("FlowForge"))
	active := m.cur
	if active == scrTask {
		active = scrRun
		if m.back == scrDead {
			active = scrDead
		}
	}
	for i, id := range tabs {
		label := fmt.Sprintf("%d %s", i+1, m.screens[id].title())
		b.WriteString(" ")
		if id == active {
			b.WriteString(th.tabActive.Render("[" + label + "]"))
		} else if compact {
			b.WriteString(th.tab.Render(label))
		} else {
			b.WriteString(th.tab.Render(" " + label + " "))
		}
	}
	if m.c.readOnly {
		b.WriteString(" " + th.dim.Render("read-only"))
	}
	return b.String()
}

// statusView is the status line in w columns: the bar while one is open,
// else the refresh state (disconnected, failed, slow, loading or live),
// led by the table's filter and followed by the last notice.
func (m *Model) statusView(w int) string {
	th := m.c.theme
	var s string
	inflightFor := time.Duration(0)
	if m.inflight[m.cur] {
		inflightFor = m.wallNow.Sub(m.started[m.cur])
	}
	if m.bar.mode != barNone {
		return m.barView(w)
	}
	switch {
	case m.disconnected:
		s = th.bad.Render(fmt.Sprintf("disconnected, retrying (for %s): %s", fmtAge(m.wallNow.Sub(m.errSince)), firstLineOf(m.err)))
	case m.err != nil:
		s = th.bad.Render(fmt.Sprintf("refresh failed, retrying every %s: %s", m.refresh, firstLineOf(m.err)))
	case inflightFor > m.refresh:
		s = th.warn.Render(fmt.Sprintf("refresh slow: waiting %s", fmtAge(inflightFor)))
	case !m.loaded:
		s = th.dim.Render("loading…")
	default:
		s = th.good.Render("● live") + th.dim.Render(fmt.Sprintf(" · read in %s · every %s", fmtAge(m.lastTook), m.refresh))
	}
	if t := m.curTable(); t != nil && t.filter != "" {
		s = th.warn.Render("/"+core.TerminalText(t.filter)) + th.dim.Render(fmt.Sprintf(" (%d of %d, esc clears) │ ", len(t.rows), len(t.all))) + s
	}
	if m.notice != "" {
		st := th.good
		if m.noticeErr {
			st = th.bad
		}
		s += th.dim.Render(" │ ") + st.Render(m.notice)
	}
	return clip(s, w, 1)
}

// firstLineOf is err's first line, made safe for the terminal.
func firstLineOf(err error) string {
	line, _, _ := strings.Cut(err.Error(), "\n")
	return core.TerminalText(line)
}

// shortHelp is the one-line help of the keys that work now.
func (m *Model) shortHelp(w int) string {
	var ks []key.Binding
	if m.showHelp {
		ks = []key.Binding{keyQuitHelp, m.global.Quit}
	} else {
		ks = append(ks, m.screens[m.cur].keys()...)
		switch {
		case m.bar.mode == barFilter:
			ks = []key.Binding{keyBarKeep, keyBarClear}
		case m.bar.mode == barJump:
			ks = []key.Binding{keyBarJump, keyAbort}
		}
		if m.bar.mode == barNone && !m.screens[m.cur].capturing() {
			ks = append(ks, m.global.Help, m.global.Quit)
		}
	}
	m.help.Width = w
	return clip(m.help.ShortHelpView(ks), w, 1)
}

// fullHelp is the ? screen: the keys in three columns (screens,
// navigation, and the current screen's own with the global ones).
func (m *Model) fullHelp(w, h int) string {
	g := m.global
	screensCol := append([]key.Binding{g.Next, g.Prev}, g.Screens...)
	own := m.screens[m.cur].keys()
	if m.curTable() != nil {
		own = append(own, keyFilter)
	}
	if _, ok := m.screens[m.cur].(copyable); ok {
		own = append(own, g.Copy)
	}
	cols := [][]key.Binding{
		screensCol,
		m.c.nav.bindings(),
		append(own, g.Jump, g.Refresh, g.Help, g.Quit),
	}
	m.help.Width = w
	title := m.c.theme.header.Render("keys — " + m.screens[m.cur].title())
	return clip(title+"\n\n"+m.help.FullHelpView(cols), w, h)
}
