package tui

import (
	"fmt"
	"slices"
	"strings"
	"testing"
)

// TestGoldenPause: the Workflows screen's pause prompt and PAUSED column,
// and the Run screen of a paused workflow's run, at both sizes.
func TestGoldenPause(t *testing.T) {
	t.Parallel()
	for _, sz := range []struct{ w, h int }{{80, 24}, {120, 30}} {
		for _, tc := range []struct {
			name string
			keys []string
		}{
			{"workflows_pause_prompt", []string{"7", "down", "p", "text:warehouse migration"}},
			{"workflows_paused", []string{"7", "down", "p", "text:warehouse migration", "enter"}},
			{"run_paused", []string{"7", "down", "p", "text:warehouse migration", "enter", "1", "enter"}},
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

// TestPauseAndResumeFromTheDashboard: "p" on the Workflows screen asks for
// a reason (refusing none), pauses the selected workflow through Source
// and shows it paused; the Run screen of its run says so, and "p" there
// resumes it, also with a reason. In read-only mode "p" does nothing.
func TestPauseAndResumeFromTheDashboard(t *testing.T) {
	t.Parallel()
	h := newHarness(t, newFake(), Options{})
	h.keys("7", "down", "p", "enter")
	if !h.m.screens[scrWorkflows].(*workflowsModel).prompt.active || !strings.Contains(h.view(), "a reason is required (it is audited)") {
		t.Fatalf("an empty reason was not refused:\n%s", h.view())
	}
	h.keys("text:warehouse migration", "enter")
	if want := []string{"pause nightly-report warehouse migration"}; !slices.Equal(h.f.pauses, want) {
		t.Fatalf("pauses %q, want %q", h.f.pauses, want)
	}
	if want := "paused nightly-report: no task of it is dispatched until it is resumed"; h.m.notice != want {
		t.Fatalf("notice %q, want %q", h.m.notice, want)
	}
	if v := h.view(); !strings.Contains(v, `paused 5m00s ago by cli:alice@host1 because "warehouse migration" (mode queue)`) || !strings.Contains(v, "30m00s queue") {
		t.Fatalf("workflows screen of a paused workflow:\n%s", v)
	}
	h.keys("1", "enter")
	if v := h.view(); !strings.Contains(v, `paused 5m00s ago by cli:alice@host1 because "warehouse migration"`) {
		t.Fatalf("run screen of a paused workflow's run:\n%s", v)
	}
	h.keys("p")
	if v := h.view(); !strings.Contains(v, "Resume workflow nightly-report?") {
		t.Fatalf("p on a paused run's screen:\n%s", v)
	}
	h.keys("text:done", "enter")
	if want := []string{"pause nightly-report warehouse migration", "resume nightly-report done"}; !slices.Equal(h.f.pauses, want) {
		t.Fatalf("pauses %q, want %q", h.f.pauses, want)
	}
	if v := h.view(); strings.Contains(v, "paused 5m00s ago") || h.m.notice != "resumed nightly-report: 2 handed-back tasks dispatched again" {
		t.Fatalf("run screen after the resume (notice %q):\n%s", h.m.notice, v)
	}

	ro := newHarness(t, newFake(), Options{ReadOnly: true})
	ro.keys("7", "down", "p")
	if ro.m.screens[scrWorkflows].(*workflowsModel).prompt.active || len(ro.f.pauses) != 0 {
		t.Fatal("read-only: p did something")
	}
}
