package main

import (
	"context"
	"fmt"
)

// Task logs (issue 28): W1 again with a handler that logs taskLogLines
// lines per task into the task's log (the noop handler's log_lines), so
// that what it measures is what storing logs costs the hot path: the
// worker's batched log writer beside its claim and finish batches.
// `daemon all` only, paired with W1's `daemon all` as the flow variants
// are (addFlowRatios). Current tree only (the before column has no task
// logs).

// wfLog is the workflow of the task-log variant: wfOne's task, logging.
const wfLog = "bench-log"

// taskLogLines is the lines each task of the variant logs.
const taskLogLines = 10

// logVariant is the task-log variant, named like a flow variant ("daemon
// all, task log 10 lines") so that addFlowRatios pairs it with "daemon all".
var logVariant = flowVariant{Suffix: fmt.Sprintf("task log %d lines", taskLogLines), WF: wfLog}

// logFile is the variant's workflow file.
func logFile() string {
	return fmt.Sprintf("name: %s\ntasks:\n  - {name: t, handler: noop, params: {log_lines: %d}}\n", wfLog, taskLogLines)
}

// pairedVariants are the variants addFlowRatios pairs with the unlimited
// variant their name extends.
func pairedVariants() []flowVariant {
	return append(append(append([]flowVariant(nil), flowVariants...), logVariant), obsVariants...)
}

// logW1Jobs is the task-log variant of W1 in layout mode: `daemon all`
// only, and only for a tree with task logs.
func (s *ffSystem) logW1Jobs(mode string) []job {
	if s.ff == nil || !s.ff.build.HasTaskLogs || mode != "all" {
		return nil
	}
	v := flowVariantName("daemon "+mode, logVariant)
	s.w1N[v] = s.env.plan.W1N[s.sysKey]
	return []job{{System: s.sysKey, Workload: "W1", Variant: v,
		run: func(ctx context.Context, _ int) (sample, error) { return s.burnDownWF(ctx, mode, v, wfLog) }}}
}

// logRows are the task-log variant's W1 lines: its tasks/s and its ratio
// to `daemon all`'s, paired by round.
func logRows() []rowSpec {
	na := map[string]string{sysFFBefore: "no task logs before issue 28", sysRiver: "-", sysCelery: "-", sysCeiling: "-"}
	v := flowVariantName("daemon all", logVariant)
	return []rowSpec{
		{Label: fmt.Sprintf("W1 · daemon all, each task logging %d lines, tasks/s", taskLogLines), Metric: metricTasksPerS, HigherBetter: true,
			Cells: map[string]pick{sysFF: pickOf("W1", v)}, NA: na},
		{Label: fmt.Sprintf("W1 · daemon all, %s ÷ without, tasks/s, paired", logVariant.Suffix), Metric: metricTasksOverUnlimited, HigherBetter: true,
			Cells: map[string]pick{sysFF: pickOf("W1", v)}, NA: na},
	}
}

// logNote explains the task-log rows.
func logNote() string {
	return fmt.Sprintf("W1 task logs (issue 28; current tree only): W1 with `daemon all` whose task (the noop handler, params {log_lines: %d}) "+
		"logs %d lines through core.Logger into its task log; the worker writes them in batches of its own (one insert per 200 ms or 2,000 lines), "+
		"beside the finish and never in it. The job runs right after W1's `daemon all` job in the same round; the ÷ without row is their ratio, round by round.",
		taskLogLines, taskLogLines)
}
