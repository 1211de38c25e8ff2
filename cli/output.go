package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"
	"golang.org/x/term"
)

// outputFlag is -o json|table; the default is table.
func outputFlag() cli.Flag {
	return &cli.StringFlag{Name: "output", Aliases: []string{"o"}, Usage: "output format: table or json", Value: "table", EnvVars: []string{"FLOWFORGE_OUTPUT"}}
}

func outputFormat(c *cli.Context) (string, error) {
	switch f := c.String("output"); f {
	case "table", "json":
		return f, nil
	default:
		return "", usageError("-o %q: want table or json", f)
	}
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func newTable(w io.Writer) *tabwriter.Writer {
	return tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
}

// isTerminal reports whether w is an interactive terminal.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

func fmtTime(t *time.Time) string {
	if t == nil {
		return "-"
	}
	return t.Local().Format("2006-01-02 15:04:05")
}

func firstLine(s *string, max int) string {
	if s == nil || *s == "" {
		return "-"
	}
	line := strings.SplitN(*s, "\n", 2)[0]
	line = sanitizeCell(line)
	if len([]rune(line)) > max {
		line = string([]rune(line)[:max-1]) + "…"
	}
	return line
}

// sanitizeCell shows control characters (terminal escape sequences
// included) as visible placeholders so untrusted text cannot drive the
// terminal.
func sanitizeCell(s string) string {
	var b strings.Builder
	for _, r := range s {
		switch {
		case r == '\t':
			b.WriteString(" ")
		case r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0):
			fmt.Fprintf(&b, "\\x%02x", r)
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}
