package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/spf13/cobra"

	"github.com/protctl/protctl/internal/config"
	"github.com/protctl/protctl/internal/demo"
	"github.com/protctl/protctl/internal/inspect"
	"github.com/protctl/protctl/internal/output"
	"github.com/protctl/protctl/internal/repair"
	"github.com/protctl/protctl/internal/tui"
)

type demoOptions struct {
	IO          *output.IOStreams
	Printer     *output.Printer
	Logger      *slog.Logger
	Settings    func() (*config.Settings, error)
	RedisClient func() (redis.UniversalClient, error)
	Inspector   func() (*inspect.Inspector, error)
	Repairer    func() (*repair.Repairer, error)
	Operator    string

	UseRedis bool // --redis was given
	Kafka    bool
	NoTUI    bool
	Duration time.Duration
	Keys     int
	Rate     int

	// Run runs the dashboard (tui.Run; tests replace it).
	Run func(ctx context.Context, o tui.Options, in io.Reader, out io.Writer) error
	// Every is the live summary's period.
	Every time.Duration
}

// demoRefresh is how often the demo's dashboard re-reads: faster than
// protctl tui's default, for a demo that changes every second.
const demoRefresh = time.Second

func newDemoCmd(f *Factory) *cobra.Command {
	opts := &demoOptions{
		IO: f.IOStreams, Settings: f.Settings, RedisClient: f.RedisClient, Inspector: f.Inspector, Repairer: f.Repairer,
		Run: tui.Run, Every: time.Second,
	}
	cmd := &cobra.Command{
		Use:   "demo [--redis URL] [--kafka] [--no-tui] [--duration D]",
		Short: "Embedded demo: in-memory broker, 3 nodes, a publisher with poison messages, the dashboard",
		Long: `Run the whole system in one process, with no server: three nodes of the
runtime share the partitions of demo::order (each order key processed by one
node at a time, in order, under fenced leases), while a publisher writes
ordered events for 300 keys with an occasional poison message. A poison
message fails every attempt and parks its partition in the failure ledger;
the key's later events wait behind it (lag), the others flow on.

On a terminal the dashboard shows it live, re-read every ` + demoRefresh.String() + ` (protctl tui
re-reads every ` + tui.DefaultRefresh.String() + ` unless --refresh says otherwise; q quits); with --no-tui,
or without a terminal, a summary line is printed every second instead. At the
end protctl prints what happened: events published, processed and failed,
partitions parked, lag, and whether per-key order held.

With --redis URL the same demo runs on that Redis (keys demo::order:*,
protctl:{demo}:*), so protctl partitions ls demo::order, parked ls and the
dashboard's actions work on it from another terminal; it is left there
afterwards. The in-memory demo's state, parked entries included, ends with it. --kafka also runs a topic subscription of the same events on an
embedded Kafka (kfake) with 6 partitions.

--duration stops the demo after D (exit 0); otherwise it runs until q or
Ctrl-C (exit 130 after the summary).`,
		Example: `  # the quick start
  go run ./cmd/protctl demo

  # for CI: no dashboard, 10 seconds, then the summary
  protctl demo --no-tui --duration 10s

  # on a local Redis, then inspect it from another terminal
  protctl demo --redis redis://127.0.0.1:6379/0
  protctl partitions ls demo::order --redis redis://127.0.0.1:6379/0

  # with a Kafka topic subscription too, summary as JSON
  protctl demo --kafka --no-tui --duration 10s -o json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if opts.Duration < 0 {
				return usageError(fmt.Errorf("invalid --duration %s: want 0 (until stopped) or more", opts.Duration))
			}
			if opts.Keys < 1 || opts.Rate < 1 {
				return usageError(errors.New("--keys and --rate must be at least 1"))
			}
			if f.changed("layout") && !f.changed("redis") {
				return usageError(errors.New("--layout needs --redis: the in-memory demo has no Redis layout"))
			}
			opts.UseRedis = f.changed("redis")
			opts.Printer, opts.Operator = f.Printer(), f.operatorName()
			// The runtime's logs (a parked partition is a warning) would
			// tear the dashboard and drown the summary: only with -v.
			opts.Logger = slog.New(slog.DiscardHandler)
			if f.Verbosity() > 0 {
				opts.Logger = f.Logger()
			}
			return runDemo(cmd.Context(), opts)
		},
	}
	fl := cmd.Flags()
	// Not the global --kafka BROKERS: the demo brings its own Kafka.
	fl.BoolVar(&opts.Kafka, "kafka", false, "also run a Kafka topic subscription, on an embedded Kafka (kfake)")
	fl.BoolVar(&opts.NoTUI, "no-tui", false, "print a live summary line every second instead of the dashboard")
	fl.DurationVar(&opts.Duration, "duration", 0, "stop after this long (0: until q or Ctrl-C)")
	fl.IntVar(&opts.Keys, "keys", 300, "order keys (partitions)")
	fl.IntVar(&opts.Rate, "rate", 300, "events published per second")
	return cmd
}

func runDemo(ctx context.Context, opts *demoOptions) error {
	cfg := demo.Config{Keys: opts.Keys, Rate: opts.Rate, Logger: opts.Logger}
	backend, redisURL := "the in-memory broker", "in-memory"
	if opts.UseRedis {
		s, err := opts.Settings()
		if err != nil {
			return err
		}
		c, err := opts.RedisClient()
		if err != nil {
			return err
		}
		if err := c.Ping(ctx).Err(); err != nil {
			return err // classified as UNAVAILABLE (exit 3)
		}
		cfg.Redis, cfg.Layout = c, s.Layout
		redisURL = config.RedactURL(s.Redis.URL)
		backend = "Redis " + redisURL
	}
	kafkaInfo := ""
	if opts.Kafka {
		brokers, stop, err := demo.EmbeddedKafka()
		if err != nil {
			return err
		}
		defer stop()
		cfg.Kafka = brokers
		kafkaInfo = "embedded " + brokers[0]
		backend += " and an embedded Kafka"
	}
	d, err := demo.New(cfg)
	if err != nil {
		return err
	}
	runCtx := ctx
	if opts.Duration > 0 {
		var cancel context.CancelFunc
		runCtx, cancel = context.WithTimeout(ctx, opts.Duration)
		defer cancel()
	}
	if err := d.Start(ctx); err != nil {
		return err
	}

	// Live output goes to stdout, unless stdout carries a JSON or YAML
	// summary.
	live := opts.IO.Out
	if opts.Printer.Structured() {
		live = opts.IO.ErrOut
	}
	useTUI := !opts.NoTUI && opts.IO.IsStdinTTY() && opts.IO.IsStdoutTTY() && !opts.Printer.Structured()
	var runErr error
	if useTUI {
		dash, err := demoDashboard(runCtx, opts, d, redisURL, kafkaInfo)
		if err == nil {
			runErr = opts.Run(runCtx, dash, opts.IO.In, opts.IO.Out)
		} else {
			runErr = err
		}
		if runErr != nil && runCtx.Err() != nil {
			runErr = nil // the duration ran out, or Ctrl-C: not the dashboard's failure
		}
	} else {
		fmt.Fprintf(live, "protctl demo: %d nodes on %s, %d keys, %d events/s; %s\n",
			3, backend, opts.Keys, opts.Rate, stopHint(opts.Duration))
		d.Report(runCtx, live, opts.Every)
	}

	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	stopErr := d.Stop(sctx)
	st := d.Stats(sctx)
	if err := opts.Printer.PrintObject("DemoSummary", demoSummaryOf(st, backend), func(w io.Writer, _ output.Styles) error {
		kept := "" // in memory: nothing is left to look at
		if opts.UseRedis {
			kept = redisURL
		}
		st.Summary(w, backend, kept)
		return nil
	}); err != nil {
		return err
	}
	switch {
	case runErr != nil:
		return runErr
	case stopErr != nil:
		return fmt.Errorf("stopping the demo's nodes: %w", stopErr)
	case ctx.Err() != nil:
		return ctx.Err() // interrupted: 130
	case st.Redis.OrderViolations > 0 || (st.Kafka != nil && st.Kafka.OrderViolations > 0):
		return errors.New("per-key order was broken: this is a bug in the runtime")
	}
	return nil
}

func stopHint(d time.Duration) string {
	if d > 0 {
		return "stopping after " + d.String()
	}
	return "Ctrl-C stops"
}

// demoDashboard attaches the dashboard: on the in-memory demo through the
// demo's own source (read-only: repairs need Redis), on Redis through
// inspect and repair as `protctl tui` does.
func demoDashboard(ctx context.Context, opts *demoOptions, d *demo.Demo, redisURL, kafka string) (tui.Options, error) {
	r := tui.NewRenderer(opts.IO.Out, opts.IO.ColorEnabled())
	o := tui.Options{
		Info:     tui.Info{Context: "demo", Redis: redisURL, Kafka: kafka, Layout: "protean"},
		Refresh:  demoRefresh,
		Operator: opts.Operator,
		Renderer: r,
		Context:  ctx,
	}
	if src := d.Source(); src != nil {
		o.Source, o.ReadOnly = src, true
		return o, nil
	}
	s, err := opts.Settings()
	if err != nil {
		return o, err
	}
	ins, err := opts.Inspector()
	if err != nil {
		return o, err
	}
	rep, err := opts.Repairer()
	if err != nil {
		return o, err
	}
	backend := tui.NewRedisBackend(ins, rep, tui.RedisOptions{Categories: []string{demo.Category}, Services: []string{demo.Service}})
	o.Source, o.Actions, o.Info.Layout = backend, backend, s.Layout.String()
	return o, nil
}

// demoSummary is the summary's JSON form (-o json|yaml).
type demoSummary struct {
	Backend   string           `json:"backend"`
	ElapsedMs int64            `json:"elapsedMs"`
	Published int64            `json:"published"`
	Poison    int64            `json:"poison"`
	Parked    int              `json:"parked"`
	Redis     demoSideSummary  `json:"redis"`
	Kafka     *demoSideSummary `json:"kafka"`
	Nodes     []demoNode       `json:"nodes"`
}

type demoSideSummary struct {
	Subscription    string `json:"subscription"`
	Processed       int64  `json:"processed"`
	Replays         int64  `json:"replays"`
	Failed          int64  `json:"failed"`
	Lag             int64  `json:"lag"`
	OrderViolations int64  `json:"orderViolations"`
}

type demoNode struct {
	Node      string `json:"node"`
	Processed int64  `json:"processed"`
	Held      int    `json:"held"`
}

func demoSummaryOf(st demo.Stats, backend string) demoSummary {
	side := func(name string, s demo.SideStats) demoSideSummary {
		return demoSideSummary{Subscription: name, Processed: s.Processed, Replays: s.Replays, Failed: s.Failed, Lag: s.Lag, OrderViolations: s.OrderViolations}
	}
	out := demoSummary{
		Backend: backend, ElapsedMs: st.Elapsed.Milliseconds(), Published: st.Published, Poison: st.Poison, Parked: st.Parked,
		Redis: side(demo.Subscription, st.Redis), Nodes: []demoNode{},
	}
	if st.Kafka != nil {
		k := side(demo.TopicSubscription, *st.Kafka)
		out.Kafka = &k
	}
	for _, n := range st.Nodes {
		out.Nodes = append(out.Nodes, demoNode{Node: n.ID, Processed: n.Processed, Held: n.Held})
	}
	return out
}
