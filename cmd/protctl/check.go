package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/protctl/protctl/internal/clierr"
	"github.com/protctl/protctl/internal/config"
	"github.com/protctl/protctl/internal/inspect"
	"github.com/protctl/protctl/internal/output"
	"github.com/protctl/protctl/pkg/broker"
	"github.com/protctl/protctl/pkg/runtime/kafkasource"
)

type checkOptions struct {
	IO        *output.IOStreams
	Printer   *output.Printer
	Inspector func() (*inspect.Inspector, error)
	Settings  func() (*config.Settings, error)
	// Kafka returns a new Source for the --topic checks; closed after.
	Kafka func() (*kafkasource.Source, error)

	Categories []string
	// Topics (SERVICE/TOPIC) and Subscriptions: the Kafka topic
	// partitions the status checks also read.
	Topics          []string
	Subscriptions   []string
	Services        []string
	MaxParked       int64
	MaxLag          int64
	MaxLagAge       time.Duration
	NoExpiredLeases bool
	NoBackingOff    bool
	// Status checks (#21): the statuses that fail, the lag in seconds and
	// the drain ETA limits, and the thresholds the statuses use.
	FailOnStatus  string
	MaxLagSeconds time.Duration
	MaxETA        time.Duration
	ETASample     time.Duration
	Thresholds    inspect.Thresholds

	checkParked, checkLag, checkLagAge bool
	statuses                           []inspect.Status

	watch watchOptions
}

// maxOffenders caps the offenders a check lists.
const maxOffenders = 20

