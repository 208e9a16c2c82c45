package inspect_test

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/protctl/protctl/internal/inspect"
	"github.com/protctl/protctl/internal/testenv"
	"github.com/protctl/protctl/pkg/broker"
	"github.com/protctl/protctl/pkg/runtime/kafkasource"
	"github.com/protctl/protctl/pkg/runtime/ledger"
	"github.com/protctl/protctl/pkg/runtime/redisstore"
	"github.com/protctl/protctl/pkg/runtime/source"
)

// statusFixture lays down, in Protean's layout, one partition of
// shop::order per status for group app.Projector, and returns the
// expected status of each key:
//
//	ok        lease held, caught up
//	working   lease held, two young entries, one pending (young work is OK)
//	idle      no lease, caught up
//	lagging   lease held, 3 entries 2m old not delivered
//	stalled   lease held, head pending 10m, delivered once
//	halted    lease held (the worker renewing), head delivered 3 times
//	orphaned  lease expired, 4 entries 5m old, 1 pending
//	parked    lease released, the aggregate parked in the ledger
func statusFixture(t *testing.T) (redis.UniversalClient, *redisstore.Store, map[string]inspect.Status) {
	t.Helper()
	ctx := context.Background()
	c := testenv.StartRedis(t).Client(t)
	const cat, g = "shop::order", "app.Projector"
	f := testenv.Protean(t, c)
	o := f.Category(cat)
	old := func(d time.Duration) time.Time { return time.Now().Add(-d) }
	o.Partition("ok").Entries(3).Group(g).Lease("node-a", 4, time.Minute).Read(3).Ack(3)
	o.Partition("working").Entries(2).Group(g).Lease("node-a", 2, time.Minute).Read(1)
	o.Partition("idle").Entries(2).Group(g).Consumer("node-a:1").Read(2).Ack(2).ExpiredLease(1)
	o.Partition("lagging").At(old(2*time.Minute)).Entries(3).Group(g).Lease("node-a", 3, time.Minute)
	o.Partition("stalled").At(old(20*time.Minute)).Entries(2).Group(g).Lease("node-b", 5, time.Minute).Read(1).Deliveries(1, 10*time.Minute)
	o.Partition("halted").At(old(time.Minute)).Entries(2).Group(g).Lease("node-b", 7, time.Minute).Read(1).Deliveries(3, time.Second)
	o.Partition("orphaned").At(old(5 * time.Minute)).Entries(4).Group(g).Consumer("node-c:2").Read(1).ExpiredLease(2)
	parked := o.Partition("parked").Entries(2).Group(g).Lease("node-c", 3, time.Minute).Read(1)
	store := redisstore.New(c)
	fence := broker.Fence{LeaseKey: parked.LeaseKey(), Token: "node-c:3"}
	if err := store.Park(ctx, fence, ledger.Parked{
		Subscription: g, Source: source.Redis, Aggregate: "parked", Category: cat,
		Partition: "parked", Position: parked.IDs()[0], Error: "boom", Attempts: 3,
	}); err != nil {
		t.Fatal(err)
	}
	parked.ExpiredLease(3)
	return c, store, map[string]inspect.Status{
		"ok": inspect.StatusOK, "working": inspect.StatusOK, "idle": inspect.StatusIdle,
		"lagging": inspect.StatusLagging, "stalled": inspect.StatusStalled, "halted": inspect.StatusHalted,
		"orphaned": inspect.StatusOrphaned, "parked": inspect.StatusHalted,
	}
}

