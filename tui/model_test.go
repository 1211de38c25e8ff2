package tui

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	tea "github.com/charmbracelet/bubbletea"
	"github.com/charmbracelet/x/exp/golden"
	"github.com/google/uuid"

	"github.com/flowforge/flowforge/core/store"
)

func TestMain(m *testing.M) {
	// The task screen shows a local time of death: pin the zone so golden
	// files do not depend on the machine.
	time.Local = time.UTC
	os.Exit(m.Run())
}

// harness drives a Model the way Bubble Tea does, synchronously: every
// command a message returns is run and its message fed back, except timers
// (the refresh tick, the cursor blink), which are dropped.
type harness struct {
	t *testing.T
	m *Model
	f *fakeSource
}

func newHarness(t *testing.T, f *fakeSource, opt Options) *harness {
	t.Helper()
	opt.NoColor = true
	wall := t0
	opt.Now = func() time.Time { return wall }
	h := &harness{t: t, m: New(f, opt), f: f}
	h.size(80, 24)
	h.run(h.m.fetch(h.m.cur))
	return h
}

func (h *harness) size(w, ht int) { h.send(tea.WindowSizeMsg{Width: w, Height: ht}) }

func (h *harness) send(msg tea.Msg) {
	h.t.Helper()
	_, cmd := h.m.Update(msg)
	h.run(cmd)
}

// run executes cmd (and what its messages return), dropping commands that
// do not answer within a moment: those are timers.
func (h *harness) run(cmd tea.Cmd) {
	h.t.Helper()
	if cmd == nil {
		return
	}
	ch := make(chan tea.Msg, 1)
	go func() { ch <- cmd() }()
	var msg tea.Msg
	select {
	case msg = <-ch:
	case <-time.After(100 * time.Millisecond):
		return
	}
	switch msg := msg.(type) {
	case nil:
	case tea.BatchMsg:
		for _, c := range msg {
			h.run(c)
		}
	case tickMsg:
	default:
		h.send(msg)
	}
}

// keys sends each argument as one key press: named keys (enter, esc, tab,
// space, up, down, ctrl+c) or single characters; "text:..." types text.
func (h *harness) keys(ks ...string) {
	h.t.Helper()
	for _, k := range ks {
		if s, ok := strings.CutPrefix(k, "text:"); ok {
			h.send(tea.KeyMsg{Type: tea.KeyRunes, Runes: []rune(s)})
			continue
		}
		h.send(keyPress(k))
	}
}

func keyPress(k string) tea.KeyMsg {
	switch k {
	case "enter":
		return tea.KeyMsg{Type: tea.KeyEnter}
	case "esc":
		return tea.KeyMsg{Type: tea.KeyEsc}
	case "tab":
		return tea.KeyMsg{Type: tea.KeyTab}
	case "shift+tab":
		return tea.KeyMsg{Type: tea.KeyShiftTab}
	case "space":
		return tea.KeyMsg{Type: tea.KeySpace, Runes: []rune{' '}}
	case "up":
		return tea.KeyMsg{Type: tea.KeyUp}
	case "down":
		return tea.KeyMsg{Type: tea.KeyDown}
	case "ctrl+c":
		return tea.KeyMsg{Type: tea.KeyCtrlC}
	case "backspace":
		return tea.KeyMsg{Type: tea.KeyBackspace}
	}
	return tea.KeyMsg{Type: tea.KeyRunes, Runes: []rune(k)}
}

func (h *harness) view() string { return h.m.View() }

func (h *harness) golden() {
	h.t.Helper()
	v := h.view()
	if strings.Contains(v, "\x1b") {
		h.t.Fatalf("view with colour off holds an escape sequence:\n%q", v)
	}
	lines := strings.Split(v, "\n")
	if len(lines) != h.m.c.height {
		h.t.Errorf("view has %d lines, want %d", len(lines), h.m.c.height)
	}
	for i, l := range lines {
		if w := len([]rune(l)); w > h.m.c.width {
			h.t.Errorf("line %d is %d wide, more than %d: %q", i+1, w, h.m.c.width, l)
		}
	}
	golden.RequireEqual(h.t, []byte(v))
}

