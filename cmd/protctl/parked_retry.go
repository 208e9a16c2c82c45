package main

import (
	"context"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/protctl/protctl/internal/repair"
)

// parkedRequestOptions are the options of parked retry and skip.
type parkedRequestOptions struct {
	Mutation *mutation
	By       string

	Action       repair.Action
	Subscription string
	Aggregate    string
	Partition    string
	All          bool
	RPS          int
	Max          int
	Reason       string
}

// parkedTargetArgs validates SUBSCRIPTION AGGREGATE | --all and fills
// opts.
func (opts *parkedRequestOptions) parseArgs(cmd *cobra.Command, args []string) error {
	switch {
	case opts.All && len(args) > 0:
		return usageError(fmt.Errorf("give either SUBSCRIPTION AGGREGATE or --all (with --subscription to narrow it), not both"))
	case !opts.All && len(args) != 2:
		return usageError(fmt.Errorf("%s takes SUBSCRIPTION AGGREGATE, or --all", cmd.CommandPath()))
	case !opts.All && cmd.Flags().Changed("subscription"):
		return usageError(fmt.Errorf("--subscription narrows --all; with SUBSCRIPTION AGGREGATE it is not needed"))
	case opts.RPS < 0:
		return usageError(fmt.Errorf("invalid --rps %d: want 0 (no pacing) or more", opts.RPS))
	case opts.Max < 0:
		return usageError(fmt.Errorf("invalid --max %d: want 0 (no cap) or more", opts.Max))
	}
	if !opts.All {
		opts.Subscription, opts.Aggregate = args[0], args[1]
	}
	return nil
}

func (opts *parkedRequestOptions) addFlags(cmd *cobra.Command) {
	fl := cmd.Flags()
	fl.BoolVar(&opts.All, "all", false, "every parked entry (of --subscription, if given)")
	fl.StringVar(&opts.Partition, "partition", "", "the entry of AGGREGATE on this partition (a Kafka aggregate parked on several); with --all, only this partition's entries")
	fl.StringVar(&opts.Subscription, "subscription", "", "with --all: only this subscription's entries")
	fl.IntVar(&opts.Max, "max", 0, "with --all: at most N entries; 0 for no cap")
	fl.IntVar(&opts.RPS, "rps", 0, "record at most N requests per second; 0 for no pacing")
}

func newParkedRetryCmd(f *Factory) *cobra.Command {
	opts := &parkedRequestOptions{Action: repair.ActionRetry}
	cmd := &cobra.Command{
		Use:   "retry SUBSCRIPTION AGGREGATE | --all",
		Short: "Ask the owner to handle parked aggregates again from their parked position",
		Long: `Record a retry request on parked entries of the failure ledger. The node that
owns the partition handles the aggregate again from its parked position,
under its own fence, now or when a node next owns it. An entry whose records
the source no longer retains (unrecoverable) cannot be retried: skip it.

The plan records each entry's status and position; an entry resolved or
re-parked at another position since the plan is a conflict (exit 5).`,
		Example: `  protctl parked retry app.OrderProjector o-1
  protctl parked retry --all --subscription ledger-sync --rps 10 --max 100 --yes`,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := opts.parseArgs(cmd, args); err != nil {
				return err
			}
			opts.Mutation = newMutation(f)
			opts.By = f.operatorName()
			return runParkedRequest(cmd.Context(), opts)
		},
	}
	opts.addFlags(cmd)
	return cmd
}

func runParkedRequest(ctx context.Context, opts *parkedRequestOptions) error {
	if opts.RPS > 0 {
		opts.Mutation.ApplyOptions.Interval = time.Second / time.Duration(opts.RPS)
	}
	return runMutation(ctx, opts.Mutation, func(ctx context.Context, r *repair.Repairer) (*repair.Plan, error) {
		p, err := r.PlanParked(ctx, repair.ParkedRequest{
			Action:       opts.Action,
			Subscription: opts.Subscription,
			Aggregate:    opts.Aggregate,
			Partition:    opts.Partition,
			All:          opts.All,
			Max:          opts.Max,
			Reason:       opts.Reason,
			By:           opts.By,
		})
		if err == nil && len(p.Items) == 0 && opts.All && opts.Subscription != "" {
			// Nothing to plan: a subscription with nothing parked, or a typo.
			err = requireSubscription(ctx, r.Inspector(), opts.Subscription)
		}
		return p, err
	})
}
