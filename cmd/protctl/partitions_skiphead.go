package main

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/protctl/protctl/internal/repair"
	"github.com/protctl/protctl/pkg/broker"
)

type partitionsSkipHeadOptions struct {
	Mutation *mutation

	Category      string
	Key           string
	Group         string
	ID            string
	Reason        string
	MinDeliveries int64
	Force         bool
}

func newPartitionsSkipHeadCmd(f *Factory) *cobra.Command {
	opts := &partitionsSkipHeadOptions{}
	cmd := &cobra.Command{
		Use:     "skip-head CATEGORY KEY --group G",
		Aliases: []string{"dead-letter"},
		Short:   "Dead-letter a group's pending head: copy it to C:K:dlq and ack it, fenced on the lease",
		Long: `Move the entry a consumer group is stuck on (its oldest pending entry, or --id)
to the partition's dead-letter stream C:K:dlq and acknowledge it, in one
atomic step fenced on the lease the plan saw. This is how a Protean
partition halted on a poison message is unstuck: Protean (v0.17) delivers
the head 3 times, then halts the partition while it keeps renewing the
lease, so the head never moves on by itself; and Protean has no failure
ledger entry for it, so "parked skip" does not apply.

When the plan saw the lease held (the instance stuck on the head), the step
runs only if the lease still holds that value; when it saw no lease, protctl
takes a short operator lease for the step, so no owner starts on the
partition meanwhile, and takes it only while the lease is still free at the
generation the plan saw (one atomic step). Either way, a lease that moved
between plan and apply is a conflict (exit 5) and nothing changes, the
generation counter included.

The plan refuses an entry delivered fewer than --min-deliveries times (its
owner may be handling it right now) unless --force is given. Afterwards,
release the lease so the owner drops the partition and re-acquires it from
the next entry: protctl partitions release CATEGORY KEY --group G --force.`,
		Example: `  protctl partitions show shop::order o-1
  protctl partitions skip-head shop::order o-1 --group app.OrderProjector --reason "poison: bad amount"
  protctl partitions skip-head shop::order o-1 --group app.OrderProjector --dry-run -o json > skip.json`,
		Args: categoryKeyArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.Category, opts.Key = args[0], args[1]
			if opts.MinDeliveries < 1 {
				return usageError(fmt.Errorf("invalid --min-deliveries %d: want 1 or more", opts.MinDeliveries))
			}
			if opts.ID != "" {
				if _, err := broker.ParseStreamID(opts.ID); err != nil {
					return usageError(fmt.Errorf("invalid --id %q: want a stream id <ms>-<seq>", opts.ID))
				}
			}
			opts.Mutation = newMutation(f)
			return runPartitionsSkipHead(cmd.Context(), opts)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&opts.Group, "group", "", "the consumer group (subscription) stuck on the head")
	fl.StringVar(&opts.ID, "id", "", "the pending entry to dead-letter, a stream id <ms>-<seq> (default: the group's oldest pending entry)")
	fl.StringVar(&opts.Reason, "reason", "", "why, recorded with the dead-letter entry")
	fl.Int64Var(&opts.MinDeliveries, "min-deliveries", 2, "refuse an entry delivered fewer times than this, unless --force")
	fl.BoolVar(&opts.Force, "force", false, "dead-letter an entry delivered fewer than --min-deliveries times")
	_ = cmd.MarkFlagRequired("group")
	return cmd
}

func runPartitionsSkipHead(ctx context.Context, opts *partitionsSkipHeadOptions) error {
	return runMutation(ctx, opts.Mutation, func(ctx context.Context, r *repair.Repairer) (*repair.Plan, error) {
		return r.PlanDeadLetter(ctx, repair.DeadLetterRequest{
			Category: opts.Category, Key: opts.Key, Group: opts.Group, ID: opts.ID,
			Reason: opts.Reason, MinDeliveries: opts.MinDeliveries, Force: opts.Force,
		})
	})
}
