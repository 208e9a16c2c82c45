package exporter

import (
	"bytes"
	"context"
	"errors"
	"math"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"

	"github.com/protctl/protctl/internal/inspect"
)

// The metric families; docs/operations.md ("Exporter metrics") documents
// each, and deploy/prometheus/rules.yaml depends on the names.
var (
	groupLabels = []string{"kind", "scope", "group"}
	keyLabels   = []string{"kind", "scope", "group", "key"}

	descPartitions = prometheus.NewDesc("protctl_partitions",
		"Partitions per status of a group (kind redis: category and consumer group; kafka: topic and subscription).",
		[]string{"kind", "scope", "group", "status"}, nil)
	descGroupLagEntries = prometheus.NewDesc("protctl_group_lag_entries",
		"Entries pending or not yet delivered, summed over the group's partitions.", groupLabels, nil)
	descGroupLagSeconds = prometheus.NewDesc("protctl_group_lag_seconds",
		"Largest age of a partition's oldest unhandled entry in the group.", groupLabels, nil)
	descGroupOldestPending = prometheus.NewDesc("protctl_group_oldest_pending_seconds",
		"Largest age of a pending (delivered, not acked) head in the group.", groupLabels, nil)
	descGroupParked = prometheus.NewDesc("protctl_group_parked",
		"Partitions of the group parked in the failure ledger.", groupLabels, nil)
	descGroupConsumers = prometheus.NewDesc("protctl_group_consumers",
		"Consumers of the group over its partitions' lanes (Redis).", groupLabels, nil)
	descGroupETA = prometheus.NewDesc("protctl_group_eta_seconds",
		"Time the group's backlog takes to drain at the net rate it shrank by between the last two collections (0 when nothing waits, +Inf when it does not shrink, NaN after one collection).",
		groupLabels, nil)
	descGenerations = prometheus.NewDesc("protctl_lease_generations_total",
		"Lease generation increments seen since the exporter started (lease churn).", groupLabels, nil)
	descKeyLagEntries = prometheus.NewDesc("protctl_partition_lag_entries",
		"Unhandled entries of one partition (only non-OK partitions and the top N by lag).", keyLabels, nil)
	descKeyLagSeconds = prometheus.NewDesc("protctl_partition_lag_seconds",
		"Age of one partition's oldest unhandled entry (only non-OK partitions and the top N by lag).", keyLabels, nil)
	descKeyETA = prometheus.NewDesc("protctl_partition_eta_seconds",
		"Time one partition's backlog takes to drain at the net rate it shrank by between the last two collections (+Inf when it does not shrink, NaN after one collection; only non-OK partitions and the top N by lag).",
		keyLabels, nil)
	descKeyStatus = prometheus.NewDesc("protctl_partition_status",
		"1 for one partition's status (only non-OK partitions and the top N by lag).",
		[]string{"kind", "scope", "group", "key", "status"}, nil)
	descLastCollect = prometheus.NewDesc("protctl_exporter_last_collect_seconds",
		"Unix time of the last successful collection (0 before one).", nil, nil)
	descCollectDuration = prometheus.NewDesc("protctl_exporter_collect_duration_seconds",
		"Duration of the last collection.", nil, nil)
	descCollectErrors = prometheus.NewDesc("protctl_exporter_collect_errors_total",
		"Failed collections per source (redis, kafka).", []string{"source"}, nil)
)

// describe sends the descriptors of every family.
func (c *Collector) describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{
		descPartitions, descGroupLagEntries, descGroupLagSeconds, descGroupOldestPending, descGroupParked,
		descGroupConsumers, descGroupETA, descGenerations, descKeyLagEntries, descKeyLagSeconds, descKeyETA, descKeyStatus,
		descLastCollect, descCollectDuration, descCollectErrors,
	} {
		ch <- d
	}
}

