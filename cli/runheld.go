package cli

import (
	"fmt"
	"io"
	"strings"

	"github.com/google/uuid"

	"github.com/flowforge/flowforge/core"
	"github.com/flowforge/flowforge/core/store"
)

// This file holds what `run show` and `task show` say of the tasks the
// scheduler holds (a sleep, a wait, a child run) and of the runs one run
// started or was started by, in core's words (core.SleepingText and its
// kin).

// childInfo is what run show or task show knows of a child run: its
// workflow and state, or that it is gone (deleted or pruned); neither
// when it is not among those read (Run.Children is bounded).
type childInfo struct {
	run  *store.ChildRun // nil: not read
	gone bool            // it no longer exists (deleted or pruned)
}

// heldNote is what a held task t holds (store.TaskRun.HeldText), for run
// show's ERROR cell and task show's line; child says what is known of a
// workflow task's child run.
func heldNote(t store.TaskRun, child func(uuid.UUID) childInfo) string {
	var c childInfo
	if t.ChildRunID != nil {
		c = child(*t.ChildRunID)
	}
	return t.HeldText(c.run, c.gone)
}

// taskNote is run show's ERROR cell of t: what a worker that handed it
// back waits for; else the flow control it waits for
// (store.TaskRun.FlowWaitText); else what it holds while RUNNING, or once it ended
// without an error; else its error's first line.
func taskNote(t store.TaskRun, child func(uuid.UUID) childInfo) string {
	if t.WaitingForHandler != nil { // a worker handed it back: say what it waits for
		return store.WaitingReasonPrefix + *t.WaitingForHandler
	}
	if w := t.FlowWaitText(); w != "" { // waiting for its admission: its key and limit
		return w
	}
	if note := heldNote(t, child); note != "" && (t.State == core.TaskRunning || t.Error == nil) {
		return note
	}
	return firstLine(t.Error, 60)
}

// runChildren looks a child run up among run's children; one missing is
// gone when every child was read.
func runChildren(run store.Run) func(uuid.UUID) childInfo {
	byID := make(map[uuid.UUID]store.ChildRun, len(run.Children))
	for _, c := range run.Children {
		byID[c.RunID] = c
	}
	all := len(run.Children) == run.ChildrenTotal
	return func(id uuid.UUID) childInfo {
		if c, ok := byID[id]; ok {
			return childInfo{run: &c}
		}
		return childInfo{gone: all}
	}
}

// printFamilyLines writes run show's header lines naming the run's parent
// (run, task and depth) when a task started it, and its child runs
// (oldest first, each with its task, workflow and state).
func printFamilyLines(w io.Writer, p colours, run store.Run) {
	switch {
	case run.ParentRunID == nil:
	case run.ParentTask == nil: // deleted or pruned: the ids stay
		fmt.Fprintf(w, "  parent    run %s, task run %s (depth %d; that run has since been deleted)\n", run.ParentRunID, run.ParentTaskRunID, run.Depth)
	default:
		fmt.Fprintf(w, "  parent    run %s (task %s, depth %d)\n", run.ParentRunID, core.TerminalText(*run.ParentTask), run.Depth)
	}
	for i, c := range run.Children {
		label := "            "
		if i == 0 {
			label = "  children  "
		}
		fmt.Fprintf(w, "%s%s (task %s, workflow %s, %s)\n", label, c.RunID, core.TerminalText(c.Task), core.TerminalText(c.Workflow), p.state(string(c.State)))
	}
	if n := run.ChildrenTotal - len(run.Children); n > 0 {
		fmt.Fprintf(w, "            and %d newer (the oldest %d are shown)\n", n, len(run.Children))
	}
}

// heldLine is task show's line of what a held task holds ("  sleep
// sleeping until …\n"), labelled with the block of its definition; "" for
// a task that holds nothing worth saying.
func heldLine(d store.TaskDetail) string {
	note := heldNote(d.TaskRun, func(uuid.UUID) childInfo {
		return childInfo{run: d.ChildRun, gone: d.ChildRun == nil}
	})
	if note == "" {
		return ""
	}
	label := map[core.TaskKind]string{core.KindSleep: "sleep", core.KindWait: "wait_for", core.KindWorkflow: "workflow"}[core.TaskKind(*d.Kind)]
	return fmt.Sprintf("  %-8s  %s\n", label, note)
}

// flowLine is task show's line of the flow control a READY task waits for
// ("  waiting   concurrency customer-42 (5/5)\n"), or of when flow control
// admitted it ("  admitted  2026-12-05 20:01:02\n"); "" for a task without
// either.
func flowLine(t store.TaskRun) string {
	w := t.FlowWaitText()
	if w == "" {
		if t.AdmittedAt != nil { // flow control dispatched it
			return fmt.Sprintf("  %-8s  %s\n", "admitted", fmtTime(t.AdmittedAt))
		}
		return ""
	}
	return fmt.Sprintf("  %-8s  %s\n", "waiting", strings.TrimPrefix(w, "waiting: "))
}
