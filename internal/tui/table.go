package tui

import (
	"cmp"
	"math"
	"regexp"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/charmbracelet/bubbles/key"
	"github.com/charmbracelet/x/ansi"

	tea "github.com/protctl/protctl/internal/third_party/bubbletea"
)

// sortKind says how a column sorts.
type sortKind uint8

const (
	sortNone sortKind = iota
	sortText          // by the cell's text
	sortNum           // by row.nums[column.num]
)

// column is a table column. Widths are the cell text's natural width,
// capped at max (0: no cap) and shrunk (widest first, never below min) to
// fit.
type column struct {
	title string
	min   int
	max   int
	right bool
	sort  sortKind
	num   int  // index into row.nums for sortNum
	desc  bool // sorts descending by default (lag: most behind first)
	// drop > 0 lets a narrow terminal hide the column (highest first)
	// rather than cut every other column; the detail page still shows it.
	drop int
}

// Numeric sort keys of unknown values: unknownHigh sorts with the largest
// (an unknown lag is treated as the worst), unknownLow with the smallest.
const (
	unknownHigh = math.MaxInt64
	unknownLow  = math.MinInt64
)

// row is one table row, built off the UI goroutine when data arrives, so
// that a frame only pads the visible rows' cells.
type row struct {
	cells []string
	nums  []int64 // numeric sort keys
	// search is what the filter matches: the cells joined by spaces, in
	// lower case (the filter ignores case).
	search string
	// toneCol is the cell coloured with tone (-1: none).
	toneCol int
	tone    tone
	// item is the row's index in the view's snapshot slice; group names
	// the partition's group for per-group rows.
	item  int
	group string
}

func newRow(item int, cells ...string) row {
	return row{cells: cells, search: strings.ToLower(strings.Join(cells, " ")), toneCol: -1, item: item}
}

// textWidth is the display width of s, fast for ASCII.
func textWidth(s string) int {
	for i := 0; i < len(s); i++ {
		if s[i] >= utf8.RuneSelf {
			return ansi.StringWidth(s)
		}
	}
	return len(s)
}

// titleWidth makes room for the sort arrow of a sortable column.
func titleWidth(c column) int {
	if c.sort != sortNone {
		return textWidth(c.title) + 1
	}
	return textWidth(c.title)
}

// naturalWidths is the widest cell (or title) of each column, capped.
func naturalWidths(cols []column, rows []row, into []int) []int {
	if into == nil {
		into = make([]int, len(cols))
		for i, c := range cols {
			into[i] = titleWidth(c)
		}
	}
	for _, r := range rows {
		for i, c := range r.cells {
			if w := textWidth(c); w > into[i] {
				if cols[i].max > 0 {
					w = min(w, max(cols[i].max, titleWidth(cols[i])))
				}
				into[i] = w
			}
		}
	}
	return into
}

// filterSpec is a compiled filter: a regular expression (case-insensitive)
// matched against a row's cells, inverted by a leading '!'. A pattern
// without regex syntax (the common case: part of a key) is matched as a
// substring, several times faster over 100,000 rows.
type filterSpec struct {
	text    string
	re      *regexp.Regexp
	lit     string // the lower-cased pattern when it is a literal
	inverse bool
}

func parseFilter(text string) (filterSpec, error) {
	f := filterSpec{text: text}
	pat := text
	if strings.HasPrefix(pat, "!") {
		f.inverse, pat = true, pat[1:]
	}
	if pat == "" {
		return filterSpec{text: text, inverse: f.inverse}, nil
	}
	if regexp.QuoteMeta(pat) == pat {
		f.lit = strings.ToLower(pat)
		return f, nil
	}
	re, err := regexp.Compile("(?i)" + pat)
	if err != nil {
		return filterSpec{}, err
	}
	f.re = re
	return f, nil
}

func (f filterSpec) keep(r *row) bool {
	switch {
	case f.lit != "":
		return strings.Contains(r.search, f.lit) != f.inverse
	case f.re != nil:
		return f.re.MatchString(r.search) != f.inverse
	}
	return true
}

// sortSpec orders rows by one column; ties are broken by the view's
// identity columns (category, key, group), so the order never depends on
// the order Redis returned the rows in.
type sortSpec struct {
	col  int
	desc bool
}

// buildIndex returns the positions of rows that pass f, ordered by s. It
// is the only O(n log n) step and runs when data, filter or sort change,
// never in View.
func buildIndex(cols []column, rows []row, f filterSpec, s sortSpec, ties []int) []int {
	idx := make([]int, 0, len(rows))
	for i := range rows {
		if f.keep(&rows[i]) {
			idx = append(idx, i)
		}
	}
	if s.col < 0 || s.col >= len(cols) || cols[s.col].sort == sortNone {
		return idx
	}
	c := cols[s.col]
	slices.SortStableFunc(idx, func(a, b int) int {
		var r int
		if c.sort == sortNum {
			r = cmp.Compare(rows[a].nums[c.num], rows[b].nums[c.num])
		} else {
			r = strings.Compare(rows[a].cells[s.col], rows[b].cells[s.col])
		}
		if s.desc {
			r = -r
		}
		for _, t := range ties {
			if r != 0 {
				break
			}
			r = strings.Compare(rows[a].cells[t], rows[b].cells[t])
		}
		return r
	})
	return idx
}

// table is a virtualised table: it holds every row but a frame renders
// only the rows in view, so its cost does not grow with the row count.
type table struct {
	cols   []column
	rows   []row
	index  []int // rows shown, in order (filtered and sorted)
	widths []int // natural widths of the current rows
	fitted []int // widths fitted to the terminal

	cursor int // position in index
	offset int // first position in view
	width  int
	height int // rows in view, without the header
}