func newCheckCmd(f *Factory) *cobra.Command {
	opts := &checkOptions{IO: f.IOStreams, Inspector: f.Inspector, Settings: f.Settings, Kafka: f.KafkaSource}
	cmd := &cobra.Command{
		Use:   "check",
		Short: "Check health against thresholds; exit 8 when one is crossed (for CI and monitoring)",
		Long: `Check the deployment against thresholds and exit 8 when any is crossed, 0 when
none is, so a pipeline can gate a deploy on it. Each check runs only when its
flag is given; without any, check runs --max-parked 0 --no-expired-leases
--fail-on-status HALTED,ORPHANED,STALLED.

  --max-parked N        more than N entries in the failure ledger (every
                        subscription)
  --max-lag N           a group has more than N entries not delivered on a
                        partition (unknown lag counts as crossed)
  --max-lag-age D       a group's oldest entry not yet acked (pending or not
                        delivered) is older than D, by the server's clock
  --no-expired-leases   a group's lease state on a partition is expired:
                        no lease is held while entries wait for it
                        (pending or not delivered) and they are not
                        parked; nobody is on them. Released leases (idle
                        or parked partitions) do not count.
  --no-backing-off      a live node of a --service reports partitions backing
                        off after a systemic failure
  --fail-on-status L    a group's status on a partition is one of the
                        comma-separated statuses L (OK, IDLE, LAGGING,
                        STALLED, HALTED, ORPHANED, PAUSED; docs/cli.md
                        "Partition statuses"); with PAUSED, each pause
                        entry of a Kafka topic subscription (of the
                        --services, or any without --category) too
  --max-lag-seconds D   a group's oldest unhandled entry is older than D
                        (the status model's lag in seconds)
  --max-eta D           a backlog would take longer than D to drain, from
                        two readings --eta-sample apart (a backlog that
                        does not shrink has no ETA and fails)

The last three (and the default status check) also apply to the Kafka topic
partitions of each --topic SERVICE/TOPIC, per subscription (default those
with checkpoints; --subscription narrows them), as checks topicStatus,
topicLagSeconds and topicEta whose offenders are "SERVICE/TOPIC PARTITION
SUBSCRIPTION". An unknown topic exits 4, an unreachable Kafka 3.

Partitions are read from the categories given with --category, else from the
context's and those a paced SCAN finds. The result lists each check with its
limit, the value found and up to 20 offenders. An unknown --category or
--service exits 4, an unknown status word 2; a key of the wrong Redis type
read by a check exits 9. Exit codes: 0 every check passed, 8 one failed (the
partitions named in the offenders), 2 bad flags, 3 Redis unreachable.`,
		Example: `  protctl check
  protctl check --max-parked 0 --max-lag 1000 --max-lag-age 5m --no-expired-leases
  protctl check --no-backing-off --service shop -o json
  protctl check -w --watch-interval 30s
  protctl check --fail-on-status HALTED,ORPHANED --max-lag-seconds 10m
  protctl check --max-eta 15m --eta-sample 30s
  protctl check --topic shop/orders --fail-on-status HALTED,ORPHANED,LAGGING`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			fl := cmd.Flags()
			opts.checkParked = fl.Changed("max-parked")
			opts.checkLag = fl.Changed("max-lag")
			opts.checkLagAge = fl.Changed("max-lag-age")
			statusChecks := fl.Changed("fail-on-status") || fl.Changed("max-lag-seconds") || fl.Changed("max-eta")
			if !opts.checkParked && !opts.checkLag && !opts.checkLagAge && !opts.NoExpiredLeases && !opts.NoBackingOff && !statusChecks {
				opts.checkParked, opts.MaxParked, opts.NoExpiredLeases = true, 0, true
				opts.FailOnStatus = "HALTED,ORPHANED,STALLED"
			}
			st, err := inspect.ParseStatuses(opts.FailOnStatus)
			if err != nil {
				return usageError(fmt.Errorf("invalid --fail-on-status: %w", err))
			}
			opts.statuses = st
			if err := validateThresholds(opts.Thresholds); err != nil {
				return err
			}
			switch {
			case opts.MaxParked < 0:
				return usageError(fmt.Errorf("invalid --max-parked %d: want 0 or more", opts.MaxParked))
			case opts.MaxLag < 0:
				return usageError(fmt.Errorf("invalid --max-lag %d: want 0 or more", opts.MaxLag))
			case opts.checkLagAge && opts.MaxLagAge <= 0:
				return usageError(fmt.Errorf("invalid --max-lag-age %s: want more than 0", opts.MaxLagAge))
			case fl.Changed("max-lag-seconds") && opts.MaxLagSeconds <= 0:
				return usageError(fmt.Errorf("invalid --max-lag-seconds %s: want more than 0", opts.MaxLagSeconds))
			case fl.Changed("max-eta") && opts.MaxETA <= 0:
				return usageError(fmt.Errorf("invalid --max-eta %s: want more than 0", opts.MaxETA))
			case opts.ETASample <= 0:
				return usageError(fmt.Errorf("invalid --eta-sample %s: want more than 0", opts.ETASample))
			case len(opts.Subscriptions) > 0 && len(opts.Topics) == 0:
				return usageError(errors.New("--subscription needs --topic"))
			case opts.NoBackingOff && len(opts.Services) == 0:
				return usageError(fmt.Errorf("--no-backing-off needs --service: node status records are per service"))
			}
			for _, t := range opts.Topics {
				if s, tp, ok := strings.Cut(t, "/"); !ok || s == "" || tp == "" {
					return usageError(fmt.Errorf("invalid --topic %q: want SERVICE/TOPIC", t))
				}
			}
			if err := opts.watch.validate(); err != nil {
				return err
			}
			opts.Printer = f.Printer()
			return opts.watch.run(cmd.Context(), f.IOStreams, opts.Printer, func(ctx context.Context) error {
				return runCheck(ctx, opts)
			})
		},
	}
	fl := cmd.Flags()
	fl.Int64Var(&opts.MaxParked, "max-parked", 0, "fail when more than N entries are parked")
	fl.Int64Var(&opts.MaxLag, "max-lag", 0, "fail when a group lags more than N entries on a partition")
	fl.DurationVar(&opts.MaxLagAge, "max-lag-age", 0, "fail when a group's oldest unacked entry is older than D")
	fl.BoolVar(&opts.NoExpiredLeases, "no-expired-leases", false, "fail when entries wait on a partition whose lease expired")
	fl.BoolVar(&opts.NoBackingOff, "no-backing-off", false, "fail when a node of a --service has partitions backing off")
	// The flag's name before issue 23 gave "paused" one meaning (an
	// operator's pause): kept for scripts, hidden, warned about. The
	// warning goes to stderr: cobra prints it on the command's out
	// stream otherwise, which is stdout here and would break -o json.
	fl.BoolVar(&opts.NoBackingOff, "no-paused", false, "fail when a node of a --service has partitions backing off")
	_ = fl.MarkDeprecated("no-paused", "use --no-backing-off (paused now means an operator's pause only)")
	fl.SetOutput(f.IOStreams.ErrOut)
	fl.StringVar(&opts.FailOnStatus, "fail-on-status", "", "fail when a partition's status is one of these (comma-separated)")
	fl.DurationVar(&opts.MaxLagSeconds, "max-lag-seconds", 0, "fail when a partition's oldest unhandled entry is older than D")
	fl.DurationVar(&opts.MaxETA, "max-eta", 0, "fail when a backlog would take longer than D to drain")
	fl.DurationVar(&opts.ETASample, "eta-sample", 10*time.Second, "time between the two readings --max-eta compares")
	addThresholdFlags(cmd, &opts.Thresholds)
	fl.StringArrayVar(&opts.Categories, "category", nil, "check these categories (repeatable); default the context's and those found by a scan")
	fl.StringArrayVar(&opts.Topics, "topic", nil, "also run the status checks on this Kafka topic's partitions, as SERVICE/TOPIC (repeatable)")
	fl.StringArrayVar(&opts.Subscriptions, "subscription", nil, "check only these subscriptions of the --topic topics (repeatable)")
	fl.StringArrayVar(&opts.Services, "service", nil, "service whose nodes --no-backing-off checks and whose topics' pauses are shown (repeatable)")
	addWatchFlags(cmd, &opts.watch)
	return cmd
}

