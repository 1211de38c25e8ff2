package tui

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// Sanitize makes untrusted text (task names, errors, params, worker ids:
// anything read from the database) safe to draw: it can neither drive the
// terminal nor break the layout. Control characters (C0, DEL, C1; ESC, so
// every escape sequence, included) are shown as visible placeholders such as
// \x1b; a tab becomes a space; bytes that are not UTF-8 become \xNN; Unicode
// bidirectional overrides and isolates (which can reorder what a line seems
// to say) become \u202e and the like. A newline becomes the visible ⏎ so a
// multi-line value stays on one row.
func Sanitize(s string) string {
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
		case r >= 0x80 && r < 0xa0:
			fmt.Fprintf(&b, `\u%04x`, r)
		case isBidiControl(r):
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			b.WriteString(s[i : i+size])
		}
		i += size
	}
	return b.String()
}

// isBidiControl reports the Unicode bidirectional formatting characters.
func isBidiControl(r rune) bool {
	return r == 0x061c || r == 0x200e || r == 0x200f ||
		(r >= 0x202a && r <= 0x202e) || (r >= 0x2066 && r <= 0x2069)
}

// firstLine returns the first line of s, sanitised; "-" for nil or empty.
func firstLine(s *string) string {
	if s == nil || *s == "" {
		return "-"
	}
	line, _, _ := strings.Cut(*s, "\n")
	return Sanitize(strings.TrimRight(line, "\r"))
}

// deref returns *s sanitised, or "-".
func deref(s *string) string {
	if s == nil || *s == "" {
		return "-"
	}
	return Sanitize(*s)
}
