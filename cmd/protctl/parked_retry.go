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
	filter       parkedFilterFlags
	RPS          int
	Max          int
	Reason       string
}

// parseArgs validates SUBSCRIPTION AGGREGATE | --all | filters and fills
// opts. Any filter flag selects in bulk, as --all narrowed by it does.
func (opts *parkedRequestOptions) parseArgs(cmd *cobra.Command, args []string) error {
	filtered := opts.filter.set(cmd)
	bulk := opts.All || filtered
	switch {
	case bulk && len(args) > 0:
		return usageError(fmt.Errorf("give either SUBSCRIPTION AGGREGATE or a bulk selection (--all, the filters, --subscription to narrow them), not both"))
	case !bulk && len(args) != 2:
		return usageError(fmt.Errorf("%s takes SUBSCRIPTION AGGREGATE, or --all or a filter (--error, --error-class, --older-than, --newer-than, --key, --position)", cmd.CommandPath()))
	case !bulk && cmd.Flags().Changed("subscription"):
		return usageError(fmt.Errorf("--subscription narrows --all and the filters; with SUBSCRIPTION AGGREGATE it is not needed"))
	case !bulk && cmd.Flags().Changed("max"):
		return usageError(fmt.Errorf("--max caps a bulk selection (--all or a filter); SUBSCRIPTION AGGREGATE names one entry"))
	case opts.RPS < 0:
		return usageError(fmt.Errorf("invalid --rps %d: want 0 (no pacing) or more", opts.RPS))
	case opts.Max < 0:
		return usageError(fmt.Errorf("invalid --max %d: want 0 (no cap) or more", opts.Max))
	}
	opts.All = bulk
	if !bulk {
		opts.Subscription, opts.Aggregate = args[0], args[1]
		return nil
	}
	opts.filter.spec.Subscription, opts.filter.spec.Partition = opts.Subscription, opts.Partition
	_, err := opts.filter.compile()
	return err
}

func (opts *parkedRequestOptions) addFlags(cmd *cobra.Command) {
	fl := cmd.Flags()
	fl.BoolVar(&opts.All, "all", false, "every parked entry (of --subscription, if given); the filters narrow it")
	fl.StringVar(&opts.Partition, "partition", "", "the entry of AGGREGATE on this partition (a Kafka aggregate parked on several); in bulk, only this partition's entries")
	fl.StringVar(&opts.Subscription, "subscription", "", "in bulk: only this subscription's entries (exit 4 if Redis has no trace of it: never parked, no consumer group, no Kafka checkpoint)")
	opts.filter.add(cmd)
	fl.IntVar(&opts.Max, "max", 0, "in bulk: plan at most N entries, the oldest; 0 for no cap")
	fl.IntVar(&opts.RPS, "rps", 0, "record at most N requests per second; 0 for no pacing")
}

func newParkedRetryCmd(f *Factory) *cobra.Command {
	opts := &parkedRequestOptions{Action: repair.ActionRetry}
	cmd := &cobra.Command{
		Use:   "retry SUBSCRIPTION AGGREGATE | --all | FILTERS",
		Short: "Ask the owner to handle parked aggregates again from their parked position",
		Long: `Record a retry request on parked entries of the failure ledger. The node that
owns the partition handles the aggregate again from its parked position,
under its own fence, now or when a node next owns it. An entry whose records
the source no longer retains (unrecoverable) cannot be retried: skip it.

Name one entry, or select in bulk with --all and the filters (any filter
selects in bulk): --subscription, --partition, --error REGEXP, --error-class
CLASS, --older-than and --newer-than DURATION, --key GLOB, --position
FROM..TO. The plan pins exactly the entries that match when it is made, each
with the state it saw, and says how many first (selection.count): entries
parked later are not in it. --max caps the set (the oldest first), --rps
paces the requests.

Each request is recorded only while its entry is as the plan saw it
(status, position, attempts, generation, pending request); one that moved
is a conflict (exit 5, or 7 when others applied). A plan saved with
--dry-run -o json and applied with apply -f can be applied again after an
interruption: entries its earlier run requested are "done", and only the
rest are requested, never one twice.`,
		Example: `  protctl parked retry app.OrderProjector o-1
  protctl parked retry --all --subscription ledger-sync --rps 10 --max 100 --yes
  protctl parked retry --subscription ledger-sync --error-class 'http POST http://billing' --older-than 5m --dry-run -o json > retry.json
  protctl apply -f retry.json --rps 20 --yes`,
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
			Filter:       opts.filter.spec,
			Max:          opts.Max,
			Reason:       opts.Reason,
			By:           opts.By,
		})
		// A --subscription that selects nothing and left no trace is
		// PlanParked's *repair.UnknownSubscriptionError (exit 4); a known
		// one is an empty plan, as parked ls lists it empty.
		return p, filterErr(err)
	})
}
