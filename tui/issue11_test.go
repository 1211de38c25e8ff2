package tui

import (
	"bytes"
	"encoding/base64"
	"strings"
	"testing"

	"github.com/google/uuid"
)

// TestSlashFiltersEveryListScreen: "/" filters the rows of every list
// screen as it is typed (not only Runs); esc clears the filter.
func TestSlashFiltersEveryListScreen(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name      string
		open      []string
		filter    string
		kept, cut string
	}{
		{"run", []string{"enter"}, "transf", "transform", "extract"},
		{"task", []string{"enter", "down", "down", "down", "enter"}, "upstream", "upstream fixed", "claimed"},
		{"leases", []string{"3"}, "resize", "image-resize/resize", "nightly-report/load"},
		{"outbox", []string{"4"}, "wordcount", "wordcount/extract", "nightly-report/load"},
		{"dead", []string{"5"}, "BILLING", "charge", "upload"},
		{"workers", []string{"6"}, "gpu", "worker-host2-77-dead", "all-host1-4242-a1b2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, newFake(), Options{})
			h.size(120, 30)
			h.keys(tc.open...)
			before := h.view()
			if !strings.Contains(before, tc.kept) || !strings.Contains(before, tc.cut) {
				t.Fatalf("before filtering, the screen lacks %q or %q:\n%s", tc.kept, tc.cut, before)
			}
			h.keys("/", "text:"+tc.filter)
			v := h.view()
			if !strings.Contains(v, tc.kept) || strings.Contains(v, tc.cut) {
				t.Fatalf("filter %q: want %q shown and %q hidden:\n%s", tc.filter, tc.kept, tc.cut, v)
			}
			h.keys("enter") // keeps the filter, leaves the bar
			v = h.view()
			if strings.Contains(v, tc.cut) || !strings.Contains(v, "/"+tc.filter) {
				t.Fatalf("after enter the filter is gone or not shown:\n%s", v)
			}
			h.keys("esc")
			if v := h.view(); !strings.Contains(v, tc.cut) {
				t.Fatalf("esc did not clear the filter:\n%s", v)
			}
		})
	}
}

// TestColonJumpsToARunOrTaskByIDOrPrefix: ":" takes a full id or a unique
// prefix and opens the run or task; a prefix that names nothing or more
// than one says so and stays.
func TestColonJumpsToARunOrTaskByIDOrPrefix(t *testing.T) {
	t.Parallel()
	f := newFake()
	h := newHarness(t, f, Options{})
	h.size(120, 30)
	run := f.runs[0].ID.String()
	h.keys("4", ":", "text:"+run[:8], "enter")
	if h.m.cur != scrRun || !strings.Contains(h.view(), "run "+run) {
		t.Fatalf("jump to run prefix %s: screen %d\n%s", run[:8], h.m.cur, h.view())
	}
	task := f.run.Tasks[2].ID.String()
	h.keys("1", ":", "text:"+task, "enter")
	if h.m.cur != scrTask || !strings.Contains(h.view(), "task "+task) {
		t.Fatalf("jump to task %s: screen %d\n%s", task, h.m.cur, h.view())
	}
	h.keys("esc")
	if h.m.cur != scrRuns {
		t.Fatalf("back from a jumped-to task went to screen %d, want the screen it was opened from", h.m.cur)
	}
	h.keys(":", "text:ffffffff", "enter")
	if h.m.cur != scrRuns || !strings.Contains(h.view(), ":ffffffff: no run or task has that id") {
		t.Fatalf("unknown id:\n%s", h.view())
	}
	f.mu.Lock()
	twin := f.runs[0]
	twin.ID = uuid.MustParse(run[:9] + "ffff-4000-8000-000000000000")
	f.runs = append(f.runs, twin)
	f.mu.Unlock()
	h.keys(":", "text:"+run[:8], "enter")
	if h.m.cur != scrRuns || !strings.Contains(h.view(), "ambiguous") {
		t.Fatalf("ambiguous prefix:\n%s", h.view())
	}
}

// TestYCopiesTheSelectedIDWithOSC52: "y" writes the OSC 52 sequence that
// puts the selected row's full id on the terminal's clipboard.
func TestYCopiesTheSelectedIDWithOSC52(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		open []string
		want func(f *fakeSource) string
	}{
		{"runs", []string{"down"}, func(f *fakeSource) string { return f.runs[1].ID.String() }},
		{"dead", []string{"5"}, func(f *fakeSource) string { return f.dead[0].ID.String() }},
		{"outbox", []string{"4"}, func(f *fakeSource) string { return f.outbox.Oldest[0].TaskRunID.String() }},
		{"workers", []string{"6"}, func(f *fakeSource) string { return f.workers[0].ID }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			f := newFake()
			h := newHarness(t, f, Options{Output: &out})
			h.keys(tc.open...)
			out.Reset()
			h.keys("y")
			want := tc.want(f)
			seq := "\x1b]52;c;" + base64.StdEncoding.EncodeToString([]byte(want)) + "\x07"
			if !strings.Contains(out.String(), seq) {
				t.Fatalf("y wrote %q, want the OSC 52 sequence %q", out.String(), seq)
			}
			if !strings.Contains(h.view(), "copied "+want) {
				t.Fatalf("status does not say what was copied:\n%s", h.view())
			}
		})
	}
}

