package exporter_test

import (
	"context"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/protctl/protctl/internal/exporter"
	"github.com/protctl/protctl/internal/inspect"
	"github.com/protctl/protctl/internal/testenv"
	"github.com/protctl/protctl/pkg/broker"
	"github.com/protctl/protctl/pkg/runtime/kafkasource"
	"github.com/protctl/protctl/pkg/runtime/redisstore"
)

// bulkPartitions writes n partitions of cat in Protean's layout, one
// entry each, group g created at 0 (so each lags 1, young: IDLE), and
// makes the first orphans of them orphaned (their entry 10 minutes old,
// an expired lease). Pipelined: 10,000 partitions in a few round trips.
func bulkPartitions(t *testing.T, c redis.UniversalClient, cat, g string, n, orphans int) {
	t.Helper()
	ctx := context.Background()
	l := broker.ProteanLayout
	old := time.Now().Add(-10 * time.Minute).UnixMilli()
	for lo := 0; lo < n; lo += 1000 {
		p := c.Pipeline()
		for i := lo; i < min(lo+1000, n); i++ {
			k := fmt.Sprintf("k%05d", i)
			id := "*"
			if i < orphans {
				id = strconv.FormatInt(old, 10) + "-1"
				p.Set(ctx, l.GenerationKey(g, k), 3, 0)
			}
			p.XAdd(ctx, &redis.XAddArgs{Stream: l.Stream(cat, k), ID: id, Values: []string{broker.DataField, "{}"}})
			p.XGroupCreate(ctx, l.Stream(cat, k), g, "0")
			p.SAdd(ctx, l.IndexKey(cat), k)
		}
		if _, err := p.Exec(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// scrapeClient bounds a scrape, so that a scrape blocked (by a running
// collection, say) fails the test instead of hanging it.
var scrapeClient = &http.Client{Timeout: time.Minute}

// scrape GETs url and parses the exposition with expfmt.
func scrape(t *testing.T, url string) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := scrapeClient.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("scrape: %s: %s", resp.Status, b)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("scrape does not parse: %v", err)
	}
	return fams
}

func value(m *dto.Metric) float64 {
	switch {
	case m.Gauge != nil:
		return m.Gauge.GetValue()
	case m.Counter != nil:
		return m.Counter.GetValue()
	}
	return 0
}

func labels(m *dto.Metric) map[string]string {
	out := map[string]string{}
	for _, l := range m.Label {
		out[l.GetName()] = l.GetValue()
	}
	return out
}

// startExporter runs the collector and its server on a free loopback
// port, stopped with the test.
func startExporter(t *testing.T, src exporter.Source, cfg exporter.Config) (*exporter.Collector, string) {
	t.Helper()
	col, err := exporter.New(src, cfg)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 2)
	go func() { done <- col.Run(ctx) }()
	go func() { done <- col.Serve(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		for range 2 {
			if err := <-done; err != nil {
				t.Errorf("exporter: %v", err)
			}
		}
	})
	return col, "http://" + ln.Addr().String() + "/metrics"
}

