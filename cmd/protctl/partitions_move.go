package main

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/protctl/protctl/internal/repair"
	"github.com/protctl/protctl/pkg/runtime/placement"
)

// pinOptions are partitions move's and topics move's.
type pinOptions struct {
	Mutation *mutation

	Service string
	To      string
	Unpin   bool
	By      string

	// Redis: Category, Key, Group. Kafka: Topic, Partition.
	Category, Key, Group string
	Topic                string
	Partition            int32
}

func (o *pinOptions) validate(cmd *cobra.Command) error {
	switch {
	case o.Unpin && o.To != "":
		return usageError(fmt.Errorf("%s: --to and --unpin exclude each other", cmd.CommandPath()))
	case !o.Unpin && o.To == "":
		return usageError(fmt.Errorf("%s: --to NODE is required (or --unpin to remove the pin)", cmd.CommandPath()))
	}
	return nil
}

func newPartitionsMoveCmd(f *Factory) *cobra.Command {
	opts := &pinOptions{}
	cmd := &cobra.Command{
		Use:   "move CATEGORY KEY --group G --service S (--to NODE | --unpin)",
		Short: "Pin a partition to a named node (or remove its pin)",
		Long: `Pin partition KEY of subscription (consumer group) G to NODE of service S:
the owner hands it off at its next batch boundary (acks flushed, lease
released) and NODE takes it, within one lease renewal period. The pin is
stored in Redis (protctl:{S}:pins) and shown by 'partitions show' and
'nodes ls'; it overrides rendezvous hashing while NODE is a live member that
is neither cordoned nor draining. A pin to a node that dies falls back to
HRW (the pin stays, ignored, until NODE is back or the pin is removed).
--unpin removes it: ownership goes back to HRW.

A pin to a node that is not live, or is cordoned or draining, is refused
(exit 6). An unknown category, a key that is neither in the category's index
nor has a stream, or a group that never leased or read the partition exits 4
with nothing written (removing a stored pin needs none of them). If the pin
changed between the plan and the apply, nothing is written and the command
exits 5.`,
		Example: `  protctl partitions move shop::order o-1 --group projector --service shop --to node-2
  protctl partitions move shop::order o-1 --group projector --service shop --unpin
  protctl partitions move shop::order o-1 --group projector --service shop --to node-2 --dry-run -o json > move.json`,
		Args: categoryKeyArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.Category, opts.Key = args[0], args[1]
			if err := opts.validate(cmd); err != nil {
				return err
			}
			opts.By = f.operatorName()
			opts.Mutation = newMutation(f)
			return runPin(cmd.Context(), opts, repair.PinRequest{
				Unpin: opts.Unpin, Service: opts.Service, Scope: opts.Group, Partition: opts.Key, Node: opts.To,
				Category: opts.Category, Key: opts.Key, By: opts.By,
			})
		},
	}
	cmd.Flags().StringVar(&opts.Group, "group", "", "the consumer group (subscription) whose partition to move")
	addPinFlags(cmd, opts)
	_ = cmd.MarkFlagRequired("group")
	return cmd
}

func newTopicsMoveCmd(f *Factory) *cobra.Command {
	opts := &pinOptions{}
	cmd := &cobra.Command{
		Use:   "move TOPIC/PARTITION --service S (--to NODE | --unpin)",
		Short: "Pin a Kafka topic partition to a named node (or remove its pin)",
		Long: `Pin partition PARTITION of Kafka topic TOPIC, in service S's lease group
(protctl:{S|topic:TOPIC}), to NODE: the holder hands it off at its next
batch boundary (checkpoint saved, lease released) and NODE takes it, within
one lease renewal period. A topic's partition is leased once for every
subscription of the topic, so the pin moves all of them together. Pins are
shown by 'nodes ls' and removed with --unpin; a pin to a node that is not a
live, active member is ignored (HRW decides) and refused when planned
(exit 6). A pin changed since the plan exits 5.`,
		Example: `  protctl topics move orders/3 --service shop --to node-2
  protctl topics move orders/3 --service shop --unpin`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) != 1 {
				return fmt.Errorf("%s takes TOPIC/PARTITION, got %d arguments", cmd.CommandPath(), len(args))
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			i := strings.LastIndexByte(args[0], '/')
			if i <= 0 {
				return usageError(fmt.Errorf("%s: %q is not TOPIC/PARTITION", cmd.CommandPath(), args[0]))
			}
			p, err := strconv.ParseInt(args[0][i+1:], 10, 32)
			if err != nil || p < 0 {
				return usageError(fmt.Errorf("%s: partition %q of %q is not a partition number", cmd.CommandPath(), args[0][i+1:], args[0]))
			}
			opts.Topic, opts.Partition = args[0][:i], int32(p)
			if err := opts.validate(cmd); err != nil {
				return err
			}
			opts.By = f.operatorName()
			opts.Mutation = newMutation(f)
			return runPin(cmd.Context(), opts, repair.PinRequest{
				Unpin: opts.Unpin, Service: opts.Service, Scope: placement.TopicScope(opts.Topic),
				Partition: strconv.Itoa(int(opts.Partition)), Node: opts.To, By: opts.By,
			})
		},
	}
	addPinFlags(cmd, opts)
	return cmd
}

func addPinFlags(cmd *cobra.Command, opts *pinOptions) {
	cmd.Flags().StringVar(&opts.Service, "service", "", "the service whose nodes share the partition")
	cmd.Flags().StringVar(&opts.To, "to", "", "the node to pin the partition to")
	cmd.Flags().BoolVar(&opts.Unpin, "unpin", false, "remove the partition's pin: HRW decides again")
	_ = cmd.MarkFlagRequired("service")
}

func runPin(ctx context.Context, opts *pinOptions, req repair.PinRequest) error {
	return runMutation(ctx, opts.Mutation, func(ctx context.Context, r *repair.Repairer) (*repair.Plan, error) {
		return r.PlanPin(ctx, req)
	})
}
