package tui

import (
	"strings"
	"testing"

	"github.com/flowforge/flowforge/core/store"
)

// TestTaskViewSaysWhenItsResultWasReused: the task screen of a task run
// that reused another's result for its idempotency key names the source.
func TestTaskViewSaysWhenItsResultWasReused(t *testing.T) {
	t.Parallel()
	f := newFake()
	f.task.ReusedFrom = &store.KeySource{TaskRunID: id(900), RunID: id(901)}
	h := newHarness(t, f, Options{})
	h.size(200, 30)
	h.keys("enter", "down", "down", "enter")
	if h.m.cur != scrTask {
		t.Fatalf("screen %d, want the task screen", h.m.cur)
	}
	want := "result reused from task run " + id(900).String() + " of run " + id(901).String()
	if v := h.view(); !strings.Contains(v, want) {
		t.Fatalf("task screen lacks %q:\n%s", want, v)
	}
}
