package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/protctl/protctl/internal/clierr"
	"github.com/protctl/protctl/internal/inspect"
	"github.com/protctl/protctl/internal/output"
	"github.com/protctl/protctl/internal/present"
	"github.com/protctl/protctl/internal/repair"
	"github.com/protctl/protctl/pkg/runtime/kafkasource"
)

type topicsSeekOptions struct {
	Mutation  *mutation
	IO        *output.IOStreams
	Inspector func() (*inspect.Inspector, error)
	Kafka     func() (*kafkasource.Source, error)
	Now       func() time.Time

	Service      string
	Topic        string
	Subscription string
	Partitions   []int32
	To           string
	Shift        int64
	shiftSet     bool
	FromFile     string
	Export       string
	By           string
	RPS          int
	Wait         time.Duration
}

func newTopicsSeekCmd(f *Factory) *cobra.Command {
	opts := &topicsSeekOptions{IO: f.IOStreams, Inspector: f.Inspector, Kafka: f.KafkaSource, Now: time.Now}
	cmd := &cobra.Command{
		Use:   "seek TOPIC --service S --subscription SUB (--to WHERE | --shift N | --from-file FILE | --export FILE)",
		Short: "Move a Kafka subscription's checkpoints: rewind to replay, or skip forward; export and restore positions",
		Long: `Set a subscription's checkpoint (the next offset it handles) on the topic's
partitions (all, or those --partition names), backwards too: the one path
that may move a checkpoint back (docs/decisions/0044-topic-seek.md).

Where to:
  --to OFFSET           that offset (outside the partition's earliest..head: exit 2)
  --to earliest|latest  the earliest retained offset, or the head
  --to TIME             the first record at or after TIME: RFC 3339
                        (2026-01-02T15:04:05Z) or a duration ago (15m);
                        a time after the last record is the head
  --shift N             N records from the checkpoint (negative rewinds),
                        clamped to earliest..head (the plan says so)
  --from-file FILE      the positions of a --export file (topic,partition,offset)

The plan shows per partition the checkpoint and lease seen, the new
checkpoint, and how many records will be handled again or skipped.

A partition nobody holds is set atomically, only while it is still free
and at the checkpoint the plan saw (else exit 5); its generation counter
is bumped, so no node's dedup memory drops the replayed records. A held
partition is set by its owner online: the apply records a request
(fenced on the lease the plan saw, else exit 5) and the owner carries it
out at its next record boundary under its fence, dropping its queued
records (and, rewinding, its dedup memory of the partition), and answers;
the apply waits for the answer up to --timeout, then withdraws the request
and exits 5 (nothing changed). A seek planned forward never moves an
owner that is already past the target back. A resumed apply -f reports
items already carried out as done and does not seek them again.
Parked aggregates stay parked: their replayed records are skipped until
the entry is retried or skipped (parked retry / skip).

--export FILE ("-" for stdout) writes the current checkpoints as
topic,partition,offset lines and changes nothing.`,
		Example: `  protctl topics seek orders --service shop --subscription ledger-sync --to 2026-01-02T14:05:00Z --dry-run
  protctl topics seek orders --service shop --subscription ledger-sync --to 30m --partition 3 --yes
  protctl topics seek orders --service shop --subscription ledger-sync --shift -100 --dry-run -o json > seek.json
  protctl topics seek orders --service shop --subscription ledger-sync --export positions.csv
  protctl topics seek orders --service shop --subscription ledger-sync --from-file positions.csv --yes`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.Topic = args[0]
			opts.shiftSet = cmd.Flags().Changed("shift")
			if err := opts.validate(); err != nil {
				return err
			}
			if opts.Export != "" {
				return runTopicsExport(cmd.Context(), opts)
			}
			opts.Mutation = newMutation(f)
			if opts.By == "" {
				opts.By = f.operatorName()
			}
			if opts.RPS > 0 {
				opts.Mutation.ApplyOptions.Interval = time.Second / time.Duration(opts.RPS)
			}
			opts.Mutation.ApplyOptions.SeekWait = f.Timeout()
			return runTopicsSeek(cmd.Context(), opts)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&opts.Service, "service", "", "the service whose lease group the topic is in")
	fl.StringVar(&opts.Subscription, "subscription", "", "the subscription whose checkpoints to move")
	fl.Int32SliceVar(&opts.Partitions, "partition", nil, "seek only this partition (repeatable, or comma-separated; default: every partition)")
	fl.StringVar(&opts.To, "to", "", "an offset, earliest, latest, an RFC 3339 time or a duration ago")
	fl.Int64Var(&opts.Shift, "shift", 0, "move each checkpoint by N records (negative rewinds), clamped to the partition")
	fl.StringVar(&opts.FromFile, "from-file", "", "restore the positions of a --export file")
	fl.StringVar(&opts.Export, "export", "", `write the current positions as topic,partition,offset to FILE ("-": stdout); changes nothing`)
	fl.IntVar(&opts.RPS, "rps", 0, "set at most N partitions per second; 0 for no pacing")
	_ = cmd.MarkFlagRequired("service")
	_ = cmd.MarkFlagRequired("subscription")
	return cmd
}

