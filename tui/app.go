// Package tui is ffctl's operator dashboard (ffctl tui): runs, a run's
// tasks, leases, the outbox, DEAD tasks and the daemon processes, refreshed
// on a timer, with the two operator actions the CLI has (requeue a DEAD
// task, cancel a run) behind a confirmation that asks for an audited reason.
//
// Shape: one root Model owns the screens (one model each), the shared
// context (size, theme, options) and the refresh loop. Data is read through
// Source in tea.Cmds with a timeout, never in Update; a tick re-arms itself
// as a command; a failed or slow read only changes the status line.
package tui

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/charmbracelet/bubbles/help"
	"github.com/charmbracelet/bubbles/key"
	tea "github.com/charmbracelet/bubbletea"
	"github.com/google/uuid"

	"github.com/flowforge/flowforge/core"
)

type keyMsg = tea.KeyMsg

// Defaults of Options.
const (
	RefreshDefault = 2 * time.Second
	// RefreshMin is the shortest refresh `ffctl tui --refresh` accepts: each
	// refresh is a few queries against the database.
	RefreshMin = 100 * time.Millisecond
	// ActionTimeout bounds a requeue or a cancellation.
	ActionTimeout = 15 * time.Second
	// minFetchTimeout is the least time one refresh may take before it is
	// abandoned (and reported).
	minFetchTimeout = 5 * time.Second
)

// Options configures the dashboard.
type Options struct {
	// Refresh is the period of the automatic refresh; 0 means
	// RefreshDefault.
	Refresh time.Duration
	// ReadOnly hides and disables the actions (requeue, cancel).
	ReadOnly bool
	// NoColor renders without colour (NO_COLOR).
	NoColor bool
	// Output is the terminal drawn on (nil: standard output); Input the
	// keyboard (nil: standard input).
	Output io.Writer
	Input  io.Reader
	// Now is the wall clock used only to time refreshes (nil: time.Now);
	// ages shown come from the database clock.
	Now func() time.Time
	// Installation is shown on the header's second line (zero: no such
	// line).
	Installation Installation
}

// Installation says which FlowForge installation the dashboard shows: its
// id (from the database, see store.Store.Installation), where the database
// is (host:port/name, never a password; DefaultDatabase when
// FLOWFORGE_DATABASE_URL was unset and the default was used) and the
// broker's vhost and dispatch queue that ffctl is configured with.
type Installation struct {
	ID              uuid.UUID
	Database        string
	DefaultDatabase bool
	Vhost, Queue    string
}

type screenID int

const (
	scrRuns screenID = iota
	scrRun
	scrLeases
	scrOutbox
	scrDead
	scrWorkers
	scrTask
	scrWorkflows
	scrSchedules
	scrLimits
	nScreens
)

// tabs lists the screens reachable with 1-9 and tab, in order.
var tabs = []screenID{scrRuns, scrRun, scrLeases, scrOutbox, scrDead, scrWorkers, scrWorkflows, scrSchedules, scrLimits}

// shared is the context every screen sees.
type shared struct {
	width, height int
	theme         *theme
	readOnly      bool
	nav           navKeys
	installation  Installation
}

// fetchFunc reads one screen's data; it runs in a command's goroutine and
// must only use what it captured.
type fetchFunc func(ctx context.Context, src Source) (any, error)

// screen is one view of the dashboard.
type screen interface {
	title() string
	// fetcher returns the read for the screen's current target, or nil
	// when there is nothing to read (no run selected).
	fetcher() fetchFunc
	// setData takes a successful read (ignoring one for another target).
	setData(data any)
	// update handles a key; it returns a command (an action, a navigation
	// message) or nil.
	update(msg keyMsg) tea.Cmd
	// view renders the screen's area.
	view(width, height int) string
	// keys lists the screen's bindings for the help.
	keys() []key.Binding
	// capturing reports that a text field has the focus: every key but
	// ctrl+c goes to the screen.
	capturing() bool
}

// Messages.
type (
	tickMsg time.Time
	dataMsg struct {
		screen screenID
		data   any
		err    error
		took   time.Duration
	}
	// openRunMsg shows a run on the Run screen.
	openRunMsg struct{ id string }
	// openTaskMsg shows a task's attempt history; back returns to from.
	openTaskMsg struct {
		id   string
		from screenID
	}
	// backMsg leaves a sub-screen.
	backMsg struct{}
	// actionMsg reports an action's outcome for the status line.
	actionMsg struct {
		text string
		err  error
	}
)

// Model is the root of the dashboard.
type Model struct {
	src     Source
	c       *shared
	refresh time.Duration
	now     func() time.Time

	screens [nScreens]screen
	runs    *runsModel
	run     *runModel
	task    *taskModel
	dead    *deadModel

	cur, back screenID
	// runBack is where esc on the Run screen goes: the screen that opened
	// the run (a schedule's tick, the Workflows screen, the search bar),
	// or the Runs list when the Run screen was reached by its tab.
	runBack screenID
	// runTrail holds the runs a child or parent run was opened from (o,
	// u), the last on top: esc goes back along it first (runtrail.go).
	runTrail []trailStep

	inflight [nScreens]bool
	started  [nScreens]time.Time

	lastTook     time.Duration
	loaded       bool
	err          error
	errSince     time.Time
	disconnected bool
	notice       string
	noticeErr    bool

	bar bar
	out io.Writer // where "y" writes its OSC 52 sequence

	showHelp bool
	help     help.Model
	global   globalKeys
	wallNow  time.Time
	quitting bool
}