// collectMetrics sends s's series (prometheus.Collector). It reads
// memory only.
func collectMetrics(s *Snapshot, ch chan<- prometheus.Metric) {
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	for _, g := range s.Groups {
		for _, st := range inspect.AllStatuses() {
			gauge(descPartitions, float64(g.Statuses[st]), g.Kind, g.Scope, g.Group, string(st))
		}
		gauge(descGroupLagEntries, float64(g.LagEntries), g.Kind, g.Scope, g.Group)
		gauge(descGroupLagSeconds, g.LagSeconds, g.Kind, g.Scope, g.Group)
		gauge(descGroupOldestPending, g.OldestPendingSeconds, g.Kind, g.Scope, g.Group)
		gauge(descGroupParked, float64(g.Parked), g.Kind, g.Scope, g.Group)
		gauge(descGroupConsumers, float64(g.Consumers), g.Kind, g.Scope, g.Group)
		gauge(descGroupETA, g.ETASeconds, g.Kind, g.Scope, g.Group)
		ch <- prometheus.MustNewConstMetric(descGenerations, prometheus.CounterValue, float64(g.Generations), g.Kind, g.Scope, g.Group)
	}
	for _, k := range s.Keys {
		gauge(descKeyLagEntries, float64(k.LagEntries), k.Kind, k.Scope, k.Group, k.Key)
		gauge(descKeyLagSeconds, k.LagSeconds, k.Kind, k.Scope, k.Group, k.Key)
		gauge(descKeyETA, k.ETASeconds, k.Kind, k.Scope, k.Group, k.Key)
		gauge(descKeyStatus, 1, k.Kind, k.Scope, k.Group, k.Key, string(k.Status))
	}
	last := 0.0
	if !s.At.IsZero() {
		last = float64(s.At.UnixNano()) / 1e9
	}
	gauge(descLastCollect, last)
	gauge(descCollectDuration, s.Duration.Seconds())
	for _, src := range []string{"redis", "kafka"} {
		ch <- prometheus.MustNewConstMetric(descCollectErrors, prometheus.CounterValue, float64(s.Errors[src]), src)
	}
}

// unknownETA and notDraining are the ETA gauges' values when there is no
// ETA: NaN (one observation: no rate yet; false in every comparison, so
// no alert fires on it) and +Inf (the backlog does not shrink: it never
// drains at this rate, so `> threshold` fires, as check --max-eta fails).
var (
	unknownETA  = math.NaN()
	notDraining = math.Inf(1)
)

var _ prometheus.Collector = snapshotCollector{}

// snapshotCollector is the protctl families of one Snapshot, or of the
// Collector's last one when snap is nil (Gatherer).
type snapshotCollector struct {
	c    *Collector
	snap *Snapshot
}

func (p snapshotCollector) Describe(ch chan<- *prometheus.Desc) { p.c.describe(ch) }
func (p snapshotCollector) Collect(ch chan<- prometheus.Metric) {
	s := p.snap
	if s == nil {
		s = p.c.Snapshot()
	}
	collectMetrics(s, ch)
}

// exposition is one Snapshot's protctl families encoded once, in each
// format the handler offers, so a scrape writes bytes.
type exposition struct {
	text, proto []byte
}

// encode gathers s's families and encodes them in the text format and
// in delimited protobuf. Called once per collection, by the collecting
// goroutine, before the Snapshot is published.
func (c *Collector) encode(s *Snapshot) (*exposition, error) {
	reg := prometheus.NewRegistry()
	if err := reg.Register(snapshotCollector{c: c, snap: s}); err != nil {
		return &exposition{}, err
	}
	fams, err := reg.Gather()
	var text, proto bytes.Buffer
	return &exposition{text: encodeFamilies(&text, expfmt.FmtText, fams), proto: encodeFamilies(&proto, expfmt.FmtProtoDelim, fams)}, err
}

func encodeFamilies(buf *bytes.Buffer, f expfmt.Format, fams []*dto.MetricFamily) []byte {
	enc := expfmt.NewEncoder(buf, f)
	for _, mf := range fams {
		_ = enc.Encode(mf) // a bytes.Buffer does not fail
	}
	return buf.Bytes()
}

// offered are the formats the handler negotiates, in order of preference
// (promhttp's without OpenMetrics, which promhttp does not offer either
// by default): delimited protobuf when asked for, else the text format.
var offered = []expfmt.Format{expfmt.FmtProtoDelim, expfmt.FmtText}

