package testenv

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/protctl/protctl/pkg/broker"
)

// ProteanFixture lays down Redis state the way a Protean deployment
// writes it, with plain Redis commands only (no protctl code), so that
// inspect and repair are tested against data they did not write:
//
//	XADD C:K * data <json envelope>           an entry of partition K
//	SADD C:__partitions__ K                   the index
//	XGROUP CREATE C:K G 0 MKSTREAM            a subscription's group
//	XREADGROUP GROUP G <consumer> ... >       entries delivered (pending)
//	XACK, XCLAIM ... IDLE ms RETRYCOUNT n     acks, redeliveries
//	SET G:K:__lease__ owner:gen PX ttl        a held lease
//	SET G:K:__generation__ gen                the fence counter
//
// The builder is fluent and eager: each call runs its commands at once
// and fails the test on error, so the state after a call is exactly what
// the calls so far describe:
//
//	f := testenv.Protean(t, client)
//	f.Category("shop::order").
//		Partition("o-1").Entries(5).
//		Group("g").Lease("node-a", 4, 10*time.Second).Read(3).Ack(2).
//		Partition("o-2").Entries(2).Backfill().Entries(3).Main().
//		Group("g").Read(2).Ack(2)
//
// Read delivers to the current consumer: the token of the partition's
// lease for the current group when one was set (Protean names consumers
// after the lease value), otherwise "fixture-consumer", or what Consumer
// set. Entries go to the current lane (Main by default, Backfill after
// Backfill()); Group, Read, Ack and Deliveries act on the current lane.
type ProteanFixture struct {
	t      testing.TB
	c      redis.UniversalClient
	layout broker.Layout
	ctx    context.Context
	seq    int
}

// Protean returns a builder writing through c in the Protean layout.
func Protean(t testing.TB, c redis.UniversalClient) *ProteanFixture {
	t.Helper()
	return &ProteanFixture{t: t, c: c, layout: broker.ProteanLayout, ctx: context.Background()}
}

// WithLayout switches the key layout (broker.ClusterLayout puts keys in
// hash tags). Call it before Category.
func (f *ProteanFixture) WithLayout(l broker.Layout) *ProteanFixture {
	f.layout = l
	return f
}

// Layout is the fixture's key layout.
func (f *ProteanFixture) Layout() broker.Layout { return f.layout }

// Client is the client the fixture writes through.
func (f *ProteanFixture) Client() redis.UniversalClient { return f.c }

// Category starts (or continues) a category.
func (f *ProteanFixture) Category(name string) *ProteanCategory {
	return &ProteanCategory{f: f, name: name}
}

func (f *ProteanFixture) do(args ...any) any {
	f.t.Helper()
	v, err := f.c.Do(f.ctx, args...).Result()
	if err != nil && err != redis.Nil {
		f.t.Fatalf("testenv: protean fixture: %v: %v", args, err)
	}
	return v
}

// ProteanCategory is a category being built.
type ProteanCategory struct {
	f    *ProteanFixture
	name string
}

// Name is the category's name.
func (c *ProteanCategory) Name() string { return c.name }

// RegisterGroup adds groups to C:__groups__ (protctl's registry; Protean
// itself does not write it).
func (c *ProteanCategory) RegisterGroup(groups ...string) *ProteanCategory {
	c.f.t.Helper()
	for _, g := range groups {
		c.f.do("SADD", c.f.layout.GroupsKey(c.name), g)
	}
	return c
}

// Partition starts (or continues) partition key: it adds key to the
// index at once (as Protean's publish does) and selects the main lane.
func (c *ProteanCategory) Partition(key string) *ProteanPartition {
	c.f.t.Helper()
	c.f.do("SADD", c.f.layout.IndexKey(c.name), key)
	return &ProteanPartition{c: c, key: key, consumer: map[string]string{}}
}

// Fixture returns the builder.
func (c *ProteanCategory) Fixture() *ProteanFixture { return c.f }

// ProteanPartition is a partition being built.
type ProteanPartition struct {
	c        *ProteanCategory
	key      string
	lane     string // "" = main, else the suffix
	group    string
	consumer map[string]string // group -> explicit consumer
	at       time.Time         // explicit entry time, zero = server time
}

// Key is the partition key.
func (p *ProteanPartition) Key() string { return p.key }

// Category is the partition's category builder (to start a sibling
// category: p.Category().Fixture().Category("other")).
func (p *ProteanPartition) Category() *ProteanCategory { return p.c }

