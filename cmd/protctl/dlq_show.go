package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/protctl/protctl/internal/inspect"
	"github.com/protctl/protctl/internal/output"
	"github.com/protctl/protctl/internal/present"
	"github.com/protctl/protctl/pkg/broker"
)

type dlqShowOptions struct {
	IO        *output.IOStreams
	Printer   *output.Printer
	Inspector func() (*inspect.Inspector, error)

	Category    string
	ID          string
	Key         string
	ShowPayload bool
}

func newDLQShowCmd(f *Factory) *cobra.Command {
	opts := &dlqShowOptions{IO: f.IOStreams, Inspector: f.Inspector}
	cmd := &cobra.Command{
		Use:   "show CATEGORY ID",
		Short: "Show one dead letter: origin, group, consumer, reason, deliveries (payload with --show-payload)",
		Long: `Show the dead letter ID of CATEGORY, found in any of its dead-letter
streams (--key narrows the search to the partitions whose key matches): the
entry it was dead-lettered from, the consumer group and consumer it was
pending to, the reason, when it failed, how many times it had been
delivered, and its format. The original entry (the payload replay would
append) is shown only with --show-payload.

Dead-letter ids are unique within a stream only: an id found in several
streams exits 2 and names them (give --key). No such dead letter exits 4.`,
		Example: `  protctl dlq show shop::order 1719234567890-0
  protctl dlq show shop::order 1719234567890-0 --key o-1 --show-payload -o json`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.Category, opts.ID = args[0], args[1]
			if _, err := broker.ParseStreamID(opts.ID); err != nil {
				return usageError(fmt.Errorf("invalid ID %q: want a stream id <ms>-<seq>", opts.ID))
			}
			sel := dlqFilter{Key: opts.Key}
			if _, err := sel.query(opts.Category); err != nil {
				return err
			}
			opts.Printer = f.Printer()
			return runDLQShow(cmd.Context(), opts)
		},
	}
	cmd.Flags().StringVar(&opts.Key, "key", "", "look only in the dead-letter streams of partitions whose key matches this glob")
	cmd.Flags().BoolVar(&opts.ShowPayload, "show-payload", false, "show the original entry")
	return cmd
}

// dlqDetail is `dlq show`: the dead letter and, with --show-payload, the
// original entry: payload when it is JSON, data (a string) when not.
type dlqDetail struct {
	dlqItem
	Payload       json.RawMessage `json:"payload"`
	Data          *string         `json:"data"`
	PayloadHidden bool            `json:"payloadHidden"`
}

func runDLQShow(ctx context.Context, opts *dlqShowOptions) error {
	ins, err := opts.Inspector()
	if err != nil {
		return err
	}
	d, err := ins.DeadLetterByID(ctx, opts.Category, opts.Key, opts.ID, inspect.ScanOptions{})
	if err != nil {
		return dlqErr(err)
	}
	det := dlqDetail{dlqItem: dlqItemOf(d), PayloadHidden: !opts.ShowPayload}
	if opts.ShowPayload && !d.Missing {
		if json.Valid(d.Payload) {
			det.Payload = json.RawMessage(d.Payload)
		} else {
			s := string(d.Payload)
			det.Data = &s
		}
	}
	pr := opts.Printer
	return pr.PrintObject("DeadLetter", det, func(w io.Writer, st output.Styles) error {
		partition := "the category's own"
		if det.Key != nil {
			partition = *det.Key
		}
		origin := present.Str(det.OriginalID)
		if det.OriginalStream != nil {
			origin += " of " + *det.OriginalStream
		}
		fields := []output.Field{
			{Label: "Dead letter", Value: det.ID + " of " + det.Stream},
			{Label: "Partition", Value: partition},
			{Label: "Origin", Value: origin},
			{Label: "Group", Value: present.Str(det.Group)},
			{Label: "Consumer", Value: present.Str(det.Consumer)},
			{Label: "Reason", Value: present.Str(det.Reason), Tone: output.ToneBad},
			{Label: "Failed at", Value: timeCell(pr, det.FailedAt)},
			{Label: "Dead-lettered", Value: timeCell(pr, &det.DeadLetteredAt)},
			{Label: "Deliveries", Value: present.Int(det.RetryCount)},
			{Label: "Format", Value: det.Format},
		}
		if det.ReplayedFrom != nil {
			fields = append(fields, output.Field{Label: "Replayed from", Value: det.ReplayedFrom.ID + " of " + det.ReplayedFrom.Stream})
		}
		switch {
		case det.Missing:
			fields = append(fields, output.Field{Label: "Body", Value: "missing: the entry was deleted before it was dead-lettered", Tone: output.ToneBad})
		case det.Payload != nil:
			fields = append(fields, output.Field{Label: "Payload", Value: string(det.Payload)})
		case det.Data != nil:
			fields = append(fields, output.Field{Label: "Data", Value: *det.Data})
		}
		if err := output.WriteFields(w, st, fields...); err != nil {
			return err
		}
		if det.PayloadHidden && !det.Missing {
			writePayloadHidden(w, st, false)
		}
		return nil
	})
}
