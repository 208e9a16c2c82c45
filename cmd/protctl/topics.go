package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/protctl/protctl/internal/clierr"
	"github.com/protctl/protctl/internal/config"
	"github.com/protctl/protctl/internal/inspect"
	"github.com/protctl/protctl/internal/output"
	"github.com/protctl/protctl/internal/present"
	"github.com/protctl/protctl/internal/repair"
	"github.com/protctl/protctl/internal/tui"
	"github.com/protctl/protctl/pkg/runtime/kafkasource"
)

func newTopicsCmd(f *Factory) *cobra.Command {
	cmd := &cobra.Command{
		Use:     "topics",
		Aliases: []string{"topic"},
		Short:   "Kafka lease groups: partitions, owner, generation, per-subscription checkpoint, head and lag",
		Example: `  protctl topics ls --service shop
  protctl topics show orders --service shop`,
	}
	cmd.AddCommand(newTopicsListCmd(f), newTopicsShowCmd(f), newTopicsSeekCmd(f), newTopicsMoveCmd(f))
	return cmd
}

// topicsOptions are shared by topics ls and topics show.
type topicsOptions struct {
	IO        *output.IOStreams
	Printer   *output.Printer
	Inspector func() (*inspect.Inspector, error)
	// Kafka returns a new Source; the run function closes it.
	Kafka func() (*kafkasource.Source, error)
	// Settings name the Kafka login for the hint of an unreachable error.
	Settings func() (*config.Settings, error)

	Service       string
	Topics        []string
	Subscriptions []string

	watch watchOptions
}

func newTopicsOptions(f *Factory) *topicsOptions {
	return &topicsOptions{IO: f.IOStreams, Inspector: f.Inspector, Kafka: f.KafkaSource, Settings: f.Settings}
}

func addTopicsFlags(cmd *cobra.Command, opts *topicsOptions, serviceRequired bool) {
	fl := cmd.Flags()
	fl.StringVar(&opts.Service, "service", "", "the service whose lease groups to read")
	fl.StringArrayVar(&opts.Subscriptions, "subscription", nil, "show this subscription (repeatable; default: every subscription with checkpoints, found by a scan)")
	if serviceRequired {
		_ = cmd.MarkFlagRequired("service")
	}
}

func newTopicsListCmd(f *Factory) *cobra.Command {
	opts := newTopicsOptions(f)
	cmd := &cobra.Command{
		Use:     "ls --service S [TOPIC...]",
		Aliases: []string{"list"},
		Short:   "List Kafka topics' lease groups: owner, generation, checkpoint, head and lag per partition",
		Long: `List the lease groups of a service's Kafka topics (protctl:{S|topic:T}:*): for
every partition the lease (owner, generation, TTL left, and a lease state:
held, released, expired or free, as in docs/cli.md "Lease states"), Kafka's earliest offset and head, and for each subscription its
checkpoint (the next offset it reads) and lag (head - checkpoint).

Without TOPIC the topics are those with lease-group keys in Redis, found by a
paced SCAN (progress on stderr); a topic found there that Kafka no longer has
is listed with an error. Subscriptions are found by the same scan unless
--subscription names them. A TOPIC Kafka does not know exits 4, and so does
a --service Redis has no trace of (no lease, generation or checkpoint on the
partitions read, no node) or a --subscription with no checkpoint on them; an
unreachable Kafka or Redis exits 3. Without --service it lists the services
found in Redis (their nodes' status records and Kafka lease groups).`,
		Example: `  protctl topics ls --service shop
  protctl topics ls --service shop orders payments --subscription ledger-sync
  protctl topics ls --service shop -o json
  protctl topics ls --service shop -w
  protctl topics ls                 # no --service: the services found in Redis`,
		Args: cobra.ArbitraryArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := opts.watch.validate(); err != nil {
				return err
			}
			opts.Topics = args
			opts.Printer = f.Printer()
			if opts.Service == "" {
				if len(args) > 0 {
					return usageError(fmt.Errorf("topics ls %s needs --service: lease groups are per service", strings.Join(args, " ")))
				}
				return opts.watch.run(cmd.Context(), f.IOStreams, opts.Printer, func(ctx context.Context) error {
					return listServices(ctx, f.IOStreams, opts.Printer, opts.Inspector, "protctl topics ls --service S")
				})
			}
			return opts.watch.run(cmd.Context(), f.IOStreams, opts.Printer, func(ctx context.Context) error {
				return runTopicsList(ctx, opts)
			})
		},
	}
	addTopicsFlags(cmd, opts, false)
	addWatchFlags(cmd, &opts.watch)
	return cmd
}