// Partition continues with another partition of the same category.
func (p *ProteanPartition) Partition(key string) *ProteanPartition {
	p.c.f.t.Helper()
	return p.c.Partition(key)
}

// Stream is the current lane's stream name.
func (p *ProteanPartition) Stream() string {
	return p.c.f.layout.LaneStream(p.c.name, p.key, p.lane)
}

// LeaseKey and GenerationKey are the current group's lease keys.
func (p *ProteanPartition) LeaseKey() string {
	return p.c.f.layout.LeaseKey(p.mustGroup(), p.key)
}

// GenerationKey is the current group's generation key.
func (p *ProteanPartition) GenerationKey() string {
	return p.c.f.layout.GenerationKey(p.mustGroup(), p.key)
}

// Main selects the main lane.
func (p *ProteanPartition) Main() *ProteanPartition { p.lane = ""; return p }

// Backfill selects the backfill lane (suffix broker.DefaultBackfillSuffix).
func (p *ProteanPartition) Backfill() *ProteanPartition {
	p.lane = broker.DefaultBackfillSuffix
	return p
}

// Lane selects a lane by suffix ("" is the main lane).
func (p *ProteanPartition) Lane(suffix string) *ProteanPartition { p.lane = suffix; return p }

// At makes the following entries' ids carry t's milliseconds (ms-*), so
// a partition can look old to reap's minIdle; the zero time goes back
// to the server's clock (*). Ids must grow: t must not be earlier than
// the lane's newest entry.
func (p *ProteanPartition) At(t time.Time) *ProteanPartition { p.at = t; return p }

// Entries appends n envelopes to the current lane.
func (p *ProteanPartition) Entries(n int) *ProteanPartition {
	p.c.f.t.Helper()
	for i := 0; i < n; i++ {
		p.c.f.seq++
		p.Entry("test.OrderPlaced.v1", map[string]any{"seq": p.c.f.seq, "key": p.key})
	}
	return p
}

// Entry appends one envelope of the given type with data as its payload.
func (p *ProteanPartition) Entry(typ string, data any) *ProteanPartition {
	p.c.f.t.Helper()
	env := map[string]any{
		"data": data,
		"metadata": map[string]any{
			"headers": map[string]any{
				"id":          fmt.Sprintf("evt-%s-%d", p.key, p.c.f.seq),
				"type":        typ,
				"time":        time.Now().UTC().Format(time.RFC3339Nano),
				"stream":      p.c.name + "-" + p.key,
				"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
			},
			"domain": map[string]any{"fqn": "test." + typ, "kind": "EVENT", "sequence_id": strconv.Itoa(p.c.f.seq)},
		},
	}
	b, err := json.Marshal(env)
	if err != nil {
		p.c.f.t.Fatalf("testenv: protean fixture: %v", err)
	}
	return p.RawEntry(string(b))
}

// RawEntry appends an entry whose data field is raw (not necessarily an
// envelope), as another tool might have written it.
func (p *ProteanPartition) RawEntry(raw string) *ProteanPartition {
	p.c.f.t.Helper()
	id := "*"
	if !p.at.IsZero() {
		id = strconv.FormatInt(p.at.UnixMilli(), 10) + "-*"
	}
	p.c.f.do("XADD", p.Stream(), id, broker.DataField, raw)
	return p
}

// Group creates group on the current lane from id 0 (MKSTREAM), as
// Protean does, and makes it the current group. Creating an existing
// group only selects it.
func (p *ProteanPartition) Group(name string) *ProteanPartition {
	p.c.f.t.Helper()
	p.group = name
	_, err := p.c.f.c.XGroupCreateMkStream(p.c.f.ctx, p.Stream(), name, "0").Result()
	if err != nil && !isBusyGroup(err) {
		p.c.f.t.Fatalf("testenv: protean fixture: XGROUP CREATE %s %s: %v", p.Stream(), name, err)
	}
	return p
}

// UseGroup makes group current without creating it on any lane (for
// leases of a group that has not read yet).
func (p *ProteanPartition) UseGroup(name string) *ProteanPartition { p.group = name; return p }

func isBusyGroup(err error) bool {
	return err != nil && len(err.Error()) >= 9 && err.Error()[:9] == "BUSYGROUP"
}

func (p *ProteanPartition) mustGroup() string {
	p.c.f.t.Helper()
	if p.group == "" {
		p.c.f.t.Fatalf("testenv: protean fixture: partition %q: call Group first", p.key)
	}
	return p.group
}

// Consumer sets the consumer name the current group reads as, instead of
// the lease token.
func (p *ProteanPartition) Consumer(name string) *ProteanPartition {
	p.consumer[p.mustGroup()] = name
	return p
}

