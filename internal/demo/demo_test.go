package demo_test

import (
	"bytes"
	"context"
	goruntime "runtime"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/protctl/protctl/internal/demo"
	"github.com/protctl/protctl/internal/inspect"
	"github.com/protctl/protctl/internal/testenv"
	"github.com/protctl/protctl/pkg/broker"
)

// fast is a demo config that produces parked partitions within seconds.
func fast(cfg demo.Config) demo.Config {
	cfg.Keys, cfg.Rate, cfg.PoisonEvery, cfg.Work = 100, 400, 60, time.Millisecond
	cfg.LeaseTTL, cfg.RenewEvery = 2*time.Second, 400*time.Millisecond
	return cfg
}

func run(t *testing.T, cfg demo.Config, until func(demo.Stats) bool, before ...func(*demo.Demo)) (*demo.Demo, demo.Stats) {
	t.Helper()
	d, err := demo.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := d.Start(ctx); err != nil {
		t.Fatal(err)
	}
	stopped := false
	stop := func() {
		if stopped {
			return
		}
		stopped = true
		sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		if err := d.Stop(sctx); err != nil {
			t.Errorf("stop: %v", err)
		}
	}
	t.Cleanup(stop)
	testenv.Eventually(t, 2*time.Minute, "the demo to get there", func() (bool, string) {
		st := d.Stats(ctx)
		return until(st), st.Line()
	})
	for _, f := range before {
		f(d)
	}
	stop()
	return d, d.Stats(ctx)
}

func checkStats(t *testing.T, st demo.Stats) {
	t.Helper()
	if st.Redis.OrderViolations != 0 {
		t.Errorf("%d order violations", st.Redis.OrderViolations)
	}
	if st.Parked == 0 || st.Redis.Failed == 0 {
		t.Errorf("no poison message was parked: %s", st.Line())
	}
	if st.Redis.Processed == 0 || st.Redis.Lag < 0 || st.Redis.Lag > st.Published {
		t.Errorf("processed %d, lag %d of %d", st.Redis.Processed, st.Redis.Lag, st.Published)
	}
	busy := 0
	for _, n := range st.Nodes {
		if n.Processed > 0 {
			busy++
		}
	}
	if len(st.Nodes) != 3 || busy != 3 {
		t.Errorf("want 3 nodes sharing the work: %+v", st.Nodes)
	}
	var b bytes.Buffer
	st.Summary(&b, "test", "")
	for _, want := range []string{"processed", "parked", "order       kept", "gone now the demo ended"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("summary lacks %q:\n%s", want, b.String())
		}
	}
}

