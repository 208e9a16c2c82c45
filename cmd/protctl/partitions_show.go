package main

import (
	"context"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"github.com/protctl/protctl/internal/inspect"
	"github.com/protctl/protctl/internal/output"
)

type partitionsShowOptions struct {
	IO        *output.IOStreams
	Printer   *output.Printer
	Inspector func() (*inspect.Inspector, error)

	Category     string
	Key          string
	ShowPayload  bool
	PendingLimit int64
}

func newPartitionsShowCmd(f *Factory) *cobra.Command {
	opts := &partitionsShowOptions{IO: f.IOStreams, Inspector: f.Inspector}
	cmd := &cobra.Command{
		Use:     "show CATEGORY KEY",
		Aliases: []string{"explain"},
		Short:   "Explain one partition: head entry, pending list, lease, generation, groups and a verdict",
		Long: `Explain one partition: its lanes, and for each consumer group the entry it
handles next (its oldest pending entry, or the first not delivered yet),
decoded; its pending list with delivery counts; its lease and generation;
whether it is parked; and a one-line verdict of why it is idle, lagging,
stuck or healthy. A head delivered several times under a held lease is a
poison message: the verdict names it and its delivery count, and the
commands that repair it are printed below.

Payloads (the envelope's data, or an entry that is not an envelope) are
hidden unless --show-payload is given; headers are always shown. Exits 4
when the key is neither in the category's index nor has a stream.`,
		Example: `  protctl partitions show shop::order o-1
  protctl partitions show shop::order o-1 --show-payload -o json`,
		Args: categoryKeyArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.Category, opts.Key = args[0], args[1]
			if opts.PendingLimit <= 0 {
				return usageError(fmt.Errorf("invalid --pending-limit %d: want more than 0", opts.PendingLimit))
			}
			opts.Printer = f.Printer()
			return runPartitionsShow(cmd.Context(), opts)
		},
	}
	cmd.Flags().BoolVar(&opts.ShowPayload, "show-payload", false, "show entries' payloads (the envelope's data)")
	cmd.Flags().Int64Var(&opts.PendingLimit, "pending-limit", 100, "list at most N pending entries per group and lane")
	return cmd
}

// partitionDetail is `partitions show -o json`: the data layer's detail
// with payloads hidden unless asked for.
type partitionDetail struct {
	inspect.PartitionDetail
	// ServerTime replaces the embedded time.Time (which encodes with
	// nanoseconds) with the contract's RFC 3339 UTC milliseconds.
	ServerTime string `json:"serverTime"`
	// PayloadHidden says that the entries' data was left out
	// (--show-payload shows it).
	PayloadHidden bool `json:"payloadHidden"`
}

func runPartitionsShow(ctx context.Context, opts *partitionsShowOptions) error {
	ins, err := opts.Inspector()
	if err != nil {
		return err
	}
	d, err := ins.Partition(ctx, opts.Category, opts.Key, inspect.ExplainOptions{PendingLimit: opts.PendingLimit})
	if err != nil {
		return dataErr(err)
	}
	if !opts.ShowPayload {
		for i := range d.Groups {
			d.Groups[i].Head = hidePayload(d.Groups[i].Head)
		}
	}
	doc := partitionDetail{PartitionDetail: d, ServerTime: output.Timestamp(d.ServerTime), PayloadHidden: !opts.ShowPayload}
	return opts.Printer.PrintObject("PartitionDetail", doc, func(w io.Writer, st output.Styles) error {
		return writePartitionDetail(w, st, opts.IO, &doc)
	})
}

// hidePayload returns a copy of e without its payload: the envelope's
// data, or the raw data field of an entry that is not an envelope.
func hidePayload(e *inspect.Entry) *inspect.Entry {
	if e == nil {
		return nil
	}
	c := *e
	if c.Envelope != nil {
		env := *c.Envelope
		env.Data = nil
		c.Envelope = &env
	}
	c.Raw = nil
	return &c
}

