package main

import (
	"context"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/protctl/protctl/internal/inspect"
	"github.com/protctl/protctl/internal/output"
	"github.com/protctl/protctl/internal/present"
)

type parkedListOptions struct {
	Printer   *output.Printer
	Inspector func() (*inspect.Inspector, error)

	Subscription string
	Partition    string
	filter       parkedFilterFlags

	watch watchOptions
}

func newParkedListCmd(f *Factory) *cobra.Command {
	opts := &parkedListOptions{Inspector: f.Inspector}
	cmd := &cobra.Command{
		Use:     "ls",
		Aliases: []string{"list"},
		Short:   "List parked aggregates and partitions: error, attempts, position, status",
		Long: `List the failure ledger: per subscription, each parked aggregate (Kafka) or
partition key (Redis) with the partition, the position of its failing record
(offset or entry id), the last error, the attempts, when it was parked, and
its status (parked, retrying, unrecoverable), oldest first. An operator's
request not taken up yet is shown with it.

The filters (--error, --error-class, --older-than, --newer-than, --key,
--position) are those of parked retry and skip: list with them first to see
what a bulk retry or skip would take. Ages are measured on the Redis
server's clock. A --subscription that never parked an entry, is no consumer group with a
lease, generation or registry entry and saved no Kafka checkpoint (a typo)
exits 4; a ledger key of the wrong Redis type exits 9.`,
		Example: `  protctl parked ls
  protctl parked ls --subscription app.OrderProjector -o json
  protctl parked ls --subscription ledger-sync --error-class 'http POST http://billing' --older-than 10m
  protctl parked ls --key 'o-1*' --position 1700000000000..1700000060000
  protctl parked ls -w`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := opts.watch.validate(); err != nil {
				return err
			}
			opts.filter.spec.Subscription, opts.filter.spec.Partition = opts.Subscription, opts.Partition
			if _, err := opts.filter.compile(); err != nil {
				return err
			}
			opts.Printer = f.Printer()
			return opts.watch.run(cmd.Context(), f.IOStreams, opts.Printer, func(ctx context.Context) error {
				return runParkedList(ctx, opts)
			})
		},
	}
	cmd.Flags().StringVar(&opts.Subscription, "subscription", "", "only this subscription's entries")
	cmd.Flags().StringVar(&opts.Partition, "partition", "", "only entries on this partition (Kafka: its number; Redis: the partition key)")
	opts.filter.add(cmd)
	addWatchFlags(cmd, &opts.watch)
	return cmd
}

func runParkedList(ctx context.Context, opts *parkedListOptions) error {
	ins, err := opts.Inspector()
	if err != nil {
		return err
	}
	f, err := opts.filter.compile()
	if err != nil {
		return err
	}
	sel, err := ins.SelectParked(ctx, f)
	if err != nil {
		return dataErr(filterErr(err))
	}
	ps := sel.Entries
	if len(ps) == 0 && opts.Subscription != "" {
		if err := requireSubscription(ctx, ins, opts.Subscription); err != nil {
			return err
		}
	}
	items := make([]parkedItem, len(ps))
	for i, p := range ps {
		items[i] = parkedItemOf(p)
	}
	pr := opts.Printer
	empty := "Nothing is parked."
	if !opts.filter.spec.IsZero() {
		empty = "No parked entry matches."
	}
	return pr.PrintList("Parked", items, output.TableSpec{
		Empty: empty,
		Columns: []output.Column{
			output.Col("SUBSCRIPTION", func(p parkedItem) string { return p.Subscription }),
			output.Col("AGGREGATE", func(p parkedItem) string { return p.Aggregate }),
			output.Col("PARTITION", func(p parkedItem) string {
				if p.Category != nil {
					return *p.Category + " " + p.Partition
				}
				if p.Topic != nil {
					return *p.Topic + "/" + p.Partition
				}
				return p.Partition
			}),
			output.Col("POSITION", func(p parkedItem) string { return p.Position }),
			output.Col("STATUS", func(p parkedItem) string {
				if p.Request != nil {
					return p.Status + " (" + p.Request.Action + " requested)"
				}
				return p.Status
			}, output.Toned(func(p parkedItem) output.Tone { return parkedStatusTone(p.Status) })),
			output.Col("ATTEMPTS", func(p parkedItem) string { return fmt.Sprint(p.Attempts) }),
			output.Col("PARKED", func(p parkedItem) string { return timeCell(pr, p.ParkedAt) }),
			output.Col("ERROR", func(p parkedItem) string { return p.Error }),
			output.Col("OWNER", func(p parkedItem) string { return present.Str(p.Owner) }, output.WideOnly()),
			output.Col("GEN", func(p parkedItem) string { return present.Int(p.Generation) }, output.WideOnly()),
			output.Col("LAST-ATTEMPT", func(p parkedItem) string { return timeCell(pr, p.LastAttemptAt) }, output.WideOnly()),
		},
	})
}

// timeCell renders a JSON timestamp field for a table.
func timeCell(pr *output.Printer, ts *string) string {
	if ts == nil {
		return "-"
	}
	t, err := time.Parse(output.TimestampLayout, *ts)
	if err != nil {
		return *ts
	}
	return pr.Time(t)
}
