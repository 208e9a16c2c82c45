package main

import (
	"context"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"github.com/protctl/protctl/internal/output"
	"github.com/protctl/protctl/pkg/broker"
	"github.com/protctl/protctl/pkg/broker/redisbroker"
)

type publishOptions struct {
	IO            *output.IOStreams
	Printer       *output.Printer
	Publisher     func() (*redisbroker.Broker, error)
	Layout        func() (broker.Layout, error)
	CheckWritable func() error
	Confirm       func(context.Context, string) error
	DryRun        bool

	Category string
	Key      string
	Backfill bool
	Data     string
	HasData  bool
}

func newPublishCmd(f *Factory) *cobra.Command {
	opts := &publishOptions{IO: f.IOStreams, Publisher: f.Broker, Layout: f.Layout, CheckWritable: f.CheckWritable, Confirm: f.Confirm}
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
demos.`,
		Example: `  protctl publish shop::order o-1 --yes --data '{"data":{"amount":5},"metadata":{"headers":{"type":"OrderPlaced"}}}'
  cat event.json | protctl publish shop::order o-1 --backfill --yes -o json`,
		Args: categoryKeyArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.Category, opts.Key = args[0], args[1]
			opts.HasData = cmd.Flags().Changed("data")
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
	return cmd
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
		b, err := opts.Publisher()
		if err != nil {
			return err
		}
		id, err := b.PublishPartitioned(ctx, opts.Category, opts.Key, lane, data)
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
