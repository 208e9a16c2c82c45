package main

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/protctl/protctl/internal/repair"
)

// nodesModeOptions are nodes cordon, drain and uncordon's.
type nodesModeOptions struct {
	Mutation *mutation

	Action  repair.Action
	Service string
	Node    string
	Reason  string
	By      string
}

func newNodesCordonCmd(f *Factory) *cobra.Command {
	return newNodesModeCmd(f, repair.ActionCordon, "Stop a node from taking new partitions; it keeps those it holds",
		`Cordon NODE of service S: it takes no new partitions. The partitions it
holds a lease on stay with it until they go idle (Redis) or until the
membership next moves them; everything else HRW would have given it goes to
the other nodes. The mode is stored in Redis (protctl:{S}:modes), so it
survives the node's restart until 'nodes uncordon'. Nodes notice at once
through Pub/Sub, and at the latest at their next heartbeat.

A node that is neither live nor has a mode stored exits 4 (a typo); a node
already cordoned is skipped (exit 0). If the node's mode changed between the
plan and the apply, nothing is written and the command exits 5.`,
		`  protctl nodes cordon node-1 --service shop --reason "kernel upgrade"
  protctl nodes cordon node-1 --service shop --dry-run -o json > cordon.json`)
}

func newNodesDrainCmd(f *Factory) *cobra.Command {
	return newNodesModeCmd(f, repair.ActionDrain, "Move every partition off a node without stopping it",
		`Drain NODE of service S: it hands every partition off at its next batch
boundary (the messages in flight finish, acks are flushed, Kafka checkpoints
saved, and the lease is released so that the next node HRW picks takes the
partition at once), takes none, and keeps running, ready to be stopped.
'nodes ls' shows it draining, then drained once it holds nothing. The mode
is stored in Redis and survives the node's restart until 'nodes uncordon'.
Redis partitioned and Kafka topic subscriptions both follow it.

A node that is neither live nor has a mode stored exits 4; one already
draining is skipped (exit 0); a mode changed since the plan exits 5.`,
		`  protctl nodes drain node-1 --service shop --yes
  protctl nodes ls --service shop -w          # watch it become drained
  protctl nodes drain node-1 --service shop --dry-run -o json > drain.json && protctl apply -f drain.json`)
}

func newNodesUncordonCmd(f *Factory) *cobra.Command {
	return newNodesModeCmd(f, repair.ActionUncordon, "Let a cordoned or drained node take partitions again",
		`Uncordon NODE of service S: delete its stored mode; it takes its HRW share
of partitions again. A node with no mode stored is skipped (exit 0), and one
that is neither live nor has a mode stored exits 4. A mode changed since the
plan exits 5.`,
		`  protctl nodes uncordon node-1 --service shop --yes`)
}

func newNodesModeCmd(f *Factory, action repair.Action, short, long, example string) *cobra.Command {
	opts := &nodesModeOptions{Action: action}
	cmd := &cobra.Command{
		Use:     string(action) + " NODE --service S",
		Short:   short,
		Long:    long,
		Example: example,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) != 1 {
				return fmt.Errorf("%s takes NODE, got %d arguments", cmd.CommandPath(), len(args))
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.Node = args[0]
			opts.By = f.operatorName()
			opts.Mutation = newMutation(f)
			return runNodesMode(cmd.Context(), opts)
		},
	}
	cmd.Flags().StringVar(&opts.Service, "service", "", "the service the node belongs to")
	if action != repair.ActionUncordon {
		cmd.Flags().StringVar(&opts.Reason, "reason", "", "why, recorded with the mode")
	}
	_ = cmd.MarkFlagRequired("service")
	return cmd
}

func runNodesMode(ctx context.Context, opts *nodesModeOptions) error {
	return runMutation(ctx, opts.Mutation, func(ctx context.Context, r *repair.Repairer) (*repair.Plan, error) {
		return r.PlanNodeMode(ctx, repair.NodeModeRequest{
			Action: opts.Action, Service: opts.Service, Node: opts.Node, Reason: opts.Reason, By: opts.By,
		})
	})
}