func TestStatusOfEveryRedisPartition(t *testing.T) {
	ctx := context.Background()
	c, store, want := statusFixture(t)
	const cat, g = "shop::order", "app.Projector"
	in := inspect.New(c, broker.ProteanLayout, inspect.WithLedger(store))
	ps, err := in.Partitions(ctx, cat, inspect.PartitionOptions{Health: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(ps) != len(want) {
		t.Fatalf("%d partitions, want %d", len(ps), len(want))
	}
	for _, p := range ps {
		gr, _ := p.Group(g)
		if gr.Health == nil || gr.Health.Status != want[p.Key] {
			t.Errorf("ls %s: health %+v, want %s", p.Key, gr.Health, want[p.Key])
		}
		// partitions show decides the same.
		d, err := in.Partition(ctx, cat, p.Key, inspect.ExplainOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got := d.Groups[0].Health; got == nil || got.Status != want[p.Key] {
			t.Errorf("show %s: health %+v, want %s", p.Key, got, want[p.Key])
		}
	}
	// Without Health nothing is read or shown.
	plain, err := in.Partitions(ctx, cat, inspect.PartitionOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range plain {
		if p.Groups[0].Health != nil {
			t.Errorf("%s: health %+v without PartitionOptions.Health", p.Key, p.Groups[0].Health)
		}
	}
}

// TestStatusProteanHaltedAndOrphaned is the acceptance fixture: Protean's
// standard scenario's halted partition (a head delivered again and
// again, the worker renewing its lease) and an orphaned one (an expired
// lease with work left older than the TTL).
func TestStatusProteanHaltedAndOrphaned(t *testing.T) {
	ctx := context.Background()
	c := testenv.StartRedis(t).Client(t)
	s := testenv.ProteanStandard(t, c)
	f := testenv.Protean(t, c)
	f.Category(s.Orders).Partition("gone").At(time.Now().Add(-10 * time.Minute)).Entries(3).
		Group(s.Projector).Consumer("worker-9:4").Read(1).ExpiredLease(4)
	in := inspect.New(c, broker.ProteanLayout)
	ps, err := in.PartitionsByKey(ctx, s.Orders, []string{s.Halted, "gone"}, inspect.PartitionOptions{Group: s.Projector, Health: true})
	if err != nil {
		t.Fatal(err)
	}
	h := ps[0].Groups[0].Health
	if h.Status != inspect.StatusHalted || h.HeadDeliveries < 3 || ps[0].Groups[0].Lease == nil {
		t.Errorf("halted: %+v lease %+v", h, ps[0].Groups[0].Lease)
	}
	o := ps[1].Groups[0].Health
	if o.Status != inspect.StatusOrphaned || o.LagSeconds == nil || *o.LagSeconds < 590 || *o.LagEntries != 3 {
		t.Errorf("orphaned: %+v", o)
	}
}

func TestLagSecondsFromStreamIDs(t *testing.T) {
	ctx := context.Background()
	c := testenv.StartRedis(t).Client(t)
	const cat, g = "shop::order", "app.Projector"
	f := testenv.Protean(t, c)
	at := time.Now().Add(-90 * time.Second)
	p := f.Category(cat).Partition("k").At(at).Entries(2).At(time.Time{}).Entries(3).Group(g).Lease("n", 1, time.Minute)
	in := inspect.New(c, broker.ProteanLayout)
	read := func() *inspect.Health {
		t.Helper()
		ps, err := in.Partitions(ctx, cat, inspect.PartitionOptions{Health: true})
		if err != nil {
			t.Fatal(err)
		}
		return ps[0].Groups[0].Health
	}
	h := read()
	// The oldest undelivered entry is 90s old (its id's time against the
	// server's clock); a second of slack for the test's own run.
	if h.LagSeconds == nil || *h.LagSeconds < 90 || *h.LagSeconds > 100 || *h.LagEntries != 5 || h.Status != inspect.StatusLagging {
		t.Fatalf("health %+v", h)
	}
	if *h.OldestUnhandledID != p.IDs()[0] {
		t.Errorf("oldest %s, want %s", *h.OldestUnhandledID, p.IDs()[0])
	}
	// Deliver and ack the two old ones: the lag is now the young entries.
	p.Read(2).Ack(2)
	if h := read(); h.LagSeconds == nil || *h.LagSeconds > 30 || *h.LagEntries != 3 || h.Status != inspect.StatusOK {
		t.Fatalf("after ack: health %+v", h)
	}
	// Pending entries count as unhandled, and the head's deliveries show.
	p.Read(1)
	if h := read(); *h.LagEntries != 3 || h.HeadDeliveries != 1 || h.HeadIdleMs == nil || h.Consumers != 1 {
		t.Fatalf("pending: health %+v", h)
	}
}

// TestETAFromTwoCollections reads a backlog twice with work done in
// between and derives the drain rate and ETA from the two observations
// (their times given, so the figures are exact).
func TestETAFromTwoCollections(t *testing.T) {
	ctx := context.Background()
	c := testenv.StartRedis(t).Client(t)
	const cat, g = "shop::order", "app.Projector"
	f := testenv.Protean(t, c)
	p := f.Category(cat).Partition("k").At(time.Now().Add(-time.Hour)).Entries(10).Group(g).Lease("n", 1, time.Minute)
	in := inspect.New(c, broker.ProteanLayout)
	read := func() inspect.Health {
		t.Helper()
		ps, err := in.Partitions(ctx, cat, inspect.PartitionOptions{Health: true})
		if err != nil {
			t.Fatal(err)
		}
		return *ps[0].Groups[0].Health
	}
	t0 := time.Unix(1_700_000_000, 0)
	first := read()
	p.Read(4).Ack(4)
	second := read()
	prev, cur := first.Observation(t0), second.Observation(t0.Add(10*time.Second))
	second.Observe(prev, cur, t0, true, false, false, inspect.Thresholds{})
	if second.DrainRate == nil || *second.DrainRate != 0.4 || second.ETASeconds == nil || *second.ETASeconds != 15 {
		t.Fatalf("drain %v eta %v, want 0.4/s and 15s", deref(second.DrainRate), deref(second.ETASeconds))
	}
	if second.Status != inspect.StatusLagging {
		t.Errorf("status %s: it moved, so LAGGING", second.Status)
	}
	// A third collection with no progress for longer than StallAfter is
	// STALLED, and no ETA (the backlog does not shrink).
	third := read()
	t2 := t0.Add(10*time.Second + 6*time.Minute)
	third.Observe(cur, third.Observation(t2), t0.Add(10*time.Second), true, false, false, inspect.Thresholds{})
	if third.Status != inspect.StatusStalled || third.ETASeconds != nil || *third.DrainRate != 0 {
		t.Fatalf("third: %s eta %v rate %v", third.Status, deref(third.ETASeconds), deref(third.DrainRate))
	}
}

func deref(p *float64) float64 {
	if p == nil {
		return math.NaN()
	}
	return *p
}

func TestStatusPrecedenceAndPause(t *testing.T) {
	d := func(x time.Duration) *time.Duration { return &x }
	for _, tc := range []struct {
		name string
		in   inspect.StatusInput
		want inspect.Status
	}{
		{"paused wins over halted", inspect.StatusInput{Paused: true, Parked: true, Unhandled: 3}, inspect.StatusPaused},
		{"parked is halted", inspect.StatusInput{Parked: true}, inspect.StatusHalted},
		{"poison head halts a held partition", inspect.StatusInput{Held: true, Unhandled: 1, HeadDeliveries: 3, HeadIdle: d(time.Hour)}, inspect.StatusHalted},
		{"unknown lag and no owner", inspect.StatusInput{LagUnknown: true}, inspect.StatusOrphaned},
		{"young work and no owner is idle", inspect.StatusInput{Unhandled: 2, OldestAge: d(time.Second)}, inspect.StatusIdle},
		{"old work unowned", inspect.StatusInput{Unhandled: 2, OldestAge: d(2 * time.Minute)}, inspect.StatusOrphaned},
		{"still too long", inspect.StatusInput{Held: true, Unhandled: 2, OldestAge: d(time.Second), StillFor: d(5 * time.Minute)}, inspect.StatusStalled},
		{"caught up held", inspect.StatusInput{Held: true}, inspect.StatusOK},
		{"caught up free", inspect.StatusInput{}, inspect.StatusIdle},
	} {
		if got := inspect.StatusOf(tc.in, inspect.Thresholds{}); got != tc.want {
			t.Errorf("%s: %s, want %s", tc.name, got, tc.want)
		}
	}
	// The pause input reaches listed groups through HealthOf.
	g := inspect.Group{Health: &inspect.Health{Status: inspect.StatusHalted, LagEntries: new(int64), HeadDeliveries: 5}}
	inspect.HealthOf(&g, true, inspect.Thresholds{})
	if g.Health.Status != inspect.StatusPaused {
		t.Errorf("paused: %s", g.Health.Status)
	}
	if _, err := inspect.ParseStatuses("halted,bogus"); err == nil {
		t.Error("ParseStatuses accepted bogus")
	}
}

// TestStatusOfEveryTopicPartition: kfake topic "events" (4 partitions)
// with records 5 minutes old, subscription "ledger":
//
//	p0: lease held, checkpoint 0 of 3     LAGGING, lag 3, ~300s
//	p1: lease expired, checkpoint 1 of 3  ORPHANED
//	p2: lease held, checkpoint 2 of 2     OK
//	p3: empty, never leased               IDLE
//	p0 for "fraud": parked                HALTED
func TestStatusOfEveryTopicPartition(t *testing.T) {
	ctx := context.Background()
	k := testenv.StartKafka(t, 4, "events")
	cl := k.Client(t)
	ts := time.Now().Add(-5 * time.Minute)
	var recs []*kgo.Record
	for p, n := range []int{3, 3, 2} {
		for range n {
			recs = append(recs, &kgo.Record{Topic: "events", Partition: int32(p), Value: []byte("v"), Timestamp: ts})
		}
	}
	k.Produce(t, cl, recs...)
	c := testenv.StartRedis(t).Client(t)
	store := redisstore.New(c)
	grp := redisstore.TopicLeaseGroup("shop", "events")
	save := func(p int32, token, sub string, next int64) {
		t.Helper()
		f := broker.Fence{LeaseKey: grp.LeaseKey(p), Token: token}
		if err := c.Set(ctx, f.LeaseKey, token, time.Minute).Err(); err != nil {
			t.Fatal(err)
		}
		if err := store.Save(ctx, f, grp.String(), sub, p, next); err != nil {
			t.Fatal(err)
		}
	}
	save(0, "node-a:4", "ledger", 0)
	save(0, "node-a:4", "fraud", 3)
	if err := store.Park(ctx, broker.Fence{LeaseKey: grp.LeaseKey(0), Token: "node-a:4"}, ledger.Parked{
		Subscription: "fraud", Source: source.Kafka, Aggregate: "a1", Topic: "events", Partition: "0", Position: "1", Error: "boom",
	}); err != nil {
		t.Fatal(err)
	}
	c.Set(ctx, grp.GenerationKey(0), "4", 0)
	save(1, "node-b:2", "ledger", 1)
	c.Del(ctx, grp.LeaseKey(1))
	c.Set(ctx, grp.GenerationKey(1), "2", 0)
	save(2, "node-a:1", "ledger", 2)
	src, err := kafkasource.New(k.Brokers)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(src.Close)

	in := inspect.New(c, broker.ProteanLayout, inspect.WithLedger(store))
	tp, err := in.Topic(ctx, src, "shop", "events", inspect.TopicOptions{Subscriptions: []string{"fraud", "ledger"}, Health: true})
	if err != nil {
		t.Fatal(err)
	}
	want := map[[2]any]inspect.Status{
		{int32(0), "ledger"}: inspect.StatusLagging, {int32(0), "fraud"}: inspect.StatusHalted,
		{int32(1), "ledger"}: inspect.StatusOrphaned, {int32(1), "fraud"}: inspect.StatusOrphaned,
		{int32(2), "ledger"}: inspect.StatusOK, {int32(2), "fraud"}: inspect.StatusLagging,
		{int32(3), "ledger"}: inspect.StatusIdle, {int32(3), "fraud"}: inspect.StatusIdle,
	}
	for _, p := range tp.Partitions {
		for _, s := range p.Subscriptions {
			w := want[[2]any{p.Partition, s.Name}]
			if s.Health == nil || s.Health.Status != w {
				t.Errorf("p%d %s: %+v, want %s", p.Partition, s.Name, s.Health, w)
			}
		}
	}
	h := tp.Partitions[0].Subscriptions[1].Health // ledger on p0
	if *h.LagEntries != 3 || h.LagSeconds == nil || *h.LagSeconds < 299 || *h.LagSeconds > 330 {
		t.Errorf("p0 ledger lag: %+v", h)
	}
	// ETA from two collections: the checkpoint moves from 0 to 2.
	prev := h.Observation(time.Unix(100, 0))
	save(0, "node-a:4", "ledger", 2)
	tp2, err := in.Topic(ctx, src, "shop", "events", inspect.TopicOptions{Subscriptions: []string{"ledger"}, Health: true})
	if err != nil {
		t.Fatal(err)
	}
	h2 := tp2.Partitions[0].Subscriptions[0].Health
	h2.Observe(prev, h2.Observation(time.Unix(104, 0)), time.Unix(104, 0), true, false, false, inspect.Thresholds{})
	if *h2.DrainRate != 0.5 || h2.ETASeconds == nil || *h2.ETASeconds != 2 {
		t.Errorf("drain %v eta %v, want 0.5/s and 2s", deref(h2.DrainRate), deref(h2.ETASeconds))
	}
}
