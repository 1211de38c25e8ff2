package tui

import (
	"fmt"

	tea "github.com/charmbracelet/bubbletea"

	"github.com/flowforge/flowforge/core"
	"github.com/flowforge/flowforge/core/store"
)

// Child and parent runs on the Run screen: o on a `workflow:` task opens
// its child run, u on a child run opens its parent, and esc comes back
// along the way taken (Model.runTrail) before it leaves the Run screen.

// followRunMsg shows a run linked to the one on the Run screen (its
// child's, or its parent); esc comes back.
type followRunMsg struct{ id string }

// runTrailMax bounds Model.runTrail: child runs nest at most
// store.MaxChildDepthDefault deep unless the scheduler allows more.
const runTrailMax = 32

// trailStep is a run o or u left, and the task that was selected on it
// (its row's key), which is selected again on the way back.
type trailStep struct{ run, task string }

// followRun shows run msg.id, remembering the run shown for esc; when
// msg.id is the run esc would come back to (u on a child opened with o),
// it goes back instead, so the trail never loops.
func (m *Model) followRun(msg followRunMsg) tea.Cmd {
	if n := len(m.runTrail); n > 0 && m.runTrail[n-1].run == msg.id {
		return m.stepBack()
	}
	if m.run.id != "" {
		task, _ := selectedKey(&m.run.tbl)
		m.runTrail = append(m.runTrail, trailStep{run: m.run.id, task: task})
		if len(m.runTrail) > runTrailMax {
			m.runTrail = m.runTrail[1:]
		}
	}
	return m.showRun(msg.id, "")
}

// backAlongTrail shows the run the last o or u left, if any (esc on the
// Run screen).
func (m *Model) backAlongTrail() (tea.Cmd, bool) {
	if len(m.runTrail) == 0 {
		return nil, false
	}
	return m.stepBack(), true
}

// stepBack takes the last step of the trail back: its run, with its task
// selected.
func (m *Model) stepBack() tea.Cmd {
	s := m.runTrail[len(m.runTrail)-1]
	m.runTrail = m.runTrail[:len(m.runTrail)-1]
	return m.showRun(s.run, s.task)
}

// showRun opens run id on the Run screen, its task task selected once
// read ("" for the first), and reads it.
func (m *Model) showRun(id, task string) tea.Cmd {
	m.run.open(id)
	m.run.selectKey = task
	m.cur = scrRun
	m.notice = ""
	m.inflight[scrRun] = false
	return m.fetch(scrRun)
}

// parentText is the Run screen's line naming the run's parent, "" for a
// run no task started: "child of run 1a2b3c4d (task ship, depth 1) · u
// opens it", or, once the parent was deleted, its short id alone.
func parentText(r store.Run) string {
	switch {
	case r.ParentRunID == nil:
		return ""
	case r.ParentTask == nil:
		return fmt.Sprintf("child of run %s (deleted since, depth %d)", shortID(*r.ParentRunID), r.Depth)
	}
	return fmt.Sprintf("child of run %s (task %s, depth %d) · %s opens it", shortID(*r.ParentRunID),
		core.TerminalText(*r.ParentTask), r.Depth, keyParent.Help().Key)
}