// ConsumerName is the consumer Read uses for the current group.
func (p *ProteanPartition) ConsumerName() string {
	g := p.mustGroup()
	if c := p.consumer[g]; c != "" {
		return c
	}
	if v, err := p.c.f.c.Get(p.c.f.ctx, p.c.f.layout.LeaseKey(g, p.key)).Result(); err == nil && v != "" {
		return v
	}
	return "fixture-consumer"
}

// Read delivers the next n entries of the current lane to the current
// group (XREADGROUP >), leaving them pending.
func (p *ProteanPartition) Read(n int) *ProteanPartition {
	p.c.f.t.Helper()
	g := p.mustGroup()
	p.c.f.do("XREADGROUP", "GROUP", g, p.ConsumerName(), "COUNT", n, "STREAMS", p.Stream(), ">")
	return p
}

// Ack acknowledges the n oldest pending entries of the current group on
// the current lane.
func (p *ProteanPartition) Ack(n int) *ProteanPartition {
	p.c.f.t.Helper()
	g := p.mustGroup()
	pend, err := p.c.f.c.XPendingExt(p.c.f.ctx, &redis.XPendingExtArgs{Stream: p.Stream(), Group: g, Start: "-", End: "+", Count: int64(n)}).Result()
	if err != nil {
		p.c.f.t.Fatalf("testenv: protean fixture: XPENDING: %v", err)
	}
	if len(pend) < n {
		p.c.f.t.Fatalf("testenv: protean fixture: Ack(%d) but only %d pending on %s for %s", n, len(pend), p.Stream(), g)
	}
	for _, e := range pend {
		p.c.f.do("XACK", p.Stream(), g, e.ID)
	}
	return p
}

// Deliveries sets the delivery count of the current group's oldest
// pending entry on the current lane to n and its idle time to idle
// (XCLAIM to the same consumer with IDLE and RETRYCOUNT), as n failed
// attempts by the owner would leave it: a poison head.
func (p *ProteanPartition) Deliveries(n int, idle time.Duration) *ProteanPartition {
	p.c.f.t.Helper()
	g := p.mustGroup()
	pend, err := p.c.f.c.XPendingExt(p.c.f.ctx, &redis.XPendingExtArgs{Stream: p.Stream(), Group: g, Start: "-", End: "+", Count: 1}).Result()
	if err != nil || len(pend) == 0 {
		p.c.f.t.Fatalf("testenv: protean fixture: Deliveries: nothing pending on %s for %s (%v)", p.Stream(), g, err)
	}
	p.c.f.do("XCLAIM", p.Stream(), g, pend[0].Consumer, 0, pend[0].ID,
		"IDLE", idle.Milliseconds(), "RETRYCOUNT", n, "JUSTID")
	return p
}

// Lease sets the current group's lease to owner:generation with ttl and
// its generation counter to generation, as a Protean instance holding
// the partition leaves them.
func (p *ProteanPartition) Lease(owner string, generation int64, ttl time.Duration) *ProteanPartition {
	p.c.f.t.Helper()
	g := p.mustGroup()
	l := p.c.f.layout
	p.c.f.do("SET", l.GenerationKey(g, p.key), generation)
	p.c.f.do("SET", l.LeaseKey(g, p.key), broker.FenceToken(owner, generation), "PX", ttl.Milliseconds())
	return p
}

// ExpiredLease leaves what an expired lease leaves: the generation
// counter at generation and no lease key.
func (p *ProteanPartition) ExpiredLease(generation int64) *ProteanPartition {
	p.c.f.t.Helper()
	g := p.mustGroup()
	l := p.c.f.layout
	p.c.f.do("SET", l.GenerationKey(g, p.key), generation)
	p.c.f.do("DEL", l.LeaseKey(g, p.key))
	return p
}

// Unindexed removes the partition from the index (its streams stay): an
// orphan stream for fsck.
func (p *ProteanPartition) Unindexed() *ProteanPartition {
	p.c.f.t.Helper()
	p.c.f.do("SREM", p.c.f.layout.IndexKey(p.c.name), p.key)
	return p
}

// IDs returns the current lane's entry ids, oldest first.
func (p *ProteanPartition) IDs() []string {
	p.c.f.t.Helper()
	msgs, err := p.c.f.c.XRange(p.c.f.ctx, p.Stream(), "-", "+").Result()
	if err != nil {
		p.c.f.t.Fatalf("testenv: protean fixture: XRANGE: %v", err)
	}
	ids := make([]string, len(msgs))
	for i, m := range msgs {
		ids[i] = m.ID
	}
	return ids
}

