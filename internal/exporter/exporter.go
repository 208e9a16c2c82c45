// Package exporter is `protctl exporter`: a Prometheus exporter of
// partition health read from the ground truth (leases, generations,
// stream heads, pending entries, checkpoints, the failure ledger).
//
// # Shape
//
// A Collector reads in the background, every Interval, with the
// pipelined readers of internal/inspect (PartitionOptions.Health,
// TopicOptions.Health), and replaces an immutable Snapshot. A scrape
// never touches Redis or Kafka: the prometheus.Collector serves the last
// Snapshot, so a scrape costs the same on 10 partitions and on 100,000,
// and a slow Redis makes collections late (seen in
// protctl_exporter_last_collect_seconds), never scrapes.
// The Snapshot's families are encoded once, at the end of the
// collection that made it, so a scrape writes bytes (Handler; decision
// 0049).
//
// # Cardinality
//
// Per (kind, scope, group) aggregates are always exported. Per-key
// series (protctl_partition_*) exist only for every partition whose
// status is not OK or IDLE and for the TopN partitions by lag in seconds
// (then entries), so the series count is bounded by groups x (7 + 7) +
// 4 x (TopN + non-OK partitions) however many partitions there are.
// Decision 0042 explains the choice.
//
// # Successive observations
//
// The Collector keeps, per (kind, scope, group, key) with work waiting,
// the previous observation and since when its position has not moved,
// so statuses become STALLED after Thresholds.StallAfter without
// progress, and the generation counters seen, so lease churn is a
// counter of generation increments.
package exporter

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/protctl/protctl/internal/inspect"
)

// Kinds of scope.
const (
	KindRedis = "redis"
	KindKafka = "kafka"
)

// TopicTarget is a Kafka topic of a service to export.
type TopicTarget struct {
	Service string
	Topic   string
	// Subscriptions, when set, are the subscriptions exported; default
	// those with checkpoints (found by a paced scan).
	Subscriptions []string
}

// Config is what a Collector reads and how often. The zero value of
// each field is its default.
type Config struct {
	// Categories are path.Match patterns of category names ("shop::*");
	// a name without metacharacters is read even before it exists.
	Categories []string
	// Topics are the Kafka topics; they need Offsets.
	Topics []TopicTarget
	// Interval between the starts of two collections. Default 30s.
	Interval time.Duration
	// TopN is how many partitions per collection get per-key series
	// besides the non-OK ones. Default 20; negative means none.
	TopN int
	// Thresholds tune the statuses.
	Thresholds inspect.Thresholds
	// Logger reports collection errors; nil discards.
	Logger *slog.Logger
}

