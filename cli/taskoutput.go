package cli

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"github.com/flowforge/flowforge/core"
	"github.com/flowforge/flowforge/core/store"
	"github.com/flowforge/flowforge/daemon/handlers"
)

// Bounds of the output tails `task show` prints in its table form; `-o
// json` holds the stored text whole.
const (
	// outputTailLines is how many last lines of each stream it prints.
	outputTailLines = 10
	// outputLineMaxRunes cuts a longer line, with "…".
	outputLineMaxRunes = 200
)

// printTaskOutput writes what a task said, below task show's header: for a
// shell task that succeeded, the last lines of the stdout and stderr its
// result holds (the handler keeps their last handlers.OutputTailBytes); for
// a task whose error spans several lines (a failed shell task's error ends
// with its stderr tail), the error's last lines. Each section starts with a
// blank line; a task with neither writes nothing. Every line goes through
// core.TerminalText.
func printTaskOutput(w io.Writer, t store.TaskDetail) {
	if t.Handler == "shell" && len(t.Result) > 0 {
		var res handlers.ShellResult
		dec := json.NewDecoder(bytes.NewReader(t.Result))
		dec.DisallowUnknownFields()
		// A result of another shape (a reused or sanitised one) shows
		// nothing here: -o json has it as it is.
		if dec.Decode(&res) == nil {
			printTail(w, "STDOUT", res.Stdout)
			printTail(w, "STDERR", res.Stderr)
		}
	}
	if t.Error != nil && strings.Contains(strings.TrimSpace(*t.Error), "\n") {
		printTail(w, "ERROR", *t.Error)
	}
}

// printTail writes the section title and the last outputTailLines lines of
// text, indented, after a line counting the earlier ones when there are
// more; "title (empty)" when text has no lines. A line rewritten with
// carriage returns (a progress bar) shows its last rewrite, as a terminal
// would.
func printTail(w io.Writer, title, text string) {
	text = strings.TrimRight(text, "\r\n")
	if strings.TrimSpace(text) == "" {
		fmt.Fprintf(w, "\n%s (empty)\n", title)
		return
	}
	lines := strings.Split(text, "\n")
	fmt.Fprintf(w, "\n%s\n", title)
	if n := len(lines) - outputTailLines; n > 0 {
		unit := "lines"
		if n == 1 {
			unit = "line"
		}
		fmt.Fprintf(w, "  (%d earlier %s; -o json for all)\n", n, unit)
		lines = lines[n:]
	}
	for _, l := range lines {
		l = strings.TrimRight(l, "\r")
		if i := strings.LastIndexByte(l, '\r'); i >= 0 {
			l = l[i+1:]
		}
		l = core.TerminalText(l)
		if r := []rune(l); len(r) > outputLineMaxRunes {
			l = string(r[:outputLineMaxRunes-1]) + "…"
		}
		fmt.Fprintf(w, "  %s\n", l)
	}
}