func (opts *topicsSeekOptions) validate() error {
	n := 0
	for _, set := range []bool{opts.To != "", opts.shiftSet, opts.FromFile != "", opts.Export != ""} {
		if set {
			n++
		}
	}
	switch {
	case n == 0:
		return usageError(fmt.Errorf("say where to: --to, --shift or --from-file (or --export to save the positions)"))
	case n > 1:
		return usageError(fmt.Errorf("--to, --shift, --from-file and --export exclude each other"))
	case opts.RPS < 0:
		return usageError(fmt.Errorf("invalid --rps %d: want 0 (no pacing) or more", opts.RPS))
	}
	for _, p := range opts.Partitions {
		if p < 0 {
			return usageError(fmt.Errorf("invalid --partition %d: partitions are numbered from 0", p))
		}
	}
	return nil
}

func runTopicsSeek(ctx context.Context, opts *topicsSeekOptions) error {
	req := repair.TopicSeekRequest{Service: opts.Service, Topic: opts.Topic, Subscription: opts.Subscription,
		Partitions: opts.Partitions, By: opts.By}
	switch {
	case opts.FromFile != "":
		data, err := os.ReadFile(opts.FromFile)
		if err != nil {
			return usageError(fmt.Errorf("--from-file: %w", err))
		}
		if req.Positions, err = repair.ParsePositions(string(data), opts.Topic); err != nil {
			return err
		}
	case opts.shiftSet:
		req.To = repair.TopicSeekTo{Kind: "shift", Offset: opts.Shift, Spec: "shift " + strconv.FormatInt(opts.Shift, 10)}
	default:
		to, err := repair.ParseTopicSeekTo("--to", opts.To, opts.Now())
		if err != nil {
			return err
		}
		req.To = to
	}
	src, err := opts.Kafka()
	if err != nil {
		return err
	}
	defer src.Close()
	req.Kafka = src
	err = runMutation(ctx, opts.Mutation, func(ctx context.Context, r *repair.Repairer) (*repair.Plan, error) {
		p, err := r.PlanTopicSeek(ctx, req)
		if err != nil {
			return nil, topicsErr(err)
		}
		return p, nil
	})
	return err
}

// runTopicsExport writes the subscription's checkpoints as
// topic,partition,offset lines (partitions without one are left out).
func runTopicsExport(ctx context.Context, opts *topicsSeekOptions) error {
	ins, err := opts.Inspector()
	if err != nil {
		return err
	}
	src, err := opts.Kafka()
	if err != nil {
		return err
	}
	defer src.Close()
	t, err := ins.Topic(ctx, src, opts.Service, opts.Topic, inspect.TopicOptions{Subscriptions: []string{opts.Subscription}})
	if err != nil {
		return topicsErr(err)
	}
	var b strings.Builder
	b.WriteString("topic,partition,offset\n")
	n := 0
	for _, p := range t.Partitions {
		if len(opts.Partitions) > 0 && !containsPartition(opts.Partitions, p.Partition) {
			continue
		}
		for _, s := range p.Subscriptions {
			if s.Name == opts.Subscription && s.Checkpoint != nil {
				fmt.Fprintf(&b, "%s,%d,%s\n", opts.Topic, p.Partition, *s.Checkpoint)
				n++
			}
		}
	}
	if n == 0 {
		return clierr.NotFound.Errorf("subscription %q saved no checkpoint on the partitions of %q asked for in service %q (check the spelling)",
			opts.Subscription, opts.Topic, opts.Service)
	}
	var w io.Writer = opts.IO.Out
	if opts.Export != "-" {
		f, err := os.Create(opts.Export)
		if err != nil {
			return usageError(fmt.Errorf("--export: %w", err))
		}
		defer f.Close()
		w = f
	}
	if _, err := io.WriteString(w, b.String()); err != nil {
		return err
	}
	if opts.Export != "-" {
		_, err = fmt.Fprintf(opts.IO.ErrOut, "Wrote %d %s of %s to %s.\n", n, present.Plural(n, "position", "positions"), opts.Subscription, opts.Export)
	}
	return err
}

func containsPartition(ps []int32, p int32) bool {
	for _, q := range ps {
		if q == p {
			return true
		}
	}
	return false
}
