package cli_test

import (
	"strings"
	"testing"
	"unicode/utf8"
)

// TestTablesShowNoRawControlOrBidiCharacters feeds C1 controls, ESC, DEL,
// bidi overrides and isolates, and line separators through the table output
// of run show, task show, dead list and workflow show: none reaches the
// terminal raw; each is shown as a visible placeholder.
func TestTablesShowNoRawControlOrBidiCharacters(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	const evil = "boom \u009b2J \x1b[2J \u202eexe.txt\u2066 \u061c \u2028 \x7f end"
	h.apply("name: evil-wf\ndescription: \"A\\u009b31mB\\u202eC\\x7fD\\e[2JE\\u2029F\"\ntasks:\n  - {name: a, handler: fail}\n")
	runID := h.trigger("evil-wf")
	a := h.taskID(runID, "a")
	h.kill(a, evil)
	h.advance()
	raw := []rune{0x1b, 0x7f, 0x9b, 0x202e, 0x2066, 0x061c, 0x2028, 0x2029}
	for _, tc := range []struct {
		name string
		args []string
		want string // the placeholder that must stand for the overrides
	}{
		{"run show", []string{"run", "show", runID.String()}, `\u202e`},
		{"task show", []string{"task", "show", a.String()}, `\u202e`},
		{"dead list", []string{"dead", "list"}, `\u202e`},
		{"workflow show", []string{"workflow", "show", "evil-wf"}, `\u202e`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := h.must(tc.args...).stdout
			if !utf8.ValidString(out) {
				t.Fatalf("output is not UTF-8: %q", out)
			}
			for _, r := range raw {
				if strings.ContainsRune(out, r) {
					t.Errorf("raw U+%04X in the table:\n%q", r, out)
				}
			}
			if !strings.Contains(out, tc.want) {
				t.Errorf("no %s placeholder in the table:\n%s", tc.want, out)
			}
		})
	}
}
