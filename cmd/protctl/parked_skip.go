package main

import (
	"errors"
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/protctl/protctl/internal/clierr"
	"github.com/protctl/protctl/internal/present"
	"github.com/protctl/protctl/internal/repair"
	"github.com/protctl/protctl/pkg/runtime/ledger"
)

func newParkedSkipCmd(f *Factory) *cobra.Command {
	opts := &parkedRequestOptions{Action: repair.ActionSkip}
	cmd := &cobra.Command{
		Use:   "skip SUBSCRIPTION AGGREGATE --reason TEXT | --all --reason TEXT | FILTERS --reason TEXT",
		Short: "Ask the owner to skip the failing head of parked aggregates (Redis: dead-letter it)",
		Long: `Record a skip request on parked entries of the failure ledger: the node that
owns the partition resolves the entry without handling its head (for a Redis
partition it moves the head to C:K:dlq and acks it; for Kafka it drops the
parked records), under its own fence, now or when a node next owns it.

Bulk selection, plan pinning, --max, --rps, conflicts and resuming an
interrupted apply from its plan file are as for parked retry.

This needs a ledger entry, which protctl's runtime writes. A Protean
partition halted on a poison message has none: dead-letter its head with
"protctl partitions skip-head CATEGORY KEY --group G".`,
		Example: `  protctl parked skip app.OrderProjector o-1 --reason "bad amount, refunded by hand"
  protctl parked skip --all --subscription ledger-sync --reason "replayed from backup" --yes
  protctl parked skip --subscription ledger-sync --error 'unknown currency' --position 1200..1500 --reason "bad feed, re-sent" --yes`,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := opts.parseArgs(cmd, args); err != nil {
				return err
			}
			if strings.TrimSpace(opts.Reason) == "" {
				return usageError(fmt.Errorf("--reason is required: it is recorded with the skip"))
			}
			opts.Mutation = newMutation(f)
			opts.By = f.operatorName()
			err := runParkedRequest(cmd.Context(), opts)
			if errors.Is(err, ledger.ErrNotParked) && !opts.All {
				return clierr.NotFound.Errorf("nothing is parked for subscription %q and aggregate %q; for a Protean partition halted on its head use: protctl partitions skip-head CATEGORY %s --group %s",
					opts.Subscription, opts.Aggregate, present.ShellQuote(opts.Aggregate), present.ShellQuote(opts.Subscription))
			}
			return err
		},
	}
	opts.addFlags(cmd)
	cmd.Flags().StringVar(&opts.Reason, "reason", "", "why the head is skipped (required; recorded in the ledger)")
	return cmd
}
