package main

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/protctl/protctl/internal/repair"
)

type pauseOptions struct {
	Mutation *mutation

	Subscription string
	Service      string
	Topic        string
	Keys         []string
	Match        []string
	All          bool
	Reason       string
	By           string
	Resume       bool
}

func newPauseCmd(f *Factory) *cobra.Command {
	return newPauseResumeCmd(f, false)
}

func newResumeCmd(f *Factory) *cobra.Command {
	return newPauseResumeCmd(f, true)
}

// newPauseResumeCmd builds `pause` and `resume`: the same selection, the
// opposite change (docs/decisions/0045-pause.md).
func newPauseResumeCmd(f *Factory, resume bool) *cobra.Command {
	opts := &pauseOptions{Resume: resume}
	cmd := &cobra.Command{
		Use:   "pause SUBSCRIPTION [KEY...] [--match PATTERN]... [--all] [--reason TEXT]",
		Short: "Hold back one key, the keys a pattern matches, or a whole subscription",
		Long: `Pause work of a Redis partitioned subscription (its consumer group): the
owner of a paused partition finishes the batch in flight, acks it and stops
reading; it keeps the lease, so no other node takes the partition. New
entries keep arriving and the lag keeps counting; the partition shows as
PAUSED in partitions ls/show and check. The rest of the subscription flows.

With --service S --topic T, pause aggregates of a Kafka topic subscription
(entries in protctl:pauses:{S|topic:T/SUBSCRIPTION}): the owner of each
partition holds a paused aggregate's records (not handled, the checkpoint
stays at the first held one) while the other aggregates flow; when held
records fill the partition's in-flight window the partition is throttled.
--all stops handling the subscription (its fetching too, once the window
is full).

A pause is state in Redis (protctl:pauses:{/SUBSCRIPTION}), not in a node:
a partition's next owner, after a failover or a restart, reads it before
its first read. Nodes see a change at once (Pub/Sub) or at their next lease
renewal at the latest.

Select with partition keys, --match PATTERN (path.Match syntax: *, ?, [a-z];
it holds back keys that appear later too) or --all. Each selector is one
item; resume removes exactly the selectors it is given. Pausing what the
same selector already pauses has nothing to do (skipped, exit 0). The apply
records each entry only if it is still as the plan saw it (else exit 5).`,
		Example: `  protctl pause app.OrderProjector o-1 --reason "downstream rejects o-1"
  protctl pause app.OrderProjector --match 'eu-*' --reason "EU billing outage" --yes
  protctl pause app.OrderProjector --all --dry-run -o json > pause.json
  protctl apply -f pause.json --yes
  protctl pause ledger-sync o-1 --service shop --topic orders --reason "bad o-1 records"`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.Subscription, opts.Keys = args[0], args[1:]
			if len(opts.Keys) == 0 && len(opts.Match) == 0 && !opts.All {
				return usageError(fmt.Errorf("nothing selected: name partition keys, --match PATTERN or --all"))
			}
			opts.Mutation = newMutation(f)
			opts.By = f.operatorName()
			return runPause(cmd.Context(), opts)
		},
	}
	if resume {
		cmd.Use = "resume SUBSCRIPTION [KEY...] [--match PATTERN]... [--all]"
		cmd.Short = "Lift pauses: paused keys go on from where they stopped, in order"
		cmd.Long = `Remove pause entries of a subscription (see protctl pause): each selector
given (a key, --match PATTERN, --all) removes the entry made with exactly
that selector, if it is still as the plan saw it (else exit 5). The owner of
each partition it held goes on at once (Pub/Sub) or at its next lease
renewal, from where it stopped, in order.

Resuming a selector that is not paused has nothing to do: the item is
skipped and the command exits 0, so a repeated resume converges. A key that
stays paused by another entry (a pattern, --all) is named in the item's
reason.`
		cmd.Example = `  protctl resume app.OrderProjector o-1
  protctl resume app.OrderProjector --match 'eu-*' --yes
  protctl resume app.OrderProjector --all --dry-run -o json
  protctl resume ledger-sync o-1 --service shop --topic orders`
	} else {
		cmd.Flags().StringVar(&opts.Reason, "reason", "", "why, recorded with the pause and shown in partitions show")
	}
	cmd.Flags().StringArrayVar(&opts.Match, "match", nil, "a glob pattern of partition keys (path.Match syntax; repeatable)")
	cmd.Flags().BoolVar(&opts.All, "all", false, "the whole subscription")
	cmd.Flags().StringVar(&opts.Service, "service", "", "a Kafka topic subscription's service (with --topic)")
	cmd.Flags().StringVar(&opts.Topic, "topic", "", "a Kafka topic subscription's topic (with --service); KEYs are aggregates")
	return cmd
}

func runPause(ctx context.Context, opts *pauseOptions) error {
	return runMutation(ctx, opts.Mutation, func(ctx context.Context, r *repair.Repairer) (*repair.Plan, error) {
		return r.PlanPause(ctx, repair.PauseRequest{
			Subscription: opts.Subscription, Service: opts.Service, Topic: opts.Topic, Keys: opts.Keys, Globs: opts.Match, All: opts.All,
			Resume: opts.Resume, Reason: opts.Reason, By: opts.By,
		})
	})
}
