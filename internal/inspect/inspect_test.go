package inspect_test

import (
	"context"
	"encoding/json"
	"errors"
	"regexp"
	goruntime "runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/protctl/protctl/internal/inspect"
	"github.com/protctl/protctl/internal/testenv"
	"github.com/protctl/protctl/pkg/broker"
	"github.com/protctl/protctl/pkg/runtime"
	"github.com/protctl/protctl/pkg/runtime/ledger"
	"github.com/protctl/protctl/pkg/runtime/redisstore"
	"github.com/protctl/protctl/pkg/runtime/source"
)

func setup(t *testing.T, opts ...inspect.Option) (*redis.Client, testenv.ProteanScenario, *inspect.Inspector) {
	t.Helper()
	srv := testenv.StartRedis(t)
	c := srv.Client(t)
	s := testenv.ProteanStandard(t, c)
	return c, s, inspect.New(c, broker.ProteanLayout, opts...)
}

func byKey(t *testing.T, ps []inspect.Partition) map[string]inspect.Partition {
	t.Helper()
	m := map[string]inspect.Partition{}
	for _, p := range ps {
		if _, dup := m[p.Key]; dup {
			t.Fatalf("partition %q listed twice", p.Key)
		}
		m[p.Key] = p
	}
	return m
}

func val[T any](t *testing.T, what string, p *T) T {
	t.Helper()
	if p == nil {
		t.Fatalf("%s is null", what)
	}
	return *p
}

func TestPartitionsMatchFixture(t *testing.T) {
	ctx := context.Background()
	_, s, in := setup(t)
	ps, err := in.Partitions(ctx, s.Orders, inspect.PartitionOptions{})
	if err != nil {
		t.Fatal(err)
	}
	m := byKey(t, ps)
	if len(m) != 6 {
		t.Fatalf("got %d partitions, want 6: %v", len(m), ps)
	}

	h := m[s.Healthy]
	if h.Length != 10 || h.Stream != s.Orders+":"+s.Healthy || len(h.Lanes) != 1 {
		t.Errorf("healthy: %+v", h)
	}
	g, ok := h.Group(s.Projector)
	if !ok || g.Pending != 0 || val(t, "lag", g.Lag) != 0 || g.Lease == nil || g.Lease.Owner != "node-a" ||
		g.Lease.Generation != 3 || val(t, "generation", g.Generation) != 3 || !g.Created || g.Parked != nil {
		t.Errorf("healthy group: %+v lease %+v", g, g.Lease)
	}
	if ttl := val(t, "ttl", g.Lease.TTLMs); ttl <= 0 || ttl > 30000 {
		t.Errorf("healthy ttl %d", ttl)
	}
	if val(t, "lastEntryId", h.LastEntryID) != val(t, "lastDeliveredId", g.LastDeliveredID) {
		t.Errorf("healthy: last entry %v, delivered %v", *h.LastEntryID, *g.LastDeliveredID)
	}
	if idle := val(t, "idleMs", h.IdleMs); idle < 0 || idle > 60000 {
		t.Errorf("healthy idle %d", idle)
	}

	l, _ := m[s.Lagging].Group(s.Projector)
	if val(t, "lag", l.Lag) != 5 || l.Pending != 0 || l.Lease != nil || val(t, "generation", l.Generation) != 2 {
		t.Errorf("lagging group: %+v", l)
	}

	b := m[s.Backfill]
	if len(b.Lanes) != 2 || b.Lanes[1].Name != "backfill" || b.Lanes[1].Stream != s.Orders+":"+s.Backfill+":backfill" ||
		b.Lanes[1].Length != 4 || b.Length != 6 {
		t.Errorf("backfill lanes: %+v", b.Lanes)
	}
	bg, _ := b.Group(s.Projector)
	if bg.Pending != 1 || val(t, "lag", bg.Lag) != 3 || bg.Lease == nil || bg.Lease.Token != s.BackfillToken {
		t.Errorf("backfill group: %+v", bg)
	}

	hg, _ := m[s.Halted].Group(s.Projector)
	if hg.Pending != 1 || val(t, "lag", hg.Lag) != 4 || hg.Lease == nil || hg.Lease.Token != s.HaltedToken {
		t.Errorf("halted group: %+v", hg)
	}

	c := m[s.Cold]
	if idle := val(t, "idleMs", c.IdleMs); idle < int64(23*time.Hour/time.Millisecond) {
		t.Errorf("cold idle %d, want about a day", idle)
	}
	cg, _ := c.Group(s.Projector)
	if cg.Lease != nil || cg.Generation != nil || val(t, "lag", cg.Lag) != 0 {
		t.Errorf("cold group: %+v", cg)
	}

	if n := m[s.Never]; len(n.Groups) != 0 || n.Length != 2 {
		t.Errorf("never: %+v", n)
	}
}

