package main

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/protctl/protctl/internal/inspect"
	"github.com/protctl/protctl/internal/output"
	"github.com/protctl/protctl/internal/present"
)

func newLeasesCmd(f *Factory) *cobra.Command {
	cmd := &cobra.Command{
		Use:     "leases",
		Aliases: []string{"lease"},
		Short:   "List partition leases: owner, generation, TTL left, and state",
		Example: `  protctl leases ls --category shop::order
  protctl leases ls --group app.OrderProjector --state expired`,
	}
	cmd.AddCommand(newLeasesListCmd(f))
	return cmd
}

type leasesListOptions struct {
	IO        *output.IOStreams
	Printer   *output.Printer
	Inspector func() (*inspect.Inspector, error)

	Group      string
	Categories []string
	State      string

	watch watchOptions
}

// leaseStates are the --state words, from inspect's one list.
func leaseStates() []string {
	var out []string
	for _, s := range inspect.LeaseStates() {
		out = append(out, s.State)
	}
	return out
}

// leaseTone colours a lease state: held good, expired bad (work waits
// with nobody on it), the rest muted.
func leaseTone(s inspect.LeaseState) output.Tone {
	switch s {
	case inspect.LeaseHeld:
		return output.ToneGood
	case inspect.LeaseExpired:
		return output.ToneBad
	}
	return output.ToneMuted
}

func newLeasesListCmd(f *Factory) *cobra.Command {
	opts := &leasesListOptions{IO: f.IOStreams, Inspector: f.Inspector}
	cmd := &cobra.Command{
		Use:     "ls",
		Aliases: []string{"list"},
		Short:   "List leases with owner, generation and TTL left",
		Long: `List the leases G:K:__lease__ of partitions, with the owner and generation of
the lease value, the TTL left, and a state (the table "Lease states" in
docs/cli.md gives each one's meaning):

  held      the lease key exists; its TTL is shown
  released  leased before, nothing waits with nobody on it (idle, or parked)
  expired   leased before, entries wait (pending or not delivered) and
            nobody holds the lease
  free      never leased
  unheld    leased before, not held, waiting work unknown (no --category)

With --category the leases are enumerated from the category's index and its
groups (free leases included), and the streams tell released from expired.
Without it, a paced SCAN of the keyspace finds every lease and generation key
(progress on stderr); free leases have no key and are not listed, the
category is unknown (null in JSON, - in the table), and a lease not held
reads unheld.

An unknown --category exits 4, and so does a --group with no trace in
Redis (never leased, and not created on a lane or registered, with
--category; no lease or generation key and no group registry, without). A
lease or generation key of the wrong Redis type exits 9 naming it.`,
		Example: `  protctl leases ls --category shop::order
  protctl leases ls --group app.OrderProjector
  protctl leases ls --category shop::order --state expired -o json
  protctl leases ls --category shop::order -w --watch-interval 5s`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if opts.State != "" && !slices.Contains(leaseStates(), opts.State) {
				return usageError(fmt.Errorf("invalid --state %q: want one of %s", opts.State, strings.Join(leaseStates(), ", ")))
			}
			if err := opts.watch.validate(); err != nil {
				return err
			}
			opts.Printer = f.Printer()
			return opts.watch.run(cmd.Context(), f.IOStreams, opts.Printer, func(ctx context.Context) error {
				return runLeasesList(ctx, opts)
			})
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&opts.Group, "group", "", "only this consumer group")
	fl.StringArrayVar(&opts.Categories, "category", nil, "enumerate from this category's index (repeatable) instead of scanning")
	fl.StringVar(&opts.State, "state", "", "only leases in this state: held, released, expired, free or unheld")
	addWatchFlags(cmd, &opts.watch)
	_ = cmd.RegisterFlagCompletionFunc("state", cobra.FixedCompletions(leaseStates(), cobra.ShellCompDirectiveNoFileComp))
	return cmd
}

func runLeasesList(ctx context.Context, opts *leasesListOptions) error {
	ins, err := opts.Inspector()
	if err != nil {
		return err
	}
	if len(opts.Categories) > 0 {
		if _, err := requireCategories(ctx, ins, opts.Categories); err != nil {
			return err
		}
	}
	prog := opts.IO.NewProgress("scanning for leases")
	leases, err := ins.Leases(ctx, inspect.LeaseQuery{
		Categories: opts.Categories,
		Group:      opts.Group,
		Scan: inspect.ScanOptions{Progress: func(p inspect.ScanProgress) {
			prog.Update("%d keys scanned, %d leases", p.Scanned, p.Found)
		}},
	})
	prog.Done()
	if err != nil {
		return dataErr(err)
	}
	if opts.Group != "" {
		if err := requireGroupOfLeases(ctx, ins, opts.Group, opts.Categories, leases); err != nil {
			return err
		}
	}
	if opts.State != "" {
		leases = slices.DeleteFunc(leases, func(l inspect.Lease) bool { return string(l.State) != opts.State })
	}
	return opts.Printer.PrintList("Lease", leases, output.TableSpec{
		Empty: "No leases found.",
		Columns: []output.Column{
			output.Col("GROUP", func(l inspect.Lease) string { return l.Group }),
			output.Col("KEY", func(l inspect.Lease) string { return l.Key }),
			output.Col("CATEGORY", func(l inspect.Lease) string { return present.Str(l.Category) }),
			output.Col("STATE", func(l inspect.Lease) string { return present.LeaseState(l.State) },
				output.Toned(func(l inspect.Lease) output.Tone { return leaseTone(l.State) })),
			output.Col("OWNER", func(l inspect.Lease) string { return present.Str(l.Owner) }),
			output.Col("GEN", func(l inspect.Lease) string { return present.Int(l.Generation) }),
			output.Col("TTL", func(l inspect.Lease) string {
				if l.State == inspect.LeaseHeld && l.TTLMs == nil {
					return "none"
				}
				return present.Ms(l.TTLMs)
			}),
			output.Col("TOKEN", func(l inspect.Lease) string { return present.Str(l.Token) }, output.WideOnly()),
			output.Col("COUNTER", func(l inspect.Lease) string { return present.Int(l.Counter) }, output.WideOnly()),
			output.Col("LEASE-KEY", func(l inspect.Lease) string { return l.LeaseKey }, output.WideOnly()),
		},
	})
}

// requireGroupOfLeases fails with NOT_FOUND when the --group filter names
// a group with no trace: none of leases (its rows) was ever leased, and,
// with --category, it is neither created on a lane nor registered for the
// categories (a row is listed for every partition, free, even for a
// typo); without, no lease or generation key and no group registry has it.
func requireGroupOfLeases(ctx context.Context, ins *inspect.Inspector, group string, cats []string, leases []inspect.Lease) error {
	if slices.ContainsFunc(leases, func(l inspect.Lease) bool { return l.Token != nil || l.Counter != nil }) {
		return nil
	}
	if len(cats) == 0 {
		return requireLeaseGroup(ctx, ins, group)
	}
	var parts []inspect.Partition
	for _, c := range cats {
		ps, err := ins.Partitions(ctx, c, inspect.PartitionOptions{Group: group})
		if err != nil {
			return dataErr(err)
		}
		parts = append(parts, ps...)
	}
	return requireGroup(parts, group, cats)
}