// checkResult is one check: its limit, the value found, and the
// offenders (at most 20), e.g. "shop::order o-1 app.OrderProjector: 512".
type checkResult struct {
	Name      string   `json:"name"`
	OK        bool     `json:"ok"`
	Limit     int64    `json:"limit"`
	Value     *int64   `json:"value"` // null when unknown
	Unit      string   `json:"unit"`  // "count" or "ms"
	Offenders []string `json:"offenders"`
	// Truncated is how many more offenders there were.
	Truncated int    `json:"truncated"`
	Detail    string `json:"detail"`
}

// checkReport is `check -o json`.
type checkReport struct {
	OK     bool          `json:"ok"`
	Checks []checkResult `json:"checks"`
}

func (r *checkResult) offend(s string) {
	if len(r.Offenders) < maxOffenders {
		r.Offenders = append(r.Offenders, s)
	} else {
		r.Truncated++
	}
	r.OK = false
}

func runCheck(ctx context.Context, opts *checkOptions) error {
	ins, err := opts.Inspector()
	if err != nil {
		return err
	}
	// Every --service is checked for a trace first, whichever checks run:
	// a misspelt one would otherwise pass quietly (no nodes backing off,
	// no pause entries of its topics).
	for _, s := range opts.Services {
		if err := requireService(ctx, ins, s); err != nil {
			return err
		}
	}
	var rep checkReport
	if opts.checkParked {
		res, err := checkParked(ctx, ins, opts.MaxParked)
		if err != nil {
			return err
		}
		rep.Checks = append(rep.Checks, res)
	}
	if opts.checkLag || opts.checkLagAge || opts.NoExpiredLeases || opts.statusChecks() {
		res, err := checkPartitions(ctx, opts, ins)
		if err != nil {
			return err
		}
		rep.Checks = append(rep.Checks, res...)
	}
	if len(opts.Topics) > 0 && opts.statusChecks() {
		res, err := checkTopics(ctx, opts, ins)
		if err != nil {
			return err
		}
		rep.Checks = append(rep.Checks, res...)
	}
	if opts.NoBackingOff {
		res, err := checkBackingOff(ctx, ins, opts.Services)
		if err != nil {
			return err
		}
		rep.Checks = append(rep.Checks, res)
	}
	rep.OK = true
	var failed []string
	for _, c := range rep.Checks {
		if !c.OK {
			rep.OK = false
			failed = append(failed, c.Name)
		}
	}
	err = opts.Printer.PrintObject("CheckReport", rep, func(w io.Writer, st output.Styles) error {
		return viewPrinter(opts.IO, w).PrintList("Check", rep.Checks, output.TableSpec{Columns: []output.Column{
			output.Col("CHECK", func(c checkResult) string { return c.Name }),
			output.Col("RESULT", func(c checkResult) string {
				if c.OK {
					return "ok"
				}
				return "FAILED"
			}, output.Toned(func(c checkResult) output.Tone {
				if c.OK {
					return output.ToneGood
				}
				return output.ToneBad
			})),
			output.Col("LIMIT", func(c checkResult) string { return quantity(&c.Limit, c.Unit) }),
			output.Col("VALUE", func(c checkResult) string { return quantity(c.Value, c.Unit) }),
			output.Col("DETAIL", func(c checkResult) string {
				if c.OK || len(c.Offenders) == 0 {
					return c.Detail
				}
				s := strings.Join(c.Offenders, "; ")
				if c.Truncated > 0 {
					s += fmt.Sprintf("; and %d more", c.Truncated)
				}
				return s
			}),
		}})
	})
	if err != nil {
		return err
	}
	if !rep.OK {
		return clierr.CheckFailed.Errorf("check failed: %s", strings.Join(failed, ", "))
	}
	return nil
}

