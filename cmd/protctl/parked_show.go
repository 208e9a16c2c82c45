package main

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/protctl/protctl/internal/clierr"
	"github.com/protctl/protctl/internal/inspect"
	"github.com/protctl/protctl/internal/output"
	"github.com/protctl/protctl/internal/present"
	"github.com/protctl/protctl/pkg/runtime/ledger"
	"github.com/protctl/protctl/pkg/runtime/source"
)

type parkedShowOptions struct {
	IO        *output.IOStreams
	Printer   *output.Printer
	Inspector func() (*inspect.Inspector, error)

	Subscription string
	Aggregate    string
	Partition    string
	ShowPayload  bool
}

func newParkedShowCmd(f *Factory) *cobra.Command {
	opts := &parkedShowOptions{IO: f.IOStreams, Inspector: f.Inspector}
	cmd := &cobra.Command{
		Use:   "show SUBSCRIPTION AGGREGATE",
		Short: "Show a parked entry and its failing record, decoded (payload hidden unless --show-payload)",
		Long: `Show one entry of the failure ledger and, for a Redis partition, the failing
entry itself with its envelope decoded: headers always, the payload (the
envelope's data) only with --show-payload. An entry whose body was deleted
is reported as missing. Exits 4 when nothing is parked for SUBSCRIPTION and
AGGREGATE. A Kafka aggregate parked on several partitions has an entry on
each: name one with --partition (without it the command exits 2 and names
the partitions).`,
		Example: `  protctl parked show app.OrderProjector o-1
  protctl parked show app.OrderProjector o-1 --show-payload -o json
  protctl parked show ledger-sync o-1 --partition 3`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.Subscription, opts.Aggregate = args[0], args[1]
			opts.Printer = f.Printer()
			return runParkedShow(cmd.Context(), opts)
		},
	}
	cmd.Flags().BoolVar(&opts.ShowPayload, "show-payload", false, "show the failing record's payload")
	cmd.Flags().StringVar(&opts.Partition, "partition", "", "the entry on this partition (a Kafka aggregate parked on several)")
	return cmd
}

// parkedDetail is `parked show`: the entry and its failing record (null
// when it cannot be read from Redis, e.g. a Kafka record).
type parkedDetail struct {
	parkedItem
	Record        *inspect.Entry `json:"record"`
	PayloadHidden bool           `json:"payloadHidden"`
}

func runParkedShow(ctx context.Context, opts *parkedShowOptions) error {
	ins, err := opts.Inspector()
	if err != nil {
		return err
	}
	p, err := ins.ParkedEntry(ctx, opts.Subscription, opts.Partition, opts.Aggregate)
	if errors.Is(err, ledger.ErrNotParked) {
		return clierr.NotFound.Errorf("nothing is parked for subscription %q and aggregate %q", opts.Subscription, opts.Aggregate)
	}
	if err != nil {
		return dataErr(err)
	}
	d := parkedDetail{parkedItem: parkedItemOf(p), PayloadHidden: !opts.ShowPayload}
	if p.Source == source.Redis && p.Stream != "" && p.Position != "" {
		e, err := ins.ReadEntry(ctx, p.Stream, p.Position)
		if err != nil {
			return dataErr(err)
		}
		if !opts.ShowPayload {
			d.Record = hidePayload(&e)
		} else {
			d.Record = &e
		}
	}
	pr := opts.Printer
	return pr.PrintObject("ParkedEntry", d, func(w io.Writer, st output.Styles) error {
		where := d.Partition
		if d.Category != nil {
			where = *d.Category + " " + d.Partition
		} else if d.Topic != nil {
			where = *d.Topic + "/" + d.Partition
		}
		status := d.Status
		if d.Request != nil {
			status += " (" + d.Request.Action + " requested by " + present.Str(d.Request.By) + ")"
		}
		fields := []output.Field{
			{Label: "Subscription", Value: d.Subscription},
			{Label: "Aggregate", Value: d.Aggregate},
			{Label: "Partition", Value: where},
			{Label: "Position", Value: d.Position},
			{Label: "Status", Value: status, Tone: parkedStatusTone(d.Status)},
			{Label: "Attempts", Value: fmt.Sprint(d.Attempts)},
			{Label: "Parked", Value: timeCell(pr, d.ParkedAt)},
			{Label: "Last attempt", Value: timeCell(pr, d.LastAttemptAt)},
			{Label: "Owner", Value: present.Str(d.Owner) + " (generation " + present.Int(d.Generation) + ")"},
			{Label: "Error", Value: d.Error, Tone: output.ToneBad},
		}
		if d.Record != nil {
			fields = append(fields, recordFields(d.Record)...)
		}
		if err := output.WriteFields(w, st, fields...); err != nil {
			return err
		}
		if d.PayloadHidden && d.Record != nil && !d.Record.Missing {
			writePayloadHidden(w, st, false)
		}
		return nil
	})
}

// recordFields describe a stream entry: its id and envelope headers, and
// the payload when it was not hidden.
func recordFields(e *inspect.Entry) []output.Field {
	fs := []output.Field{{Label: "Record", Value: e.ID + " on " + e.Stream}}
	switch {
	case e.Missing:
		fs = append(fs, output.Field{Label: "Body", Value: "missing: the entry was deleted from the stream", Tone: output.ToneBad})
	case e.Envelope != nil:
		h := e.Envelope.Metadata.Headers
		fs = append(fs,
			output.Field{Label: "Type", Value: present.Dash(h.Type)},
			output.Field{Label: "Event id", Value: present.Dash(h.ID)},
			output.Field{Label: "Time", Value: present.Dash(h.Time)},
		)
		if e.Envelope.Data != nil {
			fs = append(fs, output.Field{Label: "Data", Value: string(e.Envelope.Data)})
		}
	default:
		if e.Raw != nil {
			fs = append(fs, output.Field{Label: "Raw", Value: *e.Raw})
		} else {
			fs = append(fs, output.Field{Label: "Body", Value: "not an envelope"})
		}
	}
	return fs
}
