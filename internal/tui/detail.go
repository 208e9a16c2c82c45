package tui

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/charmbracelet/bubbles/key"
	tea "github.com/charmbracelet/bubbletea"
	"github.com/charmbracelet/x/ansi"

	"github.com/protctl/protctl/internal/inspect"
	"github.com/protctl/protctl/internal/output"
	"github.com/protctl/protctl/pkg/runtime"
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

func ms(v int64) string { return output.HumanDuration(time.Duration(v) * time.Millisecond) }

// explainText is `partitions show` for the dashboard: the same fields,
// per-group sections, pending list, verdict and repair hints, with the
// dashboard's keys named next to the commands.
func explainText(d *inspect.PartitionDetail) string {
	var b strings.Builder
	indexed := "yes"
	if !d.Indexed {
		indexed = "no (consumers will not discover it; see partitions fsck)"
	}
	last := "-"
	if d.LastEntryID != nil {
		last = *d.LastEntryID
		if d.IdleMs != nil {
			last += " (" + ms(*d.IdleMs) + " ago)"
		}
	}
	b.WriteString(fieldsText(
		output.Field{Label: "Partition", Value: d.Category + " " + d.Key},
		output.Field{Label: "Stream", Value: d.Stream},
		output.Field{Label: "Lanes", Value: lanesText(d.Lanes)},
		output.Field{Label: "Length", Value: strconv.FormatInt(d.Length, 10)},
		output.Field{Label: "Last entry", Value: last},
		output.Field{Label: "Indexed", Value: indexed},
		output.Field{Label: "Dead letters", Value: strconv.FormatInt(d.DLQLength, 10)},
	))
	for i := range d.Groups {
		g := &d.Groups[i]
		b.WriteString("\nGroup " + output.Escape(g.Name) + "\n")
		lag := "unknown (entries were deleted from the middle of a lane)"
		if g.Lag != nil {
			lag = strconv.FormatInt(*g.Lag, 10)
		}
		delivered := "-"
		if g.LastDeliveredID != nil {
			delivered = *g.LastDeliveredID
		}
		b.WriteString(fieldsText(
			output.Field{Label: "Lease", Value: leaseText(&g.Group)},
			output.Field{Label: "Generation", Value: intText(g.Generation)},
			output.Field{Label: "Pending", Value: strconv.FormatInt(g.Pending, 10)},
			output.Field{Label: "Lag", Value: lag},
			output.Field{Label: "Delivered up to", Value: delivered},
			output.Field{Label: "Parked", Value: boolText(g.Parked)},
			output.Field{Label: "Head", Value: headText(g)},
			output.Field{Label: "Verdict", Value: string(g.Verdict.State) + ": " + g.Verdict.Reason},
		))
		if len(g.PendingEntries) > 0 {
			b.WriteString("Pending entries:\n")
			b.WriteString(plainTable([]string{"STREAM", "ID", "CONSUMER", "DELIVERIES", "IDLE"}, func(yield func([]string)) {
				for _, e := range g.PendingEntries {
					yield([]string{e.Stream, e.ID, e.Consumer, strconv.FormatInt(e.Deliveries, 10), ms(e.IdleMs)})
				}
			}))
		}
	}
	b.WriteString("\n")
	if d.Verdict.State != "" {
		b.WriteString(fieldsText(output.Field{Label: "Verdict", Value: d.Verdict.String()}))
	}
	for _, h := range repairHints(d) {
		for _, l := range strings.Split(h, "\n") {
			b.WriteString(output.Escape(l) + "\n")
		}
	}
	return b.String()
}

// repairHints are `partitions show`'s runbook lines for a stuck group, with
// the dashboard key that opens the same plan.
func repairHints(d *inspect.PartitionDetail) []string {
	var hints []string
	for _, g := range d.Groups {
		if g.Verdict.State != inspect.StateStuck || g.HeadPending == nil {
			continue
		}
		args := shellQuote(d.Category) + " " + shellQuote(d.Key) + " --group " + shellQuote(g.Name)
		if g.HeadPending.Deliveries > 1 {
			hints = append(hints, fmt.Sprintf("To move the head %s to %s:dlq and ack it (D):\n  protctl partitions skip-head %s --reason TEXT",
				g.HeadPending.ID, d.Stream, args))
		}
		if g.Lease != nil {
			hints = append(hints, fmt.Sprintf("To free the lease %s (its owner drops the partition and re-acquires it) (L):\n  protctl partitions release %s --force",
				g.Lease.Token, args))
		}
	}
	return hints
}

// leaseText is the Lease line of a group, in the words of protctl
// partitions show: the lease state (inspect.LeaseStateOf) first.
func leaseText(g *inspect.Group) string {
	l, gen := g.Lease, g.Generation
	switch {
	case l != nil && l.TTLMs != nil:
		return fmt.Sprintf("held by %s (TTL %s)", l.Token, ms(*l.TTLMs))
	case l != nil:
		return "held by " + l.Token + " (no expiry)"
	case gen != nil && g.LeaseState == inspect.LeaseReleased && g.Parked != nil && *g.Parked:
		return fmt.Sprintf("released (parked; none held since generation %d)", *gen)
	case gen != nil && g.LeaseState == inspect.LeaseReleased:
		return fmt.Sprintf("released (idle; none held since generation %d)", *gen)
	case gen != nil:
		return fmt.Sprintf("%s (none held since generation %d)", g.LeaseState, *gen)
	}
	return "free (never leased)"
}

