package main

import (
	"context"
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/protctl/protctl/internal/inspect"
	"github.com/protctl/protctl/internal/output"
	"github.com/protctl/protctl/internal/present"
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

// writePayloadHidden says, below a show command's text, that payloads
// were left out and how to see them (partitions, parked and dlq show
// alike); plural for the several entries of a partition.
func writePayloadHidden(w io.Writer, st output.Styles, plural bool) {
	hint := "Payload hidden; --show-payload shows it."
	if plural {
		hint = "Payloads hidden; --show-payload shows them."
	}
	fmt.Fprintln(w, st.Tone(output.ToneMuted, hint))
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
	err := present.WritePartition(w, &d.PartitionDetail, present.Layout{
		Styles: st,
		Table: func(w io.Writer, kind string, items []any, cols []output.Column) error {
			return viewPrinter(ios, w).PrintList(kind, items, output.TableSpec{Columns: cols})
		},
		// As output.Printer.Time: relative on a terminal, RFC 3339 without.
		RelativeTimes: ios.IsStdoutTTY(),
	})
	if err != nil {
		return err
	}
	if d.PayloadHidden && hasHead(d) {
		writePayloadHidden(w, st, true)
	}
	for _, h := range present.RepairHints(&d.PartitionDetail) {
		fmt.Fprintf(w, "%s\n  %s\n", output.Escape(h.What), output.Escape(h.Command))
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

// viewPrinter prints a table inside a detail view (to w, in table format
// with the streams' colour settings).
func viewPrinter(ios *output.IOStreams, w io.Writer) *output.Printer {
	s := *ios
	s.Out = w
	return output.NewPrinter(&s, output.PrinterOptions{Format: output.FormatTable})
}
