package cli_test

import (
	"strings"
	"testing"
)

// TestRunShowDrawsAJoinOnceNamingItsUpstreams: run show's table of a
// diamond (a → b, a → c, b → d, c → d) and a three-way join has each task
// on one line, in the order a reader follows, a join naming its upstreams.
func TestRunShowDrawsAJoinOnceNamingItsUpstreams(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	for _, tc := range []struct {
		name, src string
		want      []string // the TASK cells, in order
	}{
		{"diamond", "name: diamond\ntasks:\n  - {name: a, handler: noop}\n  - {name: b, handler: noop, depends_on: [a]}\n" +
			"  - {name: c, handler: noop, depends_on: [a]}\n  - {name: d, handler: noop, depends_on: [b, c]}\n",
			[]string{"a", "  b", "  c", "    d ← b, c"}},
		{"three-way join", "name: fanin\ntasks:\n  - {name: x, handler: noop}\n  - {name: y, handler: noop}\n  - {name: z, handler: noop}\n" +
			"  - {name: merge, handler: noop, depends_on: [z, x, y]}\n  - {name: report, handler: noop, depends_on: [merge]}\n",
			[]string{"x", "y", "z", "  merge ← x, y, z", "    report"}},
		{"chain", "name: chain\ntasks:\n  - {name: one, handler: noop}\n  - {name: two, handler: noop, depends_on: [one]}\n  - {name: three, handler: noop, depends_on: [two]}\n",
			[]string{"one", "  two", "    three"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h.apply(tc.src)
			name, _, _ := strings.Cut(strings.TrimPrefix(tc.src, "name: "), "\n")
			run := h.trigger(name)
			out := h.must("run", "show", run.String()).stdout
			_, table, _ := strings.Cut(out, "\nTASK ")
			rows := strings.Split(strings.TrimRight(table, "\n"), "\n")[1:]
			if len(rows) != len(tc.want) {
				t.Fatalf("%d rows, want %d:\n%s", len(rows), len(tc.want), out)
			}
			for i, w := range tc.want {
				task := strings.TrimSpace(strings.TrimLeft(w, " "))
				task, _, _ = strings.Cut(task, " ")
				id := h.taskID(run, task).String()
				cell, _, ok := strings.Cut(rows[i], id)
				if !ok || strings.TrimRight(cell, " ") != w {
					t.Fatalf("row %d %q, want the TASK cell %q before %s:\n%s", i+1, rows[i], w, id, out)
				}
			}
		})
	}
}
