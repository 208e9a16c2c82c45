package main

import (
	"context"

	"github.com/spf13/cobra"

	"github.com/protctl/protctl/internal/inspect"
	"github.com/protctl/protctl/internal/output"
	"github.com/protctl/protctl/internal/repair"
)

type partitionsPruneConsumersOptions struct {
	Mutation *mutation
	IO       *output.IOStreams

	Category string
	Keys     []string
	Group    string
}

func newPartitionsPruneConsumersCmd(f *Factory) *cobra.Command {
	opts := &partitionsPruneConsumersOptions{IO: f.IOStreams}
	cmd := &cobra.Command{
		Use:   "prune-consumers CATEGORY [KEY...]",
		Short: "Delete stale consumers (no pending entries, not the live lease's) of a category's groups, fenced",
		Long: `Delete the stale consumers 'protctl partitions fsck' lists: consumers of a group
on a partition stream (main or backfill lane) that hold no pending entries
and are not the group's live lease (owner:generation). Every lease
generation reads as a consumer of its own, so earlier generations, and
Protean instances, leave one behind at each handover; protctl's runtime
deletes its own, this removes what older nodes and Protean left.

The plan is fsck's list (the same paced SCAN of CATEGORY:*), narrowed to
the KEYs and --group when given. Applying deletes each consumer in one
script that checks again, right before XGROUP DELCONSUMER, that it holds
no pending entries (DELCONSUMER would destroy them) and is not the live
lease's consumer: one that gained pending entries or became the lease's
consumer since the plan is kept and reported as a conflict (exit 5); one
already gone is skipped. An unknown CATEGORY or KEY, or a --group that reads
no partition of the category, exits 4.`,
		Example: `  protctl partitions prune-consumers shop::order --dry-run
  protctl partitions prune-consumers shop::order o-1 --group app.OrderProjector --yes
  protctl partitions prune-consumers shop::order --dry-run -o json > prune.json`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.Category, opts.Keys = args[0], args[1:]
			opts.Mutation = newMutation(f)
			return runPartitionsPruneConsumers(cmd.Context(), opts)
		},
	}
	cmd.Flags().StringVar(&opts.Group, "group", "", "only this consumer group (subscription); default every group")
	return cmd
}

func runPartitionsPruneConsumers(ctx context.Context, opts *partitionsPruneConsumersOptions) error {
	return runMutation(ctx, opts.Mutation, func(ctx context.Context, r *repair.Repairer) (*repair.Plan, error) {
		prog := opts.IO.NewProgress("scanning " + opts.Category + ":*")
		defer prog.Done()
		return r.PlanPruneConsumers(ctx, repair.PruneConsumersRequest{
			Category: opts.Category, Keys: opts.Keys, Group: opts.Group,
			Scan: inspect.ScanOptions{Progress: func(p inspect.ScanProgress) {
				prog.Update("%d keys scanned, %d partition streams", p.Scanned, p.Found)
			}},
		})
	})
}