func headText(g *inspect.GroupDetail) string {
	h := g.Head
	if h == nil {
		return "none: caught up"
	}
	s := h.ID + " on " + h.Stream
	if p := g.HeadPending; p != nil {
		s += fmt.Sprintf(", pending to %s, delivered %d times, idle %s", p.Consumer, p.Deliveries, ms(p.IdleMs))
	} else {
		s += ", not delivered yet"
	}
	switch {
	case h.Missing:
		s += "; its body was deleted"
	case h.Envelope != nil:
		if h.Type != "" {
			s += "; type " + h.Type
		}
		if h.EventID != "" {
			s += ", id " + h.EventID
		}
	default:
		s += "; not an envelope"
	}
	return s
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

func timeText(t, now time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return output.Timestamp(t) + " (" + relTime(now.Sub(t)) + ")"
}

func leaseDetailText(l *inspect.Lease) string {
	str := func(s *string) string {
		if s == nil {
			return "-"
		}
		return *s
	}
	return fieldsText(
		output.Field{Label: "Category", Value: orDash(l.Category)},
		output.Field{Label: "Group", Value: l.Group},
		output.Field{Label: "Key", Value: l.Key},
		output.Field{Label: "State", Value: string(l.State)},
		output.Field{Label: "Owner", Value: str(l.Owner)},
		output.Field{Label: "Generation", Value: intText(l.Generation)},
		output.Field{Label: "Counter", Value: intText(l.Counter)},
		output.Field{Label: "TTL", Value: msText(l.TTLMs)},
		output.Field{Label: "Token", Value: str(l.Token)},
		output.Field{Label: "Lease key", Value: l.LeaseKey},
	)
}

func parkedDetailText(p *runtime.Parked, now time.Time) string {
	s := fieldsText(
		output.Field{Label: "Subscription", Value: p.Subscription},
		output.Field{Label: "Aggregate", Value: p.Aggregate},
		output.Field{Label: "Source", Value: string(p.Source)},
		output.Field{Label: "Partition", Value: parkedWhere(p)},
		output.Field{Label: "Position", Value: p.Position},
		output.Field{Label: "Stream", Value: orDash(p.Stream)},
		output.Field{Label: "Status", Value: string(p.Status)},
		output.Field{Label: "Attempts", Value: strconv.Itoa(p.Attempts)},
		output.Field{Label: "Parked at", Value: timeText(p.ParkedAt, now)},
		output.Field{Label: "Last attempt", Value: timeText(p.LastAttemptAt, now)},
		output.Field{Label: "Owner", Value: orDash(p.Owner)},
		output.Field{Label: "Generation", Value: strconv.FormatInt(p.Generation, 10)},
	)
	if r := p.Request; r != nil {
		s += fieldsText(output.Field{Label: "Request", Value: fmt.Sprintf("%s by %s, %s", r.Action, orDash(r.By), relTime(now.Sub(r.RequestedAt)))})
	}
	return s + "\nError:\n" + output.Escape(p.Error) + "\n"
}

func nodeDetailText(n *runtime.NodeStatus, now time.Time) string {
	s := fieldsText(
		output.Field{Label: "Service", Value: n.Service},
		output.Field{Label: "Node", Value: n.Node},
		output.Field{Label: "State", Value: string(n.JoinState)},
		output.Field{Label: "Admin", Value: orDash(n.AdminAddr)},
		output.Field{Label: "Started", Value: timeText(n.StartedAt, now)},
		output.Field{Label: "Last seen", Value: timeText(n.LastSeen, now)},
		output.Field{Label: "Paused", Value: listText(n.Paused)},
		output.Field{Label: "Throttled", Value: listText(n.Throttled)},
		output.Field{Label: "Parked", Value: strconv.Itoa(n.Parked)},
	)
	s += fmt.Sprintf("\nHeld partitions (%d):\n", len(n.Held))
	s += plainTable([]string{"SUBSCRIPTION", "SOURCE", "WHERE", "PARTITION", "GEN"}, func(yield func([]string)) {
		for _, h := range n.Held {
			where := h.Category
			if h.Topic != "" {
				where = h.Topic
			}
			yield([]string{h.Subscription, string(h.Source), orDash(where), h.Partition, strconv.FormatInt(h.Generation, 10)})
		}
	})
	return s
}

func topicDetailText(t *TopicPartition) string {
	str := func(s *string) string {
		if s == nil {
			return "-"
		}
		return *s
	}
	s := fieldsText(
		output.Field{Label: "Service", Value: t.Service},
		output.Field{Label: "Topic", Value: t.Topic},
		output.Field{Label: "Partition", Value: strconv.Itoa(int(t.Partition))},
		output.Field{Label: "Owner", Value: str(t.Owner)},
		output.Field{Label: "Generation", Value: intText(t.Generation)},
		output.Field{Label: "TTL", Value: msText(t.TTLMs)},
		output.Field{Label: "Head", Value: intText(t.Head)},
	)
	s += "\nSubscriptions:\n"
	s += plainTable([]string{"SUBSCRIPTION", "CHECKPOINT", "LAG"}, func(yield func([]string)) {
		for _, sub := range t.Subscriptions {
			yield([]string{sub.Name, intText(sub.Checkpoint), intText(sub.Lag)})
		}
	})
	return s
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
