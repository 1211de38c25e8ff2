package tui

import (
	"strings"

	"github.com/flowforge/flowforge/core"
)

// firstLine returns the first line of s, made terminal-safe by
// core.TerminalText (the one terminal-safety function of the CLI and the
// dashboard); "-" for nil or empty.
func firstLine(s *string) string {
	if s == nil || *s == "" {
		return "-"
	}
	line, _, _ := strings.Cut(*s, "\n")
	return core.TerminalText(strings.TrimRight(line, "\r"))
}

// deref returns *s made terminal-safe, or "-".
func deref(s *string) string {
	if s == nil || *s == "" {
		return "-"
	}
	return core.TerminalText(*s)
}
