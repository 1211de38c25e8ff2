package core

import (
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"
)

func TestTerminalText(t *testing.T) {
	t.Parallel()
	cases := []struct{ in, want string }{
		{"plain text", "plain text"},
		{"héllo wörld ✓", "héllo wörld ✓"},
		{"\x1b[31mred\x1b[0m", `\x1b[31mred\x1b[0m`},
		{"\x1b]0;pwned\x07", `\x1b]0;pwned\x07`},             // OSC: set window title
		{"\x1b]52;c;ZXZpbA==\x07", `\x1b]52;c;ZXZpbA==\x07`}, // OSC 52: write the clipboard
		{"a\tb", "a b"},
		{"line1\nline2", "line1⏎line2"},
		{"cr\rover", `cr\x0dover`},
		{"del\x7f", `del\x7f`},
		{"c1\u0080\u0085\u009bcsi\u009f", `c1\u0080\u0085\u009bcsi\u009f`},
		{"bidi\u202eevil", `bidi\u202eevil`},
		{"iso\u2066l\u2067r\u2068f\u2069p", `iso\u2066l\u2067r\u2068f\u2069p`},
		{"emb\u202ae\u202bo\u202cp\u202do", `emb\u202ae\u202bo\u202cp\u202do`},
		{"marks\u061c\u200e\u200f", `marks\u061c\u200e\u200f`},
		{"sep\u2028line\u2029para", `sep\u2028line\u2029para`},
		{"bad\xffutf8", `bad\xffutf8`},
		{"nul\x00", `nul\x00`},
	}
	for _, c := range cases {
		got := TerminalText(c.in)
		if got != c.want {
			t.Errorf("TerminalText(%q) = %q, want %q", c.in, got, c.want)
		}
		if TerminalText(got) != got {
			t.Errorf("TerminalText is not idempotent on %q: %q", got, TerminalText(got))
		}
	}
}

// TestTerminalControlIsTheControlAndBidiSet pins the one definition of an
// unsafe rune against Unicode's own tables: every C0 and C1 control, DEL,
// every Bidi_Control character and the two separators, and nothing else;
// and TerminalText lets none of them through.
func TestTerminalControlIsTheControlAndBidiSet(t *testing.T) {
	t.Parallel()
	for r := rune(0); r <= 0x3000; r++ {
		want := unicode.IsControl(r) || unicode.Is(unicode.Bidi_Control, r) || r == 0x2028 || r == 0x2029
		if got := TerminalControl(r); got != want {
			t.Errorf("TerminalControl(%U) = %v, want %v", r, got, want)
		}
		out := TerminalText("a" + string(r) + "b")
		if !utf8.ValidString(out) {
			t.Errorf("TerminalText(%U) is not UTF-8: %q", r, out)
		}
		for _, o := range out {
			if TerminalControl(o) {
				t.Errorf("TerminalText(%U) = %q still holds %U", r, out, o)
			}
		}
		if want && r != '\t' && r != '\n' && !strings.Contains(out, `\`) {
			t.Errorf("TerminalText(%U) = %q shows no placeholder", r, out)
		}
	}
}