func writePartitionDetail(w io.Writer, st output.Styles, ios *output.IOStreams, d *partitionDetail) error {
	indexed := "yes"
	if !d.Indexed {
		indexed = "no (consumers will not discover it; see partitions fsck)"
	}
	fields := []output.Field{
		{Label: "Partition", Value: d.Category + " " + d.Key},
		{Label: "Stream", Value: d.Stream},
		{Label: "Lanes", Value: lanesText(d.Lanes)},
		{Label: "Length", Value: fmt.Sprint(d.Length)},
		{Label: "Last entry", Value: strCell(d.LastEntryID) + idleSuffix(d.IdleMs)},
		{Label: "Indexed", Value: indexed},
		{Label: "Dead letters", Value: fmt.Sprint(d.DLQLength)},
	}
	if err := output.WriteFields(w, st, fields...); err != nil {
		return err
	}
	for i := range d.Groups {
		g := &d.Groups[i]
		fmt.Fprintf(w, "\n%s\n", st.Header("Group "+output.Escape(g.Name)))
		gf := []output.Field{
			{Label: "Lease", Value: leaseText(&g.Group)},
			{Label: "Generation", Value: intCell(g.Generation)},
			{Label: "Pending", Value: fmt.Sprint(g.Pending)},
			{Label: "Lag", Value: lagText(g.Lag)},
			{Label: "Delivered up to", Value: strCell(g.LastDeliveredID)},
			{Label: "Parked", Value: boolCell(g.Parked)},
			{Label: "Head", Value: headText(g)},
			{Label: "Verdict", Value: string(g.Verdict.State) + ": " + g.Verdict.Reason, Tone: verdictTone(g.Verdict.State)},
		}
		if err := output.WriteFields(w, st, gf...); err != nil {
			return err
		}
		if len(g.PendingEntries) > 0 {
			fmt.Fprintln(w, "Pending entries:")
			if err := viewPrinter(ios, w).PrintList("PendingEntry", g.PendingEntries, output.TableSpec{Columns: []output.Column{
				output.Col("STREAM", func(e inspect.PendingEntry) string { return e.Stream }),
				output.Col("ID", func(e inspect.PendingEntry) string { return e.ID }),
				output.Col("CONSUMER", func(e inspect.PendingEntry) string { return e.Consumer }),
				output.Col("DELIVERIES", func(e inspect.PendingEntry) string { return fmt.Sprint(e.Deliveries) }),
				output.Col("IDLE", func(e inspect.PendingEntry) string { return output.HumanDuration(msDuration(e.IdleMs)) }),
			}}); err != nil {
				return err
			}
		}
	}
	fmt.Fprintln(w)
	if err := output.WriteFields(w, st, output.Field{Label: "Verdict", Value: d.Verdict.String(), Tone: verdictTone(d.Verdict.State)}); err != nil {
		return err
	}
	if d.PayloadHidden && hasHead(d) {
		fmt.Fprintln(w, st.Tone(output.ToneMuted, "Payloads hidden; --show-payload shows them."))
	}
	for _, hint := range repairHints(d) {
		fmt.Fprintf(w, "%s\n  %s\n", output.Escape(hint.what), output.Escape(hint.command))
	}
	return nil
}

func hasHead(d *partitionDetail) bool {
	for _, g := range d.Groups {
		if g.Head != nil {
			return true
		}
	}
	return false
}

// repairHint is a runbook step: what it does and the command.
type repairHint struct{ what, command string }

// repairHints are the runbook commands for a stuck group: dead-letter a
// pending head delivered more than once, then free a lease still held.
func repairHints(d *partitionDetail) []repairHint {
	var hints []repairHint
	for _, g := range d.Groups {
		if g.Verdict.State != inspect.StateStuck || g.HeadPending == nil {
			continue
		}
		args := fmt.Sprintf("%s %s --group %s", shellQuote(d.Category), shellQuote(d.Key), shellQuote(g.Name))
		if g.HeadPending.Deliveries > 1 {
			hints = append(hints, repairHint{
				fmt.Sprintf("To move the head %s to %s:dlq and ack it:", g.HeadPending.ID, d.Stream),
				"protctl partitions skip-head " + args + " --reason TEXT",
			})
		}
		if g.Lease != nil {
			hints = append(hints, repairHint{
				fmt.Sprintf("Then free the lease %s (its owner drops the partition and acquires it again):", g.Lease.Token),
				"protctl partitions release " + args + " --force",
			})
		}
	}
	return hints
}

// shellQuote quotes s for a copy-pasted command line when needed.
func shellQuote(s string) string {
	if s != "" && !strings.ContainsAny(s, " \t\n'\"\\$`!*?[]{}()<>|&;#~") {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

func idleSuffix(ms *int64) string {
	if ms == nil {
		return ""
	}
	return " (" + msCell(ms) + " ago)"
}

func lagText(lag *int64) string {
	if lag == nil {
		return "unknown (entries were deleted from the middle of a lane)"
	}
	return fmt.Sprint(*lag)
}

// leaseText is the Lease line of a group: the state word first, as
// partitions ls prints it.
func leaseText(g *inspect.Group) string {
	l, gen := g.Lease, g.Generation
	switch {
	case l != nil && l.TTLMs != nil:
		return fmt.Sprintf("held by %s (TTL %s)", l.Token, msCell(l.TTLMs))
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
		s += fmt.Sprintf(", pending to %s, delivered %d times, idle %s", p.Consumer, p.Deliveries, output.HumanDuration(msDuration(p.IdleMs)))
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

func verdictTone(s inspect.VerdictState) output.Tone {
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

// viewPrinter prints a table inside a detail view (to w, in table format
// with the streams' colour settings).
func viewPrinter(ios *output.IOStreams, w io.Writer) *output.Printer {
	s := *ios
	s.Out = w
	return output.NewPrinter(&s, output.PrinterOptions{Format: output.FormatTable})
}
