package handlers

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"

	"github.com/flowforge/flowforge/core"
)

// recordedLog is a core.TaskLog that keeps its lines as "stream level text".
type recordedLog struct {
	mu    sync.Mutex
	lines []string
}

func (r *recordedLog) Line(stream core.LogStream, level, text string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.lines = append(r.lines, string(stream)+" "+level+" "+text)
}

// TestLogLinesCutsOutputIntoLines: a line at each newline whatever the
// writes' boundaries, "\r\n" as one, a line over core.MaxTaskLogLineBytes
// in parts, the rest at flush; no task log in the context, no writer.
func TestLogLinesCutsOutputIntoLines(t *testing.T) {
	t.Parallel()
	if newLogLines(context.Background(), core.LogStreamStdout) != nil {
		t.Fatal("a writer without a task log")
	}
	rec := &recordedLog{}
	w := newLogLines(core.WithTaskLog(context.Background(), rec), core.LogStreamStderr)
	long := strings.Repeat("z", core.MaxTaskLogLineBytes+3)
	for _, p := range []string{"one\ntw", "o\r\n", "", "\nthree", long, "\nlast"} {
		if n, err := w.Write([]byte(p)); n != len(p) || err != nil {
			t.Fatalf("write %q: %d, %v", p, n, err)
		}
	}
	w.flush()
	want := []string{"stderr  one", "stderr  two", "stderr  ", "stderr  three" + long[:core.MaxTaskLogLineBytes-5],
		"stderr  " + long[core.MaxTaskLogLineBytes-5:], "stderr  last"}
	if strings.Join(rec.lines, "|") != strings.Join(want, "|") {
		t.Fatalf("lines %q\nwant %q", rec.lines, want)
	}
}

// TestNoopLogsItsLines: the noop handler's log_lines go into the task log.
func TestNoopLogsItsLines(t *testing.T) {
	t.Parallel()
	rec := &recordedLog{}
	ctx := core.WithTaskLog(context.Background(), rec)
	if _, err := Noop(ctx, core.Task{Params: json.RawMessage(`{"log_lines": 2}`)}); err != nil {
		t.Fatal(err)
	}
	if want := "log INFO noop: line 1 of 2|log INFO noop: line 2 of 2"; strings.Join(rec.lines, "|") != want {
		t.Fatalf("lines %q, want %q", rec.lines, want)
	}
}
