package tui

import (
	"strings"

	"github.com/charmbracelet/bubbles/key"
	"github.com/charmbracelet/x/ansi"
)

// helpView is the ? page, generated from the keymap: every binding's
// keys and description by section, sections packed into columns. In
// read-only mode the actions are greyed (struck through with colour,
// marked in words without).
func helpView(km KeyMap, st *Styles, width, height int, readOnly bool, refresh string) string {
	keyWidth := 0
	for _, s := range km.sections() {
		for _, b := range s.bindings {
			keyWidth = max(keyWidth, textWidth(b.Help().Key))
		}
	}
	var blocks [][]string
	for _, s := range km.sections() {
		title := s.title
		if s.actions && readOnly {
			title += " (disabled: read-only)"
		}
		block := []string{st.Section.Render(title)}
		for _, b := range s.bindings {
			h := b.Help()
			k := h.Key + strings.Repeat(" ", keyWidth-textWidth(h.Key))
			line := "  " + st.HintKey.Render(k) + "  " + st.Value.Render(describe(b))
			if s.actions && readOnly {
				line = "  " + st.Disabled.Render(k+"  "+describe(b))
			}
			block = append(block, line)
		}
		if s.actions {
			block = append(block, "",
				st.Status.Render("Each action opens the plan the CLI would build"),
				st.Status.Render("and its command line; "+km.Confirm.Help().Key+" applies, "+km.Cancel.Help().Key+" cancels."))
		}
		blocks = append(blocks, block)
	}
	blocks = append(blocks, []string{
		st.Section.Render("Refresh"),
		"  " + refresh + "; one read per view at a time",
		"",
		st.Status.Render("esc or ? closes this page"),
	})
	return packColumns(blocks, width, height)
}

// packColumns stacks blocks (separated by a blank line) top to bottom and
// starts a new column when the next block does not fit the height.
func packColumns(blocks [][]string, width, height int) string {
	var cols [][]string
	var cur []string
	for _, b := range blocks {
		need := len(b)
		if len(cur) > 0 {
			need++
		}
		if len(cur) > 0 && len(cur)+need > height {
			cols, cur = append(cols, cur), nil
		}
		if len(cur) > 0 {
			cur = append(cur, "")
		}
		cur = append(cur, b...)
	}
	cols = append(cols, cur)
	rows := 0
	for _, c := range cols {
		rows = max(rows, len(c))
	}
	out := make([]string, rows)
	for ci, c := range cols {
		colW := 0
		for _, l := range c {
			colW = max(colW, ansi.StringWidth(l))
		}
		for i := range rows {
			l := ""
			if i < len(c) {
				l = c[i]
			}
			if ci < len(cols)-1 {
				l += strings.Repeat(" ", colW-ansi.StringWidth(l)+4)
			}
			out[i] += l
		}
	}
	for i, l := range out {
		out[i] = ansi.Truncate(strings.TrimRight(l, " "), width, "…")
	}
	return strings.Join(out, "\n")
}

// hintLine is the bottom line of a list view: the main keys, and the
// actions the view offers (marked when read-only).
func hintLine(km KeyMap, st *Styles, view viewKind, readOnly bool, width int) string {
	var parts []string
	render := func(b key.Binding, disabled bool) string {
		h := b.Help()
		if disabled {
			return st.Disabled.Render(h.Key + " " + h.Desc)
		}
		return st.HintKey.Render(h.Key) + " " + st.HintDesc.Render(h.Desc)
	}
	for _, b := range hintedActions(km, view) {
		parts = append(parts, render(b, readOnly))
	}
	if readOnly && len(parts) > 0 {
		parts = append(parts, st.Status.Render("(read-only)"))
	}
	for _, b := range km.hints() {
		parts = append(parts, render(b, false))
	}
	return ansi.Truncate(strings.Join(parts, "  "), width, "…")
}

// viewActions are the action bindings a view offers: those its hint line
// shows, and those only the help page lists (the dead-letter actions of
// the partitions view: with them the line would push "? help" out of an
// 80-column terminal).
func viewActions(km KeyMap, view viewKind) []key.Binding {
	if view == viewPartitions {
		return append(hintedActions(km, view), km.ReplayDLQ, km.PurgeDLQ, km.Seek)
	}
	return hintedActions(km, view)
}

// hintedActions are the action bindings of a view's hint line.
func hintedActions(km KeyMap, view viewKind) []key.Binding {
	switch view {
	case viewPartitions:
		return []key.Binding{km.Reap, km.Release, km.Trim, km.SkipHead}
	case viewLeases:
		return []key.Binding{km.Release}
	case viewParked:
		return []key.Binding{km.Retry, km.Skip}
	case viewTopics:
		return []key.Binding{km.Seek}
	}
	return nil
}
