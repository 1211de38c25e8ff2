package tui

import (
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/charmbracelet/lipgloss"
	"github.com/google/uuid"
	"github.com/muesli/termenv"

	"github.com/flowforge/flowforge/core"
	"github.com/flowforge/flowforge/core/store"
	"github.com/flowforge/flowforge/tui/palette"
)

// The Run screen of tasks the scheduler holds (held.go) and the way to a
// child run and back (runtrail.go).

// heldFake is newFake's world in which the first run is an order whose
// tasks the scheduler holds: nap sleeping (due in 23h59m30s), approve
// waiting for order.approved ORDER-17 (timing out in 7 days less 30s),
// ship holding its child run (a shipping run, which Run serves too),
// skipme SKIPPED by its wait's timeout, got completed by event ev-17, and
// when SKIPPED by its when. The task screen shows approve.
func heldFake() *fakeSource {
	f := newFake()
	run := f.runs[0]
	run.Workflow = "order"
	child := store.Run{ID: id(50), Workflow: "shipping", WorkflowVersion: 2, State: core.RunRunning, CreatedAt: *ago(30 * time.Second), TasksTotal: 1,
		ParentRunID: &run.ID, ParentTaskRunID: idp(603), ParentTask: str("ship"), Depth: 1,
		Tasks: []store.TaskRun{{ID: id(651), RunID: id(50), Name: "pack", Handler: "noop", State: "READY", MaxAttempts: 3, DependsOn: deps()}}}
	napDue, waitDue := t0.Add(24*time.Hour-30*time.Second), t0.Add(7*24*time.Hour-30*time.Second)
	held := func(n int, name, kind string, st core.TaskState) store.TaskRun {
		return store.TaskRun{ID: id(n), RunID: run.ID, Name: name, State: st, Attempt: 1, MaxAttempts: 3, DependsOn: deps(), Kind: str(kind), StartedAt: ago(30 * time.Second)}
	}
	nap := held(601, "nap", "sleep", core.TaskRunning)
	nap.DueAt, nap.DueSeconds = &napDue, f64(napDue.Sub(t0).Seconds())
	approve := held(602, "approve", "wait", core.TaskRunning)
	approve.DueAt, approve.DueSeconds, approve.WaitEvent, approve.WaitKey, approve.OnTimeout = &waitDue, f64(waitDue.Sub(t0).Seconds()), str("order.approved"), str("ORDER-17"), str("fail")
	ship := held(603, "ship", "workflow", core.TaskRunning)
	ship.ChildRunID = &child.ID
	skipme := held(604, "skipme", "wait", core.TaskSkipped)
	skipme.WaitEvent, skipme.WaitKey, skipme.OnTimeout = str("order.paid"), str(""), str("skip")
	got := held(605, "got", "wait", core.TaskSucceeded)
	got.WaitEvent, got.WaitKey, got.CompletedByEvent = str("order.approved"), str("ORDER-16"), str("ev-17")
	when := store.TaskRun{ID: id(606), RunID: run.ID, Name: "when", Handler: "noop", State: core.TaskSkipped, MaxAttempts: 3, DependsOn: deps()}
	run.Tasks = []store.TaskRun{nap, approve, ship, skipme, got, when}
	run.TasksTotal, run.TasksDone = 6, 3
	run.Children = []store.ChildRun{{RunID: child.ID, TaskRunID: ship.ID, Task: "ship", Workflow: "shipping", State: core.RunRunning, CreatedAt: *ago(30 * time.Second)}}
	run.ChildrenTotal = 1
	f.runs[0], f.run, f.others = run, run, []store.Run{child}
	f.task = store.TaskDetail{TaskRun: approve, Params: store.JSON(`null`)}
	f.task.Workflow = "order"
	return f
}

func idp(n int) *uuid.UUID { u := id(n); return &u }

