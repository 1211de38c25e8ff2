package tui

import (
	"strings"

	"github.com/charmbracelet/lipgloss"
	"github.com/charmbracelet/x/ansi"

	"github.com/flowforge/flowforge/core"
)

// The dashboard draws its own tables rather than bubbles/table: that one
// styles a whole row only as "selected or not" and truncates cells by rune
// width, so it can show neither an expired lease, a marked DEAD task nor a
// coloured state without breaking its layout. This one is small: fixed and
// flexible columns, a cursor kept on the same row across refreshes (by key),
// a gutter that shows the cursor (">") and marks ("*", "!") without colour.

// column describes one table column. A column with flex > 0 shares the
// width left over by the fixed ones, in proportion to flex, never below min.
//
// A flex column with cap > 0 never grows beyond cap: on a wide terminal
// the space it would take goes to the flex columns without a cap (the
// error and reason columns), not to blank padding.
type column struct {
	title string
	width int
	flex  int
	min   int
	cap   int
	right bool
}

// rowKind selects a row's style.
type rowKind int

const (
	rowNormal rowKind = iota
	rowWarn           // needs attention (an expired lease)
	rowDim            // stale
)

// row is one table row; cells are plain text (setRows makes them
// terminal-safe), except that a cell may be pre-styled when styled[i] is
// set.
type row struct {
	key    string
	cells  []string
	kind   rowKind
	marked bool
	flag   string // one gutter character shown when not marked, e.g. "!"
	// styled holds pre-rendered (coloured) versions of cells, used instead
	// of cells[i] when not empty; widths are taken from cells.
	styled []string
}

type table struct {
	cols []column
	// rows are the rows shown: those of all that match filter.
	rows   []row
	all    []row
	filter string
	cursor int
	offset int
	empty  string
}

// setRows replaces the rows, keeping the cursor on the row with the same
// key when it is still there (and shown). Every cell goes through
// core.TerminalText, as every cell of the CLI's tables does, so no cell can
// drive the terminal or disguise a line whatever its screen forgot (text
// already terminal-safe is left as it is).
func (t *table) setRows(rows []row) {
	for i := range rows {
		for j, c := range rows[i].cells {
			rows[i].cells[j] = core.TerminalText(c)
		}
	}
	t.all = rows
	t.apply()
}

// setFilter shows only the rows one of whose cells contains f (ignoring
// case); "" shows every row.
func (t *table) setFilter(f string) {
	t.filter = f
	t.apply()
}

func (t *table) apply() {
	var key string
	if t.cursor >= 0 && t.cursor < len(t.rows) {
		key = t.rows[t.cursor].key
	}
	if t.filter == "" {
		t.rows = t.all
	} else {
		needle := strings.ToLower(t.filter)
		t.rows = make([]row, 0, len(t.all))
		for _, r := range t.all {
			for _, c := range r.cells {
				if strings.Contains(strings.ToLower(c), needle) {
					t.rows = append(t.rows, r)
					break
				}
			}
		}
	}
	if key != "" {
		for i, r := range t.rows {
			if r.key == key {
				t.cursor = i
				return
			}
		}
	}
	t.clamp()
}

func (t *table) clamp() {
	if t.cursor >= len(t.rows) {
		t.cursor = len(t.rows) - 1
	}
	if t.cursor < 0 {
		t.cursor = 0
	}
}

// selected returns the row under the cursor.
func (t *table) selected() (row, bool) {
	if t.cursor < 0 || t.cursor >= len(t.rows) {
		return row{}, false
	}
	return t.rows[t.cursor], true
}

// selectKey puts the cursor on the row with key k, if one is shown.
func (t *table) selectKey(k string) {
	for i, r := range t.rows {
		if r.key == k {
			t.cursor = i
			return
		}
	}
}

// move moves the cursor by n rows, within bounds.
func (t *table) move(n int) {
	t.cursor += n
	t.clamp()
}

func (t *table) top()    { t.cursor = 0 }
func (t *table) bottom() { t.cursor = len(t.rows) - 1; t.clamp() }

