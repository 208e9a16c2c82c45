package main

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/spf13/cobra"

	"github.com/protctl/protctl/internal/clierr"
	"github.com/protctl/protctl/internal/config"
	"github.com/protctl/protctl/internal/inspect"
	"github.com/protctl/protctl/internal/output"
	"github.com/protctl/protctl/internal/repair"
	"github.com/protctl/protctl/pkg/runtime"
)

func newPartitionsCmd(f *Factory) *cobra.Command {
	cmd := &cobra.Command{
		Use:     "partitions",
		Aliases: []string{"partition", "part"},
		Short:   "List, explain and repair the partitions of Redis stream categories",
		Long: `A category (e.g. shop::order) is partitioned by key: each key has its own
stream C:K (and a backfill lane C:K:backfill), listed in the category's index
C:__partitions__. Each subscription reads a partition as a consumer group,
under a lease G:K:__lease__ whose value owner:generation fences every read
and ack.

The repairs (reap, release, skip-head, prune-consumers) are planned first and applied fenced
on the state the plan saw; see "protctl apply".

A partition halted on a poison message (Protean's sequential_by keeps the
lease and redelivers the head forever) is repaired with protctl alone:

  protctl partitions show shop::order o-1          # names the head and its deliveries
  protctl partitions skip-head shop::order o-1 --group G --reason "poison"
  protctl partitions release shop::order o-1 --group G --force`,
		Example: `  protctl partitions ls
  protctl partitions ls shop::order --lagging --sort-by lag
  protctl partitions show shop::order o-1`,
	}
	cmd.AddCommand(
		newPartitionsListCmd(f),
		newPartitionsShowCmd(f),
		newPartitionsReapCmd(f),
		newPartitionsReleaseCmd(f),
		newPartitionsSkipHeadCmd(f),
		newPartitionsFsckCmd(f),
		newPartitionsPruneConsumersCmd(f),
	)
	return cmd
}

// resolveCategories is the categories a command without CATEGORY
// arguments looks at: the context's, plus those a paced SCAN for
// *:__partitions__ finds (progress on stderr), sorted and deduplicated.
func resolveCategories(ctx context.Context, ios *output.IOStreams, ins *inspect.Inspector, settings func() (*config.Settings, error)) ([]string, error) {
	s, err := settings()
	if err != nil {
		return nil, err
	}
	names := append([]string(nil), s.Categories...)
	prog := ios.NewProgress("scanning for categories")
	found, err := ins.Categories(ctx, inspect.ScanOptions{Progress: func(p inspect.ScanProgress) {
		prog.Update("%d keys scanned, %d categories", p.Scanned, p.Found)
	}})
	prog.Done()
	if err != nil {
		return nil, err
	}
	for _, c := range found {
		names = append(names, c.Name)
	}
	slices.Sort(names)
	return slices.Compact(names), nil
}

// requireCategories fails with NOT_FOUND (exit 4) for a named category
// whose index does not exist (Redis deletes an empty set, so an empty
// category and an unknown one look the same: neither has partitions).
func requireCategories(ctx context.Context, ins *inspect.Inspector, names []string) error {
	for _, n := range names {
		c, err := ins.CategoryInfo(ctx, n)
		if err != nil {
			return err
		}
		if c.Partitions == 0 {
			return clierr.NotFound.Errorf("category %q not found: its index %s is empty or missing", n, ins.Layout().IndexKey(n))
		}
	}
	return nil
}

// dataErr gives the data layer's sentinels their exit codes: not found
// (a partition, a parked entry) exits 4, an invalid plan document 2, a
// retry of an unrecoverable entry 6.
func dataErr(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, inspect.ErrNotFound), errors.Is(err, runtime.ErrNotParked):
		return clierr.NotFound.Wrap(err)
	case errors.Is(err, repair.ErrInvalidPlan):
		return clierr.Usage.Wrap(err)
	case errors.Is(err, runtime.ErrUnrecoverable):
		return clierr.Refused.Wrap(err)
	case errors.Is(err, runtime.ErrAmbiguousParked):
		return clierr.Usage.Errorf("%w (name the entry with --partition)", err)
	}
	return err
}

// categoryKeyArgs validates CATEGORY KEY arguments.
func categoryKeyArgs(cmd *cobra.Command, args []string) error {
	if len(args) != 2 {
		return fmt.Errorf("%s takes CATEGORY KEY, got %d arguments", cmd.CommandPath(), len(args))
	}
	return nil
}