func TestDemoInMemory(t *testing.T) {
	baseline := goruntime.NumGoroutine()
	d, st := run(t, fast(demo.Config{}), func(s demo.Stats) bool { return s.Redis.Processed >= 1500 && s.Parked >= 2 })
	checkStats(t, st)
	if !d.InMemory() {
		t.Error("not in memory")
	}

	// The dashboard's source reads the same state.
	src := d.Source()
	ctx := context.Background()
	cats, _ := src.Categories(ctx)
	if len(cats) != 1 || cats[0] != demo.Category {
		t.Fatalf("categories %v", cats)
	}
	var parts []inspect.Partition
	if err := src.Partitions(ctx, demo.Category, func(p []inspect.Partition) error { parts = append(parts, p...); return nil }); err != nil {
		t.Fatal(err)
	}
	parkedRows, sum := 0, int64(0)
	for _, p := range parts {
		g, ok := p.Group(demo.Subscription)
		if !ok || g.Lag == nil || g.Parked == nil || g.Generation == nil {
			t.Fatalf("partition %s: group %+v", p.Key, g)
		}
		if *g.Parked {
			parkedRows++
		}
		sum += p.Length
		// Healthy partitions (nothing waits, or parked) are held or
		// released, never expired; a held lease shows its TTL.
		caughtUp := g.Pending == 0 && *g.Lag == 0
		if (caughtUp || *g.Parked) && g.LeaseState != inspect.LeaseHeld && g.LeaseState != inspect.LeaseReleased {
			t.Errorf("partition %s (pending %d, lag %d, parked %v): lease state %q", p.Key, g.Pending, *g.Lag, *g.Parked, g.LeaseState)
		}
		if g.LeaseState == inspect.LeaseHeld && (g.Lease == nil || g.Lease.TTLMs == nil || *g.Lease.TTLMs <= 0) {
			t.Errorf("partition %s: held lease without a TTL: %+v", p.Key, g.Lease)
		}
	}
	if len(parts) == 0 || parkedRows != st.Parked || sum != st.Published {
		t.Errorf("%d partitions, %d parked (want %d), %d entries (want %d)", len(parts), parkedRows, st.Parked, sum, st.Published)
	}
	if _, err := src.Explain(ctx, demo.Category, parts[0].Key); err != nil {
		t.Error(err)
	}
	if _, err := src.Explain(ctx, demo.Category, "nope"); err == nil {
		t.Error("explained a missing partition")
	}
	leases, err := src.Leases(ctx)
	if err != nil || len(leases) != len(parts) {
		t.Errorf("leases: %d %v", len(leases), err)
	}
	for _, l := range leases {
		if l.State == "" || (l.State == inspect.LeaseHeld && l.TTLMs == nil) {
			t.Errorf("lease %s: state %q ttl %v", l.Key, l.State, l.TTLMs)
		}
	}
	parked, err := src.Parked(ctx)
	if err != nil || len(parked) != st.Parked {
		t.Errorf("parked: %d %v", len(parked), err)
	}
	if _, err := src.Topics(ctx); err == nil {
		t.Error("topics without Kafka")
	}

	// Stop ended every goroutine the demo started (nodes, publisher).
	testenv.Eventually(t, 10*time.Second, "the demo's goroutines to end", testenv.GoroutinesAtMost(baseline))
}

// With a Redis client the demo runs on it, and what it leaves is what
// `protctl partitions ls demo::order` reads.
func TestDemoOnRedis(t *testing.T) {
	srv := testenv.StartRedis(t)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer c.Close()
	d, st := run(t, fast(demo.Config{Redis: c}), func(s demo.Stats) bool { return s.Redis.Processed >= 1000 && s.Parked >= 1 })
	checkStats(t, st)
	if d.InMemory() || d.Source() != nil {
		t.Error("in memory on Redis")
	}
	ins := inspect.New(c, broker.ProteanLayout)
	parts, err := ins.Partitions(context.Background(), demo.Category, inspect.PartitionOptions{})
	if err != nil || len(parts) == 0 {
		t.Fatalf("inspect: %d partitions, %v", len(parts), err)
	}
}

func TestDemoKafka(t *testing.T) {
	brokers, stopKafka, err := demo.EmbeddedKafka()
	if err != nil {
		t.Fatal(err)
	}
	defer stopKafka()
	_, st := run(t, fast(demo.Config{Kafka: brokers}), func(s demo.Stats) bool {
		return s.Kafka != nil && s.Kafka.Processed >= 500 && s.Redis.Processed >= 500
	}, func(d *demo.Demo) {
		topics, err := d.Source().Topics(context.Background())
		if err != nil || len(topics) != demo.TopicPartitions {
			t.Fatalf("topics: %d %v", len(topics), err)
		}
		held := 0
		for _, tp := range topics {
			if tp.Owner != nil {
				held++
			}
		}
		if held == 0 {
			t.Errorf("no topic partition leased: %+v", topics)
		}
	})
	if st.Kafka.OrderViolations != 0 || st.Redis.OrderViolations != 0 {
		t.Errorf("order violations: kafka %d, redis %d", st.Kafka.OrderViolations, st.Redis.OrderViolations)
	}
}
