package main

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/protctl/protctl/internal/repair"
)

func newStreamsCmd(f *Factory) *cobra.Command {
	cmd := &cobra.Command{
		Use:     "streams",
		Aliases: []string{"stream"},
		Short:   "Maintain streams: safe trims that never remove what a group still needs",
		Example: `  protctl streams trim shop::order:o-1 --maxlen 1000 --dry-run`,
	}
	cmd.AddCommand(newStreamsTrimCmd(f))
	return cmd
}

type streamsTrimOptions struct {
	Mutation *mutation

	Stream string
	MaxLen int64
}

func newStreamsTrimCmd(f *Factory) *cobra.Command {
	opts := &streamsTrimOptions{}
	cmd := &cobra.Command{
		Use:   "trim STREAM --maxlen N",
		Short: "Trim a stream to at most N entries, never below what any consumer group still needs",
		Long: `Trim STREAM, keeping its newest --maxlen entries and every entry a consumer
group still needs: the floor is the oldest entry some group has not been
delivered, or has been delivered and not acked (its oldest pending entry).
Registered groups that have not read the stream yet pin it at its start.

The plan shows the floor, the group that pins it, and how many entries would
go now. Applying recomputes the floor and trims in one atomic script, so it
never removes an unacked entry or one a group has not read, whatever moved
since the plan; a group created or deleted since the plan is a conflict.`,
		Example: `  protctl streams trim billing::payment:p-1 --maxlen 1000 --dry-run
  protctl streams trim billing::payment:p-1 --maxlen 1000 --yes`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.Stream = args[0]
			if opts.MaxLen <= 0 {
				return usageError(fmt.Errorf("invalid --maxlen %d: want more than 0", opts.MaxLen))
			}
			opts.Mutation = newMutation(f)
			return runStreamsTrim(cmd.Context(), opts)
		},
	}
	cmd.Flags().Int64Var(&opts.MaxLen, "maxlen", 0, "keep at most N entries (more when a group needs them)")
	_ = cmd.MarkFlagRequired("maxlen")
	return cmd
}

func runStreamsTrim(ctx context.Context, opts *streamsTrimOptions) error {
	return runMutation(ctx, opts.Mutation, func(ctx context.Context, r *repair.Repairer) (*repair.Plan, error) {
		return r.PlanTrim(ctx, repair.TrimRequest{Stream: opts.Stream, MaxLen: opts.MaxLen})
	})
}
