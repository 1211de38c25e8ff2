package cli

import (
	"fmt"
	"io"

	"github.com/flowforge/flowforge/core"
	"github.com/flowforge/flowforge/core/store"
)

// reuseLine is task show's line for a task run that reused another's
// result ("  reused    result reused from task run X of run Y\n"), or "".
func reuseLine(t store.TaskRun) string {
	if t.ReusedFrom == nil {
		return ""
	}
	return fmt.Sprintf("  reused    result reused from %s (idempotency key; see `ffctl task forget-key`)\n", t.ReusedFrom)
}

// printReuses lists, under run show's table, the tasks that reused another
// task run's result instead of running their handler.
func printReuses(w io.Writer, tasks []core.Layered[store.TaskRun]) {
	first := true
	for _, t := range tasks {
		if t.Node.ReusedFrom == nil {
			continue
		}
		if first {
			fmt.Fprintln(w, "\nREUSED RESULTS (idempotency key; the handler did not run)")
			first = false
		}
		fmt.Fprintf(w, "  %s: result reused from %s\n", core.TerminalText(t.Node.Name), t.Node.ReusedFrom)
	}
}
