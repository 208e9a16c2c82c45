package main

import (
	"context"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/protctl/protctl/internal/inspect"
	"github.com/protctl/protctl/internal/output"
	"github.com/protctl/protctl/internal/repair"
)

// dlqChangeOptions are the options of dlq replay and purge.
type dlqChangeOptions struct {
	Mutation *mutation
	IO       *output.IOStreams

	Action   repair.Action
	Category string
	Filter   dlqFilter
	RPS      int

	query inspect.DeadLetterQuery
}

func (opts *dlqChangeOptions) parse(f *Factory, args []string) error {
	opts.Category = args[0]
	q, err := opts.Filter.query(opts.Category)
	if err != nil {
		return err
	}
	if opts.RPS < 0 {
		return usageError(fmt.Errorf("invalid --rps %d: want 0 (no pacing) or more", opts.RPS))
	}
	opts.query = q
	opts.Mutation = newMutation(f)
	if opts.RPS > 0 {
		opts.Mutation.ApplyOptions.Interval = time.Second / time.Duration(opts.RPS)
	}
	return nil
}

func newDLQReplayCmd(f *Factory) *cobra.Command {
	opts := &dlqChangeOptions{IO: f.IOStreams, Action: repair.ActionDLQReplay}
	cmd := &cobra.Command{
		Use:   "replay CATEGORY",
		Short: "Append dead letters back to their partitions (after the entries there), fenced on each entry",
		Long: `Append the dead letters of CATEGORY that the filters select back to their
partitions, for the running nodes (or Protean) to handle again: a dead
letter of C:K:dlq goes to the end of C:K; one of Protean's C:dlq goes back to
the stream it records as its origin (a partition of C, or C itself for an
unpartitioned subscription). The replayed entry is the original, with
_replayed_from naming the dead-letter stream and id, and the key is recorded
in the category's index as a publish does.

A replayed entry lands after everything already in the partition: the key
sees it after the newer entries, not at its old place, and the replayed ones
in the plan's order (each partition's oldest dead letter first). The plan
says so per item, with the partition's newest entry now.

Each dead letter is appended and deleted in one atomic step, only while it
is still the entry the plan saw: one changed since is a conflict (exit 5),
and one already replayed by an earlier apply is reported done ("already
replayed, as ID") and not replayed again (resuming a plan file is safe). A dead
letter whose body was gone is refused: purge it.`,
		Example: `  protctl dlq replay shop::order --key o-1 --dry-run
  protctl dlq replay shop::order --reason 'amount must be positive' --dry-run -o json > replay.json
  protctl apply -f replay.json --yes
  protctl dlq replay shop::order --rps 50 --yes`,
	}
	return opts.finish(f, cmd, "replay")
}

// finish gives a dlq replay or purge command its arguments, run function
// and flags (verb names what --rps paces).
func (opts *dlqChangeOptions) finish(f *Factory, cmd *cobra.Command, verb string) *cobra.Command {
	cmd.Args = cobra.ExactArgs(1)
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		if err := opts.parse(f, args); err != nil {
			return err
		}
		return runDLQChange(cmd.Context(), opts)
	}
	opts.Filter.addFlags(cmd)
	cmd.Flags().IntVar(&opts.RPS, "rps", 0, verb+" at most N dead letters per second; 0 for no pacing")
	return cmd
}

func runDLQChange(ctx context.Context, opts *dlqChangeOptions) error {
	return runMutation(ctx, opts.Mutation, func(ctx context.Context, r *repair.Repairer) (*repair.Plan, error) {
		prog := opts.IO.NewProgress("scanning " + opts.Category + ":*dlq")
		defer prog.Done()
		q := opts.query
		q.Scan.Progress = func(p inspect.ScanProgress) {
			prog.Update("%d keys scanned, %d dead-letter streams", p.Scanned, p.Found)
		}
		p, err := r.PlanDLQ(ctx, repair.DLQRequest{Action: opts.Action, Query: q})
		if err != nil {
			return nil, dlqErr(err)
		}
		return p, nil
	})
}