func newTopicsShowCmd(f *Factory) *cobra.Command {
	opts := newTopicsOptions(f)
	cmd := &cobra.Command{
		Use:   "show TOPIC --service S",
		Short: "Show one Kafka topic's lease group: every partition's lease, head and subscriptions' lag",
		Long: `Show the lease group of one Kafka topic of a service: the lease group name,
the subscriptions, and per partition the lease (owner, generation, TTL left,
state), Kafka's earliest offset and head, and each subscription's checkpoint
and lag. A topic Kafka does not know exits 4, as do a --service and a
--subscription of which the topic shows no trace; an unreachable Kafka or
Redis exits 3.`,
		Example: `  protctl topics show orders --service shop
  protctl topics show orders --service shop --subscription ledger-sync -o json`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.Topics = args
			opts.Printer = f.Printer()
			return runTopicsShow(cmd.Context(), opts)
		},
	}
	addTopicsFlags(cmd, opts, true)
	return cmd
}

// readTopics reads the snapshots of opts.Topics (all those found when
// none are named), mapping the errors to the contract's exit codes.
func readTopics(ctx context.Context, opts *topicsOptions) ([]inspect.Topic, error) {
	ins, err := opts.Inspector()
	if err != nil {
		return nil, err
	}
	src, err := opts.Kafka()
	if err != nil {
		return nil, err
	}
	defer src.Close()
	prog := opts.IO.NewProgress("scanning for topics and subscriptions")
	topics, err := ins.Topics(ctx, src, opts.Service, opts.Topics, inspect.TopicOptions{
		Health:        true,
		Subscriptions: opts.Subscriptions,
		Scan: inspect.ScanOptions{Progress: func(p inspect.ScanProgress) {
			prog.Update("%d keys scanned, %d lease-group keys", p.Scanned, p.Found)
		}},
	})
	prog.Done()
	if err != nil {
		return nil, loginHint(topicsErr(err), opts.Settings)
	}
	if err := requireTopicNames(ctx, ins, opts, topics); err != nil {
		return nil, err
	}
	return topics, nil
}

// requireTopicNames fails with NOT_FOUND when what was read shows no
// trace of --service (no lease, generation or checkpoint on any partition
// read, and no other record of the service) or of a --subscription (no
// checkpoint on any partition read): a typo would otherwise list every
// partition as free and the subscription's checkpoints as missing.
func requireTopicNames(ctx context.Context, ins *inspect.Inspector, opts *topicsOptions, topics []inspect.Topic) error {
	traced := false
	saved := map[string]bool{}
	for _, t := range topics {
		for _, p := range t.Partitions {
			traced = traced || p.Generation != nil || p.Owner != nil
			for _, s := range p.Subscriptions {
				if s.Checkpoint != nil {
					traced, saved[s.Name] = true, true
				}
			}
		}
	}
	if !traced {
		if err := requireService(ctx, ins, opts.Service); err != nil {
			return err
		}
	}
	for _, s := range opts.Subscriptions {
		if !saved[s] {
			where := "any topic"
			if len(topics) > 0 {
				names := make([]string, 0, len(topics))
				for _, t := range topics {
					names = append(names, t.Topic)
				}
				where = "any partition of " + strings.Join(names, ", ")
			}
			return clierr.NotFound.Errorf("subscription %q saved no checkpoint on %s of service %q (check the spelling; without --subscription the subscriptions with checkpoints are listed)",
				s, where, opts.Service)
		}
	}
	return nil
}

// loginHint adds to an unreachable-Kafka error with SASL configured what
// is most likely wrong: a rejected login looks, on the wire, like a broker
// closing the connection (kafkasource says "EOF").
func loginHint(err error, settings func() (*config.Settings, error)) error {
	if !errors.Is(err, kafkasource.ErrUnreachable) || settings == nil {
		return err
	}
	s, serr := settings()
	if serr != nil || s.KafkaSASL.Mechanism == "" {
		return err
	}
	return clierr.Unavailable.Errorf("%w; if the brokers are up, they refused the SASL %s login of %q: check the mechanism, the user and the password (%s or the password file)",
		err, s.KafkaSASL.Mechanism, s.KafkaSASL.Username, config.EnvKafkaPassword)
}

func topicsErr(err error) error {
	var firstEOF *kgo.ErrFirstReadEOF
	switch {
	case err == nil:
		return nil
	case errors.Is(err, kafkasource.ErrUnreachable):
		return clierr.Unavailable.Wrap(err)
	case errors.As(err, &firstEOF):
		// The broker hung up on the first request: SASL required and not
		// configured, or TLS on one side only. kafkasource does not call
		// that unreachable (the connection itself succeeded), but for the
		// contract it is a failed login: exit 3.
		return clierr.Unavailable.Wrap(err)
	}
	return dataErr(err)
}