func TestGoldenScreens(t *testing.T) {
	t.Parallel()
	for _, sz := range []struct{ w, h int }{{80, 24}, {120, 30}} {
		for _, tc := range []struct {
			name string
			keys []string
		}{
			{"runs", nil},
			{"run", []string{"enter"}},
			{"task", []string{"enter", "down", "down", "down", "enter"}},
			{"leases", []string{"3"}},
			{"outbox", []string{"4"}},
			{"dead", []string{"5"}},
			{"dead_marked_prompt", []string{"5", "space", "down", "space", "r", "text:upstream fixed"}},
			{"workers", []string{"6"}},
			{"workflows", []string{"7"}},
			{"workflows_trigger_prompt", []string{"7", "down", "t", "text:date=2026-12-01"}},
			{"dead_filtered", []string{"5", "/", "text:wordcount"}},
			{"jump_prompt", []string{":", "text:2f1e3d"}},
			{"help", []string{"5", "?"}},
		} {
			t.Run(fmt.Sprintf("%s_%dx%d", tc.name, sz.w, sz.h), func(t *testing.T) {
				h := newHarness(t, newFake(), Options{})
				h.size(sz.w, sz.h)
				h.keys(tc.keys...)
				h.golden()
			})
		}
	}
}

func TestGoldenReadOnlyDead(t *testing.T) {
	t.Parallel()
	h := newHarness(t, newFake(), Options{ReadOnly: true})
	h.keys("5", "space", "r")
	if h.m.dead.prompt.active || len(h.m.dead.marked) != 0 {
		t.Fatal("read-only: space or r did something")
	}
	h.golden()
}

func TestGoldenRunsFilterAndTiny(t *testing.T) {
	t.Parallel()
	h := newHarness(t, newFake(), Options{})
	h.keys("/", "text:failed")
	h.golden()
	h.size(19, 5)
	if got := h.view(); !strings.Contains(got, "too small") {
		t.Errorf("tiny terminal: %q", got)
	}
}

func TestRunsFilter(t *testing.T) {
	t.Parallel()
	h := newHarness(t, newFake(), Options{})
	if n := len(h.m.runs.tbl.rows); n != 6 {
		t.Fatalf("rows = %d, want 6", n)
	}
	h.keys("/", "text:wordcount failed", "enter")
	want := RunFilter{Workflow: "wordcount", State: "FAILED"}
	if h.m.runs.filter != want {
		t.Fatalf("filter = %+v, want %+v", h.m.runs.filter, want)
	}
	if got := h.f.filters[len(h.f.filters)-1]; got != want {
		t.Errorf("source asked with %+v, want %+v", got, want)
	}
	if n := len(h.m.runs.tbl.rows); n != 0 {
		t.Errorf("rows = %d after filtering to nothing", n)
	}
	// While typing, number keys and q are text, not commands.
	h.keys("/", "text:q5")
	if h.m.cur != scrRuns || h.m.quitting {
		t.Fatal("a key typed into the filter acted globally")
	}
	h.keys("esc") // discard the edit
	h.keys("esc") // clear the filter
	if h.m.runs.filter != (RunFilter{}) || len(h.m.runs.tbl.rows) != 6 {
		t.Errorf("after esc: filter %+v, %d rows", h.m.runs.filter, len(h.m.runs.tbl.rows))
	}
	h.keys("/", "text:billing-sync", "enter")
	if len(h.m.runs.tbl.rows) != 1 {
		t.Errorf("workflow filter: %d rows", len(h.m.runs.tbl.rows))
	}
}

func TestParseFilter(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]RunFilter{
		"":                  {},
		"failed":            {State: "FAILED"},
		"nightly-report":    {Workflow: "nightly-report"},
		"RUNNING wordcount": {Workflow: "wordcount", State: "RUNNING"},
	} {
		if got := parseFilter(in); got != want {
			t.Errorf("parseFilter(%q) = %+v, want %+v", in, got, want)
		}
	}
}

func TestScreenSwitching(t *testing.T) {
	t.Parallel()
	h := newHarness(t, newFake(), Options{})
	for _, c := range []struct {
		key  string
		want screenID
	}{{"3", scrLeases}, {"tab", scrOutbox}, {"tab", scrDead}, {"tab", scrWorkers}, {"tab", scrWorkflows}, {"tab", scrSchedules}, {"tab", scrLimits}, {"tab", scrRuns}, {"shift+tab", scrLimits}, {"9", scrLimits}, {"7", scrWorkflows}, {"8", scrSchedules}, {"2", scrRun}, {"1", scrRuns}} {
		h.keys(c.key)
		if h.m.cur != c.want {
			t.Fatalf("after %q: screen %d, want %d", c.key, h.m.cur, c.want)
		}
	}
	// Keys typed together ("jj") count one by one.
	h.send(tea.KeyMsg{Type: tea.KeyRunes, Runes: []rune("jj")})
	if h.m.runs.tbl.cursor != 2 {
		t.Errorf("cursor after jj = %d, want 2", h.m.runs.tbl.cursor)
	}
	h.keys("q")
	if !h.m.quitting {
		t.Error("q did not quit")
	}
}

