package redisbroker_test

import (
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/redis/go-redis/v9"

	"github.com/protctl/protctl/pkg/broker"
	"github.com/protctl/protctl/pkg/broker/redisbroker"
)

// consumerNames returns group's consumers on stream with their pending
// counts; none when the stream or group is missing.
func consumerNames(t *testing.T, c *redis.Client, stream string) map[string]int64 {
	t.Helper()
	out := map[string]int64{}
	cs, err := c.XInfoConsumers(t.Context(), stream, group).Result()
	if err != nil {
		if n, _ := c.Exists(t.Context(), stream).Result(); n == 0 {
			return out
		}
		t.Fatalf("XINFO CONSUMERS %s: %v", stream, err)
	}
	for _, x := range cs {
		out[x.Name] = x.Pending
	}
	return out
}

// Issue 16 item 5: every generation reads as a consumer of its own
// (owner:generation), and before the prune nothing deleted them, so a
// partition handed over or released when idle gained a consumer each
// time, forever. 1,000 handovers between two owners, on both lanes, some
// with an entry in flight and half of them through the plain release
// (as a Protean instance or an older node releases), must leave at most
// two consumers in the group at every step, and lose no entry.
func TestThousandHandoversLeaveAtMostTwoConsumers(t *testing.T) {
	b, c := newBroker(t)
	ctx := t.Context()
	lanes := []string{layout.Stream(cat, key), layout.LaneStream(cat, key, broker.DefaultBackfillSuffix)}
	published := map[string]bool{}
	handled := map[string]bool{}
	owners := []string{"node-a", "node-b"}
	const handovers = 1000
	for i := 0; i <= handovers; i++ {
		if i%4 == 0 {
			for _, lane := range []string{"", broker.DefaultBackfillSuffix} {
				for _, id := range publish(t, b, key, lane, 1) {
					published[lane+id] = true
				}
			}
		}
		l := acquire(t, b, key, owners[i%2], time.Minute)
		for li, stream := range lanes {
			if _, err := b.ReclaimPartitionPending(ctx, l.Fence, stream, group, 0, 10); err != nil {
				t.Fatalf("handover %d: reclaim %s: %v", i, stream, err)
			}
			msgs, err := b.ReadPartitionFenced(ctx, l.Fence, stream, group, 10, broker.ReadPendingThenNew)
			if err != nil {
				t.Fatalf("handover %d: read %s: %v", i, stream, err)
			}
			// Every fifth owner hands over with its last entry in flight
			// (the last one acks everything).
			if i%5 == 0 && len(msgs) > 0 && i < handovers {
				msgs = msgs[:len(msgs)-1]
			}
			if len(msgs) > 0 {
				if _, err := b.AckPartitionFenced(ctx, l.Fence, stream, group, msgIDs(msgs)...); err != nil {
					t.Fatalf("handover %d: ack: %v", i, err)
				}
			}
			prefix := []string{"", broker.DefaultBackfillSuffix}[li]
			for _, m := range msgs {
				handled[prefix+m.ID] = true
			}
		}
		var ok bool
		var err error
		if i%2 == 0 {
			ok, err = b.ReleasePartitionLeaseConsumer(ctx, l.Fence, group, lanes...)
		} else {
			ok, err = b.ReleasePartitionLease(ctx, l.Fence)
		}
		if err != nil || !ok {
			t.Fatalf("handover %d: release = %v, %v", i, ok, err)
		}
		for _, stream := range lanes {
			if cs := consumerNames(t, c, stream); len(cs) > 2 {
				t.Fatalf("after handover %d: %s has %d consumers %v; want at most 2", i, stream, len(cs), cs)
			}
		}
	}
	if len(handled) != len(published) {
		t.Fatalf("handled %d of %d entries", len(handled), len(published))
	}
	for _, stream := range lanes {
		if cs := consumerNames(t, c, stream); len(cs) > 1 {
			t.Fatalf("%s after the last release: consumers %v", stream, cs)
		}
	}
}

