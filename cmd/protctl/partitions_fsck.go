package main

import (
	"context"
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/protctl/protctl/internal/inspect"
	"github.com/protctl/protctl/internal/output"
	"github.com/protctl/protctl/internal/present"
	"github.com/protctl/protctl/pkg/broker"
)

type partitionsFsckOptions struct {
	IO        *output.IOStreams
	Printer   *output.Printer
	Inspector func() (*inspect.Inspector, error)

	Category string
}

func newPartitionsFsckCmd(f *Factory) *cobra.Command {
	opts := &partitionsFsckOptions{IO: f.IOStreams, Inspector: f.Inspector}
	return &cobra.Command{
		Use:   "fsck CATEGORY",
		Short: "Find orphans (streams missing from the index, index entries without streams) and stale consumers",
		Long: `Check a category's index against its streams, by an explicit, paced SCAN of
the keyspace for CATEGORY:* (progress on stderr; the only keyspace scan
besides listing every category):

  unindexed-stream  a partition stream whose key is not in the index:
                    consumers never discover it, its entries wait forever
  missing-stream    an index entry with no stream: harmless, listed until
                    reaped or published to again
  wrong-type        an index entry whose lane key holds another Redis type
                    than a stream (TYPE names it): no consumer can read it

Dead-letter streams (CATEGORY:K:dlq) and the category's own streams under
reserved names (Protean's CATEGORY:dlq, CATEGORY:<backfill>, CATEGORY:__x__)
are not partition streams: fsck neither counts nor reports them.

It also lists the stale consumers of the partition streams it found:
consumers of a group with no pending entries that are not the group's live
lease (owner:generation), as earlier lease generations and Protean
instances leave them. They hold nothing but cost memory and XINFO time; remove them
with 'protctl partitions prune-consumers'.

It changes nothing. It exits 0 whatever orphans and stale consumers it
finds, except a key of the wrong type: that one it counts and lists, then
exits 9 (WRONG_TYPE) naming the key. An unknown category exits 4. -o json
lists the findings for scripts.`,
		Example: `  protctl partitions fsck shop::order
  protctl partitions fsck shop::order -o json`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.Category = args[0]
			opts.Printer = f.Printer()
			return runPartitionsFsck(cmd.Context(), opts)
		},
	}
}

func runPartitionsFsck(ctx context.Context, opts *partitionsFsckOptions) error {
	ins, err := opts.Inspector()
	if err != nil {
		return err
	}
	if _, err := requireCategories(ctx, ins, []string{opts.Category}); err != nil {
		return err
	}
	prog := opts.IO.NewProgress("scanning " + opts.Category + ":*")
	rep, err := ins.Fsck(ctx, opts.Category, inspect.ScanOptions{Progress: func(p inspect.ScanProgress) {
		prog.Update("%d keys scanned, %d partition streams", p.Scanned, p.Found)
	}})
	prog.Done()
	if err != nil {
		return dataErr(err)
	}
	if rep.Orphans == nil {
		rep.Orphans = []inspect.Orphan{}
	}
	if rep.StaleConsumers == nil {
		rep.StaleConsumers = []inspect.StaleConsumer{}
	}
	if err := printFsck(opts, rep); err != nil {
		return err
	}
	for _, o := range rep.Orphans {
		if o.Kind == inspect.OrphanWrongType {
			return &broker.WrongTypeError{Op: "fsck", Key: o.Stream, Want: "stream", Got: o.Type}
		}
	}
	return nil
}

func printFsck(opts *partitionsFsckOptions, rep inspect.FsckReport) error {
	return opts.Printer.PrintObject("FsckReport", rep, func(w io.Writer, st output.Styles) error {
		tone := output.ToneGood
		if len(rep.Orphans) > 0 {
			tone = output.ToneWarn
		}
		if err := output.WriteFields(w, st,
			output.Field{Label: "Category", Value: rep.Category},
			output.Field{Label: "Index entries", Value: fmt.Sprint(rep.Indexed)},
			output.Field{Label: "Partition streams", Value: fmt.Sprint(rep.Streams)},
			output.Field{Label: "Orphans", Value: fmt.Sprint(len(rep.Orphans)), Tone: tone},
			output.Field{Label: "Stale consumers", Value: fmt.Sprint(len(rep.StaleConsumers)), Tone: staleTone(rep.StaleConsumers)},
		); err != nil {
			return err
		}
		if len(rep.Orphans) > 0 {
			fmt.Fprintln(w)
			if err := viewPrinter(opts.IO, w).PrintList("Orphan", rep.Orphans, output.TableSpec{Columns: []output.Column{
				output.Col("KIND", func(o inspect.Orphan) string { return string(o.Kind) }),
				output.Col("KEY", func(o inspect.Orphan) string { return o.Key }),
				output.Col("STREAM", func(o inspect.Orphan) string { return o.Stream }),
				output.Col("LENGTH", func(o inspect.Orphan) string { return fmt.Sprint(o.Length) }),
				output.Col("TYPE", func(o inspect.Orphan) string { return present.Dash(o.Type) }),
			}}); err != nil {
				return err
			}
		}
		return printStaleConsumers(opts.IO, w, rep.StaleConsumers)
	})
}