func TestRunDetailDAGOrderAndHistory(t *testing.T) {
	t.Parallel()
	h := newHarness(t, newFake(), Options{})
	h.keys("enter")
	if h.m.cur != scrRun {
		t.Fatalf("enter on Runs: screen %d", h.m.cur)
	}
	var names []string
	for _, r := range h.m.run.tbl.rows {
		names = append(names, strings.TrimSpace(r.cells[0]))
	}
	want := []string{"extract", "mail", "transform", "load", "report", "notify"}
	if !slices.Equal(names, want) {
		t.Fatalf("DAG order = %v, want %v", names, want)
	}
	if got := h.m.run.tbl.rows[4].cells[0]; got != "    report" {
		t.Errorf("depth-2 task drawn as %q", got)
	}
	h.keys("down", "down", "down", "enter")
	if h.m.cur != scrTask || h.m.task.id != id(103).String() {
		t.Fatalf("history: screen %d task %s", h.m.cur, h.m.task.id)
	}
	if n := len(h.m.task.tbl.rows); n != 5 {
		t.Errorf("history rows = %d", n)
	}
	h.keys("esc")
	if h.m.cur != scrRun {
		t.Errorf("esc from history: screen %d", h.m.cur)
	}
	h.keys("esc")
	if h.m.cur != scrRuns {
		t.Errorf("esc from run: screen %d", h.m.cur)
	}
}

func TestCancelRunConfirms(t *testing.T) {
	t.Parallel()
	f := newFake()
	h := newHarness(t, f, Options{})
	h.keys("enter", "c")
	if !h.m.run.prompt.active {
		t.Fatal("c did not ask for confirmation")
	}
	h.keys("esc")
	if len(f.cancels) != 0 || h.m.run.prompt.active {
		t.Fatal("esc did not abort the cancellation")
	}
	h.keys("c", "enter")
	if len(f.cancels) != 0 || !h.m.run.prompt.active {
		t.Fatal("an empty reason cancelled the run")
	}
	h.keys("text:wrong input", "enter")
	if len(f.cancels) != 1 || f.cancels[0] != f.run.ID {
		t.Fatalf("cancels = %v", f.cancels)
	}
	if !strings.Contains(h.m.notice, "cancellation requested") {
		t.Errorf("notice = %q", h.m.notice)
	}
}

func TestRequeueMarkedWithReason(t *testing.T) {
	t.Parallel()
	f := newFake()
	h := newHarness(t, f, Options{})
	h.keys("5")
	if n := len(h.m.dead.tbl.rows); n != 3 {
		t.Fatalf("dead rows = %d", n)
	}
	h.keys("space", "space", "r")
	if len(h.m.dead.marked) != 2 || !h.m.dead.prompt.active {
		t.Fatalf("marked %d, prompt %v", len(h.m.dead.marked), h.m.dead.prompt.active)
	}
	// A reason is required.
	h.keys("enter")
	if !h.m.dead.prompt.active || len(f.requeued) != 0 {
		t.Fatal("requeued without a reason")
	}
	h.keys("text:upstream fixed", "enter")
	if !slices.Equal(f.requeued, []uuid.UUID{id(401), id(402)}) {
		t.Fatalf("requeued %v", f.requeued)
	}
	if f.reasons[0] != "upstream fixed" {
		t.Errorf("reason %q", f.reasons[0])
	}
	if h.m.notice != "requeued 2 of 2" || h.m.noticeErr {
		t.Errorf("notice %q (error %v)", h.m.notice, h.m.noticeErr)
	}
	if n := len(h.m.dead.tbl.rows); n != 1 || len(h.m.dead.marked) != 0 {
		t.Errorf("after requeue: %d rows, %d marked", n, len(h.m.dead.marked))
	}
	// Without marks, r requeues the selected task.
	h.keys("r", "text:again", "enter")
	if got := f.requeued[len(f.requeued)-1]; got != id(403) {
		t.Errorf("requeued %v, want the selected task", got)
	}
}

// TestTheReasonPromptRefusesWhatTheStoreWouldRefuse: the prompt checks the
// reason with core.ValidateReason before any action: 400 three-byte
// characters fit the input's 500-character limit but not the 1024 bytes of
// core.MaxReasonBytes, and are refused on screen, the prompt staying open.
func TestTheReasonPromptRefusesWhatTheStoreWouldRefuse(t *testing.T) {
	f := newFake()
	h := newHarness(t, f, Options{})
	h.keys("5", "r", "text:"+strings.Repeat("€", 400), "enter")
	if len(f.requeued) != 0 || !h.m.dead.prompt.active || !strings.Contains(h.m.dead.prompt.problem, "longer than 1024 bytes") {
		t.Fatalf("requeued %v; prompt open %v, problem %q", f.requeued, h.m.dead.prompt.active, h.m.dead.prompt.problem)
	}
	h.keys("esc", "r", "text:fixed", "enter")
	if len(f.requeued) != 1 {
		t.Fatalf("a valid reason requeued %v", f.requeued)
	}
}

