package tui

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/charmbracelet/bubbles/key"
	"github.com/charmbracelet/x/ansi"

	"github.com/protctl/protctl/internal/inspect"
	"github.com/protctl/protctl/internal/output"
	"github.com/protctl/protctl/internal/present"
	"github.com/protctl/protctl/internal/repair"
	tea "github.com/protctl/protctl/internal/third_party/bubbletea"
	"github.com/protctl/protctl/pkg/runtime"
	"github.com/protctl/protctl/pkg/runtime/ledger"
)

// detail is the `enter` page: one item explained, wrapped to the width
// and scrollable. For a partition the text is `partitions show`'s, read
// with Source.Explain in a tea.Cmd; for the other views it is the item's
// fields, already in hand.
type detail struct {
	title   string
	loading bool
	err     error
	text    string   // the content, unwrapped
	lines   []string // text wrapped to width
	offset  int
	width   int
	height  int
	seq     int
	// what the detail is about, for refresh and actions: row.item indexes
	// snap, a copy of the one item
	view viewKind
	row  row
	snap snapshot
}

func newDetail(title string, w, h int) *detail {
	return &detail{title: title, width: w, height: max(h, 1)}
}

func (d *detail) setSize(w, h int) {
	d.width, d.height = w, max(h, 1)
	d.wrap()
}

func (d *detail) setContent(s string) {
	d.loading, d.err = false, nil
	d.text = strings.TrimRight(s, "\n")
	d.wrap()
}

// wrap breaks the text's lines at the width (at a space when it can),
// indenting continuations by two columns.
func (d *detail) wrap() {
	d.lines = d.lines[:0]
	if d.text == "" {
		return
	}
	w := max(d.width, 10)
	for _, l := range strings.Split(d.text, "\n") {
		if textWidth(l) <= w {
			d.lines = append(d.lines, l)
			continue
		}
		parts := strings.Split(ansi.Wrap(l, w-2, " "), "\n")
		d.lines = append(d.lines, parts[0])
		for _, p := range parts[1:] {
			d.lines = append(d.lines, "  "+p)
		}
	}
	d.scroll(0)
}

func (d *detail) scroll(by int) {
	d.offset = max(0, min(d.offset+by, len(d.lines)-d.height))
}

func (d *detail) update(msg tea.KeyMsg, km KeyMap) {
	switch {
	case key.Matches(msg, km.Up):
		d.scroll(-1)
	case key.Matches(msg, km.Down):
		d.scroll(1)
	case key.Matches(msg, km.PageUp):
		d.scroll(-d.height)
	case key.Matches(msg, km.PageDown):
		d.scroll(d.height)
	case key.Matches(msg, km.Top):
		d.offset = 0
	case key.Matches(msg, km.Bottom):
		d.scroll(len(d.lines))
	}
}

func (d *detail) render(st *Styles) string {
	if len(d.lines) == 0 {
		if d.loading {
			return st.Status.Render("reading…")
		}
		return ""
	}
	end := min(d.offset+d.height, len(d.lines))
	return strings.Join(d.lines[d.offset:end], "\n")
}

// fieldsText renders "Label:  value" lines the way the CLI's detail
// commands do (output.WriteFields, without colour).
func fieldsText(fields ...output.Field) string {
	var b strings.Builder
	_ = output.WriteFields(&b, output.Styles{}, fields...)
	return b.String()
}

// explainText is `partitions show` for the dashboard: the CLI's text
// (present.WritePartition) without colour, its repair hints naming the
// dashboard key that opens the same plan.
func explainText(d *inspect.PartitionDetail) string {
	var b strings.Builder
	_ = present.WritePartition(&b, d, present.Layout{
		Table: func(w io.Writer, _ string, items []any, cols []output.Column) error {
			_, err := io.WriteString(w, columnsTable(cols, items))
			return err
		},
		RelativeTimes: true, // the dashboard is a terminal
	})
	for _, h := range present.RepairHints(d) {
		what := h.What
		if k := hintKey(h.Action); k != "" {
			what = strings.TrimSuffix(what, ":") + " (" + k + "):"
		}
		b.WriteString(output.Escape(what) + "\n  " + output.Escape(h.Command) + "\n")
	}
	return b.String()
}

// hintKey is the dashboard key that plans a repair hint's action.
func hintKey(a repair.Action) string {
	switch a {
	case repair.ActionDeadLetter:
		return "D"
	case repair.ActionRelease:
		return "L"
	}
	return ""
}

// plainTable aligns rows under a header, two spaces apart, escaped.
func plainTable(head []string, rows func(yield func([]string))) string {
	all := [][]string{head}
	rows(func(r []string) {
		c := make([]string, len(r))
		for i, s := range r {
			c[i] = output.Escape(s)
		}
		all = append(all, c)
	})
	widths := make([]int, len(head))
	for _, r := range all {
		for i, c := range r {
			widths[i] = max(widths[i], textWidth(c))
		}
	}
	var b strings.Builder
	for _, r := range all {
		for i, c := range r {
			if i > 0 {
				b.WriteString("  ")
			}
			b.WriteString(c)
			if i < len(r)-1 {
				b.WriteString(strings.Repeat(" ", widths[i]-textWidth(c)))
			}
		}
		b.WriteByte('\n')
	}
	return b.String()
}

