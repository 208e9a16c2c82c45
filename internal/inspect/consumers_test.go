package inspect_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/protctl/protctl/internal/inspect"
	"github.com/protctl/protctl/internal/testenv"
	"github.com/protctl/protctl/pkg/broker"
)

// fsck lists the stale consumers of the Protean fixture: empty consumers
// that are not the live lease's (a generation whose lease expired, a
// reader Protean named "fixture-consumer", earlier generations), and
// leaves out the live lease's consumer and every consumer with pending
// entries, on main and backfill lanes and on a stream the index lost.
func TestFsckListsStaleConsumers(t *testing.T) {
	ctx := context.Background()
	c, s, in := setup(t)
	l := broker.ProteanLayout
	// Earlier generations of the healthy partition, empty, beside the
	// live node-a:3; one of the backfill lane's, empty, beside node-b:1
	// with its pending entry; and one, busy, of the halted partition.
	f := testenv.Protean(t, c).Category(s.Orders)
	for _, name := range []string{"node-a:1", "node-a:2"} {
		if err := c.XGroupCreateConsumer(ctx, l.Stream(s.Orders, s.Healthy), s.Projector, name).Err(); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.XGroupCreateConsumer(ctx, l.LaneStream(s.Orders, s.Backfill, broker.DefaultBackfillSuffix), s.Projector, "node-c:0").Err(); err != nil {
		t.Fatal(err)
	}
	f.Partition(s.Halted).Entries(1).Group(s.Projector).Consumer("worker-0:4").Read(1)
	// A stream the index does not name, with an empty consumer.
	f.Partition("o-lost").Entries(1).Group(s.Projector).Consumer("node-d:1").Read(1).Ack(1).Unindexed()

	rep, err := in.Fsck(ctx, s.Orders, inspect.ScanOptions{Pause: -1})
	if err != nil {
		t.Fatal(err)
	}
	healthy, backfill := s.HealthyToken, s.BackfillToken
	want := []inspect.StaleConsumer{
		{Key: s.Backfill, Stream: l.LaneStream(s.Orders, s.Backfill, broker.DefaultBackfillSuffix), Consumer: "node-c:0", Lease: &backfill},
		{Key: s.Cold, Stream: l.Stream(s.Orders, s.Cold), Consumer: "fixture-consumer"},
		{Key: s.Healthy, Stream: l.Stream(s.Orders, s.Healthy), Consumer: "node-a:1", Lease: &healthy},
		{Key: s.Healthy, Stream: l.Stream(s.Orders, s.Healthy), Consumer: "node-a:2", Lease: &healthy},
		{Key: s.Lagging, Stream: l.Stream(s.Orders, s.Lagging), Consumer: "node-c:2"},
		{Key: "o-lost", Stream: l.Stream(s.Orders, "o-lost"), Consumer: "node-d:1"},
	}
	for i := range want {
		want[i].Category, want[i].Group = s.Orders, s.Projector
	}
	if diff := cmp.Diff(want, rep.StaleConsumers, cmpopts.IgnoreFields(inspect.StaleConsumer{}, "IdleMs")); diff != "" {
		t.Fatalf("stale consumers (-want +got):\n%s", diff)
	}
	for _, got := range rep.StaleConsumers {
		if got.IdleMs < 0 || got.IdleMs > time.Hour.Milliseconds() {
			t.Fatalf("stale consumer %+v: idle %dms, want between 0 and an hour", got, got.IdleMs)
		}
	}

	// Payments: ledger-sync's reader is empty, audit's holds an entry.
	rep, err = in.Fsck(ctx, s.Payments, inspect.ScanOptions{Pause: -1})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.StaleConsumers) != 1 || rep.StaleConsumers[0].Group != s.Ledger || rep.StaleConsumers[0].Key != s.Pay1 {
		t.Fatalf("payments stale consumers = %+v; want ledger-sync's on %s only", rep.StaleConsumers, s.Pay1)
	}
}
