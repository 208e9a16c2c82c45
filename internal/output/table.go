package output

import (
	"fmt"
	"io"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/charmbracelet/lipgloss"
)

// columnGap separates table columns.
const columnGap = "   "

type cell struct {
	text string
	tone Tone
}

func (p *Printer) table(items []any, spec TableSpec) error {
	var cols []Column
	for _, c := range spec.Columns {
		if c.Wide && p.format != FormatWide {
			continue
		}
		cols = append(cols, c)
	}
	if len(cols) == 0 {
		return fmt.Errorf("output: table has no columns")
	}
	rows := make([][]cell, 0, len(items)+1)
	if !p.noHeaders {
		hdr := make([]cell, len(cols))
		for i, c := range cols {
			hdr[i] = cell{text: c.Header}
		}
		rows = append(rows, hdr)
	}
	for _, it := range items {
		row := make([]cell, len(cols))
		for i, c := range cols {
			row[i].text = Escape(c.Value(it))
			if c.Tone != nil {
				row[i].tone = c.Tone(it)
			}
		}
		rows = append(rows, row)
	}
	widths := make([]int, len(cols))
	for _, r := range rows {
		for i, c := range r {
			widths[i] = max(widths[i], displayWidth(c.text))
		}
	}
	var b strings.Builder
	for ri, r := range rows {
		header := ri == 0 && !p.noHeaders
		for i, c := range r {
			text := c.text
			if header {
				text = p.styles.Header(text)
			} else {
				text = p.styles.Tone(c.tone, text)
			}
			b.WriteString(text)
			if i < len(r)-1 {
				b.WriteString(strings.Repeat(" ", widths[i]-displayWidth(c.text)))
				b.WriteString(columnGap)
			}
		}
		b.WriteByte('\n')
	}
	_, err := io.WriteString(p.ios.Out, b.String())
	return err
}

func displayWidth(s string) int { return lipgloss.Width(s) }

// Escape makes data safe to print on a terminal: control characters
// (newlines, tabs, ESC and the rest of C0 and C1) and invalid UTF-8 become
// Go-style escapes, so a partition key or an error text from Redis can
// neither break a table's alignment nor drive the terminal.
func Escape(s string) string {
	clean := true
	for _, r := range s {
		if r == utf8.RuneError || unicode.IsControl(r) {
			clean = false
			break
		}
	}
	if clean {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\t':
			b.WriteString(`\t`)
		case r == '\r':
			b.WriteString(`\r`)
		case r < 0x80 && unicode.IsControl(r):
			fmt.Fprintf(&b, `\x%02x`, r)
		case unicode.IsControl(r):
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			b.WriteRune(r)
		}
		i += size
	}
	return b.String()
}