func TestPartitionsJSONFieldsOfTheContract(t *testing.T) {
	ctx := context.Background()
	_, s, in := setup(t)
	ps, err := in.Partitions(ctx, s.Orders, inspect.PartitionOptions{Filter: func(p *inspect.Partition) bool { return p.Key == s.Lagging }})
	if err != nil || len(ps) != 1 {
		t.Fatalf("%v %v", ps, err)
	}
	b, _ := json.Marshal(ps[0])
	var m map[string]any
	_ = json.Unmarshal(b, &m)
	for _, f := range []string{"category", "key", "stream", "length", "lastEntryId", "idleMs", "lanes", "groups"} {
		if _, ok := m[f]; !ok {
			t.Errorf("partition JSON lacks %q: %s", f, b)
		}
	}
	g := m["groups"].([]any)[0].(map[string]any)
	for _, f := range []string{"name", "pending", "lag", "lastDeliveredId", "generation", "lease", "parked"} {
		if _, ok := g[f]; !ok {
			t.Errorf("group JSON lacks %q: %s", f, b)
		}
	}
	if g["lease"] != nil || g["parked"] != nil {
		t.Errorf("lease and parked should be null: %s", b)
	}
	lane := m["lanes"].([]any)[0].(map[string]any)
	if _, ok := lane["stream"]; !ok {
		t.Errorf("lane JSON: %s", b)
	}
}

func TestPartitionsGroupFilterAndLimit(t *testing.T) {
	ctx := context.Background()
	_, s, in := setup(t)
	ps, err := in.Partitions(ctx, s.Payments, inspect.PartitionOptions{Group: s.Audit})
	if err != nil {
		t.Fatal(err)
	}
	m := byKey(t, ps)
	if len(m) != 2 { // p-1 and p-ghost; p-orphan is not indexed
		t.Fatalf("partitions %v", ps)
	}
	if g := m[s.Pay1].Groups; len(g) != 1 || g[0].Name != s.Audit || g[0].Pending != 1 || val(t, "lag", g[0].Lag) != 4 {
		t.Errorf("filtered groups %+v", g)
	}
	if g := m[s.Ghost].Groups; len(g) != 1 || g[0].Created || m[s.Ghost].Lanes[0].Exists {
		t.Errorf("ghost %+v", m[s.Ghost])
	}

	ps, err = in.Partitions(ctx, s.Orders, inspect.PartitionOptions{Limit: 2, PageSize: 1})
	if err != nil || len(ps) != 2 {
		t.Fatalf("limit 2: %d %v", len(ps), err)
	}
	none, err := in.Partitions(ctx, "no::such", inspect.PartitionOptions{})
	if err != nil || len(none) != 0 {
		t.Fatalf("unknown category: %v %v", none, err)
	}
}