// New returns the dashboard over src.
func New(src Source, opt Options) *Model {
	if opt.Refresh <= 0 {
		opt.Refresh = RefreshDefault
	}
	if opt.Now == nil {
		opt.Now = time.Now
	}
	th := newTheme(newRenderer(opt.Output, opt.NoColor))
	c := &shared{width: 80, height: 24, theme: th, readOnly: opt.ReadOnly, nav: newNavKeys(), installation: opt.Installation}
	out := opt.Output
	if out == nil {
		out = os.Stdout
	}
	m := &Model{src: src, c: c, refresh: opt.Refresh, now: opt.Now, global: newGlobalKeys(), out: out}
	m.runs = newRunsModel(c)
	m.run = newRunModel(c)
	m.task = newTaskModel(c)
	m.dead = newDeadModel(c)
	m.screens = [nScreens]screen{
		scrRuns:      m.runs,
		scrRun:       m.run,
		scrLeases:    newLeasesModel(c),
		scrOutbox:    newOutboxModel(c),
		scrDead:      m.dead,
		scrWorkers:   newWorkersModel(c),
		scrTask:      m.task,
		scrWorkflows: newWorkflowsModel(c),
		scrSchedules: newSchedulesModel(c),
		scrLimits:    newLimitsModel(c),
	}
	m.help = help.New()
	m.help.Styles.ShortKey = th.header
	m.help.Styles.FullKey = th.header
	m.help.Styles.ShortDesc = th.dim
	m.help.Styles.FullDesc = th.dim
	m.help.Styles.ShortSeparator = th.dim
	m.help.Styles.FullSeparator = th.dim
	m.help.Styles.Ellipsis = th.dim
	m.wallNow = m.now()
	return m
}

// Run draws the dashboard until the user quits or ctx ends.
func Run(ctx context.Context, src Source, opt Options) error {
	m := New(src, opt)
	popts := []tea.ProgramOption{tea.WithAltScreen(), tea.WithContext(ctx)}
	if opt.Output != nil {
		popts = append(popts, tea.WithOutput(opt.Output))
	}
	if opt.Input != nil {
		popts = append(popts, tea.WithInput(opt.Input))
	}
	_, err := tea.NewProgram(m, popts...).Run()
	if errors.Is(err, tea.ErrProgramKilled) && ctx.Err() != nil {
		return nil
	}
	return err
}

// Init starts the first read and the refresh timer.
func (m *Model) Init() tea.Cmd {
	return tea.Batch(m.fetch(m.cur), m.tick())
}

func (m *Model) tick() tea.Cmd {
	return tea.Tick(m.refresh, func(t time.Time) tea.Msg { return tickMsg(t) })
}

func (m *Model) fetchTimeout() time.Duration {
	return max(2*m.refresh, minFetchTimeout)
}

// fetch starts a read of screen id unless one is already in flight.
func (m *Model) fetch(id screenID) tea.Cmd {
	if m.inflight[id] {
		return nil
	}
	f := m.screens[id].fetcher()
	if f == nil {
		return nil
	}
	m.inflight[id] = true
	m.started[id] = m.now()
	src, timeout, now := m.src, m.fetchTimeout(), m.now
	return func() tea.Msg {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		start := now()
		data, err := f(ctx, src)
		return dataMsg{screen: id, data: data, err: err, took: now().Sub(start)}
	}
}

// Update handles one message; it never blocks.
func (m *Model) Update(msg tea.Msg) (tea.Model, tea.Cmd) {
	switch msg := msg.(type) {
	case tea.WindowSizeMsg:
		m.c.width, m.c.height = msg.Width, msg.Height
		m.help.Width = msg.Width
		return m, nil
	case tickMsg:
		m.wallNow = m.now()
		return m, tea.Batch(m.fetch(m.cur), m.tick())
	case dataMsg:
		return m, m.onData(msg)
	case openRunMsg:
		return m, m.openRun(msg)
	case followRunMsg:
		return m, m.followRun(msg)
	case openTaskMsg:
		m.task.open(msg.id)
		m.back = msg.from
		m.cur = scrTask
		m.inflight[scrTask] = false
		return m, m.fetch(scrTask)
	case backMsg:
		switch m.cur {
		case scrTask:
			m.cur = m.back
		case scrRun:
			if cmd, ok := m.backAlongTrail(); ok {
				return m, cmd
			}
			m.cur = m.runBack
		default:
			m.cur = scrRuns
		}
		return m, m.fetch(m.cur)
	case actionMsg:
		m.notice, m.noticeErr = core.TerminalText(msg.text), msg.err != nil
		if msg.err != nil {
			m.notice = core.TerminalText(fmt.Sprintf("%s: %v", msg.text, msg.err))
		}
		return m, m.fetch(m.cur)
	case requeueMsg:
		return m, m.requeue(msg)
	case cancelRunMsg:
		return m, m.cancelRun(msg)
	case pauseMsg:
		return m, m.pauseWorkflow(msg)
	case refreshMsg:
		m.inflight[m.cur] = false
		return m, m.fetch(m.cur)
	case scheduleActMsg:
		return m, m.scheduleAct(msg)
	case triggerMsg:
		return m, m.triggerRun(msg)
	case triggeredMsg:
		return m, m.onTriggered(msg)
	case jumpMsg:
		return m, m.onJump(msg)
	case copiedMsg:
		m.notice, m.noticeErr = "copied "+core.TerminalText(msg.id), msg.err != nil
		if msg.err != nil {
			m.notice = core.TerminalText(fmt.Sprintf("copy %s: %v", msg.id, msg.err))
		}
		return m, nil
	case tea.KeyMsg:
		return m, m.onKey(msg)
	}
	return m, nil
}

