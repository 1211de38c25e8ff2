package cli

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/charmbracelet/lipgloss"
	"github.com/muesli/termenv"
	"github.com/urfave/cli/v2"
	"golang.org/x/term"

	"github.com/flowforge/flowforge/core"
	"github.com/flowforge/flowforge/tui/palette"
)

// outputFlag is -o json|table; the default is table.
func outputFlag() cli.Flag {
	return &cli.StringFlag{Name: "output", Aliases: []string{"o"}, Usage: "output format: table (aligned text; states coloured on a terminal unless NO_COLOR is set) or json (stable field names)", Value: "table", EnvVars: []string{"FLOWFORGE_OUTPUT"}}
}

// limitFlag is --limit N with its bounds checked by checkLimit.
func limitFlag(def int) cli.Flag {
	return &cli.IntFlag{Name: "limit", Value: def, Usage: fmt.Sprintf("at most this many (1 to %d)", maxLimit)}
}

// maxLimit bounds every --limit.
const maxLimit = 10000

func checkLimit(c *cli.Context) (int, error) {
	n := c.Int("limit")
	if n < 1 || n > maxLimit {
		return 0, usageError("--limit %d: must be between 1 and %d", n, maxLimit)
	}
	return n, nil
}

// outputFormat is -o's value: table or json. Errors: a usage error naming
// the value and where it came from (FLOWFORGE_OUTPUT when the environment
// gave it, else -o).
func outputFormat(c *cli.Context) (string, error) {
	switch f := c.String("output"); f {
	case "table", "json":
		return f, nil
	default:
		// The process's environment: it is what urfave/cli reads the
		// flag's variable from. A command line that gives the same bad
		// value is told of the variable too, which holds it as well.
		if v, set := os.LookupEnv("FLOWFORGE_OUTPUT"); set && v == f {
			return "", usageError("FLOWFORGE_OUTPUT %q: want table or json (or -o table|json on the command line)", f)
		}
		return "", usageError("-o %q: want table or json", f)
	}
}

// writeJSON writes v as indented JSON. Beyond what encoding/json escapes
// (C0 controls), it escapes DEL, the C1 controls U+0080-U+009F (U+009B is
// a one-byte CSI that drives many terminals), the bidirectional formatting
// characters (U+202E and its kin) and U+2028/U+2029 as \uXXXX: the same
// JSON value, but stored text cannot drive or disguise itself on the
// terminal of whoever reads the output. Such characters appear only inside
// strings, so escaping them in the encoded bytes is safe.
func writeJSON(w io.Writer, v any) error {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false) // keep <, > and & readable for grep and sed
	if err := enc.Encode(v); err != nil {
		return err
	}
	_, err := w.Write(escapeInvisible(buf.Bytes()))
	return err
}

// escapeInvisible rewrites the characters writeJSON promises to escape in
// encoded JSON b: core.TerminalControl's, the set core.TerminalText
// replaces, but for C0 (encoding/json escapes those inside strings, and
// the newlines between values must stay).
func escapeInvisible(b []byte) []byte {
	out := make([]byte, 0, len(b))
	for len(b) > 0 {
		r, n := utf8.DecodeRune(b)
		if r >= 0x20 && core.TerminalControl(r) {
			out = fmt.Appendf(out, `\u%04x`, r)
		} else {
			out = append(out, b[:n]...)
		}
		b = b[n:]
	}
	return out
}

// isTerminal reports whether s (a stream) is an interactive terminal.
func isTerminal(s any) bool {
	f, ok := s.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

// useColor decides whether table output is coloured: only on a terminal,
// and never when NO_COLOR is set to anything (https://no-color.org).
func useColor(stdoutIsTerminal bool, noColor string) bool {
	return stdoutIsTerminal && noColor == ""
}

// colours colours the states (in tui/palette's colours, the ones the
// dashboard uses) and headers of standard output, or passes text through
// unchanged.
type colours struct {
	on bool
	r  *lipgloss.Renderer // nil when off
}

// colours returns the colours for standard output.
func (env *Env) colours() colours {
	return newColours(useColor(env.isTTY(env.Stdout), env.env("NO_COLOR")))
}

func newColours(on bool) colours {
	if !on {
		return colours{}
	}
	// The 16 basic ANSI colours: every terminal has them, and each user's
	// theme maps them to something readable.
	r := lipgloss.NewRenderer(io.Discard)
	r.SetColorProfile(termenv.ANSI)
	return colours{on: true, r: r}
}

// header renders a table header.
func (p colours) header(s string) string {
	if !p.on {
		return s
	}
	return p.r.NewStyle().Bold(true).Render(s)
}

// state colours a task or run state; other text is returned as it is.
func (p colours) state(s string) string {
	if !p.on {
		return s
	}
	out, _ := palette.State(p.r, s)
	return out
}

// table prints aligned columns separated by two spaces. Widths are measured
// on the plain text, so colouring a column (the STATE-like ones named in
// stateColumns) never breaks the alignment.
type table struct {
	w      io.Writer
	p      colours
	header []string
	rows   [][]string
}

// stateColumns are the headers whose cells are states, coloured by state.
var stateColumns = map[string]bool{"STATE": true, "FROM": true, "TO": true, "OUTCOME": true}

func newTable(w io.Writer, p colours, header ...string) *table {
	return &table{w: w, p: p, header: header}
}

// row adds a row; cells beyond the header are dropped, missing ones blank.
// Every cell goes through core.TerminalText, so no cell can drive the
// terminal or disguise a line, whatever its caller forgot (it changes no
// text that is already terminal-safe).
func (t *table) row(cells ...string) {
	r := make([]string, len(t.header))
	for i := range min(len(cells), len(r)) {
		r[i] = core.TerminalText(cells[i])
	}
	t.rows = append(t.rows, r)
}

// flush writes the header and the rows.
func (t *table) flush() error {
	width := make([]int, len(t.header))
	for i, h := range t.header {
		width[i] = lipgloss.Width(h)
	}
	for _, r := range t.rows {
		for i, c := range r {
			width[i] = max(width[i], lipgloss.Width(c))
		}
	}
	var b strings.Builder
	line := func(cells []string, style func(col int, s string) string) {
		for i, c := range cells {
			if i > 0 {
				b.WriteString("  ")
			}
			b.WriteString(style(i, c))
			if i < len(cells)-1 {
				b.WriteString(strings.Repeat(" ", width[i]-lipgloss.Width(c)))
			}
		}
		b.WriteString("\n")
	}
	line(t.header, func(_ int, s string) string { return t.p.header(s) })
	for _, r := range t.rows {
		line(r, func(col int, s string) string {
			if stateColumns[t.header[col]] {
				return t.p.state(s)
			}
			return s
		})
	}
	_, err := io.WriteString(t.w, b.String())
	return err
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
	line, rest, more := strings.Cut(*s, "\n")
	line = core.TerminalText(strings.TrimRight(line, "\r"))
	if more && strings.TrimSpace(rest) != "" {
		line += " …" // more lines follow: `-o json` has them whole
	}
	if len([]rune(line)) > max {
		line = string([]rune(line)[:max-1]) + "…"
	}
	return line
}