func quantity(v *int64, unit string) string {
	if v == nil {
		return "unknown"
	}
	if unit == "ms" {
		return output.HumanDuration(msDuration(*v))
	}
	return strconv.FormatInt(*v, 10)
}

func checkParked(ctx context.Context, ins *inspect.Inspector, limit int64) (checkResult, error) {
	ps, err := ins.Parked(ctx, "")
	if err != nil {
		return checkResult{}, dataErr(err)
	}
	n := int64(len(ps))
	res := checkResult{Name: "parked", OK: true, Limit: limit, Value: &n, Unit: "count", Offenders: []string{},
		Detail: fmt.Sprintf("%d parked", n)}
	if n > limit {
		res.OK = false
		for _, p := range ps {
			res.offend(fmt.Sprintf("%s %s at %s: %s", p.Subscription, p.Aggregate, p.Position, p.Status))
		}
	}
	return res, nil
}

// checkPartitions runs the lag, lag-age and expired-lease checks over one
// listing of the categories.
func checkPartitions(ctx context.Context, opts *checkOptions, ins *inspect.Inspector) ([]checkResult, error) {
	cats := opts.Categories
	var err error
	if len(cats) == 0 {
		if cats, err = resolveCategories(ctx, opts.IO, ins, opts.Settings); err != nil {
			return nil, err
		}
	} else if _, err := requireCategories(ctx, ins, cats); err != nil {
		return nil, err
	}
	popts := inspect.PartitionOptions{Health: opts.statusChecks(), Thresholds: opts.Thresholds}
	parts, err := readPartitions(ctx, opts.IO, ins, cats, popts)
	if err != nil {
		return nil, err
	}
	for i := range parts {
		// A lane of the wrong type cannot be checked: say so (exit 9)
		// rather than pass or fail it as an empty partition.
		if err := parts[i].Err(); errors.Is(err, broker.ErrWrongType) {
			return nil, err
		}
	}
	var out []checkResult
	name := func(p *inspect.Partition, g *inspect.Group) string {
		if g.Paused != nil {
			// Held back by an operator (protctl pause): its lag grows on
			// purpose, and the offender says so.
			return p.Category + " " + p.Key + " " + g.Name + " PAUSED"
		}
		return p.Category + " " + p.Key + " " + g.Name
	}
	if opts.checkLag {
		var worst int64
		unknown := false
		res := checkResult{Name: "lag", OK: true, Limit: opts.MaxLag, Unit: "count", Offenders: []string{}}
		for i := range parts {
			p := &parts[i]
			for j := range p.Groups {
				g := &p.Groups[j]
				switch {
				case g.Lag == nil:
					unknown = true
					res.offend(name(p, g) + ": unknown")
				case *g.Lag > opts.MaxLag:
					res.offend(fmt.Sprintf("%s: %d", name(p, g), *g.Lag))
				}
				if g.Lag != nil && *g.Lag > worst {
					worst = *g.Lag
				}
			}
		}
		if !unknown {
			res.Value = &worst
		}
		res.Detail = fmt.Sprintf("largest lag %s over %d partitions", quantity(res.Value, "count"), len(parts))
		out = append(out, res)
	}
	if opts.checkLagAge {
		res, err := checkLagAge(ctx, ins, parts, opts.MaxLagAge)
		if err != nil {
			return nil, err
		}
		out = append(out, res)
	}
	if opts.statusChecks() {
		res, err := checkStatuses(ctx, opts, ins, cats, parts)
		if err != nil {
			return nil, err
		}
		out = append(out, res...)
	}
	if opts.NoExpiredLeases {
		var n int64
		res := checkResult{Name: "expiredLeases", OK: true, Limit: 0, Unit: "count", Offenders: []string{}}
		for i := range parts {
			p := &parts[i]
			for j := range p.Groups {
				g := &p.Groups[j]
				// The lease state decides (inspect.LeaseStateOf): an idle
				// partition its owner released, or a parked one, is
				// released, not expired.
				if g.LeaseState == inspect.LeaseExpired {
					n++
					res.offend(fmt.Sprintf("%s: expired at generation %d, %d pending, lag %s", name(p, g), *g.Generation, g.Pending, quantity(g.Lag, "count")))
				}
			}
		}
		res.Value = &n
		res.Detail = fmt.Sprintf("%d expired leases with entries waiting", n)
		out = append(out, res)
	}
	return out, nil
}