// columnsTable is plainTable of items under present's columns (wide
// columns included: the dashboard has no -o wide).
func columnsTable(cols []output.Column, items []any) string {
	head := make([]string, len(cols))
	for i, c := range cols {
		head[i] = c.Header
	}
	return plainTable(head, func(yield func([]string)) {
		for _, it := range items {
			r := make([]string, len(cols))
			for i, c := range cols {
				r[i] = c.Value(it)
			}
			yield(r)
		}
	})
}

func timeText(t, now time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return output.Timestamp(t) + " (" + relTime(now.Sub(t)) + ")"
}

func leaseDetailText(l *inspect.Lease) string {
	return fieldsText(
		output.Field{Label: "Category", Value: present.Str(l.Category)},
		output.Field{Label: "Group", Value: l.Group},
		output.Field{Label: "Key", Value: l.Key},
		output.Field{Label: "State", Value: present.LeaseState(l.State)},
		output.Field{Label: "Owner", Value: present.Str(l.Owner)},
		output.Field{Label: "Generation", Value: present.Int(l.Generation)},
		output.Field{Label: "Counter", Value: present.Int(l.Counter)},
		output.Field{Label: "TTL", Value: present.Ms(l.TTLMs)},
		output.Field{Label: "Token", Value: present.Str(l.Token)},
		output.Field{Label: "Lease key", Value: l.LeaseKey},
	)
}

func parkedDetailText(p *ledger.Parked, now time.Time) string {
	s := fieldsText(
		output.Field{Label: "Subscription", Value: p.Subscription},
		output.Field{Label: "Aggregate", Value: p.Aggregate},
		output.Field{Label: "Source", Value: string(p.Source)},
		output.Field{Label: "Partition", Value: parkedWhere(p)},
		output.Field{Label: "Position", Value: p.Position},
		output.Field{Label: "Stream", Value: present.Dash(p.Stream)},
		output.Field{Label: "Status", Value: string(p.Status)},
		output.Field{Label: "Attempts", Value: strconv.Itoa(p.Attempts)},
		output.Field{Label: "Parked at", Value: timeText(p.ParkedAt, now)},
		output.Field{Label: "Last attempt", Value: timeText(p.LastAttemptAt, now)},
		output.Field{Label: "Owner", Value: present.Dash(p.Owner)},
		output.Field{Label: "Generation", Value: strconv.FormatInt(p.Generation, 10)},
	)
	if r := p.Request; r != nil {
		s += fieldsText(output.Field{Label: "Request", Value: fmt.Sprintf("%s by %s, %s", r.Action, present.Dash(r.By), relTime(now.Sub(r.RequestedAt)))})
	}
	return s + "\nError:\n" + output.Escape(p.Error) + "\n"
}

func nodeDetailText(n *runtime.NodeStatus, now time.Time) string {
	s := fieldsText(
		output.Field{Label: "Service", Value: n.Service},
		output.Field{Label: "Node", Value: n.Node},
		output.Field{Label: "State", Value: string(n.JoinState)},
		output.Field{Label: "Admin", Value: present.Dash(n.AdminAddr)},
		output.Field{Label: "Started", Value: timeText(n.StartedAt, now)},
		output.Field{Label: "Last seen", Value: timeText(n.LastSeen, now)},
		output.Field{Label: "Backing off", Value: present.List(n.BackingOff)},
		output.Field{Label: "Paused", Value: present.List(n.Paused)},
		output.Field{Label: "Throttled", Value: present.List(n.Throttled)},
		output.Field{Label: "Parked", Value: strconv.Itoa(n.Parked)},
	)
	s += fmt.Sprintf("\nHeld partitions (%d):\n", len(n.Held))
	s += plainTable([]string{"SUBSCRIPTION", "SOURCE", "WHERE", "PARTITION", "GEN"}, func(yield func([]string)) {
		for _, h := range n.Held {
			where := h.Category
			if h.Topic != "" {
				where = h.Topic
			}
			yield([]string{h.Subscription, string(h.Source), present.Dash(where), h.Partition, strconv.FormatInt(h.Generation, 10)})
		}
	})
	return s
}

func topicDetailText(t *TopicPartition) string {
	s := fieldsText(
		output.Field{Label: "Service", Value: t.Service},
		output.Field{Label: "Topic", Value: t.Topic},
		output.Field{Label: "Partition", Value: strconv.Itoa(int(t.Partition))},
		output.Field{Label: "Owner", Value: present.Str(t.Owner)},
		output.Field{Label: "Generation", Value: present.Int(t.Generation)},
		output.Field{Label: "TTL", Value: present.Ms(t.TTLMs)},
		output.Field{Label: "Head", Value: present.Int(t.Head)},
	)
	s += "\nSubscriptions:\n"
	s += plainTable([]string{"SUBSCRIPTION", "CHECKPOINT", "LAG"}, func(yield func([]string)) {
		for _, sub := range t.Subscriptions {
			yield([]string{sub.Name, present.Int(sub.Checkpoint), present.Int(sub.Lag)})
		}
	})
	return s
}