func TestRequeueReportsFailure(t *testing.T) {
	t.Parallel()
	f := newFake()
	h := newHarness(t, f, Options{})
	h.keys("5")
	h.m.Update(requeueMsg{ids: []uuid.UUID{id(999)}, reason: "x"})
	h.send(requeueMsg{ids: []uuid.UUID{id(999)}, reason: "x"})
	if !h.m.noticeErr || !strings.Contains(h.m.notice, "requeued 0 of 1") || !strings.Contains(h.m.notice, "not DEAD") {
		t.Errorf("notice %q (error %v)", h.m.notice, h.m.noticeErr)
	}
}

func TestRefreshFailureAndRecovery(t *testing.T) {
	t.Parallel()
	f := newFake()
	h := newHarness(t, f, Options{})
	before := h.view()
	f.setErr(fmt.Errorf("%w: dial tcp 127.0.0.1:5432: connect: connection refused", ErrDisconnected))
	h.run(h.m.fetch(scrRuns))
	v := h.view()
	if !strings.Contains(v, "disconnected, retrying") {
		t.Fatalf("status after a lost database:\n%s", v)
	}
	// The last good data stays on screen.
	if !strings.Contains(v, "nightly-report") || len(h.m.runs.tbl.rows) != 6 {
		t.Error("the screen lost its data on a failed refresh")
	}
	f.setErr(errors.New("ERROR: canceling statement due to statement timeout"))
	h.run(h.m.fetch(scrRuns))
	if v := h.view(); !strings.Contains(v, "refresh failed, retrying") {
		t.Errorf("status after a failed query:\n%s", v)
	}
	f.setErr(nil)
	h.run(h.m.fetch(scrRuns))
	if v := h.view(); v != before {
		t.Errorf("after recovery the view differs:\n%s\nwant:\n%s", v, before)
	}
}

func TestSlowRefreshShowsStatusAndDoesNotPileUp(t *testing.T) {
	t.Parallel()
	f := newFake()
	wall := t0
	m := New(f, Options{NoColor: true, Refresh: time.Second, Now: func() time.Time { return wall }})
	m.Update(tea.WindowSizeMsg{Width: 80, Height: 24})
	if cmd := m.fetch(scrRuns); cmd == nil {
		t.Fatal("no fetch")
	}
	if cmd := m.fetch(scrRuns); cmd != nil {
		t.Fatal("a second read started while one was in flight")
	}
	wall = t0.Add(3 * time.Second)
	m.Update(tickMsg(wall))
	if v := m.View(); !strings.Contains(v, "refresh slow: waiting 3s") {
		t.Errorf("slow status missing:\n%s", v)
	}
}

func TestTickReArmsAndFetchesCurrentScreen(t *testing.T) {
	t.Parallel()
	m := New(newFake(), Options{NoColor: true})
	_, cmd := m.Update(tickMsg(t0))
	if cmd == nil {
		t.Fatal("tick returned no command")
	}
	if !m.inflight[scrRuns] {
		t.Error("tick did not start a read of the current screen")
	}
}

func TestDataForAnotherTargetIgnored(t *testing.T) {
	t.Parallel()
	h := newHarness(t, newFake(), Options{})
	h.keys("enter")
	other := h.f.run
	other.ID = id(77)
	h.send(dataMsg{screen: scrRun, data: RunData{Now: t0, Run: other}})
	if h.m.run.data.Run.ID != h.f.run.ID {
		t.Error("a late read of another run replaced the one on screen")
	}
}

func TestUntrustedTextIsSanitised(t *testing.T) {
	t.Parallel()
	h := newHarness(t, newFake(), Options{})
	for _, k := range []string{"1", "enter", "3", "4", "5", "6"} {
		h.keys(k)
		v := h.view()
		if strings.ContainsAny(v, "\x1b\x07") {
			t.Fatalf("screen after %q holds a raw control character", k)
		}
	}
	h.keys("5")
	if v := h.view(); !strings.Contains(v, `evil\x1b[2J`) {
		t.Errorf("escape sequence not shown as a placeholder:\n%s", v)
	}
}

func TestStateCountsCapped(t *testing.T) {
	t.Parallel()
	h := newHarness(t, newFake(), Options{})
	if v := h.view(); !strings.Contains(v, fmt.Sprintf("SUCCEEDED %d+", RunCountCap)) {
		t.Errorf("capped count not shown as N+:\n%s", v)
	}
}

var _ = store.ErrNotDead
