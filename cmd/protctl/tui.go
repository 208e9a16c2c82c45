package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/protctl/protctl/internal/clierr"
	"github.com/protctl/protctl/internal/config"
	"github.com/protctl/protctl/internal/inspect"
	"github.com/protctl/protctl/internal/output"
	"github.com/protctl/protctl/internal/repair"
	"github.com/protctl/protctl/internal/tui"
)

type tuiOptions struct {
	IO        *output.IOStreams
	Settings  func() (*config.Settings, error)
	Inspector func() (*inspect.Inspector, error)
	Repairer  func() (*repair.Repairer, error)
	Operator  string

	Refresh     time.Duration
	Categories  []string
	Services    []string
	View        string
	ReapMinIdle time.Duration

	// Run runs the dashboard on the terminal (tui.Run; tests replace it).
	Run func(ctx context.Context, o tui.Options, in io.Reader, out io.Writer) error
}

func newTUICmd(f *Factory) *cobra.Command {
	opts := &tuiOptions{IO: f.IOStreams, Settings: f.Settings, Inspector: f.Inspector, Repairer: f.Repairer, Run: tui.Run}
	cmd := &cobra.Command{
		Use:     "tui",
		Aliases: []string{"dashboard"},
		Short:   "Interactive dashboard: partitions, leases, parked, topics and nodes, with safe repairs",
		Long: `Run the interactive dashboard on the terminal. Views (k9s grammar): :partitions,
:leases, :parked, :topics and :nodes; / filters by a regular expression (a
leading ! inverts it); s and i sort; enter explains a row (a partition the
way partitions show does); esc goes back; ? lists every key.

The header shows the context, the endpoints, the node count and totals over
every category (partitions, leased, expired, parked, lag) with a lag
sparkline per category. Views refresh every --refresh (p freezes them: FROZEN in the header; r reads
now); a view is never read twice at once, and a failed read shows an error
line above the last data read.

Actions are on capital letters: R reap, L release, T trim, D dead-letter the
head (skip-head), E replay and X purge a partition's dead letters, W seek (a
partition's group; on the topics view, a subscription on one partition: as
partitions seek and topics seek), Y retry and S skip a parked entry. Each
one builds the plan the equivalent CLI command builds, shows that command
line and the plan, and applies only on y (in a protected context: on typing
its name); each item's result is shown after. With --read-only or a
read-only context the actions are disabled.

It needs a terminal: without one it exits 2. A --category or --service that
Redis has no trace of exits 4 before the dashboard starts. To watch from a
script, use protctl partitions ls -w.`,
		Example: `  protctl tui
  protctl dashboard --context prod --read-only
  protctl tui --category shop::order --service shop --refresh 5s --view parked`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if opts.Refresh < tui.MinRefresh {
				return usageError(fmt.Errorf("invalid --refresh %s: want at least %s", opts.Refresh, tui.MinRefresh))
			}
			if opts.ReapMinIdle < 0 {
				return usageError(fmt.Errorf("invalid --reap-min-idle %s: want 0 or more", opts.ReapMinIdle))
			}
			if !validView(opts.View) {
				return usageError(fmt.Errorf("invalid --view %q: want partitions, leases, parked, topics or nodes", opts.View))
			}
			opts.Operator = f.operatorName()
			return runTUI(cmd.Context(), opts)
		},
	}
	fl := cmd.Flags()
	fl.DurationVar(&opts.Refresh, "refresh", tui.DefaultRefresh, "auto-refresh period, at least "+tui.MinRefresh.String())
	fl.StringArrayVar(&opts.Categories, "category", nil, "watch only this category (repeatable; default: the context's and those found by a scan)")
	fl.StringArrayVar(&opts.Services, "service", nil, "list the live nodes of this service (repeatable)")
	fl.StringVar(&opts.View, "view", "partitions", "the view to start in: partitions, leases, parked, topics or nodes")
	fl.DurationVar(&opts.ReapMinIdle, "reap-min-idle", tui.DefaultReapMinIdle, "the reap action's --min-idle")
	_ = cmd.RegisterFlagCompletionFunc("view", cobra.FixedCompletions([]string{"partitions", "leases", "parked", "topics", "nodes"}, cobra.ShellCompDirectiveNoFileComp))
	return cmd
}

func validView(v string) bool {
	switch v {
	case "partitions", "leases", "parked", "topics", "nodes":
		return true
	}
	return false
}

// errNoTerminal is the message of `protctl tui` without a terminal.
const errNoTerminal = "protctl tui needs a terminal (stdin and stdout must be a TTY); to watch without one, use protctl partitions ls -w"

func runTUI(ctx context.Context, opts *tuiOptions) error {
	if !opts.IO.IsStdinTTY() || !opts.IO.IsStdoutTTY() {
		return clierr.Usage.Errorf("%s", errNoTerminal)
	}
	if err := requireDashboardNames(ctx, opts); err != nil {
		return err
	}
	dash, err := dashboardOptions(ctx, opts)
	if err != nil {
		return err
	}
	return opts.Run(ctx, dash, opts.IO.In, opts.IO.Out)
}

// requireDashboardNames fails with NOT_FOUND, before the dashboard takes
// the terminal, for a --category or --service nothing in Redis records:
// the dashboard would otherwise show empty views for a typo.
func requireDashboardNames(ctx context.Context, opts *tuiOptions) error {
	if len(opts.Categories) == 0 && len(opts.Services) == 0 {
		return nil
	}
	ins, err := opts.Inspector()
	if err != nil {
		return err
	}
	if _, err := requireCategories(ctx, ins, opts.Categories); err != nil {
		return err
	}
	for _, s := range opts.Services {
		nodes, err := ins.Nodes(ctx, s)
		if err != nil {
			return dataErr(err)
		}
		if len(nodes) == 0 {
			if err := requireService(ctx, ins, s); err != nil {
				return err
			}
		}
	}
	return nil
}

// dashboardOptions builds the dashboard on the same data layer the CLI's
// commands use: the factory's Inspector for reads and its Repairer for
// plans and applies. It does no I/O.
func dashboardOptions(ctx context.Context, opts *tuiOptions) (tui.Options, error) {
	s, err := opts.Settings()
	if err != nil {
		return tui.Options{}, err
	}
	ins, err := opts.Inspector()
	if err != nil {
		return tui.Options{}, err
	}
	rep, err := opts.Repairer()
	if err != nil {
		return tui.Options{}, err
	}
	cats := opts.Categories
	if len(cats) == 0 {
		cats = s.Categories
	}
	backend := tui.NewRedisBackend(ins, rep, tui.RedisOptions{
		Categories: cats,
		Scan:       len(opts.Categories) == 0, // like partitions ls without CATEGORY
		Services:   opts.Services,
		Topics:     dashboardTopics(s, DefaultTimeout, ins, opts.Services),
		Kafka:      dashboardKafka(s, DefaultTimeout),
	})
	r := tui.NewRenderer(opts.IO.Out, opts.IO.ColorEnabled())
	return tui.Options{
		Source:  backend,
		Actions: backend,
		Info: tui.Info{
			Context: s.Context,
			Redis:   config.RedactURL(s.Redis.URL),
			Kafka:   strings.Join(s.Kafka, ","),
			Layout:  s.Layout.String(),
		},
		ReadOnly:    s.ReadOnly,
		Protected:   s.Protected,
		Refresh:     opts.Refresh,
		ReapMinIdle: opts.ReapMinIdle,
		Operator:    opts.Operator,
		View:        opts.View,
		Renderer:    r,
		Context:     ctx,
	}, nil
}
