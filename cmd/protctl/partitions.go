package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/protctl/protctl/internal/clierr"
	"github.com/protctl/protctl/internal/config"
	"github.com/protctl/protctl/internal/inspect"
	"github.com/protctl/protctl/internal/output"
	"github.com/protctl/protctl/internal/repair"
	"github.com/protctl/protctl/pkg/broker"
	"github.com/protctl/protctl/pkg/runtime/ledger"
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

A partition halted on a poison message (Protean's sequential_by, v0.17,
delivers the head 3 times, then halts the partition and keeps renewing its
lease, so nothing after the head is handled) is repaired with protctl alone:

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
		newPartitionsSeekCmd(f),
		newPartitionsMoveCmd(f),
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
// that is not known: no index, no group registry and no key named C:*
// (inspect.CategoryKnown). Redis deletes an empty set, so a category
// reaped to its last partition has no index, but its registry or
// dead-letter streams remain: it is returned in empty, to be shown as
// having no live partitions (exit 0) rather than as a typo.
func requireCategories(ctx context.Context, ins *inspect.Inspector, names []string) (empty []string, err error) {
	for _, n := range names {
		c, err := ins.CategoryInfo(ctx, n)
		if err != nil {
			return nil, err
		}
		if c.Partitions > 0 {
			continue
		}
		known, err := ins.CategoryKnown(ctx, n)
		if err != nil {
			return nil, err
		}
		if !known {
			return nil, categoryNotFound(ins, n)
		}
		empty = append(empty, n)
	}
	return empty, nil
}

// categoryNotFound is the NOT_FOUND error of a category nothing in Redis
// names.
func categoryNotFound(ins *inspect.Inspector, name string) error {
	l := ins.Layout()
	return clierr.NotFound.Errorf("category %q not found: no index %s, no group registry %s, no key %s:* (check the spelling; `protctl partitions ls` lists the categories)",
		name, l.IndexKey(name), l.GroupsKey(name), name)
}

// noLivePartitions is what a listing of known categories without
// partitions says instead of an empty table.
func noLivePartitions(ins *inspect.Inspector, names []string) string {
	var b strings.Builder
	for _, n := range names {
		fmt.Fprintf(&b, "Category %q has no live partitions: its index %s is empty (every partition was reaped, or none was published yet).\n", n, ins.Layout().IndexKey(n))
	}
	return b.String()
}

// wrongTypes returns an error naming the keys of the wrong type found in
// parts (each partition's Err), nil when there are none: a listing prints
// what it could read, then exits with WRONG_TYPE (9) rather than showing
// such a partition as an empty one.
func wrongTypes(parts []*inspect.Partition) error {
	var errs []error
	for _, p := range parts {
		if err := p.Err(); errors.Is(err, broker.ErrWrongType) {
			errs = append(errs, err)
		}
	}
	switch len(errs) {
	case 0:
		return nil
	case 1:
		return errs[0]
	}
	return fmt.Errorf("%w (and %d more keys of the wrong type; -o wide shows each in the ERROR column)", errs[0], len(errs)-1)
}

// dataErr gives the data layer's sentinels their exit codes: not found
// (a partition, a parked entry) exits 4, an invalid plan document 2, a
// retry of an unrecoverable entry 6.
func dataErr(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, inspect.ErrNotFound), errors.Is(err, ledger.ErrNotParked):
		return clierr.NotFound.Wrap(err)
	case errors.Is(err, repair.ErrInvalidPlan):
		return clierr.Usage.Wrap(err)
	case errors.Is(err, ledger.ErrUnrecoverable):
		return clierr.Refused.Wrap(err)
	case errors.Is(err, ledger.ErrAmbiguousParked):
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
