package inspect_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/protctl/protctl/internal/inspect"
	"github.com/protctl/protctl/internal/testenv"
	"github.com/protctl/protctl/pkg/broker"
	"github.com/protctl/protctl/pkg/runtime/ledger"
	"github.com/protctl/protctl/pkg/runtime/redisstore"
	"github.com/protctl/protctl/pkg/runtime/source"
)

// TestLeaseStatesFromRedis lays down each lease state on a real Redis
// and reads it back through every read that prints one: Partitions (ls,
// check, the dashboard), Partition (show) and Leases (leases ls). Idle
// released partitions and a parked one must read released, never
// expired (issue 18 item 4).
func TestLeaseStatesFromRedis(t *testing.T) {
	ctx := context.Background()
	srv := testenv.StartRedis(t)
	c := srv.Client(t)
	const cat, g = "shop::order", "app.Projector"
	f := testenv.Protean(t, c)
	o := f.Category(cat)
	o.Partition("held").Entries(3).Group(g).Lease("node-a", 4, time.Minute).Read(3).Ack(3)
	o.Partition("released").Entries(3).Group(g).Consumer("node-a:4").Read(3).Ack(3).ExpiredLease(4)
	o.Partition("expired-pending").Entries(3).Group(g).Consumer("node-b:2").Read(2).Ack(1).ExpiredLease(2)
	o.Partition("expired-lag").Entries(5).Group(g).Consumer("node-b:3").Read(2).Ack(2).ExpiredLease(3)
	o.Partition("free").Entries(2).Group(g).Read(2).Ack(2)
	parked := o.Partition("parked").Entries(4).Group(g).Lease("node-c", 2, time.Minute).Read(1)
	store := redisstore.New(c)
	fence := broker.Fence{LeaseKey: parked.LeaseKey(), Token: "node-c:2"}
	if err := store.Park(ctx, fence, ledger.Parked{
		Subscription: g, Source: source.Redis, Aggregate: "parked", Category: cat,
		Partition: "parked", Position: parked.IDs()[0], Error: "boom", Attempts: 3,
	}); err != nil {
		t.Fatal(err)
	}
	parked.ExpiredLease(2) // the runtime releases a parked partition

	want := map[string]inspect.LeaseState{
		"held": inspect.LeaseHeld, "released": inspect.LeaseReleased, "parked": inspect.LeaseReleased,
		"expired-pending": inspect.LeaseExpired, "expired-lag": inspect.LeaseExpired, "free": inspect.LeaseFree,
	}
	in := inspect.New(c, broker.ProteanLayout, inspect.WithLedger(store))
	ps, err := in.Partitions(ctx, cat, inspect.PartitionOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(ps) != len(want) {
		t.Fatalf("%d partitions, want %d", len(ps), len(want))
	}
	for _, p := range ps {
		gr, ok := p.Group(g)
		if !ok || gr.LeaseState != want[p.Key] {
			t.Errorf("ls %s: lease state %q, want %q", p.Key, gr.LeaseState, want[p.Key])
		}
		if p.Key == "held" && (gr.Lease == nil || gr.Lease.TTLMs == nil || *gr.Lease.TTLMs <= 0) {
			t.Errorf("held lease shows no TTL: %+v", gr.Lease)
		}
	}
	for key, st := range want {
		d, err := in.Partition(ctx, cat, key, inspect.ExplainOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got := d.Groups[0].LeaseState; got != st {
			t.Errorf("show %s: lease state %q, want %q", key, got, st)
		}
		// The verdict speaks of an expired lease only when the state is.
		if says := strings.Contains(d.Verdict.Reason, "expired"); says != (st == inspect.LeaseExpired) {
			t.Errorf("show %s (%s): verdict %q", key, st, d.Verdict)
		}
	}
	d, _ := in.Partition(ctx, cat, "parked", inspect.ExplainOptions{})
	if d.Verdict.State != inspect.StateStuck || !strings.Contains(d.Verdict.Reason, "parked in the failure ledger") {
		t.Errorf("parked verdict %v", d.Verdict)
	}
	d, _ = in.Partition(ctx, cat, "released", inspect.ExplainOptions{})
	if d.Verdict.State != inspect.StateIdle || !strings.Contains(d.Verdict.Reason, "lease released at generation 4") {
		t.Errorf("released verdict %v", d.Verdict)
	}

	ls, err := in.Leases(ctx, inspect.LeaseQuery{Categories: []string{cat}})
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range ls {
		if l.State != want[l.Key] {
			t.Errorf("leases ls --category %s: %q, want %q", l.Key, l.State, want[l.Key])
		}
	}
	// A scan cannot read the streams: not held but leased is unheld.
	scanned, err := in.Leases(ctx, inspect.LeaseQuery{})
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range scanned {
		wantScan := inspect.LeaseUnheld
		if l.Key == "held" {
			wantScan = inspect.LeaseHeld
		}
		if l.State != wantScan {
			t.Errorf("leases ls (scan) %s: %q, want %q", l.Key, l.State, wantScan)
		}
	}
}

// TestLeaseStateOfCoversEveryState walks the derivation's inputs and
// checks that every result is a documented state and every documented
// state but unheld (a scan's) is reachable.
func TestLeaseStateOfCoversEveryState(t *testing.T) {
	i64 := func(v int64) *int64 { return &v }
	yes, no := true, false
	rows := []struct {
		name string
		g    inspect.Group
		want inspect.LeaseState
	}{
		{"lease key", inspect.Group{Lease: &inspect.LeaseInfo{Owner: "a"}, Generation: i64(1), Lag: i64(5)}, inspect.LeaseHeld},
		{"never leased", inspect.Group{Lag: i64(3)}, inspect.LeaseFree},
		{"idle after release", inspect.Group{Generation: i64(2), Lag: i64(0)}, inspect.LeaseReleased},
		{"parked with pending", inspect.Group{Generation: i64(2), Pending: 1, Lag: i64(4), Parked: &yes}, inspect.LeaseReleased},
		{"pending, not parked", inspect.Group{Generation: i64(2), Pending: 1, Lag: i64(0), Parked: &no}, inspect.LeaseExpired},
		{"pending, no ledger", inspect.Group{Generation: i64(2), Pending: 1, Lag: i64(0)}, inspect.LeaseExpired},
		{"lag only", inspect.Group{Generation: i64(2), Lag: i64(1)}, inspect.LeaseExpired},
		{"lag unknown", inspect.Group{Generation: i64(2)}, inspect.LeaseExpired},
	}
	var documented []string
	for _, s := range inspect.LeaseStates() {
		if s.Meaning == "" {
			t.Errorf("state %q has no meaning", s.State)
		}
		documented = append(documented, s.State)
	}
	reached := map[string]bool{string(inspect.LeaseUnheld): true}
	for _, r := range rows {
		got := inspect.LeaseStateOf(&r.g)
		if got != r.want {
			t.Errorf("%s: %q, want %q", r.name, got, r.want)
		}
		if !slices.Contains(documented, string(got)) {
			t.Errorf("%s: %q is not in LeaseStates", r.name, got)
		}
		reached[string(got)] = true
	}
	for _, s := range documented {
		if !reached[s] {
			t.Errorf("documented state %q is never derived", s)
		}
	}
}
