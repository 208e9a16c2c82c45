package exporter

import (
	"context"
	"errors"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

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
	descGenerations = prometheus.NewDesc("protctl_lease_generations_total",
		"Lease generation increments seen since the exporter started (lease churn).", groupLabels, nil)
	descKeyLagEntries = prometheus.NewDesc("protctl_partition_lag_entries",
		"Unhandled entries of one partition (only non-OK partitions and the top N by lag).", keyLabels, nil)
	descKeyLagSeconds = prometheus.NewDesc("protctl_partition_lag_seconds",
		"Age of one partition's oldest unhandled entry (only non-OK partitions and the top N by lag).", keyLabels, nil)
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
		descGroupConsumers, descGenerations, descKeyLagEntries, descKeyLagSeconds, descKeyStatus,
		descLastCollect, descCollectDuration, descCollectErrors,
	} {
		ch <- d
	}
}

// collectMetrics sends the last Snapshot's series (prometheus.Collector). It
// reads memory only.
func (c *Collector) collectMetrics(ch chan<- prometheus.Metric) {
	s := c.Snapshot()
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
		ch <- prometheus.MustNewConstMetric(descGenerations, prometheus.CounterValue, float64(g.Generations), g.Kind, g.Scope, g.Group)
	}
	for _, k := range s.Keys {
		gauge(descKeyLagEntries, float64(k.LagEntries), k.Kind, k.Scope, k.Group, k.Key)
		gauge(descKeyLagSeconds, k.LagSeconds, k.Kind, k.Scope, k.Group, k.Key)
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

var _ prometheus.Collector = promCollector{}

// promCollector adapts a Collector to prometheus.Collector (whose
// Collect would clash with the collection's Collect(ctx)).
type promCollector struct{ c *Collector }

func (p promCollector) Describe(ch chan<- *prometheus.Desc) { p.c.describe(ch) }
func (p promCollector) Collect(ch chan<- prometheus.Metric) { p.c.collectMetrics(ch) }

// Handler returns the /metrics handler: the Collector's families, the Go
// runtime's and the process's, on a registry of their own.
func (c *Collector) Handler() http.Handler {
	reg := prometheus.NewRegistry()
	reg.MustRegister(promCollector{c}, collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg, ErrorHandling: promhttp.ContinueOnError})
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
