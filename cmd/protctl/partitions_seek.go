package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/protctl/protctl/internal/repair"
)

type partitionsSeekOptions struct {
	Mutation *mutation

	Category string
	Keys     []string
	Group    string
	To       string
	Shift    int64
	Match    string
	Lane     string
	Force    bool
	RPS      int
	Wait     time.Duration
	By       string

	target repair.SeekTarget
}

func newPartitionsSeekCmd(f *Factory) *cobra.Command {
	opts := &partitionsSeekOptions{}
	cmd := &cobra.Command{
		Use:   "seek CATEGORY [KEY...] --group G (--to ID|TIME|DURATION-ago|earliest|latest | --shift N)",
		Short: "Move a group's position on partitions (replay or skip), fenced, online on protctl nodes",
		Long: `Move consumer group G on partitions of CATEGORY (all, the KEYs given, or those
matching --match) to a new position: the entries after it are handed to G again
(a rewind: "replay since the bad deploy"), or those up to it are skipped (a
forward seek).

--to takes a stream id (1700000000000-0), an RFC 3339 time (entries from that
time on are handled again), a duration ago (15m-ago), earliest (everything
again) or latest (the newest entry the plan sees); --shift N moves N entries
forward (N > 0) or back (N < 0) from each lane's position.

The plan says per partition the group's position and the new one on each lane,
how many entries will be handled again or skipped, the group's pending entries
and how they are settled, and the lease it saw:

  no lease       the seek is one step, applied only while the partition stays
                 free at the generation the plan saw (exit 5 if a lease appeared);
  protctl node   the node carries the seek out itself between two batches under
                 its lease, so it keeps running and never handles a key twice at
                 once; apply waits for it (--wait) and says when it was done;
  foreign owner  (a Protean worker) refused (exit 6) unless --force, which
                 deletes its lease and seeks in one step, only while the
                 lease still holds the value seen (exit 5, lease kept, if not).

A partition parked in the failure ledger is refused (exit 6): parked retry or
skip it first, or --force to seek anyway and leave its ledger entry as it is.

Pending entries are settled so that nothing is handled twice at once: those
after a rewind's target are acked and handed again once, in order; those at or
before it stay pending and are handled first; a forward seek acks (skips) them.
The direction is the plan's: a node that read past a forward target meanwhile
stays where it is (nothing is handed back), and a rewind never skips.
The backfill lane is sought with the main lane (--lane all) unless --lane main
excludes it.`,
		Example: `  protctl partitions seek shop::order --group app.OrderProjector --to 2026-12-02T14:05:00Z --dry-run
  protctl partitions seek shop::order o-1 o-2 --group app.OrderProjector --to 30m-ago --yes
  protctl partitions seek shop::order --match 'o-1*' --group G --shift -10 --lane main
  protctl partitions seek shop::order --group G --to latest --dry-run -o json > seek.json && protctl apply -f seek.json`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) < 1 {
				return fmt.Errorf("%s takes CATEGORY [KEY...], got no arguments", cmd.CommandPath())
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.Category, opts.Keys = args[0], args[1:]
			toSet, shiftSet := cmd.Flags().Changed("to"), cmd.Flags().Changed("shift")
			switch {
			case toSet == shiftSet:
				return usageError(fmt.Errorf("give exactly one of --to and --shift"))
			case opts.RPS < 0:
				return usageError(fmt.Errorf("invalid --rps %d: want 0 (no pacing) or more", opts.RPS))
			case opts.Wait <= 0:
				return usageError(fmt.Errorf("invalid --wait %s: want a positive duration", opts.Wait))
			case opts.Lane != repair.LaneMain && opts.Lane != repair.LaneBackfill && opts.Lane != repair.LaneAll:
				return usageError(fmt.Errorf("invalid --lane %q: want main, backfill or all", opts.Lane))
			case len(opts.Keys) > 0 && opts.Match != "":
				return usageError(fmt.Errorf("give KEYs or --match, not both"))
			case shiftSet && opts.Shift == 0:
				return usageError(fmt.Errorf("invalid --shift 0: want a number of entries, negative to go back"))
			}
			if toSet {
				t, err := repair.ParseSeekTo(opts.To, f.Now())
				if err != nil {
					return usageError(fmt.Errorf("invalid --to: %w", err))
				}
				opts.target = t
			} else {
				opts.target = repair.SeekTarget{Kind: repair.SeekShift, Shift: opts.Shift}
			}
			opts.By = f.operatorName()
			opts.Mutation = newMutation(f)
			if opts.RPS > 0 {
				opts.Mutation.ApplyOptions.Interval = time.Second / time.Duration(opts.RPS)
			}
			opts.Mutation.ApplyOptions.SeekWait = opts.Wait
			return runPartitionsSeek(cmd.Context(), opts)
		},
	}
	cmd.Flags().StringVar(&opts.Group, "group", "", "the consumer group (subscription) to move")
	cmd.Flags().StringVar(&opts.To, "to", "", "the target: a stream id, an RFC 3339 time, DURATION-ago, earliest or latest")
	cmd.Flags().Int64Var(&opts.Shift, "shift", 0, "move N entries forward, or back when negative, from each lane's position")
	cmd.Flags().StringVar(&opts.Match, "match", "", "seek only the index's keys matching this glob")
	cmd.Flags().StringVar(&opts.Lane, "lane", repair.LaneAll, "the lanes to seek: main, backfill or all")
	cmd.Flags().BoolVar(&opts.Force, "force", false, "seek partitions a foreign (non-protctl) worker holds: release its lease first")
	cmd.Flags().IntVar(&opts.RPS, "rps", 0, "seek at most N partitions per second; 0 for no pacing")
	cmd.Flags().DurationVar(&opts.Wait, "wait", 30*time.Second, "how long to wait for a protctl node to carry out a seek of a partition it owns")
	_ = cmd.MarkFlagRequired("group")
	return cmd
}

func runPartitionsSeek(ctx context.Context, opts *partitionsSeekOptions) error {
	return runMutation(ctx, opts.Mutation, func(ctx context.Context, r *repair.Repairer) (*repair.Plan, error) {
		p, err := r.PlanSeek(ctx, repair.SeekRequest{
			Category: opts.Category, Keys: opts.Keys, Match: opts.Match, Group: opts.Group,
			Target: opts.target, Lane: opts.Lane, Force: opts.Force, By: opts.By,
		})
		if errors.Is(err, repair.ErrBadSeekTarget) {
			// An id in the future, which only the server's clock tells.
			return nil, usageError(fmt.Errorf("invalid --to: %w", err))
		}
		return p, err
	})
}
