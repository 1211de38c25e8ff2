package tui

import (
	"fmt"
	"strings"
	"testing"

	"github.com/flowforge/flowforge/core"
	"github.com/flowforge/flowforge/core/store"
)

// TestTaskViewShowsTheLastLinesOfItsLog: the task screen ends its header
// with the last lines of the task's log that its height spares (attempt,
// stream, level, terminal-safe text), newest last.
func TestTaskViewShowsTheLastLinesOfItsLog(t *testing.T) {
	t.Parallel()
	f := newFake()
	for i := 1; i <= 12; i++ {
		f.taskLogs = append(f.taskLogs, store.TaskLogLine{Attempt: 2, Seq: i, Stream: core.LogStreamStdout, Line: fmt.Sprintf("line %d", i)})
	}
	f.taskLogs[11] = store.TaskLogLine{Attempt: 2, Seq: 12, Stream: core.LogStreamLog, Level: "WARN", Line: "evil \x1b[2J"}
	h := newHarness(t, f, Options{})
	h.size(200, 30)
	h.keys("enter", "down", "down", "enter")
	if h.m.cur != scrTask {
		t.Fatalf("screen %d, want the task screen", h.m.cur)
	}
	v := h.view()
	for _, want := range []string{"log (last ", "  #2 stdout  line 11\n", `  #2 log WARN  evil \x1b[2J`} {
		if !strings.Contains(v, want) {
			t.Fatalf("task screen lacks %q:\n%s", want, v)
		}
	}
	if strings.Contains(v, "#2 stdout  line 5\n") {
		t.Fatalf("task screen shows the oldest line at 30 rows:\n%s", v)
	}
}
