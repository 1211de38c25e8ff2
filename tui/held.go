package tui

import (
	"fmt"

	"github.com/google/uuid"

	"github.com/flowforge/flowforge/core"
	"github.com/flowforge/flowforge/core/store"
)

// This file holds what the dashboard says of the tasks the scheduler
// holds without a worker (a sleep, a wait, a child run), in core's words
// (core.SleepingText and its kin) on the task screen and in compact ones
// in the Run screen's ERROR column, which leads with what fits a narrow
// terminal: the time left, the event and key, the child's short id.

// heldCell is the Run screen's ERROR cell of a held task t: a RUNNING
// sleep's time left and due time, a RUNNING wait's event, key and time
// left (0s once past), a workflow task's child run (its short id,
// workflow and state), the event that completed a wait or the timeout
// that skipped it; "" for any other task. children holds the run's child
// runs (Run.Children) by id.
func heldCell(t store.TaskRun, children map[uuid.UUID]store.ChildRun) string {
	if t.Kind == nil {
		return ""
	}
	running := t.State == core.TaskRunning && t.DueAt != nil
	switch core.TaskKind(*t.Kind) {
	case core.KindSleep:
		if running {
			return fmt.Sprintf("sleeps, due %s (%s)", dueIn(t.DueSeconds), t.DueAt.UTC().Format(core.DueTimeLayout))
		}
	case core.KindWait:
		switch {
		case running:
			return fmt.Sprintf("waits for %s %s, %s left", core.TerminalText(*t.WaitEvent), core.KeyText(orEmpty(t.WaitKey)), fmtAge(max(core.SecondsLeft(t.DueSeconds), 0)))
		case t.State == core.TaskSkipped && t.WaitEvent != nil:
			return fmt.Sprintf("timed out waiting for %s %s", core.TerminalText(*t.WaitEvent), core.KeyText(orEmpty(t.WaitKey)))
		}
		return endedWait(t)
	case core.KindWorkflow:
		if t.ChildRunID != nil { // the help offers keyChild on its row
			c := children[*t.ChildRunID]
			return core.ChildRunText(shortID(*t.ChildRunID), c.Workflow, c.State, false)
		}
	}
	return ""
}

// heldLine is the task screen's line of what a held task holds, in
// core's words (store.TaskRun.HeldText); "" for any other task.
func heldLine(d store.TaskDetail) string {
	return d.TaskRun.HeldText(d.ChildRun, d.ChildRun == nil)
}

// endedWait is what a wait that ended says: the event that completed it,
// or that its timeout skipped it; "" otherwise (a failed wait has its
// error).
func endedWait(t store.TaskRun) string {
	switch {
	case t.CompletedByEvent != nil:
		return core.CompletedByText(*t.CompletedByEvent)
	case t.State == core.TaskSkipped && t.WaitEvent != nil:
		return core.TimedOutText(*t.WaitEvent, orEmpty(t.WaitKey))
	}
	return ""
}

// dueIn is the time left to a due time: "in 23h59m", or "3s ago" once
// past.
func dueIn(sec *float64) string {
	left := core.SecondsLeft(sec)
	if left < 0 {
		return fmtAge(-left) + " ago"
	}
	return "in " + fmtAge(left)
}

// orEmpty is *s, or "" for nil (the core texts make it terminal-safe).
func orEmpty(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
