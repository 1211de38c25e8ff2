package tui

import (
	"bytes"
	"strings"
	"testing"
	"time"

	tea "github.com/charmbracelet/bubbletea"
	"github.com/charmbracelet/x/exp/teatest"
)

// TestProgramRefreshesAndRequeues runs the dashboard as a real Bubble Tea
// program (teatest): it refreshes on its own timer, switches screens and
// requeues a DEAD task through the prompt.
func TestProgramRefreshesAndRequeues(t *testing.T) {
	t.Parallel()
	f := newFake()
	m := New(f, Options{NoColor: true, Refresh: 50 * time.Millisecond})
	tm := teatest.NewTestModel(t, m, teatest.WithInitialTermSize(80, 24))
	wait := func(want string) {
		t.Helper()
		teatest.WaitFor(t, tm.Output(), func(b []byte) bool { return bytes.Contains(b, []byte(want)) },
			teatest.WithDuration(5*time.Second), teatest.WithCheckInterval(10*time.Millisecond))
	}
	wait("nightly-report")
	tm.Send(tea.KeyMsg{Type: tea.KeyRunes, Runes: []rune("5")})
	wait("billing-sync")
	tm.Send(tea.KeyMsg{Type: tea.KeyRunes, Runes: []rune("r")})
	wait("reason:")
	tm.Type("fixed upstream")
	tm.Send(tea.KeyMsg{Type: tea.KeyEnter})
	wait("requeued 1 of 1")
	tm.Send(tea.KeyMsg{Type: tea.KeyRunes, Runes: []rune("q")})
	final := tm.FinalModel(t, teatest.WithFinalTimeout(5*time.Second)).(*Model)
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.requeued) != 1 || f.requeued[0] != id(401) || f.reasons[0] != "fixed upstream" {
		t.Errorf("requeued %v with %v", f.requeued, f.reasons)
	}
	if final.cur != scrDead || !strings.Contains(final.notice, "requeued 1 of 1") {
		t.Errorf("final screen %d, notice %q", final.cur, final.notice)
	}
}