func TestPartitionsManyChunks(t *testing.T) {
	ctx := context.Background()
	srv := testenv.StartRedis(t)
	c := srv.Client(t)
	cat := testenv.Protean(t, c).Category("big")
	for i := 0; i < 1234; i++ {
		cat.Partition("k" + strconv.Itoa(i)).Entries(1)
	}
	in := inspect.New(c, broker.ProteanLayout, inspect.WithChunk(100))
	ps, err := in.Partitions(ctx, "big", inspect.PartitionOptions{PageSize: 50})
	if err != nil {
		t.Fatal(err)
	}
	if len(byKey(t, ps)) != 1234 {
		t.Fatalf("got %d", len(ps))
	}
}

func TestPartitionsStopEarlyWithoutLeakingWorkers(t *testing.T) {
	ctx := context.Background()
	srv := testenv.StartRedis(t)
	c := srv.Client(t)
	cat := testenv.Protean(t, c).Category("big")
	for i := 0; i < 300; i++ {
		cat.Partition("k" + strconv.Itoa(i)).Entries(1)
	}
	in := inspect.New(c, broker.ProteanLayout, inspect.WithChunk(10), inspect.WithConcurrency(3))
	before := goruntime.NumGoroutine()
	ps, err := in.Partitions(ctx, "big", inspect.PartitionOptions{Limit: 15, PageSize: 7})
	if err != nil || len(ps) != 15 {
		t.Fatalf("limit: %d %v", len(ps), err)
	}
	stop := errors.New("stop")
	n := 0
	err = in.EachPartition(ctx, "big", inspect.PartitionOptions{}, func(inspect.Partition) error {
		if n++; n == 25 {
			return stop
		}
		return nil
	})
	if !errors.Is(err, stop) {
		t.Fatalf("fn's error not returned: %v", err)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if err := in.EachPartition(cctx, "big", inspect.PartitionOptions{}, func(inspect.Partition) error { return nil }); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled: %v", err)
	}
	testenv.Eventually(t, 5*time.Second, "the listing's goroutines to end", testenv.GoroutinesAtMost(before))
}

func TestPartitionsWrongTypeIsReportedNotFatal(t *testing.T) {
	ctx := context.Background()
	c, s, in := setup(t)
	c.SAdd(ctx, s.Orders+":__partitions__", "o-str")
	c.Set(ctx, s.Orders+":o-str", "not a stream", 0)
	// A backfill lane of the wrong type is reported too (it was once
	// skipped as if missing).
	c.HSet(ctx, s.Orders+":o-cold:backfill", "f", "a hash where a lane should be")
	ps, err := in.Partitions(ctx, s.Orders, inspect.PartitionOptions{})
	if err != nil {
		t.Fatal(err)
	}
	p := byKey(t, ps)["o-str"]
	if !strings.Contains(p.Error, "o-str") || !p.Lanes[0].Exists || p.Lanes[0].Error == "" {
		t.Errorf("wrong type: %+v", p)
	}
	if p := byKey(t, ps)["o-cold"]; !strings.Contains(p.Error, "o-cold:backfill") || p.Length != 3 {
		t.Errorf("backfill of the wrong type: %+v", p)
	}
}