// widths resolves column widths for a table width (gutter and separators
// included).
func (t *table) widths(width int) []int {
	w := make([]int, len(t.cols))
	used := 2 // gutter
	flexSum := 0
	for i, c := range t.cols {
		if i > 0 {
			used++
		}
		if c.flex > 0 {
			flexSum += c.flex
			w[i] = max(c.min, 1)
			used += w[i]
			continue
		}
		w[i] = c.width
		used += c.width
	}
	left := width - used
	if left > 0 && flexSum > 0 {
		given := 0
		last := -1
		for i, c := range t.cols {
			if c.flex > 0 {
				add := left * c.flex / flexSum
				w[i] += add
				given += add
				last = i
			}
		}
		w[last] += left - given
	}
	// Capped columns give what they would take beyond their cap to the
	// uncapped flex columns (in proportion to flex).
	excess, open := 0, 0
	for i, c := range t.cols {
		if c.flex > 0 && c.cap > 0 && w[i] > c.cap {
			excess += w[i] - c.cap
			w[i] = c.cap
		}
		if c.flex > 0 && c.cap == 0 {
			open += c.flex
		}
	}
	if excess > 0 && open > 0 {
		given, last := 0, -1
		for i, c := range t.cols {
			if c.flex > 0 && c.cap == 0 {
				add := excess * c.flex / open
				w[i] += add
				given += add
				last = i
			}
		}
		w[last] += excess - given
	}
	return w
}

// view renders a header line and up to height-1 rows.
func (t *table) view(th *theme, width, height int) string {
	if height < 1 {
		return ""
	}
	w := t.widths(width)
	var b strings.Builder
	var hdr strings.Builder
	hdr.WriteString("  ")
	for i, c := range t.cols {
		if i > 0 {
			hdr.WriteByte(' ')
		}
		hdr.WriteString(pad(c.title, w[i], c.right))
	}
	b.WriteString(th.colHeader.Render(fit(hdr.String(), width)))
	visible := height - 1
	if len(t.rows) == 0 {
		empty := t.empty
		if t.filter != "" && len(t.all) > 0 {
			empty = "no row matches the filter (esc clears it)"
		}
		if visible > 0 && empty != "" {
			b.WriteString("\n" + th.dim.Render(fit("  "+empty, width)))
		}
		return b.String()
	}
	if visible < 1 {
		return b.String()
	}
	if t.cursor < t.offset {
		t.offset = t.cursor
	}
	if t.cursor >= t.offset+visible {
		t.offset = t.cursor - visible + 1
	}
	if t.offset > len(t.rows)-visible {
		t.offset = max(0, len(t.rows)-visible)
	}
	for i := t.offset; i < len(t.rows) && i < t.offset+visible; i++ {
		r := t.rows[i]
		b.WriteByte('\n')
		b.WriteString(t.renderRow(th, r, w, width, i == t.cursor))
	}
	return b.String()
}

func (t *table) renderRow(th *theme, r row, w []int, width int, cur bool) string {
	g0, g1 := " ", " "
	if cur {
		g0 = ">"
	}
	switch {
	case r.marked:
		g1 = "*"
	case r.flag != "":
		g1 = r.flag
	}
	var plain strings.Builder
	plain.WriteString(g0 + g1)
	for i, c := range t.cols {
		if i > 0 {
			plain.WriteByte(' ')
		}
		cell := ""
		if i < len(r.cells) {
			cell = r.cells[i]
		}
		plain.WriteString(pad(cell, w[i], c.right))
	}
	line := fit(plain.String(), width)
	switch {
	case cur:
		return th.cursor.Render(line)
	case r.marked:
		return th.marked.Render(line)
	case r.kind == rowWarn:
		return th.warn.Render(line)
	case r.kind == rowDim:
		return th.dim.Render(line)
	}
	if len(r.styled) == 0 {
		return line
	}
	// Re-assemble with the pre-styled cells where they fit untruncated.
	var out strings.Builder
	out.WriteString(g0 + g1)
	for i, c := range t.cols {
		if i > 0 {
			out.WriteByte(' ')
		}
		cell := ""
		if i < len(r.cells) {
			cell = r.cells[i]
		}
		p := pad(cell, w[i], c.right)
		if i < len(r.styled) && r.styled[i] != "" && cell != "" && ansi.StringWidth(cell) <= w[i] {
			p = strings.Replace(p, cell, r.styled[i], 1)
		}
		out.WriteString(p)
	}
	if ansi.StringWidth(out.String()) > width {
		return line
	}
	return out.String()
}

// pad truncates s to w cells (with an ellipsis) and pads it to exactly w.
func pad(s string, w int, right bool) string {
	if w <= 0 {
		return ""
	}
	s = ansi.Truncate(s, w, "…")
	n := w - ansi.StringWidth(s)
	if n <= 0 {
		return s
	}
	if right {
		return strings.Repeat(" ", n) + s
	}
	return s + strings.Repeat(" ", n)
}

// fit truncates a line to width cells and pads it to width.
func fit(s string, width int) string {
	return pad(s, width, false)
}

// clip cuts a block of lines to width and height (padding nothing).
func clip(s string, width, height int) string {
	lines := strings.Split(s, "\n")
	if len(lines) > height {
		lines = lines[:height]
	}
	for i, l := range lines {
		if lipgloss.Width(l) > width {
			lines[i] = ansi.Truncate(l, width, "")
		}
	}
	return strings.Join(lines, "\n")
}