// checkLagAge measures, for each group with entries pending or not
// delivered, the age of the oldest such entry (its id's time against the
// server's clock). A partition whose newest entry is already older than
// the limit crosses it without further reads (the oldest unacked entry is
// at least as old); the others are explained one by one.
func checkLagAge(ctx context.Context, ins *inspect.Inspector, parts []inspect.Partition, limit time.Duration) (checkResult, error) {
	limitMs := limit.Milliseconds()
	var worst int64
	res := checkResult{Name: "lagAge", OK: true, Limit: limitMs, Unit: "ms", Offenders: []string{}}
	for i := range parts {
		p := &parts[i]
		var waiting []*inspect.Group
		for j := range p.Groups {
			g := &p.Groups[j]
			if g.Pending > 0 || g.Lag == nil || *g.Lag > 0 {
				waiting = append(waiting, g)
			}
		}
		if len(waiting) == 0 {
			continue
		}
		if p.IdleMs != nil && *p.IdleMs > limitMs {
			for _, g := range waiting {
				worst = max(worst, *p.IdleMs)
				res.offend(fmt.Sprintf("%s %s %s: older than %s", p.Category, p.Key, g.Name, output.HumanDuration(msDuration(*p.IdleMs))))
			}
			continue
		}
		d, err := ins.Partition(ctx, p.Category, p.Key, inspect.ExplainOptions{PendingLimit: 1})
		if err != nil {
			return checkResult{}, dataErr(err)
		}
		for _, g := range d.Groups {
			if g.Head == nil {
				continue
			}
			ms, ok := entryMillis(g.Head.ID)
			if !ok {
				continue
			}
			age := d.ServerTime.UnixMilli() - ms
			worst = max(worst, age)
			if age > limitMs {
				res.offend(fmt.Sprintf("%s %s %s: head %s is %s old", p.Category, p.Key, g.Name, g.Head.ID, output.HumanDuration(msDuration(age))))
			}
		}
	}
	res.Value = &worst
	res.Detail = "oldest unacked entry " + output.HumanDuration(msDuration(worst)) + " old"
	return res, nil
}

// entryMillis is the time part of a stream id "ms-seq".
func entryMillis(id string) (int64, bool) {
	ms, _, _ := strings.Cut(id, "-")
	v, err := strconv.ParseInt(ms, 10, 64)
	return v, err == nil
}

// checkBackingOff counts the partitions the live nodes of services report
// backing off after a systemic failure (not an operator's pause: that is
// PAUSED, a healthy status).
func checkBackingOff(ctx context.Context, ins *inspect.Inspector, services []string) (checkResult, error) {
	var n int64
	res := checkResult{Name: "backingOff", OK: true, Limit: 0, Unit: "count", Offenders: []string{}}
	nodes := 0
	for _, s := range services {
		// runCheck found s known (requireService) before any check ran.
		ns, err := ins.Nodes(ctx, s)
		if err != nil {
			return checkResult{}, dataErr(err)
		}
		nodes += len(ns)
		for _, node := range ns {
			if len(node.BackingOff) > 0 {
				n += int64(len(node.BackingOff))
				res.offend(fmt.Sprintf("%s %s: %s", s, node.Node, strings.Join(node.BackingOff, ",")))
			}
		}
	}
	res.Value = &n
	res.Detail = fmt.Sprintf("%d partitions backing off on %d live nodes", n, nodes)
	return res, nil
}