// TestExporterCardinalityOn10000Partitions: per-key series exist only
// for the non-OK partitions and the top N, however many partitions.
func TestExporterCardinalityOn10000Partitions(t *testing.T) {
	c := testenv.StartRedis(t).Client(t)
	const cat, g, n, orphans, top = "shop::order", "app.Projector", 10_000, 30, 5
	bulkPartitions(t, c, cat, g, n, orphans)
	in := inspect.New(c, broker.ProteanLayout)
	col, url := startExporter(t, exporter.Source{Inspector: in}, exporter.Config{Categories: []string{"shop::*"}, Interval: time.Hour, TopN: top})
	testenv.Eventually(t, 60*time.Second, "first collection", func() (bool, string) {
		s := col.Snapshot()
		return !s.At.IsZero(), fmt.Sprintf("errors %v", s.Errors)
	})
	fams := scrape(t, url)
	count := func(name string) int {
		if f := fams[name]; f != nil {
			return len(f.Metric)
		}
		return 0
	}
	perKey := orphans + top
	for name, want := range map[string]int{
		"protctl_partitions":                        len(inspect.AllStatuses()),
		"protctl_group_lag_entries":                 1,
		"protctl_group_lag_seconds":                 1,
		"protctl_group_oldest_pending_seconds":      1,
		"protctl_group_parked":                      1,
		"protctl_group_consumers":                   1,
		"protctl_group_eta_seconds":                 1,
		"protctl_lease_generations_total":           1,
		"protctl_partition_lag_entries":             perKey,
		"protctl_partition_lag_seconds":             perKey,
		"protctl_partition_status":                  perKey,
		"protctl_partition_eta_seconds":             perKey,
		"protctl_exporter_last_collect_seconds":     1,
		"protctl_exporter_collect_duration_seconds": 1,
		"protctl_exporter_collect_errors_total":     2,
	} {
		if got := count(name); got != want {
			t.Errorf("%s: %d series, want %d", name, got, want)
		}
	}
	total := 0
	for name, f := range fams {
		if strings.HasPrefix(name, "protctl_") {
			total += len(f.Metric)
		}
	}
	bound := 14 + 6 + 4*perKey
	if total > bound {
		t.Errorf("%d protctl_ series on %d partitions, bound %d", total, n, bound)
	}
	for _, m := range fams["protctl_partitions"].Metric {
		l := labels(m)
		want := 0.0
		switch l["status"] {
		case "ORPHANED":
			want = orphans
		case "IDLE":
			want = n - orphans
		}
		if l["kind"] != "redis" || l["scope"] != cat || l["group"] != g || value(m) != want {
			t.Errorf("protctl_partitions%v = %v, want %v", l, value(m), want)
		}
	}
	orphaned := 0
	for _, m := range fams["protctl_partition_status"].Metric {
		if labels(m)["status"] == "ORPHANED" {
			orphaned++
		}
	}
	if orphaned != orphans {
		t.Errorf("%d ORPHANED per-key series, want %d", orphaned, orphans)
	}
	if v := value(fams["protctl_group_lag_entries"].Metric[0]); v != n {
		t.Errorf("group lag entries %v, want %d", v, n)
	}
	if v := value(fams["protctl_group_lag_seconds"].Metric[0]); v < 590 {
		t.Errorf("group lag seconds %v, want the orphans' ~600", v)
	}
	if fams["go_goroutines"] == nil || fams["process_cpu_seconds_total"] == nil {
		t.Error("no Go or process collector families")
	}
}