// ProteanScenario is the standard fixture ProteanStandard lays down.
// Every name below is a field so tests refer to them, not to literals.
//
//	category Orders ("shop::order"), group Projector ("app.OrderProjector"):
//	  Healthy  "o-healthy"  10 entries, all read and acked, lease held by
//	                        node-a generation 3 (TTL 30s)
//	  Lagging  "o-lagging"  8 entries, 3 read and acked, 5 not delivered,
//	                        lease expired (generation 2, no lease key)
//	  Backfill "o-backfill" main: 2 entries read and acked; backfill lane:
//	                        4 entries, 1 pending, lease held by node-b gen 1
//	  Halted   "o-halted"   5 entries; head pending to HaltedToken
//	                        ("worker-1:5"), delivered PoisonDeliveries (7)
//	                        times, idle 3m; lease held by worker-1 gen 5
//	  Cold     "o-cold"     3 entries a day old, all read and acked, no
//	                        lease: reapable
//	  Never    "o-never"    2 entries, group never created: reap refuses
//	category Payments ("billing::payment"), groups Ledger ("ledger-sync")
//	and Audit ("audit"):
//	  Pay1     "p-1"        6 entries; ledger-sync read 6 acked 6, audit
//	                        read 2 acked 1 (pins a trim at entry 2)
//	  Orphan   "p-orphan"   a stream not in the index
//	  Ghost    "p-ghost"    in the index, no stream
type ProteanScenario struct {
	Orders, Payments            string
	Projector, Ledger, Audit    string
	Healthy, Lagging, Backfill  string
	Halted, Cold, Never         string
	Pay1, Orphan, Ghost         string
	HaltedToken                 string
	HaltedOwner                 string
	HaltedGeneration            int64
	PoisonDeliveries            int64
	HaltedIDs, Pay1IDs          []string
	HealthyToken, BackfillToken string
	ColdEntriesAt               time.Time
}

// ProteanStandard lays down the ProteanScenario state and returns its
// names. The server should be empty (call FlushAll first when sharing).
func ProteanStandard(t testing.TB, c redis.UniversalClient) ProteanScenario {
	t.Helper()
	s := ProteanScenario{
		Orders: "shop::order", Payments: "billing::payment",
		Projector: "app.OrderProjector", Ledger: "ledger-sync", Audit: "audit",
		Healthy: "o-healthy", Lagging: "o-lagging", Backfill: "o-backfill",
		Halted: "o-halted", Cold: "o-cold", Never: "o-never",
		Pay1: "p-1", Orphan: "p-orphan", Ghost: "p-ghost",
		HaltedOwner: "worker-1", HaltedGeneration: 5, HaltedToken: "worker-1:5",
		PoisonDeliveries: 7,
		HealthyToken:     "node-a:3", BackfillToken: "node-b:1",
		ColdEntriesAt: time.Now().Add(-24 * time.Hour).Truncate(time.Millisecond),
	}
	f := Protean(t, c)
	o := f.Category(s.Orders)
	o.Partition(s.Healthy).Entries(10).Group(s.Projector).Lease("node-a", 3, 30*time.Second).Read(10).Ack(10)
	o.Partition(s.Lagging).Entries(8).Group(s.Projector).Consumer("node-c:2").Read(3).Ack(3).ExpiredLease(2)
	o.Partition(s.Backfill).Entries(2).Group(s.Projector).Lease("node-b", 1, 30*time.Second).Read(2).Ack(2).
		Backfill().Entries(4).Group(s.Projector).Read(1)
	halted := o.Partition(s.Halted).Entries(5).Group(s.Projector).
		Lease(s.HaltedOwner, s.HaltedGeneration, time.Minute).Read(1).Deliveries(int(s.PoisonDeliveries), 3*time.Minute)
	s.HaltedIDs = halted.IDs()
	o.Partition(s.Cold).At(s.ColdEntriesAt).Entries(3).Group(s.Projector).Read(3).Ack(3)
	o.Partition(s.Never).Entries(2)

	p := f.Category(s.Payments)
	pay := p.Partition(s.Pay1).Entries(6).Group(s.Ledger).Read(6).Ack(6).Group(s.Audit).Read(2).Ack(1)
	s.Pay1IDs = pay.IDs()
	p.Partition(s.Orphan).Entries(1).Group(s.Ledger).Unindexed()
	p.Partition(s.Ghost)
	return s
}