// TestWorkersShowHandlersQueueAndBroker: the Workers screen shows each
// worker's handler set, queue and broker connection.
func TestWorkersShowHandlersQueueAndBroker(t *testing.T) {
	t.Parallel()
	h := newHarness(t, newFake(), Options{})
	h.size(160, 30)
	h.keys("6")
	v := h.view()
	for _, want := range []string{"HANDLERS", "QUEUE", "BROKER", "fail,http,noop,sleep", "flowforge.dispatch", " ok ", "gpu", "down", "noop,shell,sleep"} {
		if !strings.Contains(v, want) {
			t.Errorf("workers screen lacks %q", want)
		}
	}
	if t.Failed() {
		t.Log(v)
	}
}

// TestTaskDetailShowsResultTailsAndParams: the task screen shows params,
// the result and the last lines of a shell result's stdout and stderr.
func TestTaskDetailShowsResultTailsAndParams(t *testing.T) {
	t.Parallel()
	h := newHarness(t, newFake(), Options{})
	h.size(120, 30)
	h.keys("enter", "down", "down", "down", "enter")
	v := h.view()
	for _, want := range []string{`params {"url":"https://reports.internal/x"}`, `result {"exit_code":1`, "stdout (last ", "  line 5", "stderr (last 2 of 2 lines)", "  warn: slow", `  error: \x1b[31mboom`} {
		if !strings.Contains(v, want) {
			t.Errorf("task screen lacks %q", want)
		}
	}
	if t.Failed() {
		t.Log(v)
	}
}

// TestRunScreenSaysATaskWaitsForAHandler: a task a worker handed back for
// want of its handler says what it waits for.
func TestRunScreenSaysATaskWaitsForAHandler(t *testing.T) {
	t.Parallel()
	h := newHarness(t, newFake(), Options{})
	h.size(120, 30)
	h.keys("enter")
	if v := h.view(); !strings.Contains(v, "waiting for a worker with handler sendmail") {
		t.Fatalf("run screen:\n%s", v)
	}
}

// TestWideTerminalGivesTheSpaceToErrors: on a wide terminal the task and
// worker columns stop growing and the error column shows the whole error.
func TestWideTerminalGivesTheSpaceToErrors(t *testing.T) {
	t.Parallel()
	f := newFake()
	long := "upstream said: " + strings.Repeat("very long diagnostic ", 5) + "FINAL-WORD"
	f.run.Tasks[4].Error = &long
	h := newHarness(t, f, Options{})
	h.size(220, 30)
	h.keys("enter")
	if v := h.view(); !strings.Contains(v, "FINAL-WORD") {
		t.Fatalf("a 220-column terminal truncates a %d-character error:\n%s", len(long), v)
	}
	w := h.m.run.tbl.widths(220)
	if w[0] > 28 || w[3] > 24 {
		t.Fatalf("task and worker columns grew to %d and %d on a wide terminal", w[0], w[3])
	}
}

// TestWorkflowsScreenTriggersWithParams: the Workflows screen lists the
// workflows; "t" asks for params, refuses bad ones, triggers through
// Source and opens the new run; read-only has no trigger.
func TestWorkflowsScreenTriggersWithParams(t *testing.T) {
	t.Parallel()
	f := newFake()
	h := newHarness(t, f, Options{})
	h.size(120, 30)
	h.keys("7")
	v := h.view()
	for _, want := range []string{"billing-sync", "nightly-report", "wordcount", "t trigger a run"} {
		if !strings.Contains(v, want) {
			t.Fatalf("workflows screen lacks %q:\n%s", want, v)
		}
	}
	h.keys("down", "t", "text:date", "enter")
	if !strings.Contains(h.view(), `"date": want key=value`) || len(f.triggers) != 0 {
		t.Fatalf("a bad param was not refused in the prompt (triggers %v):\n%s", f.triggers, h.view())
	}
	h.keys("text:=2026-12-01", "enter")
	if len(f.triggers) != 1 || f.triggers[0] != `nightly-report {"date":"2026-12-01"}` {
		t.Fatalf("triggers = %q", f.triggers)
	}
	if h.m.cur != scrRun || !strings.Contains(h.view(), "triggered nightly-report") {
		t.Fatalf("after trigger: screen %d\n%s", h.m.cur, h.view())
	}

	ro := newHarness(t, newFake(), Options{ReadOnly: true})
	ro.keys("7", "t")
	if ro.m.screens[scrWorkflows].capturing() || strings.Contains(ro.view(), "trigger a run") {
		t.Fatal("read-only: t opened the trigger prompt or is offered")
	}
}

// TestRunScreenShowsTheWorkerOfFinishedTasks: the WORKER column names the
// worker of a task's last attempt also once the attempt ended, as run show
// does.
func TestRunScreenShowsTheWorkerOfFinishedTasks(t *testing.T) {
	t.Parallel()
	f := newFake()
	done := "worker-that-finished-it"
	for i := range f.run.Tasks {
		if f.run.Tasks[i].State == "SUCCEEDED" {
			f.run.Tasks[i].WorkerID = &done
			break
		}
	}
	h := newHarness(t, f, Options{})
	h.size(160, 30)
	h.keys("enter")
	if v := h.view(); !strings.Contains(v, done) {
		t.Fatalf("the run screen hides the worker of a finished task:\n%s", v)
	}
}
