package tui

import (
	"strings"
	"testing"
)

func TestSanitize(t *testing.T) {
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
		{"c1\u009bcsi", `c1\u009bcsi`},
		{"bidi\u202eevil", `bidi\u202eevil`},
		{"bad\xffutf8", `bad\xffutf8`},
		{"nul\x00", `nul\x00`},
	}
	for _, c := range cases {
		if got := Sanitize(c.in); got != c.want {
			t.Errorf("Sanitize(%q) = %q, want %q", c.in, got, c.want)
		}
		if got := Sanitize(c.in); strings.ContainsAny(got, "\x1b\x07\x00\r\n\x7f\u009b\u202e") {
			t.Errorf("Sanitize(%q) = %q still holds a control character", c.in, got)
		}
	}
}

func TestFirstLine(t *testing.T) {
	t.Parallel()
	s := "boom: \x1b[2Jcleared\r\nsecond line"
	if got, want := firstLine(&s), `boom: \x1b[2Jcleared`; got != want {
		t.Errorf("firstLine = %q, want %q", got, want)
	}
	if got := firstLine(nil); got != "-" {
		t.Errorf("firstLine(nil) = %q", got)
	}
}
