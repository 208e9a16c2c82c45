package present

import (
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/protctl/protctl/internal/inspect"
	"github.com/protctl/protctl/internal/output"
	"github.com/protctl/protctl/internal/repair"
)

// Layout is how a front end lays out a detail view: the styles of its
// labels, headers and toned values, and how it prints a list inside the
// view.
type Layout struct {
	// Styles are the output's styles; the zero value writes plain text.
	Styles output.Styles
	// Table writes items (all of one type) under cols' headers.
	Table func(w io.Writer, kind string, items []any, cols []output.Column) error
	// RelativeTimes writes a point in time as its age by the server's
	// clock ("5m25s ago"), as tables do on a terminal; false writes it in
	// RFC 3339 (UTC, to the second), as tables do without one
	// (docs/cli.md, "Output"; output.Printer.Time decides the same way).
	RelativeTimes bool
}

// ago writes the point in time age before now: "5m25s ago" with
// RelativeTimes, else RFC 3339.
func (l Layout) ago(now time.Time, age time.Duration) string {
	if l.RelativeTimes {
		return Duration(age.Milliseconds()) + " ago"
	}
	return now.Add(-age).UTC().Format(time.RFC3339)
}

// WritePartition writes `partitions show`'s text view of d: the
// partition's fields, a section per group (its fields and pending
// entries), and the partition's verdict. Repair hints and notes about
// hidden payloads follow it, written by the caller (RepairHints).
func WritePartition(w io.Writer, d *inspect.PartitionDetail, l Layout) error {
	st := l.Styles
	indexed := "yes"
	if !d.Indexed {
		indexed = "no (consumers will not discover it; see partitions fsck)"
	}
	last := Str(d.LastEntryID)
	if d.IdleMs != nil {
		last += " (" + l.ago(d.ServerTime, time.Duration(*d.IdleMs)*time.Millisecond) + ")"
	}
	if err := output.WriteFields(w, st,
		output.Field{Label: "Partition", Value: d.Category + " " + d.Key},
		output.Field{Label: "Stream", Value: d.Stream},
		output.Field{Label: "Lanes", Value: Lanes(d.Lanes)},
		output.Field{Label: "Length", Value: strconv.FormatInt(d.Length, 10)},
		output.Field{Label: "Last entry", Value: last},
		output.Field{Label: "Indexed", Value: indexed},
		output.Field{Label: "Dead letters", Value: strconv.FormatInt(d.DLQLength, 10)},
	); err != nil {
		return err
	}
	for i := range d.Groups {
		g := &d.Groups[i]
		if _, err := fmt.Fprintf(w, "\n%s\n", st.Header("Group "+output.Escape(g.Name))); err != nil {
			return err
		}
		if err := output.WriteFields(w, st,
			output.Field{Label: "Lease", Value: Lease(&g.Group)},
			output.Field{Label: "Generation", Value: Generation(&g.Group)},
			output.Field{Label: "Pending", Value: strconv.FormatInt(g.Pending, 10)},
			output.Field{Label: "Lag", Value: Lag(g.Lag)},
			output.Field{Label: "Delivered up to", Value: Str(g.LastDeliveredID)},
			output.Field{Label: "Parked", Value: Bool(g.Parked)},
			output.Field{Label: "Head", Value: Head(g)},
			output.Field{Label: "Verdict", Value: string(g.Verdict.State) + ": " + g.Verdict.Reason, Tone: VerdictTone(g.Verdict.State)},
			output.Field{Label: "Status", Value: HealthLine(g.Health), Tone: StatusTone(g.Health)},
		); err != nil {
			return err
		}
		if len(g.PendingEntries) == 0 {
			continue
		}
		if _, err := io.WriteString(w, "Pending entries:\n"); err != nil {
			return err
		}
		items := make([]any, len(g.PendingEntries))
		for i, e := range g.PendingEntries {
			items[i] = e
		}
		if err := l.Table(w, "PendingEntry", items, PendingColumns()); err != nil {
			return err
		}
	}
	if _, err := io.WriteString(w, "\n"); err != nil {
		return err
	}
	if d.Verdict.State == "" {
		return nil // not judged (a dashboard fixture's detail)
	}
	return output.WriteFields(w, st, output.Field{Label: "Verdict", Value: d.Verdict.String(), Tone: VerdictTone(d.Verdict.State)})
}

