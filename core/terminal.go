package core

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// TerminalText makes untrusted text (task names, errors, params, worker ids,
// descriptions: anything read from the database) safe to print on a
// terminal, for the CLI's tables and the dashboard alike: it can neither
// drive the terminal nor disguise what a line says. Control characters (C0,
// DEL, C1; ESC, so every escape sequence, included) are shown as visible
// placeholders such as \x1b and \u009b; a tab becomes a space; a newline
// becomes the visible ⏎, so a value stays on one row; bytes that are not
// UTF-8 become \xNN; Unicode bidirectional overrides, marks and isolates and
// the line and paragraph separators (which can reorder or break what a line
// seems to say) become \u202e and the like. Text without any of these is
// returned as it is.
func TerminalText(s string) string {
	clean := true
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x7f {
			clean = false
			break
		}
	}
	if clean {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + 8)
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size <= 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case r == '\t':
			b.WriteByte(' ')
		case r == '\n':
			b.WriteString("⏎")
		case r < 0x20 || r == 0x7f:
			fmt.Fprintf(&b, `\x%02x`, r)
		case TerminalControl(r):
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			b.WriteString(s[i : i+size])
		}
		i += size
	}
	return b.String()
}

// TerminalControl reports whether rune r, written raw, can drive a terminal
// or disguise the text around it: a C0 control (tab and newline included),
// DEL, a C1 control (U+0080-U+009F; U+009B is a one-byte CSI), a Unicode
// bidirectional formatting character (ALM U+061C, LRM, RLM, the embeddings
// and overrides U+202A-U+202E, the isolates U+2066-U+2069) or the line and
// paragraph separators U+2028 and U+2029. It is the one definition of what
// is unsafe: TerminalText replaces every such rune, and the CLI's JSON
// writer escapes every such rune outside C0 (which encoding/json escapes
// itself) as \uXXXX.
func TerminalControl(r rune) bool {
	return r < 0x20 || (r >= 0x7f && r < 0xa0) || r == 0x061c || r == 0x200e || r == 0x200f ||
		r == 0x2028 || r == 0x2029 || (r >= 0x202a && r <= 0x202e) || (r >= 0x2066 && r <= 0x2069)
}