// topicRow is one table row: a partition and one of its subscriptions.
type topicRow struct {
	topic *inspect.Topic
	part  *inspect.TopicPartition
	sub   *inspect.TopicSubscription // nil when the topic has none
}

func topicRows(topics []inspect.Topic) []topicRow {
	var rows []topicRow
	for i := range topics {
		t := &topics[i]
		for j := range t.Partitions {
			p := &t.Partitions[j]
			if len(p.Subscriptions) == 0 {
				rows = append(rows, topicRow{topic: t, part: p})
			}
			for k := range p.Subscriptions {
				rows = append(rows, topicRow{topic: t, part: p, sub: &p.Subscriptions[k]})
			}
		}
	}
	return rows
}

func topicColumns(withTopic bool) []output.Column {
	var cols []output.Column
	if withTopic {
		cols = append(cols, output.Col("TOPIC", func(r topicRow) string { return r.topic.Topic }))
	}
	return append(cols,
		output.Col("PARTITION", func(r topicRow) string { return strconv.FormatInt(int64(r.part.Partition), 10) }),
		output.Col("STATE", func(r topicRow) string { return present.LeaseState(r.part.State) },
			output.Toned(func(r topicRow) output.Tone { return leaseTone(r.part.State) })),
		output.Col("OWNER", func(r topicRow) string { return present.Str(r.part.Owner) }),
		output.Col("GEN", func(r topicRow) string { return present.Int(r.part.Generation) }),
		output.Col("TTL", func(r topicRow) string { return present.Ms(r.part.TTLMs) }),
		output.Col("HEAD", func(r topicRow) string { return r.part.HeadOffset }),
		output.Col("SUBSCRIPTION", func(r topicRow) string {
			if r.sub == nil {
				return "-"
			}
			return r.sub.Name
		}),
		output.Col("CHECKPOINT", func(r topicRow) string {
			if r.sub == nil {
				return "-"
			}
			return present.Str(r.sub.Checkpoint)
		}),
		output.Col("LAG", func(r topicRow) string {
			if r.sub == nil {
				return "-"
			}
			return present.Int(r.sub.Lag)
		}, output.Toned(func(r topicRow) output.Tone {
			if r.sub != nil && r.sub.Lag != nil && *r.sub.Lag > 0 {
				return output.ToneWarn
			}
			return output.ToneNone
		})),
		output.Col("STATUS", func(r topicRow) string {
			if r.sub == nil {
				return "-"
			}
			return present.Status(r.sub.Health)
		}, output.Toned(func(r topicRow) output.Tone {
			if r.sub == nil {
				return output.ToneNone
			}
			return present.StatusTone(r.sub.Health)
		})),
		output.Col("LAG-AGE", func(r topicRow) string {
			if r.sub == nil {
				return "-"
			}
			return present.LagAge(r.sub.Health)
		}, output.WideOnly()),
		output.Col("PAUSED", func(r topicRow) string { return topicPausedCell(r.sub) },
			output.Toned(func(r topicRow) output.Tone {
				if topicPausedCell(r.sub) != "-" {
					return output.ToneWarn
				}
				return output.ToneNone
			})),
		output.Col("EARLIEST", func(r topicRow) string { return r.part.EarliestOffset }, output.WideOnly()),
		output.Col("TOKEN", func(r topicRow) string { return present.Str(r.part.Token) }, output.WideOnly()),
	)
}

// topicPausedCell is a row's PAUSED cell: PAUSED for a whole-subscription
// pause, "N keys" for aggregates held back (wherever they are: an
// aggregate's partition is not known), "-" for none.
func topicPausedCell(s *inspect.TopicSubscription) string {
	switch {
	case s == nil:
		return "-"
	case s.Paused:
		return "PAUSED"
	case s.PausedKeys == 1:
		return "1 key"
	case s.PausedKeys > 1:
		return strconv.Itoa(s.PausedKeys) + " keys"
	}
	return "-"
}

// topicPausesText lists a topic's pause entries for topics show.
func topicPausesText(t inspect.Topic) string {
	if len(t.Pauses) == 0 {
		return "-"
	}
	var lines []string
	for _, p := range t.Pauses {
		s := "PAUSED " + p.Subscription + " " + string(p.Selector)
		if p.By != "" {
			s += " by " + p.By
		}
		if !p.At.IsZero() {
			s += " at " + p.At.UTC().Format("2006-01-02T15:04:05Z")
		}
		if p.Reason != "" {
			s += ": " + p.Reason
		}
		lines = append(lines, s)
	}
	return strings.Join(lines, "; ")
}