// What a key of the wrong Redis type hides is unknown, not empty, free or
// missing: a lane's length (and the partition's, and the group's lag), a
// lease state whose lease or generation key cannot be read, and such a
// generation; what could be read stays known.
func TestPartitionsUnreadableKeysAreUnknown(t *testing.T) {
	ctx := context.Background()
	srv := testenv.StartRedis(t)
	c := srv.Client(t)
	const cat, g = "shop::order", "app.OrderProjector"
	f := testenv.Protean(t, c).Category(cat)
	l := broker.ProteanLayout
	f.Partition("gen-bad").Entries(5).Group(g)
	c.HSet(ctx, l.GenerationKey(g, "gen-bad"), "f", "v")
	f.Partition("lease-bad").Entries(2).Group(g)
	c.Set(ctx, l.GenerationKey(g, "lease-bad"), "4", 0)
	c.HSet(ctx, l.LeaseKey(g, "lease-bad"), "f", "v")
	f.Partition("held-gen-bad").Entries(1).Group(g).Lease("node-a", 3, time.Minute)
	c.Del(ctx, l.GenerationKey(g, "held-gen-bad"))
	c.HSet(ctx, l.GenerationKey(g, "held-gen-bad"), "f", "v")
	f.Partition("main-bad")
	c.HSet(ctx, l.Stream(cat, "main-bad"), "f", "v")
	f.Partition("bf-bad").Entries(3).Group(g)
	c.HSet(ctx, l.LaneStream(cat, "bf-bad", broker.DefaultBackfillSuffix), "f", "v")
	c.SAdd(ctx, l.GroupsKey(cat), g)

	ps, err := inspect.New(c, l).Partitions(ctx, cat, inspect.PartitionOptions{})
	if err != nil {
		t.Fatal(err)
	}
	m := byKey(t, ps)
	group := func(key string) inspect.Group {
		t.Helper()
		gr, ok := m[key].Group(g)
		if !ok {
			t.Fatalf("%s: no group %s", key, g)
		}
		return gr
	}
	for _, key := range []string{"gen-bad", "lease-bad", "held-gen-bad", "main-bad", "bf-bad"} {
		if p := m[key]; !errors.Is(p.Err(), broker.ErrWrongType) {
			t.Errorf("%s: err %v, want a wrong type", key, p.Err())
		}
	}

	if gr, p := group("gen-bad"), m["gen-bad"]; gr.LeaseState != inspect.LeaseUnknown || gr.GenerationKnown() || !p.LengthKnown() || p.Length != 5 {
		t.Errorf("generation key of the wrong type: state %q, generation known %v, length %d known %v", gr.LeaseState, gr.GenerationKnown(), p.Length, p.LengthKnown())
	}
	if gr := group("lease-bad"); gr.LeaseState != inspect.LeaseUnknown || !gr.GenerationKnown() || val(t, "generation", gr.Generation) != 4 {
		t.Errorf("lease key of the wrong type: state %q, generation %v", gr.LeaseState, gr.Generation)
	}
	if gr := group("held-gen-bad"); gr.LeaseState != inspect.LeaseHeld || gr.GenerationKnown() || gr.Lease == nil {
		t.Errorf("held lease, generation key of the wrong type: state %q, generation known %v", gr.LeaseState, gr.GenerationKnown())
	}
	if p, gr := m["main-bad"], group("main-bad"); p.LengthKnown() || !p.Lanes[0].Exists || p.Lanes[0].LengthKnown() || gr.Lag != nil {
		t.Errorf("main lane of the wrong type: %+v, lag %v", p, gr.Lag)
	}
	p := m["bf-bad"]
	if len(p.Lanes) != 2 || !p.Lanes[0].LengthKnown() || p.Lanes[1].LengthKnown() || !p.Lanes[1].Exists || p.LengthKnown() || group("bf-bad").Lag != nil {
		t.Errorf("backfill lane of the wrong type: %+v", p)
	}
}

