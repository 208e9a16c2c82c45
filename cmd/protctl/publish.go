package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/protctl/protctl/internal/output"
	"github.com/protctl/protctl/pkg/broker"
	"github.com/protctl/protctl/pkg/broker/redisbroker"
)

type publishOptions struct {
	IO            *output.IOStreams
	Printer       *output.Printer
	Publisher     func(...redisbroker.Option) (*redisbroker.Broker, error)
	Layout        func() (broker.Layout, error)
	CheckWritable func() error
	Confirm       func(context.Context, string) error
	DryRun        bool

	Category string
	Key      string
	Backfill bool
	Data     string
	HasData  bool

	// WaitReplicas and WaitTimeout: WAIT for replicas after the append
	// (0: none).
	WaitReplicas int
	WaitTimeout  time.Duration
	timeoutSet   bool
}

func newPublishCmd(f *Factory) *cobra.Command {
	opts := &publishOptions{IO: f.IOStreams, Publisher: f.BrokerWith, Layout: f.Layout, CheckWritable: f.CheckWritable, Confirm: f.Confirm}
	cmd := &cobra.Command{
		Use:   "publish CATEGORY KEY",
		Short: "Append an envelope to a partition (and record the key in the category's index)",
		Long: `Append one entry to partition KEY of CATEGORY: its data field is the JSON
envelope given with --data or read from stdin, {"data": {...}, "metadata":
{"headers": {...}}}. The append and the index entry are one atomic step, and
the category's wake-up channel is notified. --backfill appends to the
backfill lane (low priority) instead of the main lane.

Publishing is a change: --dry-run shows what would be appended, read-only
mode refuses it, and without a terminal it needs --yes. For scripts and
demos.

Redis replicates asynchronously: an entry the primary acknowledged can be
lost if the primary dies before a replica has it. --wait-replicas N makes
the publish return only once N replicas hold the entry (Redis WAIT, bounded
by --wait-timeout); otherwise it exits 3 naming the entry, which is on the
primary and may or may not survive a failover (publishing it again may
duplicate it). docs/guarantees.md says what each setting guarantees.`,
		Example: `  protctl publish shop::order o-1 --yes --data '{"data":{"amount":5},"metadata":{"headers":{"type":"OrderPlaced"}}}'
  cat event.json | protctl publish shop::order o-1 --backfill --yes -o json`,
		Args: categoryKeyArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.Category, opts.Key = args[0], args[1]
			opts.HasData = cmd.Flags().Changed("data")
			opts.timeoutSet = cmd.Flags().Changed("wait-timeout")
			if err := opts.validWait(); err != nil {
				return err
			}
			if !opts.HasData && f.IOStreams.CanPrompt() {
				return usageError(fmt.Errorf("give the envelope with --data, or pipe it on stdin"))
			}
			opts.DryRun = f.DryRun()
			opts.Printer = f.Printer()
			return runPublish(cmd.Context(), opts)
		},
	}
	cmd.Flags().BoolVar(&opts.Backfill, "backfill", false, "append to the backfill lane")
	cmd.Flags().StringVar(&opts.Data, "data", "", "the JSON envelope (default: read from stdin)")
	cmd.Flags().IntVar(&opts.WaitReplicas, "wait-replicas", 0, "return only once this many replicas hold the entry (Redis WAIT; 0: don't wait)")
	cmd.Flags().DurationVar(&opts.WaitTimeout, "wait-timeout", redisbroker.DefaultReplicaTimeout, "how long --wait-replicas waits before the publish fails (exit 3)")
	return cmd
}

// validWait checks --wait-replicas and --wait-timeout.
func (o *publishOptions) validWait() error {
	switch {
	case o.WaitReplicas < 0:
		return usageError(fmt.Errorf("--wait-replicas must not be negative, got %d (0: don't wait)", o.WaitReplicas))
	case o.timeoutSet && o.WaitReplicas == 0:
		return usageError(fmt.Errorf("--wait-timeout needs --wait-replicas (the replicas to wait for)"))
	case o.WaitTimeout <= 0:
		return usageError(fmt.Errorf("--wait-timeout must be positive, got %s", o.WaitTimeout))
	}
	return nil
}

// published is `publish -o json`.
type published struct {
	Category string  `json:"category"`
	Key      string  `json:"key"`
	Lane     string  `json:"lane"`
	Stream   string  `json:"stream"`
	ID       *string `json:"id"` // null in a dry run
	DryRun   bool    `json:"dryRun"`
}

func runPublish(ctx context.Context, opts *publishOptions) error {
	if !opts.DryRun {
		if err := opts.CheckWritable(); err != nil {
			return err
		}
	}
	data := []byte(opts.Data)
	if !opts.HasData {
		var err error
		if data, err = io.ReadAll(opts.IO.In); err != nil {
			return fmt.Errorf("reading the envelope from stdin: %w", err)
		}
	}
	if _, err := broker.DecodeEnvelope(data); err != nil {
		return usageError(fmt.Errorf("the data is not an envelope ({\"data\": ..., \"metadata\": {\"headers\": ...}}): %w", err))
	}
	layout, err := opts.Layout()
	if err != nil {
		return err
	}
	lane, laneName := "", "main"
	if opts.Backfill {
		lane, laneName = broker.DefaultBackfillSuffix, broker.DefaultBackfillSuffix
	}
	res := published{Category: opts.Category, Key: opts.Key, Lane: laneName,
		Stream: layout.LaneStream(opts.Category, opts.Key, lane), DryRun: opts.DryRun}
	if err := layout.ValidateKey(opts.Key, broker.DefaultBackfillSuffix); err != nil {
		return err
	}
	if !opts.DryRun {
		if err := opts.Confirm(ctx, fmt.Sprintf("Append %d bytes to %s?", len(data), res.Stream)); err != nil {
			return err
		}
		var bopts []redisbroker.Option
		if opts.WaitReplicas > 0 {
			bopts = append(bopts, redisbroker.WithPublishReplicas(redisbroker.Replicas{N: opts.WaitReplicas, Timeout: opts.WaitTimeout}))
		}
		b, err := opts.Publisher(bopts...)
		if err != nil {
			return err
		}
		id, err := b.PublishPartitioned(ctx, opts.Category, opts.Key, lane, data)
		if errors.Is(err, broker.ErrNotReplicated) {
			return fmt.Errorf("%w; check the replicas' link to the primary (INFO replication), or raise --wait-timeout", err)
		}
		if err != nil {
			return err
		}
		res.ID = &id
	}
	return opts.Printer.PrintObject("Published", res, func(w io.Writer, st output.Styles) error {
		if res.ID == nil {
			_, err := fmt.Fprintf(w, "Dry run: would append %d bytes to %s (not published).\n", len(data), output.Escape(res.Stream))
			return err
		}
		_, err := fmt.Fprintf(w, "Published %s to %s.\n", output.Escape(*res.ID), output.Escape(strings.TrimSpace(res.Stream)))
		return err
	})
}
