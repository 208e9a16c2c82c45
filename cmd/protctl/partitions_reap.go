package main

import (
	"context"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/protctl/protctl/internal/repair"
)

type partitionsReapOptions struct {
	Mutation *mutation

	Category string
	Keys     []string
	AllCold  bool
	MinIdle  time.Duration
	Force    bool
}

func newPartitionsReapCmd(f *Factory) *cobra.Command {
	opts := &partitionsReapOptions{}
	cmd := &cobra.Command{
		Use:   "reap CATEGORY [KEY...]",
		Short: "Retire cold partitions: remove them from the index and delete their streams, fenced",
		Long: `Reap cold partitions: remove each key from the category's index and delete its
streams (main and backfill lanes). The generation counters stay, so fencing
still holds if the key is published again.

A partition is reaped only when, on every lane, every consumer group has been
delivered every entry and has nothing pending, every registered group has
read it, a non-empty lane has at least one group, and the newest entry is at
least --min-idle old by the server's clock. The plan checks these and refuses
an item naming the lane, the group and why (lagging, pending, never read,
too young); applying re-checks them in one atomic script and reports a
conflict when something moved.

A group's lease that is held belongs to a live owner (even one with nothing
left to do), so, as with release, reaping its partition needs --force;
without it the plan shows the lease and refuses the item (exit 6). With
--force the apply reaps only while each group's lease still holds the
value the plan saw (a lease renewed under a new generation, taken by
another owner, or acquired since is a conflict, exit 5) and deletes those
lease keys with the lanes.

Give the keys, or --all-cold to consider every key of the index (only the
reapable ones become items).`,
		Example: `  protctl partitions reap shop::order o-1 o-2 --dry-run
  protctl partitions reap shop::order --all-cold --min-idle 24h --yes
  protctl partitions reap shop::order --all-cold --dry-run -o json > reap.json`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.Category, opts.Keys = args[0], args[1:]
			if len(opts.Keys) == 0 && !opts.AllCold {
				return usageError(fmt.Errorf("give the KEYs to reap, or --all-cold"))
			}
			if len(opts.Keys) > 0 && opts.AllCold {
				return usageError(fmt.Errorf("give either KEYs or --all-cold, not both"))
			}
			if opts.MinIdle < 0 {
				return usageError(fmt.Errorf("invalid --min-idle %s: want 0 or more", opts.MinIdle))
			}
			opts.Mutation = newMutation(f)
			return runPartitionsReap(cmd.Context(), opts)
		},
	}
	cmd.Flags().BoolVar(&opts.AllCold, "all-cold", false, "reap every partition of the category that is safe to reap")
	cmd.Flags().DurationVar(&opts.MinIdle, "min-idle", time.Hour, "minimum age of a partition's newest entry (server clock)")
	cmd.Flags().BoolVar(&opts.Force, "force", false, "reap a partition whose lease is held (its live owner loses the partition)")
	return cmd
}

func runPartitionsReap(ctx context.Context, opts *partitionsReapOptions) error {
	return runMutation(ctx, opts.Mutation, func(ctx context.Context, r *repair.Repairer) (*repair.Plan, error) {
		return r.PlanReap(ctx, repair.ReapRequest{
			Category: opts.Category, Keys: opts.Keys, AllCold: opts.AllCold, MinIdle: opts.MinIdle, Force: opts.Force,
		})
	})
}