func TestExplainHaltedNamesPoisonHead(t *testing.T) {
	ctx := context.Background()
	_, s, in := setup(t)
	d, err := in.Partition(ctx, s.Orders, s.Halted, inspect.ExplainOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(d.Groups) != 1 || !d.Indexed {
		t.Fatalf("groups %+v", d.Groups)
	}
	g := d.Groups[0]
	if g.HeadPending == nil || g.HeadPending.ID != s.HaltedIDs[0] || g.HeadPending.Deliveries != s.PoisonDeliveries ||
		g.HeadPending.Consumer != s.HaltedToken || g.HeadPending.IdleMs < int64(3*time.Minute/time.Millisecond) {
		t.Fatalf("head pending %+v", g.HeadPending)
	}
	if g.Head == nil || g.Head.ID != s.HaltedIDs[0] || g.Head.Envelope == nil || g.Head.Type != "test.OrderPlaced.v1" || g.Head.Raw != nil {
		t.Fatalf("head %+v", g.Head)
	}
	if len(g.PendingEntries) != 1 {
		t.Errorf("pending entries %+v", g.PendingEntries)
	}
	// The idle time is 3m plus however long the test took since the
	// fixture set it, rounded to the second.
	want := regexp.MustCompile(`^halted on a poison message: head ` + regexp.QuoteMeta(s.HaltedIDs[0]) +
		` delivered 7 times, pending 3m[0-9]s to consumer worker-1:5 whose lease is held$`)
	if d.Verdict.State != inspect.StateStuck || !want.MatchString(d.Verdict.Reason) || d.Verdict.Group != s.Projector {
		t.Errorf("verdict %q\nwant       %s", d.Verdict.Reason, want)
	}
	if !strings.HasPrefix(d.Verdict.String(), "stuck (group app.OrderProjector): halted") {
		t.Errorf("verdict string %q", d.Verdict.String())
	}
}

func TestExplainVerdicts(t *testing.T) {
	ctx := context.Background()
	c, s, in := setup(t)
	// An expired owner's pending entry, delivered once.
	testenv.Protean(t, c).Category(s.Orders).Partition("o-expired").Entries(3).Group(s.Projector).
		Consumer("dead:1").Read(1).ExpiredLease(1)
	// A working owner: one fresh pending entry under a held lease.
	testenv.Protean(t, c).Category(s.Orders).Partition("o-working").Entries(3).Group(s.Projector).
		Lease("node-w", 1, time.Minute).Read(1)
	// An entry that is not an envelope.
	testenv.Protean(t, c).Category(s.Orders).Partition("o-raw").RawEntry("plain text").Group(s.Projector)

	tests := []struct {
		key    string
		state  inspect.VerdictState
		reason string
	}{
		{s.Healthy, inspect.StateHealthy, "caught up; lease held by node-a (generation 3, "},
		{s.Lagging, inspect.StateLagging, "5 entries not delivered yet; lease expired at generation 2"},
		{s.Backfill, inspect.StateHealthy, "working: 1 pending, head "},
		{s.Cold, inspect.StateIdle, "caught up; never leased"},
		{s.Never, inspect.StateLagging, "2 entries and no consumer group has read the partition"},
		{"o-expired", inspect.StateStuck, "lease expired with 1 pending: head "},
		{"o-working", inspect.StateHealthy, "working: 1 pending"},
		{"o-raw", inspect.StateLagging, "1 entries not delivered yet; never leased"},
	}
	for _, tt := range tests {
		t.Run(tt.key, func(t *testing.T) {
			d, err := in.Partition(ctx, s.Orders, tt.key, inspect.ExplainOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if d.Verdict.State != tt.state || !strings.HasPrefix(d.Verdict.Reason, tt.reason) {
				t.Errorf("verdict %s, want %s: %s...", d.Verdict, tt.state, tt.reason)
			}
		})
	}

	d, err := in.Partition(ctx, s.Orders, "o-raw", inspect.ExplainOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if h := d.Groups[0].Head; h == nil || h.Envelope != nil || h.Raw == nil || *h.Raw != "plain text" {
		t.Errorf("raw head %+v", h)
	}
	d, err = in.Partition(ctx, s.Orders, "o-expired", inspect.ExplainOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(d.Verdict.Reason, "consumer dead:1") || !strings.Contains(d.Verdict.Reason, "no owner holds the lease") {
		t.Errorf("expired verdict %q", d.Verdict.Reason)
	}
}

func TestExplainNotFoundAndGhost(t *testing.T) {
	ctx := context.Background()
	_, s, in := setup(t)
	_, err := in.Partition(ctx, s.Orders, "nope", inspect.ExplainOptions{})
	if !errors.Is(err, inspect.ErrNotFound) {
		t.Fatalf("err %v, want ErrNotFound", err)
	}
	d, err := in.Partition(ctx, s.Payments, s.Ghost, inspect.ExplainOptions{})
	if err != nil || d.Verdict.State != inspect.StateOrphan {
		t.Fatalf("ghost %+v %v", d.Verdict, err)
	}
	d, err = in.Partition(ctx, s.Payments, s.Orphan, inspect.ExplainOptions{})
	if err != nil || d.Indexed {
		t.Fatalf("orphan stream: indexed=%v %v", d.Indexed, err)
	}
}

func TestCategories(t *testing.T) {
	ctx := context.Background()
	c, s, in := setup(t)
	c.SAdd(ctx, s.Orders+":__groups__", "reg-b", "reg-a")
	var last inspect.ScanProgress
	calls := 0
	cats, err := in.Categories(ctx, inspect.ScanOptions{Count: 2, Progress: func(p inspect.ScanProgress) { last = p; calls++ }})
	if err != nil {
		t.Fatal(err)
	}
	if len(cats) != 2 || cats[0].Name != s.Payments || cats[1].Name != s.Orders ||
		cats[0].Partitions != 2 || cats[1].Partitions != 6 || !slices.Equal(cats[1].Groups, []string{"reg-a", "reg-b"}) {
		t.Fatalf("categories %+v", cats)
	}
	if !last.Done || last.Found != 2 || calls < 2 {
		t.Errorf("progress %+v after %d calls", last, calls)
	}
	ci, err := in.CategoryInfo(ctx, "no::such")
	if err != nil || ci.Partitions != 0 {
		t.Fatalf("%+v %v", ci, err)
	}
}

func TestLeases(t *testing.T) {
	ctx := context.Background()
	_, s, in := setup(t)
	scanned, err := in.Leases(ctx, inspect.LeaseQuery{})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]inspect.LeaseState{}
	for _, l := range scanned {
		got[l.Group+"/"+l.Key] = l.State
	}
	want := map[string]inspect.LeaseState{
		s.Projector + "/" + s.Healthy:  inspect.LeaseHeld,
		s.Projector + "/" + s.Lagging:  inspect.LeaseUnheld, // a scan cannot read the streams
		s.Projector + "/" + s.Backfill: inspect.LeaseHeld,
		s.Projector + "/" + s.Halted:   inspect.LeaseHeld,
	}
	if len(got) != len(want) {
		t.Fatalf("scanned leases %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s: %s, want %s", k, got[k], v)
		}
	}

	byCat, err := in.Leases(ctx, inspect.LeaseQuery{Categories: []string{s.Orders}})
	if err != nil {
		t.Fatal(err)
	}
	if len(byCat) != 5 { // five partitions with the projector group; o-never has none
		t.Fatalf("by category %d: %+v", len(byCat), byCat)
	}
	for _, l := range byCat {
		if l.Key == s.Cold && l.State != inspect.LeaseFree {
			t.Errorf("cold lease %s", l.State)
		}
		if l.Key == s.Halted && (l.State != inspect.LeaseHeld || *l.Owner != s.HaltedOwner || *l.Generation != 5 || *l.Token != s.HaltedToken) {
			t.Errorf("halted lease %+v", l)
		}
		if l.Category == nil || *l.Category != s.Orders || l.LeaseKey != l.Group+":"+l.Key+":__lease__" {
			t.Errorf("lease row %+v", l)
		}
	}
	one, err := in.Leases(ctx, inspect.LeaseQuery{Categories: []string{s.Orders}, Key: s.Lagging, Group: s.Projector})
	if err != nil || len(one) != 1 || one[0].State != inspect.LeaseExpired || *one[0].Generation != 2 || one[0].Owner != nil {
		t.Fatalf("one %+v %v", one, err)
	}
	l, err := in.Lease(ctx, s.Projector, s.Cold)
	if err != nil || l.State != inspect.LeaseFree {
		t.Fatalf("%+v %v", l, err)
	}
}

func TestTrimInfoNamesPinningGroup(t *testing.T) {
	ctx := context.Background()
	c, s, in := setup(t)
	stream := s.Payments + ":" + s.Pay1
	ti, err := in.TrimInfo(ctx, stream, 1)
	if err != nil {
		t.Fatal(err)
	}
	// audit read 2 and acked 1: its floor is entry 2, so only entry 1 may go.
	if val(t, "pinnedBy", ti.PinnedBy) != s.Audit || val(t, "floor", ti.Floor) != s.Pay1IDs[1] || ti.Removes != 1 || ti.Length != 6 {
		t.Fatalf("trim info %+v", ti)
	}
	if !strings.Contains(ti.Reason, `group "audit" still needs entries from `+s.Pay1IDs[1]) {
		t.Errorf("reason %q", ti.Reason)
	}
	ti, err = in.TrimInfo(ctx, stream, 10)
	if err != nil || ti.Removes != 0 {
		t.Fatalf("%+v %v", ti, err)
	}
	c.SAdd(ctx, s.Payments+":__groups__", "late")
	ti, err = in.TrimInfo(ctx, stream, 1)
	if err != nil || ti.Removes != 0 || val(t, "pinnedBy", ti.PinnedBy) != "late" || !slices.Equal(ti.MissingGroups, []string{"late"}) {
		t.Fatalf("registered group missing: %+v %v", ti, err)
	}
	if _, err := in.TrimInfo(ctx, stream, 0); !errors.Is(err, broker.ErrInvalidArgument) {
		t.Fatalf("maxLen 0: %v", err)
	}
	ti, err = in.TrimInfo(ctx, "missing", 5)
	if err != nil || ti.Exists {
		t.Fatalf("missing stream %+v %v", ti, err)
	}
	// No group: trim to maxLen.
	ti, err = in.TrimInfo(ctx, s.Orders+":"+s.Never, 1)
	if err != nil || ti.Removes != 1 || ti.PinnedBy != nil {
		t.Fatalf("no group %+v %v", ti, err)
	}
}

func TestFsck(t *testing.T) {
	ctx := context.Background()
	_, s, in := setup(t)
	rep, err := in.Fsck(ctx, s.Payments, inspect.ScanOptions{Count: 3, Pause: -1})
	if err != nil {
		t.Fatal(err)
	}
	want := []inspect.Orphan{
		{Kind: inspect.OrphanMissingStream, Category: s.Payments, Key: s.Ghost, Stream: s.Payments + ":" + s.Ghost},
		{Kind: inspect.OrphanUnindexedStream, Category: s.Payments, Key: s.Orphan, Stream: s.Payments + ":" + s.Orphan, Length: 1},
	}
	if !slices.Equal(rep.Orphans, want) || rep.Indexed != 2 || rep.Streams != 2 {
		t.Fatalf("fsck %+v", rep)
	}
	rep, err = in.Fsck(ctx, s.Orders, inspect.ScanOptions{})
	if err != nil || len(rep.Orphans) != 0 || rep.Streams != 7 { // six main lanes and one backfill lane
		t.Fatalf("orders fsck %+v %v", rep, err)
	}
}

func TestParkedThroughTheLedger(t *testing.T) {
	ctx := context.Background()
	srv := testenv.StartRedis(t)
	c := srv.Client(t)
	s := testenv.ProteanStandard(t, c)
	store := redisstore.New(c)
	f := broker.Fence{LeaseKey: broker.ProteanLayout.LeaseKey(s.Projector, s.Halted), Token: s.HaltedToken}
	err := store.Park(ctx, f, ledger.Parked{
		Subscription: s.Projector, Source: source.Redis, Aggregate: s.Halted, Category: s.Orders,
		Partition: s.Halted, Position: s.HaltedIDs[0], Error: "boom", Attempts: 7,
	})
	if err != nil {
		t.Fatal(err)
	}
	in := inspect.New(c, broker.ProteanLayout, inspect.WithLedger(store))
	ps, err := in.Partitions(ctx, s.Orders, inspect.PartitionOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range ps {
		for _, g := range p.Groups {
			if val(t, "parked", g.Parked) != (p.Key == s.Halted) {
				t.Errorf("%s parked=%v", p.Key, *g.Parked)
			}
		}
	}
	list, err := in.Parked(ctx, "")
	if err != nil || len(list) != 1 || list[0].Position != s.HaltedIDs[0] {
		t.Fatalf("parked %+v %v", list, err)
	}
	d, err := in.Partition(ctx, s.Orders, s.Halted, inspect.ExplainOptions{})
	if err != nil || !*d.Groups[0].Parked || !strings.HasSuffix(d.Verdict.Reason, "parked in the failure ledger") {
		t.Fatalf("explain parked: %+v %v", d.Verdict, err)
	}
	if _, err := inspect.New(c, broker.ProteanLayout).Parked(ctx, ""); err == nil {
		t.Fatal("Parked without a ledger should fail")
	}
}

func TestNodesThroughMembers(t *testing.T) {
	ctx := context.Background()
	srv := testenv.StartRedis(t)
	c := srv.Client(t)
	store := redisstore.New(c)
	if err := store.Heartbeat(ctx, runtime.NodeStatus{Service: "shop", Node: "n1", JoinState: runtime.JoinJoined}, time.Minute); err != nil {
		t.Fatal(err)
	}
	ns, err := inspect.New(c, broker.ProteanLayout, inspect.WithMembers(store)).Nodes(ctx, "shop")
	if err != nil || len(ns) != 1 || ns[0].Node != "n1" {
		t.Fatalf("nodes %+v %v", ns, err)
	}
}

func TestUnreachableServerIsUnavailable(t *testing.T) {
	port, err := testenv.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:" + strconv.Itoa(port), MaxRetries: -1})
	defer c.Close()
	_, err = inspect.New(c, broker.ProteanLayout).Partitions(context.Background(), "x", inspect.PartitionOptions{})
	if !errors.Is(err, broker.ErrUnavailable) {
		t.Fatalf("err %v, want ErrUnavailable", err)
	}
}

func TestClusterLayoutKeys(t *testing.T) {
	ctx := context.Background()
	srv := testenv.StartRedis(t)
	c := srv.Client(t)
	f := testenv.Protean(t, c).WithLayout(broker.ClusterLayout)
	cat := f.Category("shop::order")
	cat.Partition("o-1").Entries(3).Group("g").Lease("node-a", 2, time.Minute).Read(2).Ack(1).
		Backfill().Entries(1)
	cat.Partition("o-2").Entries(1).Group("g").Unindexed()
	if n := c.Exists(ctx, "shop::order:{o-1}", "shop::order:{o-1}:backfill", "g:{o-1}:__lease__").Val(); n != 3 {
		t.Fatalf("fixture keys: %d of 3", n)
	}
	in := inspect.New(c, broker.ClusterLayout)
	ps, err := in.Partitions(ctx, "shop::order", inspect.PartitionOptions{})
	if err != nil || len(ps) != 1 {
		t.Fatalf("%+v %v", ps, err)
	}
	g, _ := ps[0].Group("g")
	if ps[0].Stream != "shop::order:{o-1}" || len(ps[0].Lanes) != 2 || g.Pending != 1 || val(t, "lag", g.Lag) != 2 || g.Lease == nil || g.Lease.Token != "node-a:2" {
		t.Fatalf("partition %+v group %+v", ps[0], g)
	}
	ls, err := in.Leases(ctx, inspect.LeaseQuery{})
	if err != nil || len(ls) != 1 || ls[0].Key != "o-1" || ls[0].Group != "g" || ls[0].State != inspect.LeaseHeld {
		t.Fatalf("leases %+v %v", ls, err)
	}
	rep, err := in.Fsck(ctx, "shop::order", inspect.ScanOptions{})
	if err != nil || len(rep.Orphans) != 1 || rep.Orphans[0].Key != "o-2" || rep.Orphans[0].Kind != inspect.OrphanUnindexedStream {
		t.Fatalf("fsck %+v %v", rep, err)
	}
}
