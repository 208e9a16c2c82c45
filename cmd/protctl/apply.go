package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/protctl/protctl/internal/clierr"
	"github.com/protctl/protctl/internal/repair"
	"github.com/protctl/protctl/pkg/broker"
)

type applyOptions struct {
	Mutation *mutation
	Layout   func() (broker.Layout, error)
	Stdin    io.Reader

	File string
	RPS  int
	Max  int
}

func newApplyCmd(f *Factory) *cobra.Command {
	opts := &applyOptions{Layout: f.Layout, Stdin: f.IOStreams.In}
	cmd := &cobra.Command{
		Use:   "apply -f PLAN",
		Short: "Apply a saved plan (any mutator's --dry-run -o json), re-checking every item",
		Long: `Apply a plan saved by a mutator's --dry-run -o json (reap, release, skip-head,
trim, prune-consumers, parked retry and skip, dlq replay and purge). Every item is applied only if the state it
recorded still holds, checked atomically in Redis: an item whose lease,
generation, entries or group positions moved since the plan is not applied
and reported as a conflict. Items the plan refused stay refused.

A parked retry or skip plan can be applied again after an interruption
(the process killed, Redis gone): entries an earlier apply of the same plan
requested are reported "done" and not requested again, so only the rest is
applied. --rps paces the changes and --max bounds how many items this run
tries (items found done do not count); the rest is left for the next run.

Exits 0 when every item applied (or had nothing to do, or was done), 5 when
nothing applied and something conflicted, 6 when nothing applied and
something was refused, 7 when some applied and some did not, or --max left
items for a later run. An item done by an earlier apply of the same plan
counts as applied: its change is in place, so a resumed plan whose items
are done or conflict now exits 7 (partly applied), not 5. A plan made for another key layout is refused (exit
2). -f - reads the plan from stdin.`,
		Example: `  protctl partitions release shop::order o-1 --group G --force --dry-run -o json > plan.json
  protctl apply -f plan.json
  protctl apply -f plan.json --yes -o json
  protctl apply -f retry.json --rps 20 --max 500 --yes`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			switch {
			case opts.RPS < 0:
				return usageError(fmt.Errorf("invalid --rps %d: want 0 (no pacing) or more", opts.RPS))
			case opts.Max < 0:
				return usageError(fmt.Errorf("invalid --max %d: want 0 (no bound) or more", opts.Max))
			}
			opts.Mutation = newMutation(f)
			if opts.RPS > 0 {
				opts.Mutation.ApplyOptions.Interval = time.Second / time.Duration(opts.RPS)
			}
			opts.Mutation.ApplyOptions.Max = opts.Max
			opts.Mutation.ApplyOptions.SeekWait = f.Timeout()
			return runApply(cmd.Context(), opts)
		},
	}
	cmd.Flags().StringVarP(&opts.File, "file", "f", "", "the plan file (JSON), or - for stdin")
	cmd.Flags().IntVar(&opts.RPS, "rps", 0, "make at most N changes per second; 0 for no pacing")
	cmd.Flags().IntVar(&opts.Max, "max", 0, "try at most N items in this run (items found done do not count); 0 for no bound")
	_ = cmd.MarkFlagRequired("file")
	_ = cmd.MarkFlagFilename("file", "json")
	return cmd
}

func runApply(ctx context.Context, opts *applyOptions) error {
	m := opts.Mutation
	if !m.DryRun {
		if err := m.CheckWritable(); err != nil {
			return err
		}
	}
	var data []byte
	var err error
	if opts.File == "-" {
		if m.IO.CanPrompt() {
			return usageError(fmt.Errorf("-f - reads the plan from stdin, which is a terminal: pipe the plan in or give a file"))
		}
		data, err = io.ReadAll(opts.Stdin)
	} else {
		data, err = os.ReadFile(opts.File)
	}
	if err != nil {
		return clierr.Usage.Errorf("reading the plan: %w", err)
	}
	p, err := repair.ParsePlan(data)
	if err != nil {
		return clierr.Usage.Wrap(err)
	}
	layout, err := opts.Layout()
	if err != nil {
		return err
	}
	if p.Layout != layout.String() {
		return clierr.Usage.Errorf("the plan was made for the %s key layout, but the layout in force is %s (--layout)", p.Layout, layout)
	}
	for i := range p.Items {
		// A saved plan may carry results of an earlier apply: this apply
		// records its own.
		if p.Items[i].Result != repair.ResultSkipped {
			p.Items[i].Result, p.Items[i].Detail = repair.ResultNone, ""
		}
	}
	r, err := m.Repairer()
	if err != nil {
		return err
	}
	return applyPlan(ctx, m, r, p)
}
