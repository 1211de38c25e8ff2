package tui

import (
	"strings"

	"github.com/flowforge/flowforge/core"
)

// Sanitize makes untrusted text safe to draw: see core.TerminalText, the
// one terminal-safety function the CLI and the dashboard share.
func Sanitize(s string) string { return core.TerminalText(s) }

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