func (c *Config) validate() error {
	if c.Interval == 0 {
		c.Interval = 30 * time.Second
	}
	if c.Interval < 0 {
		return fmt.Errorf("exporter: interval %s: want more than 0", c.Interval)
	}
	if c.TopN == 0 {
		c.TopN = 20
	}
	for _, p := range c.Categories {
		if _, err := path.Match(p, ""); err != nil {
			return fmt.Errorf("exporter: category pattern %q: %w", p, err)
		}
	}
	if len(c.Categories) == 0 && len(c.Topics) == 0 {
		return errors.New("exporter: nothing to export: no category pattern and no topic")
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return nil
}

// GroupSeries is one (kind, scope, group)'s aggregates.
type GroupSeries struct {
	Kind, Scope, Group string
	// Statuses counts partitions per status (every status present).
	Statuses map[inspect.Status]int
	// LagEntries sums the unhandled entries; LagSeconds is the largest
	// lag in seconds; OldestPendingSeconds the largest age of a pending
	// head (Redis).
	LagEntries           int64
	LagSeconds           float64
	OldestPendingSeconds float64
	Parked               int
	Consumers            int64
	// ETASeconds is how long the group's backlog (LagEntries) takes to
	// drain at the net rate it shrank by since the previous collection:
	// 0 when nothing waits, +Inf when it did not shrink, NaN after one
	// collection (inspect.DrainOf on the group's totals).
	ETASeconds float64
	// Generations is the counter of generation increments seen since
	// the exporter started (lease churn).
	Generations int64
}

// KeySeries is one partition's per-key series.
type KeySeries struct {
	Kind, Scope, Group, Key string
	Status                  inspect.Status
	LagEntries              int64
	LagSeconds              float64
	// ETASeconds is the partition's drain ETA from the previous
	// collection's observation (inspect.Health.ETASeconds): +Inf when
	// its backlog did not shrink, NaN without a previous observation.
	ETASeconds float64
}

// Snapshot is one collection: what scrapes serve until the next.
type Snapshot struct {
	// At is when the last successful collection ended (zero before
	// one); Duration how long the last collection took.
	At       time.Time
	Duration time.Duration
	Groups   []GroupSeries
	Keys     []KeySeries
	// Errors counts failed collections of a source ("redis", "kafka")
	// since the start.
	Errors map[string]int64

	// expo is the families above encoded once (Collector.encode): what
	// a scrape writes.
	expo *exposition
}

// Source is where a Collector reads: the inspector and, for topics,
// Kafka's offsets (nil without topics).
type Source struct {
	Inspector *inspect.Inspector
	Kafka     inspect.Offsets
}

// Collector collects in the background and holds the last Snapshot. It
// is safe for concurrent use.
type Collector struct {
	cfg  Config
	src  Source
	last atomic.Pointer[Snapshot]
	// runtime holds the Go and process collectors; runtimeExpo is their
	// last gathering, refreshed by scrapes (runtimeExposition), and
	// refreshing is set while a refresh runs.
	runtime     *prometheus.Registry
	runtimeExpo atomic.Pointer[runtimeFamilies]
	refreshing  atomic.Bool

	// Touched only by the collecting goroutine (Collect is not run
	// concurrently with itself: mu).
	mu     sync.Mutex
	prev   map[seriesKey]observed
	gens   map[seriesKey]int64
	churn  map[groupKey]int64
	totals map[groupKey]inspect.Observation // each group's backlog at the previous collection
	errors map[string]int64
	scopes map[groupKey]scopeResult // last good result per scope, carried over on errors
}

type groupKey struct{ kind, scope, group string }

type seriesKey struct {
	groupKey
	key string
}

type observed struct {
	obs   inspect.Observation
	since time.Time // when the position was first seen where it is
}

// scopeResult is one scope's part of a snapshot.
type scopeResult struct {
	groups []GroupSeries
	keys   []KeySeries
}

// New returns a Collector; it does no I/O.
func New(src Source, cfg Config) (*Collector, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if src.Inspector == nil {
		return nil, errors.New("exporter: no inspector")
	}
	if len(cfg.Topics) > 0 && src.Kafka == nil {
		return nil, errors.New("exporter: topics need a Kafka source")
	}
	c := &Collector{
		cfg: cfg, src: src,
		prev: map[seriesKey]observed{}, gens: map[seriesKey]int64{}, churn: map[groupKey]int64{},
		totals: map[groupKey]inspect.Observation{},
		errors: map[string]int64{"redis": 0, "kafka": 0}, scopes: map[groupKey]scopeResult{},
		runtime: prometheus.NewRegistry(),
	}
	c.runtime.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	first := &Snapshot{Errors: map[string]int64{"redis": 0, "kafka": 0}}
	var err error
	if first.expo, err = c.encode(first); err != nil {
		return nil, err
	}
	c.last.Store(first)
	return c, nil
}

// Snapshot returns the last collection.
func (c *Collector) Snapshot() *Snapshot { return c.last.Load() }

// Run collects now and then every Interval until ctx ends; it returns
// nil then. Collection errors are counted and logged, never returned.
func (c *Collector) Run(ctx context.Context) error {
	t := time.NewTicker(c.cfg.Interval)
	defer t.Stop()
	for {
		_ = c.Collect(ctx)
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// Collect runs one collection and publishes its Snapshot. A scope that
// fails keeps its previous series and counts an error of its source;
// the error returned joins them. The snapshot's At moves only when every
// scope was read.
func (c *Collector) Collect(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	start := time.Now()
	var errs []error
	fail := func(source string, err error) {
		c.errors[source]++
		errs = append(errs, err)
		c.cfg.Logger.Warn("collection failed", "source", source, "err", err)
	}
	seen := map[groupKey]bool{}
	cats, err := c.categories(ctx)
	if err != nil {
		fail("redis", err)
	}
	for _, cat := range cats {
		sk := groupKey{KindRedis, cat, ""}
		seen[sk] = true
		res, err := c.collectCategory(ctx, cat)
		if err != nil {
			fail("redis", fmt.Errorf("category %s: %w", cat, err))
			continue
		}
		c.scopes[sk] = res
	}
	for _, tt := range c.cfg.Topics {
		sk := groupKey{KindKafka, tt.Topic, tt.Service}
		seen[sk] = true
		res, err := c.collectTopic(ctx, tt)
		if err != nil {
			fail("kafka", fmt.Errorf("topic %s/%s: %w", tt.Service, tt.Topic, err))
			continue
		}
		c.scopes[sk] = res
	}
	if err == nil {
		for sk := range c.scopes {
			if !seen[sk] {
				delete(c.scopes, sk) // a category that went away
			}
		}
	}
	snap := &Snapshot{Duration: time.Since(start), Errors: map[string]int64{}}
	for k, v := range c.errors {
		snap.Errors[k] = v
	}
	prev := c.last.Load()
	snap.At = prev.At
	if len(errs) == 0 {
		snap.At = time.Now()
	}
	scopeKeys := make([]groupKey, 0, len(c.scopes))
	for sk := range c.scopes {
		scopeKeys = append(scopeKeys, sk)
	}
	slices.SortFunc(scopeKeys, func(a, b groupKey) int {
		return compareKeys(a.kind+"\x00"+a.scope+"\x00"+a.group, b.kind+"\x00"+b.scope+"\x00"+b.group)
	})
	for _, sk := range scopeKeys {
		r := c.scopes[sk]
		snap.Groups = append(snap.Groups, r.groups...)
		snap.Keys = append(snap.Keys, r.keys...)
	}
	for i := range snap.Groups {
		g := &snap.Groups[i]
		g.Generations = c.churn[groupKey{g.Kind, g.Scope, g.Group}]
	}
	// Encoded here, once, so that scrapes during the next collection
	// write bytes (Handler). An error is a programming error (duplicate
	// series); the exposition then holds what could be gathered.
	snap.expo, err = c.encode(snap)
	if err != nil {
		errs = append(errs, err)
		c.cfg.Logger.Error("encoding the exposition failed", "err", err)
	}
	c.last.Store(snap)
	return errors.Join(errs...)
}

func compareKeys(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// categories resolves the patterns: names without metacharacters as
// they are, patterns against the categories a paced scan finds.
func (c *Collector) categories(ctx context.Context) ([]string, error) {
	var out []string
	var patterns []string
	for _, p := range c.cfg.Categories {
		if hasMeta(p) {
			patterns = append(patterns, p)
		} else {
			out = append(out, p)
		}
	}
	if len(patterns) > 0 {
		found, err := c.src.Inspector.Categories(ctx, inspect.ScanOptions{})
		if err != nil {
			return out, err
		}
		for _, cat := range found {
			for _, p := range patterns {
				if ok, _ := path.Match(p, cat.Name); ok {
					out = append(out, cat.Name)
					break
				}
			}
		}
	}
	slices.Sort(out)
	return slices.Compact(out), nil
}

func hasMeta(p string) bool {
	for _, r := range p {
		switch r {
		case '*', '?', '[', '\\':
			return true
		}
	}
	return false
}

// observation is one (key, group) health as the aggregation sees it.
type observation struct {
	sk     seriesKey
	health *inspect.Health
	held   bool
	parked bool
	gen    *int64
}

// aggregator builds one scope's series.
type aggregator struct {
	c      *Collector
	now    time.Time
	kind   string
	scope  string
	groups map[string]*GroupSeries
	top    *topN
	bad    []KeySeries
}

func (c *Collector) newAggregator(kind, scope string, now time.Time) *aggregator {
	return &aggregator{c: c, now: now, kind: kind, scope: scope, groups: map[string]*GroupSeries{}, top: newTopN(c.cfg.TopN)}
}

// add folds one observation in: the status with the previous
// observation, the aggregates, the churn and the per-key candidates.
func (a *aggregator) add(o observation) {
	c := a.c
	h := o.health
	cur := h.Observation(a.now)
	p, seenBefore := c.prev[o.sk]
	if seenBefore {
		since := p.since
		if cur.Position != p.obs.Position {
			since = a.now
		}
		h.Observe(p.obs, cur, since, o.held, o.parked, false, c.cfg.Thresholds)
		c.prev[o.sk] = observed{obs: cur, since: since}
	} else {
		c.prev[o.sk] = observed{obs: cur, since: a.now}
	}
	if cur.Unhandled == 0 && cur.Position == "" {
		delete(c.prev, o.sk) // caught up: nothing to remember
	}
	if o.gen != nil {
		if before, ok := c.gens[o.sk]; ok && *o.gen > before {
			c.churn[o.sk.groupKey] += *o.gen - before
		}
		c.gens[o.sk] = *o.gen
	}
	g := a.groups[o.sk.group]
	if g == nil {
		g = &GroupSeries{Kind: a.kind, Scope: a.scope, Group: o.sk.group, Statuses: map[inspect.Status]int{}}
		for _, s := range inspect.AllStatuses() {
			g.Statuses[s] = 0
		}
		a.groups[o.sk.group] = g
	}
	g.Statuses[h.Status]++
	lagEntries := int64(0)
	if h.LagEntries != nil {
		lagEntries = *h.LagEntries
	}
	g.LagEntries += lagEntries
	lagSeconds := 0.0
	if h.LagSeconds != nil {
		lagSeconds = *h.LagSeconds
	}
	g.LagSeconds = max(g.LagSeconds, lagSeconds)
	if h.HeadIdleMs != nil && h.LagSeconds != nil {
		g.OldestPendingSeconds = max(g.OldestPendingSeconds, lagSeconds)
	}
	if o.parked {
		g.Parked++
	}
	g.Consumers += h.Consumers
	eta := unknownETA
	switch {
	case h.ETASeconds != nil:
		eta = *h.ETASeconds
	case lagEntries == 0:
		eta = 0
	case seenBefore:
		eta = notDraining
	}
	ks := KeySeries{Kind: a.kind, Scope: a.scope, Group: o.sk.group, Key: o.sk.key, Status: h.Status, LagEntries: lagEntries, LagSeconds: lagSeconds, ETASeconds: eta}
	if h.Status != inspect.StatusOK && h.Status != inspect.StatusIdle {
		a.bad = append(a.bad, ks)
	} else if lagEntries > 0 {
		a.top.offer(ks)
	}
}

// result is the scope's series: groups sorted, the non-OK keys and the
// top N by lag.
func (a *aggregator) result() scopeResult {
	var r scopeResult
	names := make([]string, 0, len(a.groups))
	for n := range a.groups {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		g := a.groups[n]
		g.ETASeconds = a.c.groupETA(groupKey{a.kind, a.scope, n}, inspect.Observation{At: a.now, Unhandled: g.LagEntries})
		r.groups = append(r.groups, *g)
	}
	r.keys = append(a.bad, a.top.sorted()...)
	return r
}

// groupETA is a group's drain ETA in seconds from its backlog at the
// previous collection and now (cur), and remembers cur: the group's
// backlog over its net drain rate, 0 when nothing waits, +Inf when the
// backlog did not shrink, NaN without a previous collection.
func (c *Collector) groupETA(gk groupKey, cur inspect.Observation) float64 {
	prev, ok := c.totals[gk]
	c.totals[gk] = cur
	switch {
	case cur.Unhandled == 0:
		return 0
	case !ok:
		return unknownETA
	}
	d, ok := inspect.DrainOf(prev, cur)
	switch {
	case !ok:
		return unknownETA
	case d.ETA == nil:
		return notDraining
	}
	return d.ETA.Seconds()
}

func (c *Collector) collectCategory(ctx context.Context, cat string) (scopeResult, error) {
	now, err := c.src.Inspector.ServerTime(ctx)
	if err != nil {
		return scopeResult{}, err
	}
	a := c.newAggregator(KindRedis, cat, now)
	err = c.src.Inspector.EachPartition(ctx, cat, inspect.PartitionOptions{Health: true, Thresholds: c.cfg.Thresholds}, func(p inspect.Partition) error {
		for i := range p.Groups {
			g := &p.Groups[i]
			if g.Health == nil {
				continue
			}
			a.add(observation{
				sk:     seriesKey{groupKey{KindRedis, cat, g.Name}, p.Key},
				health: g.Health, held: g.Lease != nil, parked: g.Parked != nil && *g.Parked, gen: g.Generation,
			})
		}
		return nil
	})
	if err != nil {
		return scopeResult{}, err
	}
	return a.result(), nil
}

func (c *Collector) collectTopic(ctx context.Context, tt TopicTarget) (scopeResult, error) {
	now, err := c.src.Inspector.ServerTime(ctx)
	if err != nil {
		return scopeResult{}, err
	}
	t, err := c.src.Inspector.Topic(ctx, c.src.Kafka, tt.Service, tt.Topic, inspect.TopicOptions{
		Subscriptions: tt.Subscriptions, Health: true, Thresholds: c.cfg.Thresholds,
	})
	if err != nil {
		return scopeResult{}, err
	}
	a := c.newAggregator(KindKafka, tt.Topic, now)
	for _, p := range t.Partitions {
		key := strconv.FormatInt(int64(p.Partition), 10)
		for _, s := range p.Subscriptions {
			if s.Health == nil {
				continue
			}
			a.add(observation{
				sk:     seriesKey{groupKey{KindKafka, tt.Topic, s.Name}, key},
				health: s.Health, held: p.State == inspect.LeaseHeld, parked: s.Health.Status == inspect.StatusHalted,
				gen: p.Generation,
			})
		}
	}
	return a.result(), nil
}