// rowText is the Run screen's row of task name, its cells joined.
func rowText(t *testing.T, h *harness, name string) string {
	t.Helper()
	for _, r := range h.m.run.tbl.rows {
		if strings.TrimSpace(r.cells[0]) == name {
			return strings.Join(r.cells, " | ")
		}
	}
	t.Fatalf("no row for task %s", name)
	return ""
}

// TestTheRunScreenSaysWhatHeldTasksHold: each held task's row says what it
// holds (a sleep its time left and due time, a wait its event, key and
// time left, a workflow task its child run, a wait that ended the event
// that completed it or its timeout), the header counts the child runs,
// and the task screen says it in full.
func TestTheRunScreenSaysWhatHeldTasksHold(t *testing.T) {
	t.Parallel()
	h := newHarness(t, heldFake(), Options{})
	h.keys("enter")
	for name, want := range map[string]string{
		"nap":     "RUNNING | 1/3 | - | - | sleeps, due in 23h59m (2026-12-01 11:59:30Z)",
		"approve": "RUNNING | 1/3 | - | - | waits for order.approved key ORDER-17, 6d23h left",
		"ship":    "RUNNING | 1/3 | - | - | child run " + shortID(id(50)) + " (shipping, RUNNING)",
		"skipme":  "SKIPPED | 1/3 | - | - | timed out waiting for order.paid without a key",
		"got":     "SUCCEEDED | 1/3 | - | - | completed by event ev-17",
		"when":    "SKIPPED | 0/3 | - | - | -",
	} {
		if row := rowText(t, h, name); !strings.HasSuffix(row, want) {
			t.Errorf("row %q, want it to end %q", row, want)
		}
	}
	if v := h.view(); !strings.Contains(v, "order v1 · 3/6 done · age 1m05s · 1 child run") {
		t.Errorf("the header does not count the child runs:\n%s", v)
	}
	h.size(120, 30)
	h.keys("enter") // approve's history
	if v := h.view(); !strings.Contains(v, "waiting for event order.approved key ORDER-17 (times out in 6d23h, on timeout: fail)") || !strings.Contains(v, "handler -") {
		t.Errorf("the task screen does not say what the wait holds:\n%s", v)
	}
}

// TestAChildRunIsOneKeyFromItsParentAndBack: on the Run screen, o on a
// task with a child run opens the child (the help offers o only on such a
// task); the child's screen names its parent and u goes up to it; esc
// comes back along the way taken, the cursor back on the task the child
// was opened from, then leaves the Run screen.
func TestAChildRunIsOneKeyFromItsParentAndBack(t *testing.T) {
	t.Parallel()
	f := heldFake()
	h := newHarness(t, f, Options{})
	parent, child := f.run.ID.String(), id(50).String()
	h.keys("enter", "o")
	if h.m.run.id != parent {
		t.Fatalf("o on approve (no child run) opened %s", h.m.run.id)
	}
	if v := h.view(); strings.Contains(v, "open child run") {
		t.Errorf("the help offers o on a task without a child run:\n%s", v)
	}
	h.keys("down", "down", "down") // ship (DAG order: by name)
	if v := h.view(); !strings.Contains(v, "o open child run") {
		t.Errorf("the help does not offer o on ship:\n%s", v)
	}
	h.keys("o")
	if h.m.cur != scrRun || h.m.run.id != child || !h.m.run.loaded {
		t.Fatalf("o on ship: screen %d run %s (loaded %v), want the child %s", h.m.cur, h.m.run.id, h.m.run.loaded, child)
	}
	v := h.view()
	for _, want := range []string{"run " + child, "shipping v2", "child of run " + shortID(f.run.ID) + " (task ship, depth 1) · u opens it", "u up to parent run"} {
		if !strings.Contains(v, want) {
			t.Errorf("the child's screen lacks %q:\n%s", want, v)
		}
	}
	h.keys("u")
	if h.m.run.id != parent || len(h.m.runTrail) != 0 {
		t.Fatalf("u on the child: run %s (trail %v), want the parent %s and an empty trail", h.m.run.id, h.m.runTrail, parent)
	}
	h.keys("o") // the cursor stayed on ship
	if h.m.run.id != child {
		t.Fatalf("o again: run %s, want the child", h.m.run.id)
	}
	h.keys("esc")
	if h.m.cur != scrRun || h.m.run.id != parent {
		t.Fatalf("esc on the child: screen %d run %s, want the parent's Run screen", h.m.cur, h.m.run.id)
	}
	if c, ok := h.m.run.selectedChild(); !ok || c.String() != child {
		t.Errorf("back on the parent, the cursor is not on ship")
	}
	h.keys("esc")
	if h.m.cur != scrRuns {
		t.Errorf("esc on the parent: screen %d, want the Runs screen", h.m.cur)
	}

	// Opened from elsewhere (the jump bar), the child has no way back but
	// u; u then leads to the parent, and esc back to the child.
	h.send(openRunMsg{id: child})
	h.keys("u", "esc")
	if h.m.run.id != child || h.m.cur != scrRun {
		t.Errorf("u then esc from a child opened directly: run %s screen %d, want the child", h.m.run.id, h.m.cur)
	}
}

