package main

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/protctl/protctl/internal/inspect"
	"github.com/protctl/protctl/internal/output"
	"github.com/protctl/protctl/internal/present"
)

type dlqListOptions struct {
	IO        *output.IOStreams
	Printer   *output.Printer
	Inspector func() (*inspect.Inspector, error)

	Category string
	Filter   dlqFilter
	Limit    int

	query inspect.DeadLetterQuery
	watch watchOptions
}

func newDLQListCmd(f *Factory) *cobra.Command {
	opts := &dlqListOptions{IO: f.IOStreams, Inspector: f.Inspector}
	cmd := &cobra.Command{
		Use:     "ls CATEGORY",
		Aliases: []string{"list"},
		Short:   "List a category's dead letters: origin, group, reason, age, deliveries",
		Long: `List the dead letters of CATEGORY: every partition's C:K:dlq and the
category's own C:dlq (and C:<backfill>:dlq) that Protean writes. Each row is
one dead letter: the partition (- for the category's own), its id, the entry
it was dead-lettered from, the consumer group, the reason, how long ago it
was dead-lettered (by the server's clock and the time in its id) and how
many times the entry had been delivered. The category's own dead letters
come first, then each partition's by key, each oldest first.

The dead-letter streams are found by a paced SCAN of CATEGORY:*dlq, so those
of partitions no longer in the index are listed too. Filters: --key (a glob
over partition keys), --reason (a regular expression), --group,
--older-than and --newer-than, --id. An unknown category exits 4, and so
does a --group that selects nothing and that Redis has no trace of (no
dead letter of the category names it, it does not read the category, no
lease or generation key of it exists); a key named like a dead-letter
stream that holds another type is named, after the rest is listed, with
exit 9.

-o json lists items of kind DeadLetter with these fields: category; key
(null for the category's own); stream (the dead-letter stream); id;
deadLetteredAt; ageMs; originalStream, originalId, group, consumer, reason,
failedAt and retryCount as the dead letter records them (null when it does
not); missing (the original body was gone); format (protean, protctl-raw,
protctl-fields or unknown: how it was written); replayedFrom ({stream, id}
of an earlier replay of it, or null).`,
		Example: `  protctl dlq ls shop::order
  protctl dlq ls shop::order --key 'o-1*' --reason 'amount must be' -o wide
  protctl dlq ls shop::order --older-than 24h -o json`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.Category = args[0]
			q, err := opts.Filter.query(opts.Category)
			if err != nil {
				return err
			}
			if opts.Limit < 0 {
				return usageError(fmt.Errorf("invalid --limit %d: want 0 (no limit) or more", opts.Limit))
			}
			if err := opts.watch.validate(); err != nil {
				return err
			}
			q.Limit = opts.Limit
			opts.query = q
			opts.Printer = f.Printer()
			return opts.watch.run(cmd.Context(), f.IOStreams, opts.Printer, func(ctx context.Context) error {
				return runDLQList(ctx, opts)
			})
		},
	}
	opts.Filter.addFlags(cmd)
	cmd.Flags().IntVar(&opts.Limit, "limit", 0, "list at most N dead letters; 0 for all")
	addWatchFlags(cmd, &opts.watch)
	return cmd
}

func runDLQList(ctx context.Context, opts *dlqListOptions) error {
	ins, err := opts.Inspector()
	if err != nil {
		return err
	}
	q := opts.query
	prog := opts.IO.NewProgress("scanning " + opts.Category + ":*dlq")
	q.Scan.Progress = func(p inspect.ScanProgress) {
		prog.Update("%d keys scanned, %d dead-letter streams", p.Scanned, p.Found)
	}
	dls, readErr := ins.DeadLetters(ctx, q)
	prog.Done()
	if readErr != nil && dls == nil {
		return dlqErr(readErr)
	}
	items := make([]dlqItem, len(dls))
	for i, d := range dls {
		items[i] = dlqItemOf(d)
	}
	pr := opts.Printer
	err = pr.PrintList("DeadLetter", items, output.TableSpec{
		Empty: "No dead letters.",
		Columns: []output.Column{
			output.Col("KEY", func(d dlqItem) string { return present.Str(d.Key) }),
			output.Col("ID", func(d dlqItem) string { return d.ID }),
			output.Col("ORIGIN", func(d dlqItem) string { return present.Str(d.OriginalID) }),
			output.Col("GROUP", func(d dlqItem) string { return present.Str(d.Group) }),
			output.Col("AGE", func(d dlqItem) string { return output.HumanDuration(msDuration(d.AgeMs)) }),
			output.Col("RETRIES", func(d dlqItem) string { return present.Int(d.RetryCount) }),
			output.Col("REASON", func(d dlqItem) string {
				if d.Missing {
					return present.Str(d.Reason) + " (body was gone)"
				}
				return present.Str(d.Reason)
			}, output.Toned(func(dlqItem) output.Tone { return output.ToneBad })),
			output.Col("CONSUMER", func(d dlqItem) string { return present.Str(d.Consumer) }, output.WideOnly()),
			output.Col("FAILED-AT", func(d dlqItem) string { return timeCell(pr, d.FailedAt) }, output.WideOnly()),
			output.Col("STREAM", func(d dlqItem) string { return d.Stream }, output.WideOnly()),
			output.Col("FORMAT", func(d dlqItem) string { return d.Format }, output.WideOnly()),
		},
	})
	if err != nil {
		return err
	}
	return dlqErr(readErr)
}