// openRun shows run msg.id on the Run screen, esc going back to the
// screen that opened it (the Runs list when that was the Run or the task
// screen), the trail of child and parent runs forgotten.
func (m *Model) openRun(msg openRunMsg) tea.Cmd {
	m.run.open(msg.id)
	m.runTrail = nil
	switch m.cur {
	case scrRun:
	case scrTask:
		m.runBack = m.back
	default:
		m.runBack = m.cur
	}
	if m.runBack == scrRun || m.runBack == scrTask {
		m.runBack = scrRuns
	}
	m.cur = scrRun
	m.inflight[scrRun] = false
	return m.fetch(scrRun)
}

func (m *Model) onData(msg dataMsg) tea.Cmd {
	m.inflight[msg.screen] = false
	m.wallNow = m.now()
	if msg.err != nil {
		if m.err == nil {
			m.errSince = m.wallNow
		}
		m.err = msg.err
		m.disconnected = errors.Is(msg.err, ErrDisconnected)
		return nil
	}
	m.err, m.disconnected = nil, false
	m.loaded = true
	m.lastTook = msg.took
	m.screens[msg.screen].setData(msg.data)
	return nil
}

func (m *Model) onKey(msg tea.KeyMsg) tea.Cmd {
	if msg.Type == tea.KeyCtrlC {
		m.quitting = true
		return tea.Quit
	}
	if m.bar.mode != barNone {
		return m.barKey(msg)
	}
	s := m.screens[m.cur]
	if s.capturing() {
		return s.update(msg)
	}
	if msg.Type == tea.KeyRunes && len(msg.Runes) > 1 && !msg.Paste {
		// Keys typed faster than the terminal is read arrive together
		// ("jj"): take them one by one.
		var cmds []tea.Cmd
		for _, r := range msg.Runes {
			cmds = append(cmds, m.onKey(tea.KeyMsg{Type: tea.KeyRunes, Runes: []rune{r}, Alt: msg.Alt}))
		}
		return tea.Batch(cmds...)
	}
	if m.showHelp {
		switch {
		case key.Matches(msg, keyQuitHelp):
			m.showHelp = false
		case key.Matches(msg, m.global.Quit):
			m.quitting = true
			return tea.Quit
		}
		return nil
	}
	switch {
	case key.Matches(msg, m.global.Quit):
		m.quitting = true
		return tea.Quit
	case key.Matches(msg, m.global.Help):
		m.showHelp = true
		return nil
	case key.Matches(msg, m.global.Refresh):
		return m.fetch(m.cur)
	case key.Matches(msg, m.global.Next):
		return m.switchTo(m.tabStep(1))
	case key.Matches(msg, m.global.Prev):
		return m.switchTo(m.tabStep(-1))
	case key.Matches(msg, m.global.Jump):
		return m.openBar(barJump, "")
	case key.Matches(msg, m.global.Copy):
		if c, ok := s.(copyable); ok {
			if id, ok := c.selectedID(); ok {
				return m.copyID(id)
			}
		}
		return nil
	}
	if t := m.curTable(); t != nil {
		switch {
		case key.Matches(msg, keyFilter):
			return m.openBar(barFilter, t.filter)
		case key.Matches(msg, keyClear) && t.filter != "":
			t.setFilter("")
			return nil
		}
	}
	for i, b := range m.global.Screens {
		if key.Matches(msg, b) {
			return m.switchTo(tabs[i])
		}
	}
	return s.update(msg)
}

func (m *Model) tabStep(d int) screenID {
	cur := m.cur
	if cur == scrTask {
		cur = m.back
	}
	for i, id := range tabs {
		if id == cur {
			return tabs[(i+d+len(tabs))%len(tabs)]
		}
	}
	return scrRuns
}

func (m *Model) switchTo(id screenID) tea.Cmd {
	if id == scrRun {
		m.runBack = scrRuns // reached by its tab, not opened from elsewhere
	}
	m.cur = id
	m.notice = ""
	return m.fetch(id)
}

// disabled returns b, disabled when readOnly (hidden from help, inert).
func disabled(b key.Binding, readOnly bool) key.Binding {
	b.SetEnabled(!readOnly)
	return b
}