// Gatherer gathers what /metrics serves, live: the last Snapshot's
// families and the Go runtime's and the process's. The handler does not
// use it for the protctl families (it serves their bytes encoded once
// per collection); it is for embedding and for comparing with promhttp
// (bench/exporter_test.go).
func (c *Collector) Gatherer() prometheus.Gatherer {
	reg := prometheus.NewRegistry()
	reg.MustRegister(snapshotCollector{c: c})
	return prometheus.Gatherers{reg, c.runtime}
}

// runtimeMaxAge is how old the cached Go and process families may be
// before a scrape starts refreshing them (in the background: that
// scrape and the next ones until the refresh ends serve the cached
// ones).
const runtimeMaxAge = time.Second

// runtimeFamilies is the Go runtime's and the process's families,
// gathered at at and encoded in each format the handler offers.
type runtimeFamilies struct {
	exposition
	at time.Time
}

// gatherRuntime gathers and encodes the runtime families, publishes
// them, and ends the refresh. Gather errors are partial results
// (promhttp's ContinueOnError): what was gathered is served.
func (c *Collector) gatherRuntime() *runtimeFamilies {
	defer c.refreshing.Store(false)
	fams, _ := c.runtime.Gather()
	var text, proto bytes.Buffer
	rf := &runtimeFamilies{at: time.Now(), exposition: exposition{text: encodeFamilies(&text, expfmt.FmtText, fams), proto: encodeFamilies(&proto, expfmt.FmtProtoDelim, fams)}}
	c.runtimeExpo.Store(rf)
	return rf
}

// runtimeExposition returns the cached runtime families, starting a
// background refresh when they are older than runtimeMaxAge; only the
// first scrape, with nothing cached, waits for a gathering.
func (c *Collector) runtimeExposition() *exposition {
	rf := c.runtimeExpo.Load()
	if rf != nil && time.Since(rf.at) < runtimeMaxAge {
		return &rf.exposition
	}
	if !c.refreshing.CompareAndSwap(false, true) {
		if rf == nil {
			// The first scrapes, while the first gathering runs: serve
			// without the runtime families rather than wait.
			return &exposition{}
		}
		return &rf.exposition
	}
	if rf == nil {
		return &c.gatherRuntime().exposition
	}
	go c.gatherRuntime()
	return &rf.exposition
}

// Handler returns the /metrics handler: the last collection's families
// and the Go runtime's and the process's.
//
// Why not promhttp.HandlerFor: promhttp gathers and encodes every series
// at every scrape, and gathering the Go and process collectors costs
// several /proc reads and syscalls, each of which, on a busy machine
// while a collection keeps both Ps busy, waits for a P on return. The
// benchmark (docs/benchmarks.md, "Exporter") measured scrape p99 during
// collections at 139 ms with the runtime families gathered per scrape
// and under 10 ms without, on 2 cores at load 30. So the protctl
// families, which change once per collection, are encoded once at its
// end (Collector.encode), the runtime families at most once a second in
// the background (runtimeExposition), and a scrape writes the two
// byte slices: it neither gathers nor allocates per series. The body is
// not gzipped: gzip per scrape is work proportional to the exposition
// again, and two pre-gzipped parts would make a multi-member gzip stream
// that not every client reads whole.
func (c *Collector) Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		format := expfmt.NegotiateAccept(r.Header, offered...)
		x, rt := c.Snapshot().expo, c.runtimeExposition()
		body, live := x.text, rt.text
		if format.FormatType() == expfmt.TypeProtoDelim {
			body, live = x.proto, rt.proto
		}
		h := w.Header()
		h.Set("Content-Type", string(format))
		h.Set("Content-Length", strconv.Itoa(len(body)+len(live)))
		if r.Method == http.MethodHead {
			return
		}
		_, _ = w.Write(body)
		_, _ = w.Write(live)
	})
}

// Serve serves /metrics (and /healthz) on ln until ctx ends, then shuts
// the server down within 5s.
func (c *Collector) Serve(ctx context.Context, ln net.Listener) error {
	mux := http.NewServeMux()
	mux.Handle("/metrics", c.Handler())
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte("ok\n"))
	})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	err := srv.Shutdown(sctx)
	if e := <-done; !errors.Is(e, http.ErrServerClosed) && err == nil {
		err = e
	}
	return err
}
