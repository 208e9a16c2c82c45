package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/protctl/protctl/internal/clierr"
	"github.com/protctl/protctl/internal/config"
	"github.com/protctl/protctl/internal/exporter"
	"github.com/protctl/protctl/internal/inspect"
	"github.com/protctl/protctl/internal/output"
	"github.com/protctl/protctl/pkg/runtime/kafkasource"
)

type exporterOptions struct {
	IO        *output.IOStreams
	Inspector func() (*inspect.Inspector, error)
	Kafka     func() (*kafkasource.Source, error)
	Settings  func() (*config.Settings, error)

	Listen        string
	Categories    []string
	Topics        []string // service/topic
	Subscriptions []string
	Interval      time.Duration
	Top           int
	Thresholds    inspect.Thresholds

	// listening, when set (tests), receives the bound address.
	listening func(addr string)
}

func newExporterCmd(f *Factory) *cobra.Command {
	opts := &exporterOptions{IO: f.IOStreams, Inspector: f.Inspector, Kafka: f.KafkaSource, Settings: f.Settings}
	cmd := &cobra.Command{
		Use:   "exporter",
		Short: "Serve Prometheus metrics of partition health (status counts, lag, parked, lease churn)",
		Long: `Run a Prometheus exporter of partition health read from the ground truth:
leases, generations, stream heads, pending entries, Kafka checkpoints and the
failure ledger. It collects in the background every --interval with the
pipelined readers of partitions ls and topics ls and serves the last
collection on --listen /metrics: a scrape never touches Redis or Kafka.

Per (kind, scope, group) aggregates are always exported; per-partition series
only for every partition whose status is not OK or IDLE and for the --top N
partitions by lag, so the series count does not grow with the partitions.
docs/operations.md ("Exporter metrics") lists the families; deploy/prometheus
has alert rules and deploy/grafana a dashboard.

Categories are --category names or path patterns ("shop::*", matched against
the categories a paced SCAN finds at each collection), default the context's.
Topics are --topic SERVICE/TOPIC (repeatable), with --subscription narrowing
the subscriptions (default those with checkpoints). The exporter only reads:
run it as the readonly ACL role (protctl acl print --role readonly).

Exit codes: 2 on a bad flag; 3 when --listen cannot be bound; 0 when stopped
by SIGINT or SIGTERM. Collection errors do not stop it: they are counted in
protctl_exporter_collect_errors_total and protctl_exporter_last_collect_seconds
stops moving.`,
		Example: `  protctl exporter --listen :9474 --category 'shop::*'
  protctl exporter --context prod --topic shop/orders --subscription ledger --interval 15s
  protctl exporter --category shop::order --top 50 --stall-after 10m`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if opts.Interval <= 0 {
				return usageError(fmt.Errorf("invalid --interval %s: want more than 0", opts.Interval))
			}
			if opts.Top < 0 {
				return usageError(fmt.Errorf("invalid --top %d: want 0 or more", opts.Top))
			}
			for _, t := range opts.Topics {
				if s, tp, ok := strings.Cut(t, "/"); !ok || s == "" || tp == "" {
					return usageError(fmt.Errorf("invalid --topic %q: want SERVICE/TOPIC", t))
				}
			}
			if len(opts.Subscriptions) > 0 && len(opts.Topics) == 0 {
				return usageError(errors.New("--subscription needs --topic"))
			}
			return runExporter(cmd.Context(), opts)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&opts.Listen, "listen", ":9474", "address to serve /metrics on")
	fl.StringArrayVar(&opts.Categories, "category", nil, "category name or path pattern to export (repeatable); default the context's")
	fl.StringArrayVar(&opts.Topics, "topic", nil, "Kafka topic to export as SERVICE/TOPIC (repeatable)")
	fl.StringArrayVar(&opts.Subscriptions, "subscription", nil, "export only these subscriptions of the --topic topics (repeatable)")
	fl.DurationVar(&opts.Interval, "interval", 30*time.Second, "time between the starts of two collections")
	fl.IntVar(&opts.Top, "top", 20, "partitions by lag given per-partition series besides the non-OK ones")
	addThresholdFlags(cmd, &opts.Thresholds)
	return cmd
}

// addThresholdFlags adds the status thresholds (inspect.Thresholds).
func addThresholdFlags(cmd *cobra.Command, th *inspect.Thresholds) {
	fl := cmd.Flags()
	fl.Int64Var(&th.PoisonDeliveries, "poison-deliveries", 3, "a pending head delivered this many times is HALTED")
	fl.DurationVar(&th.LaggingAfter, "lagging-after", 30*time.Second, "waiting work older than this is LAGGING")
	fl.DurationVar(&th.StallAfter, "stall-after", 5*time.Minute, "a head pending, or a position still, this long is STALLED")
	fl.DurationVar(&th.OrphanAfter, "orphan-after", time.Minute, "waiting work older than this with no lease held is ORPHANED")
}

// validateThresholds refuses non-positive thresholds, naming the flag.
func validateThresholds(th inspect.Thresholds) error {
	switch {
	case th.PoisonDeliveries <= 0:
		return usageError(fmt.Errorf("invalid --poison-deliveries %d: want 1 or more", th.PoisonDeliveries))
	case th.LaggingAfter <= 0:
		return usageError(fmt.Errorf("invalid --lagging-after %s: want more than 0", th.LaggingAfter))
	case th.StallAfter <= 0:
		return usageError(fmt.Errorf("invalid --stall-after %s: want more than 0", th.StallAfter))
	case th.OrphanAfter <= 0:
		return usageError(fmt.Errorf("invalid --orphan-after %s: want more than 0", th.OrphanAfter))
	}
	return nil
}

func runExporter(ctx context.Context, opts *exporterOptions) error {
	if err := validateThresholds(opts.Thresholds); err != nil {
		return err
	}
	ins, err := opts.Inspector()
	if err != nil {
		return err
	}
	cats := opts.Categories
	if len(cats) == 0 {
		s, err := opts.Settings()
		if err != nil {
			return err
		}
		cats = s.Categories
	}
	src := exporter.Source{Inspector: ins}
	cfg := exporter.Config{Categories: cats, Interval: opts.Interval, TopN: opts.Top, Thresholds: opts.Thresholds}
	if opts.Top == 0 {
		cfg.TopN = -1
	}
	for _, t := range opts.Topics {
		s, tp, _ := strings.Cut(t, "/")
		cfg.Topics = append(cfg.Topics, exporter.TopicTarget{Service: s, Topic: tp, Subscriptions: opts.Subscriptions})
	}
	if len(cfg.Topics) > 0 {
		k, err := opts.Kafka()
		if err != nil {
			return err
		}
		defer k.Close()
		src.Kafka = k
	}
	col, err := exporter.New(src, cfg)
	if err != nil {
		return usageError(err)
	}
	ln, err := net.Listen("tcp", opts.Listen)
	if err != nil {
		return clierr.Unavailable.Wrap(fmt.Errorf("--listen %s: %w", opts.Listen, err))
	}
	fmt.Fprintf(opts.IO.ErrOut, "exporter: serving /metrics on %s, collecting every %s\n", ln.Addr(), opts.Interval)
	if opts.listening != nil {
		opts.listening(ln.Addr().String())
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- col.Run(ctx) }()
	err = col.Serve(ctx, ln)
	cancel()
	<-done
	// Stopped by SIGINT or SIGTERM: a clean exit (0).
	return err
}