// TestExporterServesTheLastCollection: a scrape between collections
// sees the collection's values even after Redis changed, and after Redis
// goes away it still answers, with the collection errors counted and
// last_collect_seconds unchanged; the churn counter counts generation
// increments between collections.
func TestExporterServesTheLastCollection(t *testing.T) {
	ctx := context.Background()
	srv := testenv.StartRedis(t)
	c := srv.Client(t)
	const cat, g = "shop::order", "app.Projector"
	f := testenv.Protean(t, c)
	p := f.Category(cat).Partition("halted").Entries(3).Group(g).Lease("node-a", 2, time.Minute).Read(1).Deliveries(4, time.Second)
	in := inspect.New(c, broker.ProteanLayout)
	col, err := exporter.New(exporter.Source{Inspector: in}, exporter.Config{Categories: []string{cat}, Interval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if err := col.Collect(ctx); err != nil {
		t.Fatal(err)
	}
	first := col.Snapshot()
	if len(first.Keys) != 1 || first.Keys[0].Status != inspect.StatusHalted || first.Groups[0].Statuses[inspect.StatusHalted] != 1 {
		t.Fatalf("snapshot %+v", first)
	}
	p.Lease("node-b", 5, time.Minute) // generation 2 -> 5
	if err := col.Collect(ctx); err != nil {
		t.Fatal(err)
	}
	if got := col.Snapshot().Groups[0].Generations; got != 3 {
		t.Errorf("generations counter %d, want 3", got)
	}
	at := col.Snapshot().At
	srv.Kill()
	if err := col.Collect(ctx); err == nil {
		t.Fatal("collection against a stopped Redis succeeded")
	}
	s := col.Snapshot()
	if s.Errors["redis"] != 1 || !s.At.Equal(at) || len(s.Keys) != 1 {
		t.Errorf("after a failed collection: errors %v at %v (was %v), keys %d", s.Errors, s.At, at, len(s.Keys))
	}
}

// TestExporterKafkaTopic exports a topic's subscriptions.
func TestExporterKafkaTopic(t *testing.T) {
	ctx := context.Background()
	k := testenv.StartKafka(t, 2, "events")
	cl := k.Client(t)
	old := time.Now().Add(-10 * time.Minute)
	k.Produce(t, cl, &kgo.Record{Topic: "events", Partition: 0, Value: []byte("a"), Timestamp: old},
		&kgo.Record{Topic: "events", Partition: 0, Value: []byte("b"), Timestamp: old})
	c := testenv.StartRedis(t).Client(t)
	store := redisstore.New(c)
	grp := redisstore.TopicLeaseGroup("shop", "events")
	if err := c.Set(ctx, grp.LeaseKey(0), "node-a:1", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	if err := store.Save(ctx, broker.Fence{LeaseKey: grp.LeaseKey(0), Token: "node-a:1"}, grp.String(), "ledger", 0, 0); err != nil {
		t.Fatal(err)
	}
	c.Del(ctx, grp.LeaseKey(0)) // expired with work left: ORPHANED
	src, err := kafkasource.New(k.Brokers)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(src.Close)
	in := inspect.New(c, broker.ProteanLayout)
	col, url := startExporter(t, exporter.Source{Inspector: in, Kafka: src}, exporter.Config{
		Topics: []exporter.TopicTarget{{Service: "shop", Topic: "events", Subscriptions: []string{"ledger"}}}, Interval: time.Hour,
	})
	testenv.Eventually(t, 30*time.Second, "first collection", func() (bool, string) {
		s := col.Snapshot()
		return !s.At.IsZero(), fmt.Sprintf("errors %v", s.Errors)
	})
	fams := scrape(t, url)
	found := false
	for _, m := range fams["protctl_partition_status"].GetMetric() {
		l := labels(m)
		if l["kind"] == "kafka" && l["scope"] == "events" && l["group"] == "ledger" && l["key"] == "0" && l["status"] == "ORPHANED" {
			found = true
		}
	}
	if !found {
		t.Errorf("no ORPHANED series for events/0: %v", fams["protctl_partition_status"])
	}
}

func TestExporterConfigErrors(t *testing.T) {
	c := testenv.StartRedis(t).Client(t)
	in := inspect.New(c, broker.ProteanLayout)
	for name, cfg := range map[string]exporter.Config{
		"nothing":     {},
		"bad pattern": {Categories: []string{"shop::["}},
		"interval":    {Categories: []string{"a"}, Interval: -time.Second},
		"no kafka":    {Topics: []exporter.TopicTarget{{Service: "s", Topic: "t"}}},
	} {
		if _, err := exporter.New(exporter.Source{Inspector: in}, cfg); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// gate holds a client's commands while armed: the first held call
// closes entered, and every held call waits for release. It stands for
// a collection stuck mid-way on a slow Redis.
type gate struct {
	armed    atomic.Bool
	once     sync.Once
	entered  chan struct{}
	released chan struct{}
}

func newGate() *gate { return &gate{entered: make(chan struct{}), released: make(chan struct{})} }

func (g *gate) hold() {
	if g.armed.Load() {
		g.once.Do(func() { close(g.entered) })
		<-g.released
	}
}

func (g *gate) DialHook(next redis.DialHook) redis.DialHook { return next }
func (g *gate) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error { g.hold(); return next(ctx, cmd) }
}
func (g *gate) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error { g.hold(); return next(ctx, cmds) }
}

// statusCount is protctl_partitions{status=st} of a scrape.
func statusCount(t *testing.T, fams map[string]*dto.MetricFamily, st inspect.Status) float64 {
	t.Helper()
	for _, m := range fams["protctl_partitions"].GetMetric() {
		if labels(m)["status"] == string(st) {
			return value(m)
		}
	}
	t.Fatalf("no protctl_partitions{status=%q}", st)
	return 0
}

// TestExporterScrapeDuringCollectionServesThePrevious: a collection held
// mid-way (its Redis calls blocked by a hook) neither blocks a scrape nor
// shows in it: the scrape returns the last complete collection's values,
// and after the held collection ends, a scrape returns the new ones.
func TestExporterScrapeDuringCollectionServesThePrevious(t *testing.T) {
	ctx := context.Background()
	c := testenv.StartRedis(t).Client(t)
	const cat, g = "shop::order", "app.Projector"
	f := testenv.Protean(t, c)
	f.Category(cat).Partition("h1").Entries(3).Group(g).Lease("node-a", 2, time.Minute).Read(1).Deliveries(4, time.Second)
	gt := newGate()
	c.AddHook(gt)
	col, err := exporter.New(exporter.Source{Inspector: inspect.New(c, broker.ProteanLayout)}, exporter.Config{Categories: []string{cat}, Interval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if err := col.Collect(ctx); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	sctx, cancel := context.WithCancel(ctx)
	served := make(chan error, 1)
	go func() { served <- col.Serve(sctx, ln) }()
	t.Cleanup(func() {
		cancel()
		if err := <-served; err != nil {
			t.Errorf("serve: %v", err)
		}
	})
	url := "http://" + ln.Addr().String() + "/metrics"
	first := scrape(t, url)
	if n := statusCount(t, first, inspect.StatusHalted); n != 1 {
		t.Fatalf("first collection: %v HALTED, want 1", n)
	}

	// A second halted partition, then a collection held at its first
	// Redis call.
	f.Category(cat).Partition("h2").Entries(3).Group(g).Lease("node-a", 2, time.Minute).Read(1).Deliveries(4, time.Second)
	gt.armed.Store(true)
	collected := make(chan error, 1)
	go func() { collected <- col.Collect(ctx) }()
	<-gt.entered
	during := scrape(t, url)
	if n := statusCount(t, during, inspect.StatusHalted); n != 1 {
		t.Errorf("scrape during the held collection: %v HALTED, want the previous collection's 1", n)
	}
	last := func(fams map[string]*dto.MetricFamily) float64 {
		return value(fams["protctl_exporter_last_collect_seconds"].GetMetric()[0])
	}
	if last(during) != last(first) {
		t.Errorf("last_collect_seconds moved during the held collection: %v, was %v", last(during), last(first))
	}
	gt.armed.Store(false)
	close(gt.released)
	if err := <-collected; err != nil {
		t.Fatal(err)
	}
	after := scrape(t, url)
	if n := statusCount(t, after, inspect.StatusHalted); n != 2 {
		t.Errorf("after the collection: %v HALTED, want 2", n)
	}
	if last(after) <= last(first) {
		t.Errorf("last_collect_seconds %v did not move past %v", last(after), last(first))
	}
}

// TestExporterETAFromTwoCollections: the ETA gauges are NaN after one
// collection; after a second, a draining partition has a finite ETA
// (its backlog over the rate it shrank by), one whose backlog did not
// shrink +Inf, and the group its whole backlog over its net rate.
func TestExporterETAFromTwoCollections(t *testing.T) {
	ctx := context.Background()
	c := testenv.StartRedis(t).Client(t)
	const cat, g = "shop::order", "app.Projector"
	f := testenv.Protean(t, c)
	draining := f.Category(cat).Partition("draining").Entries(10).Group(g).Lease("node-a", 1, time.Minute)
	f.Category(cat).Partition("still").Entries(4).Group(g).Lease("node-a", 1, time.Minute)
	col, url := startExporter(t, exporter.Source{Inspector: inspect.New(c, broker.ProteanLayout)}, exporter.Config{Categories: []string{cat}, Interval: time.Hour})
	testenv.Eventually(t, 30*time.Second, "first collection", func() (bool, string) {
		return !col.Snapshot().At.IsZero(), fmt.Sprint(col.Snapshot().Errors)
	})
	eta := func(fams map[string]*dto.MetricFamily, name, key string) float64 {
		t.Helper()
		for _, m := range fams[name].GetMetric() {
			if l := labels(m); l["group"] == g && (key == "" || l["key"] == key) {
				return value(m)
			}
		}
		t.Fatalf("no %s for %q", name, key)
		return 0
	}
	one := scrape(t, url)
	for _, v := range []float64{eta(one, "protctl_group_eta_seconds", ""), eta(one, "protctl_partition_eta_seconds", "draining")} {
		if !math.IsNaN(v) {
			t.Errorf("ETA after one collection %v, want NaN", v)
		}
	}
	draining.Read(6).Ack(6) // 10 -> 4 waiting
	if err := col.Collect(ctx); err != nil {
		t.Fatal(err)
	}
	two := scrape(t, url)
	if v := eta(two, "protctl_partition_eta_seconds", "draining"); math.IsNaN(v) || math.IsInf(v, 0) || v <= 0 {
		t.Errorf("draining partition's ETA %v, want a finite positive number", v)
	}
	if v := eta(two, "protctl_partition_eta_seconds", "still"); !math.IsInf(v, 1) {
		t.Errorf("still partition's ETA %v, want +Inf", v)
	}
	// The group: 8 waiting, 6 handled between the collections. Its ETA
	// is 8 / (6/dt) and the draining partition's 4 / (6/dt): twice it.
	ge, pe := eta(two, "protctl_group_eta_seconds", ""), eta(two, "protctl_partition_eta_seconds", "draining")
	if math.Abs(ge-2*pe) > 1e-3*ge+0.002 {
		t.Errorf("group ETA %v, want twice the draining partition's %v", ge, pe)
	}
}