// TestTheRunScreenColoursSkippedAsThePaletteDoes: SKIPPED has a colour of
// its own (palette.Pink), on the Run screen as in the CLI.
func TestTheRunScreenColoursSkippedAsThePaletteDoes(t *testing.T) {
	t.Parallel()
	r := lipgloss.NewRenderer(io.Discard)
	r.SetColorProfile(termenv.ANSI)
	h := newHarness(t, heldFake(), Options{})
	h.m.c.theme = newTheme(r)
	h.keys("enter")
	skipped, _ := palette.State(r, "SKIPPED")
	if spec, _ := palette.Of("SKIPPED"); spec.Colour != palette.Pink || !strings.Contains(h.view(), skipped) {
		t.Errorf("SKIPPED is not drawn pink (%q):\n%q", skipped, h.view())
	}
}

func TestGoldenHeld(t *testing.T) {
	t.Parallel()
	for _, sz := range []struct{ w, h int }{{80, 24}, {120, 30}} {
		for _, tc := range []struct {
			name string
			keys []string
		}{
			{"run", []string{"enter", "down", "down", "down"}},
			{"child", []string{"enter", "down", "down", "down", "o"}},
			{"task", []string{"enter", "enter"}},
		} {
			t.Run(fmt.Sprintf("%s_%dx%d", tc.name, sz.w, sz.h), func(t *testing.T) {
				h := newHarness(t, heldFake(), Options{})
				h.size(sz.w, sz.h)
				h.keys(tc.keys...)
				h.golden()
			})
		}
	}
}

// TestHeldTextIsSanitised: a wait's key comes from the run's params and an
// event's id from its sender: hostile text in either reaches the Run
// screen and the task screen only as placeholders.
func TestHeldTextIsSanitised(t *testing.T) {
	t.Parallel()
	f := heldFake()
	for i := range f.run.Tasks {
		switch f.run.Tasks[i].Name {
		case "approve":
			f.run.Tasks[i].WaitKey = str("k\x1b]0;pwned\x07")
		case "got":
			f.run.Tasks[i].CompletedByEvent = str("ev\u009b2J\u202e")
		}
	}
	f.runs[0] = f.run
	f.task.WaitKey = str("k\x1b]0;pwned\x07")
	h := newHarness(t, f, Options{})
	h.size(160, 30)
	h.keys("enter")
	run := h.view()
	h.keys("enter")
	task := h.view()
	for what, v := range map[string]string{"run": run, "task": task} {
		if strings.ContainsAny(v, "\x1b\x07\u009b\u202e") {
			t.Errorf("the %s screen holds a raw control character:\n%q", what, v)
		}
		if !strings.Contains(v, `key k\x1b]0;pwned\x07`) {
			t.Errorf("the %s screen does not show the key with placeholders:\n%s", what, v)
		}
	}
	if !strings.Contains(run, `completed by event ev\u009b2J\u202e`) {
		t.Errorf("the Run screen does not show the event id with placeholders:\n%s", run)
	}
}