func runTopicsList(ctx context.Context, opts *topicsOptions) error {
	topics, err := readTopics(ctx, opts)
	if err != nil {
		return err
	}
	if opts.Printer.Structured() {
		return opts.Printer.PrintList("Topic", topics, output.TableSpec{})
	}
	for _, t := range topics {
		if t.Error != "" {
			fmt.Fprintf(opts.IO.ErrOut, "topic %s: %s\n", t.Topic, t.Error)
		}
	}
	return opts.Printer.PrintList("TopicPartition", topicRows(topics), output.TableSpec{
		Empty:   fmt.Sprintf("No Kafka lease groups of service %q found.", opts.Service),
		Columns: topicColumns(true),
	})
}

func runTopicsShow(ctx context.Context, opts *topicsOptions) error {
	topics, err := readTopics(ctx, opts)
	if err != nil {
		return err
	}
	t := topics[0]
	return opts.Printer.PrintObject("Topic", t, func(w io.Writer, st output.Styles) error {
		subs := "-"
		if len(t.Subscriptions) > 0 {
			subs = strings.Join(t.Subscriptions, ", ")
		}
		if err := output.WriteFields(w, st,
			output.Field{Label: "Service", Value: t.Service},
			output.Field{Label: "Topic", Value: t.Topic},
			output.Field{Label: "Lease group", Value: t.LeaseGroup},
			output.Field{Label: "Partitions", Value: strconv.Itoa(len(t.Partitions))},
			output.Field{Label: "Subscriptions", Value: subs},
			output.Field{Label: "Paused", Value: topicPausesText(t)},
		); err != nil {
			return err
		}
		if _, err := fmt.Fprintln(w); err != nil {
			return err
		}
		return viewPrinter(opts.IO, w).PrintList("TopicPartition", topicRows(topics), output.TableSpec{
			Empty:   "The topic has no partitions.",
			Columns: topicColumns(false),
		})
	})
}

// dashboardTopics is the dashboard's topics view reader: every topic of
// each service with lease-group keys in Redis, read as topics ls reads
// them. It returns nil (the view says there is no reader) without Kafka
// brokers or services. The Kafka source is created on the first read and
// lives as long as the process.
func dashboardTopics(s *config.Settings, timeout time.Duration, ins *inspect.Inspector, services []string) func(context.Context) ([]tui.TopicPartition, error) {
	if len(s.Kafka) == 0 || len(services) == 0 {
		return nil
	}
	var src *kafkasource.Source
	return func(ctx context.Context) ([]tui.TopicPartition, error) {
		// The dashboard never reads a view twice at once, so src needs no lock.
		if src == nil {
			var err error
			if src, err = newKafkaSource(s, timeout); err != nil {
				return nil, err
			}
		}
		var out []tui.TopicPartition
		for _, svc := range services {
			topics, err := ins.Topics(ctx, src, svc, nil, inspect.TopicOptions{})
			if err != nil {
				return out, fmt.Errorf("topics of service %s: %w", svc, err)
			}
			out = append(out, tuiTopicPartitions(topics)...)
		}
		return out, nil
	}
}

// dashboardKafka is the Kafka reader the dashboard's topic seek plans
// with, as `topics seek` does: created on the first seek planned and kept
// for the process (a plan and a topics read may run at once, hence the
// lock). It returns nil (the action says there is no reader) without
// Kafka brokers.
func dashboardKafka(s *config.Settings, timeout time.Duration) func(context.Context) (repair.TopicOffsets, error) {
	if len(s.Kafka) == 0 {
		return nil
	}
	var (
		mu  sync.Mutex
		src *kafkasource.Source
	)
	return func(context.Context) (repair.TopicOffsets, error) {
		mu.Lock()
		defer mu.Unlock()
		if src == nil {
			var err error
			if src, err = newKafkaSource(s, timeout); err != nil {
				return nil, err
			}
		}
		return src, nil
	}
}

func tuiTopicPartitions(topics []inspect.Topic) []tui.TopicPartition {
	var out []tui.TopicPartition
	for _, t := range topics {
		for _, p := range t.Partitions {
			tp := tui.TopicPartition{
				Service: t.Service, Topic: t.Topic, Partition: p.Partition,
				Head:          &p.Head,
				Subscriptions: make([]tui.TopicSubscription, 0, len(p.Subscriptions)),
			}
			if p.State == inspect.LeaseHeld {
				tp.Owner, tp.Generation, tp.TTLMs = p.Owner, p.Generation, p.TTLMs
			}
			for _, s := range p.Subscriptions {
				ts := tui.TopicSubscription{Name: s.Name, Lag: s.Lag}
				if s.Checkpoint != nil {
					next := s.Next
					ts.Checkpoint = &next
				}
				tp.Subscriptions = append(tp.Subscriptions, ts)
			}
			out = append(out, tp)
		}
	}
	return out
}