// PendingColumns are the columns of a group's pending entries, over
// inspect.PendingEntry.
func PendingColumns() []output.Column {
	return []output.Column{
		output.Col("STREAM", func(e inspect.PendingEntry) string { return e.Stream }),
		output.Col("ID", func(e inspect.PendingEntry) string { return e.ID }),
		output.Col("CONSUMER", func(e inspect.PendingEntry) string { return e.Consumer }),
		output.Col("DELIVERIES", func(e inspect.PendingEntry) string { return strconv.FormatInt(e.Deliveries, 10) }),
		output.Col("IDLE", func(e inspect.PendingEntry) string { return Duration(e.IdleMs) }),
	}
}

// Lease is a group's Lease line: the lease state first, in the words of
// partitions ls and leases ls (inspect.LeaseStateOf), then what it rests
// on: the holder and TTL, or the generation no lease has been held since.
func Lease(g *inspect.Group) string {
	l, gen := g.Lease, g.Generation
	switch {
	case l != nil && l.TTLMs != nil:
		return fmt.Sprintf("held by %s (TTL %s)", l.Token, Duration(*l.TTLMs))
	case l != nil:
		return "held by " + l.Token + " (no expiry)"
	case gen != nil && g.LeaseState == inspect.LeaseReleased && g.Parked != nil && *g.Parked:
		return fmt.Sprintf("released (parked; none held since generation %d)", *gen)
	case gen != nil && g.LeaseState == inspect.LeaseReleased:
		return fmt.Sprintf("released (idle; none held since generation %d)", *gen)
	case g.LeaseState == inspect.LeaseUnknown:
		return Unknown + " (the lease or generation key could not be read)"
	}
	return inspect.NotHeldText(g.LeaseState, gen)
}

// Lag is a group's lag, or why it is unknown.
func Lag(lag *int64) string {
	if lag == nil {
		return "unknown (entries were deleted from the middle of a lane)"
	}
	return strconv.FormatInt(*lag, 10)
}

// Head is what a group handles next: the entry, whether and to whom it
// is pending, and what it is (its envelope's type and id).
func Head(g *inspect.GroupDetail) string {
	h := g.Head
	if h == nil {
		return "none: caught up"
	}
	s := h.ID + " on " + h.Stream
	if p := g.HeadPending; p != nil {
		s += fmt.Sprintf(", pending to %s, delivered %d times, idle %s", p.Consumer, p.Deliveries, Duration(p.IdleMs))
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

// VerdictTone colours a verdict: stuck and orphan bad, lagging warn,
// healthy good, the rest (idle) muted.
func VerdictTone(s inspect.VerdictState) output.Tone {
	switch s {
	case inspect.StateStuck, inspect.StateOrphan:
		return output.ToneBad
	case inspect.StateLagging:
		return output.ToneWarn
	case inspect.StateHealthy:
		return output.ToneGood
	}
	return output.ToneMuted
}

// Hint is a runbook step under a partition's detail: what it does, ending
// in a colon, and the command that plans it (Action's).
type Hint struct {
	Action  repair.Action
	What    string
	Command string
}

// RepairHints are the runbook steps for d's stuck groups: dead-letter a
// pending head delivered more than once, then free a lease still held.
func RepairHints(d *inspect.PartitionDetail) []Hint {
	var hints []Hint
	for _, g := range d.Groups {
		if g.Verdict.State != inspect.StateStuck || g.HeadPending == nil {
			continue
		}
		args := ShellQuote(d.Category) + " " + ShellQuote(d.Key) + " --group " + ShellQuote(g.Name)
		if g.HeadPending.Deliveries > 1 {
			hints = append(hints, Hint{
				Action:  repair.ActionDeadLetter,
				What:    fmt.Sprintf("To move the head %s to %s:dlq and ack it:", g.HeadPending.ID, d.Stream),
				Command: "protctl partitions skip-head " + args + " --reason TEXT",
			})
		}
		if g.Lease != nil {
			hints = append(hints, Hint{
				Action:  repair.ActionRelease,
				What:    fmt.Sprintf("Then free the lease %s (its owner drops the partition and acquires it again):", g.Lease.Token),
				Command: "protctl partitions release " + args + " --force",
			})
		}
	}
	return hints
}