func newTable(cols []column) table {
	return table{cols: cols, widths: naturalWidths(cols, nil, nil)}
}

// setData replaces the rows, their natural widths and the shown index,
// keeping the cursor on the row with the same identity (the cells of
// idCols) when it is still shown.
func (t *table) setData(rows []row, widths []int, index []int, idCols []int) {
	var keep []string
	if sel, ok := t.selected(); ok {
		keep = make([]string, len(idCols))
		for i, c := range idCols {
			keep[i] = sel.cells[c]
		}
	}
	t.rows, t.widths, t.index = rows, widths, index
	t.fit()
	t.cursor = 0
	if keep != nil {
	find:
		for pos, i := range index {
			for k, c := range idCols {
				if rows[i].cells[c] != keep[k] {
					continue find
				}
			}
			t.cursor = pos
			break
		}
	}
	t.clamp()
}

// setIndex changes the shown rows (filter or sort changed).
func (t *table) setIndex(index []int) {
	t.index = index
	t.clamp()
}

func (t *table) setSize(w, h int) {
	t.width, t.height = w, max(h, 1)
	t.fit()
	t.clamp()
}

// fit makes the row fit the width (two columns of cursor and a
// two-space gap between columns): it hides droppable columns, then
// shrinks the widest columns. A hidden column's fitted width is -1.
func (t *table) fit() {
	if len(t.widths) != len(t.cols) {
		t.widths = naturalWidths(t.cols, nil, nil)
	}
	fitted := slices.Clone(t.widths)
	total, shown := 0, len(fitted)
	for _, w := range fitted {
		total += w
	}
	avail := func() int { return t.width - 2 - 2*(shown-1) }
	for total > avail() && t.width > 0 {
		drop := -1
		for i, c := range t.cols {
			if c.drop > 0 && fitted[i] >= 0 && (drop < 0 || c.drop > t.cols[drop].drop) {
				drop = i
			}
		}
		if drop < 0 {
			break
		}
		total -= fitted[drop]
		fitted[drop] = -1
		shown--
	}
	for total > avail() && avail() > 0 {
		widest := -1
		for i, w := range fitted {
			if w > max(t.cols[i].min, 1) && (widest < 0 || w > fitted[widest]) {
				widest = i
			}
		}
		if widest < 0 {
			break
		}
		fitted[widest]--
		total--
	}
	t.fitted = fitted
}

func (t *table) clamp() {
	n := len(t.index)
	t.cursor = max(0, min(t.cursor, n-1))
	if t.cursor < t.offset {
		t.offset = t.cursor
	}
	if t.cursor >= t.offset+t.height {
		t.offset = t.cursor - t.height + 1
	}
	t.offset = max(0, min(t.offset, n-t.height))
}

func (t *table) selected() (row, bool) {
	if t.cursor < 0 || t.cursor >= len(t.index) {
		return row{}, false
	}
	return t.rows[t.index[t.cursor]], true
}

// update moves the cursor; it reports whether msg was a navigation key.
func (t *table) update(msg tea.KeyMsg, km KeyMap) bool {
	switch {
	case key.Matches(msg, km.Up):
		t.cursor--
	case key.Matches(msg, km.Down):
		t.cursor++
	case key.Matches(msg, km.PageUp):
		t.cursor -= t.height
		t.offset -= t.height
	case key.Matches(msg, km.PageDown):
		t.cursor += t.height
		t.offset += t.height
	case key.Matches(msg, km.Top):
		t.cursor = 0
	case key.Matches(msg, km.Bottom):
		t.cursor = len(t.index) - 1
	default:
		return false
	}
	t.clamp()
	return true
}

// view renders the header and the rows in view, height+1 lines. Its cost
// is O(rows in view x columns).
func (t *table) view(st *Styles, sort sortSpec) string {
	var b strings.Builder
	b.Grow((t.height + 1) * (t.width + 1))
	head := make([]string, len(t.cols))
	for i, c := range t.cols {
		title := c.title
		if i == sort.col && c.sort != sortNone {
			if sort.desc {
				title += "↓"
			} else {
				title += "↑"
			}
		}
		head[i] = title
	}
	b.WriteString(st.TableHead.Render(t.line(head, -1, toneNone, st)))
	for pos := t.offset; pos < t.offset+t.height; pos++ {
		b.WriteByte('\n')
		if pos >= len(t.index) {
			continue
		}
		r := &t.rows[t.index[pos]]
		if pos == t.cursor {
			line := t.line(r.cells, -1, toneNone, st)
			b.WriteString(st.Selected.Render(">" + line[1:]))
			continue
		}
		b.WriteString(t.line(r.cells, r.toneCol, r.tone, st))
	}
	return b.String()
}

// line pads or cuts each cell to its fitted width.
func (t *table) line(cells []string, toneCol int, tn tone, st *Styles) string {
	var b strings.Builder
	last := len(cells) - 1
	for last > 0 && t.fitted[last] < 0 {
		last--
	}
	for i, c := range cells {
		w := t.fitted[i]
		if w < 0 {
			continue
		}
		b.WriteString("  ")
		cw := textWidth(c)
		if cw > w {
			c = ansi.Truncate(c, w, "…")
			cw = textWidth(c)
		}
		pad := strings.Repeat(" ", max(0, w-cw))
		if i == last && !t.cols[i].right {
			pad = "" // no trailing blanks
		}
		if i == toneCol && tn != toneNone {
			c = st.Tones[tn].Render(c)
		}
		if t.cols[i].right {
			b.WriteString(pad + c)
		} else {
			b.WriteString(c + pad)
		}
	}
	return b.String()
}
