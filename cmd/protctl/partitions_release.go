package main

import (
	"context"

	"github.com/spf13/cobra"

	"github.com/protctl/protctl/internal/repair"
)

type partitionsReleaseOptions struct {
	Mutation *mutation

	Category string
	Key      string
	Group    string
	Force    bool
}

func newPartitionsReleaseCmd(f *Factory) *cobra.Command {
	opts := &partitionsReleaseOptions{}
	cmd := &cobra.Command{
		Use:   "release CATEGORY KEY --group G",
		Short: "Release a group's lease on a partition as operator, fenced on the observed token",
		Long: `Release the lease of consumer group G on partition KEY: delete G:KEY:__lease__
only if it still holds the value (owner:generation) the plan saw. The owner
then loses the partition at its next fenced call, and any node (the same
Protean instance included) can acquire it again with a new generation.

A lease that is held belongs to a live owner, so releasing it needs --force;
without it the plan refuses (exit 6). A free lease has nothing to release
(skipped, exit 0). If the lease changed between the plan and the apply (it
expired, was renewed under a new generation, or was taken by another
owner) nothing is deleted and the item is a conflict (exit 5).

The lease key names the group and the key, not the category, so CATEGORY,
KEY and G are checked first, as every partition command does: an unknown
category, a key that is neither in the category's index nor has a stream,
or a group that never leased or read the partition exits 4 with nothing
changed. An apply checks them again: one gone since the plan is a conflict.`,
		Example: `  protctl partitions release shop::order o-1 --group app.OrderProjector --force
  protctl partitions release shop::order o-1 --group app.OrderProjector --dry-run -o json > release.json`,
		Args: categoryKeyArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.Category, opts.Key = args[0], args[1]
			opts.Mutation = newMutation(f)
			return runPartitionsRelease(cmd.Context(), opts)
		},
	}
	cmd.Flags().StringVar(&opts.Group, "group", "", "the consumer group (subscription) whose lease to release")
	cmd.Flags().BoolVar(&opts.Force, "force", false, "release a lease that is held (its live owner loses the partition)")
	_ = cmd.MarkFlagRequired("group")
	return cmd
}

func runPartitionsRelease(ctx context.Context, opts *partitionsReleaseOptions) error {
	return runMutation(ctx, opts.Mutation, func(ctx context.Context, r *repair.Repairer) (*repair.Plan, error) {
		return r.PlanRelease(ctx, repair.ReleaseRequest{
			Category: opts.Category, Group: opts.Group, Key: opts.Key, Force: opts.Force,
		})
	})
}