// A consumer Protean named otherwise (here "worker-7", empty) goes with
// the earlier generations' consumers at the next owner's reclaim; one
// still holding an entry is kept until it has none.
func TestReclaimPrunesConsumersProteanNamed(t *testing.T) {
	b, c := newBroker(t)
	ctx := t.Context()
	stream := layout.Stream(cat, key)
	publish(t, b, key, "", 3)
	if err := c.XGroupCreate(ctx, stream, group, "0").Err(); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"worker-7", "worker-8"} {
		if err := c.XReadGroup(ctx, &redis.XReadGroupArgs{Group: group, Consumer: name, Streams: []string{stream, ">"}, Count: 1, Block: -1}).Err(); err != nil {
			t.Fatal(err)
		}
	}
	first, _ := c.XRange(ctx, stream, "-", "+").Result()
	if err := c.XAck(ctx, stream, group, first[0].ID).Err(); err != nil { // worker-7's entry
		t.Fatal(err)
	}
	l := acquire(t, b, key, owner, time.Minute)
	res, err := b.ReclaimPartitionPending(ctx, l.Fence, stream, group, time.Hour, 10)
	if err != nil || res.Pruned != 1 {
		t.Fatalf("reclaim = %+v, %v; want worker-7 pruned", res, err)
	}
	if cs := consumerNames(t, c, stream); len(cs) != 1 || cs["worker-8"] != 1 {
		t.Fatalf("consumers = %v; want only worker-8 with its entry", cs)
	}
}

func TestDeleteEmptyConsumer(t *testing.T) {
	b, c := newBroker(t)
	ctx := t.Context()
	stream := layout.Stream(cat, key)
	leaseKey := layout.LeaseKey(group, key)
	publish(t, b, key, "", 3)
	live := acquire(t, b, key, owner, time.Minute)
	if err := c.XGroupCreate(ctx, stream, group, "0").Err(); err != nil {
		t.Fatal(err)
	}
	read := func(name string, n int64) {
		t.Helper()
		if err := c.XReadGroup(ctx, &redis.XReadGroupArgs{Group: group, Consumer: name, Streams: []string{stream, ">"}, Count: n, Block: -1}).Err(); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.XGroupCreateConsumer(ctx, stream, group, "old:1").Err(); err != nil { // empty
		t.Fatal(err)
	}
	read("busy:2", 1)   // one pending
	read(live.Token, 1) // the live owner's, one pending
	read("other:3", 1)  // the last entry, acked: empty
	c.XAck(ctx, stream, group, mustPending(t, c, stream, "other:3")...)

	for _, tc := range []struct {
		name     string
		consumer string
		want     redisbroker.ConsumerDeletion
		gone     bool
	}{
		{"empty", "old:1", redisbroker.ConsumerDeletion{Verdict: redisbroker.ConsumerDeleted}, true},
		{"again", "old:1", redisbroker.ConsumerDeletion{Verdict: redisbroker.ConsumerGone}, true},
		{"pending", "busy:2", redisbroker.ConsumerDeletion{Verdict: redisbroker.ConsumerHasPending, Pending: 1}, false},
		{"live lease", live.Token, redisbroker.ConsumerDeletion{Verdict: redisbroker.ConsumerLeased}, false},
		{"acked empty", "other:3", redisbroker.ConsumerDeletion{Verdict: redisbroker.ConsumerDeleted}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := b.DeleteEmptyConsumer(ctx, leaseKey, stream, group, tc.consumer)
			if err != nil {
				t.Fatalf("DeleteEmptyConsumer(%s): %v", tc.consumer, err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Fatalf("DeleteEmptyConsumer(%s) (-want +got):\n%s", tc.consumer, diff)
			}
			if _, present := consumerNames(t, c, stream)[tc.consumer]; present == tc.gone {
				t.Fatalf("consumer %s present = %v after %s", tc.consumer, present, got.Verdict)
			}
		})
	}
	if got, err := b.DeleteEmptyConsumer(ctx, leaseKey, layout.Stream(cat, "none"), group, "x"); err != nil || got.Verdict != redisbroker.ConsumerGone {
		t.Fatalf("missing stream = %+v, %v; want gone", got, err)
	}
	if got, err := b.DeleteEmptyConsumer(ctx, leaseKey, stream, "no-group", "x"); err != nil || got.Verdict != redisbroker.ConsumerGone {
		t.Fatalf("missing group = %+v, %v; want gone", got, err)
	}
	c.Set(ctx, "wrong", "x", 0)
	before := snapshot(t, c)
	_, err := b.DeleteEmptyConsumer(ctx, leaseKey, "wrong", group, "old:1")
	wantWrongType(t, "delete consumer on a string", err, "wrong", "stream")
	wantUnchanged(t, c, before)
}

func mustPending(t *testing.T, c *redis.Client, stream, consumer string) []string {
	t.Helper()
	ps, err := c.XPendingExt(t.Context(), &redis.XPendingExtArgs{Stream: stream, Group: group, Start: "-", End: "+", Count: 100, Consumer: consumer}).Result()
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, p := range ps {
		ids = append(ids, p.ID)
	}
	slices.Sort(ids)
	return ids
}
