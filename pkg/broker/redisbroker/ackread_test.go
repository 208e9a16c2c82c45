package redisbroker_test

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/protctl/protctl/pkg/broker"
)

// The steady loop's cost: one EVALSHA per batch, acking the previous
// batch and reading the next.
func TestAckAndReadIsOneRoundTrip(t *testing.T) {
	server.FlushAll(t)
	c := server.Client(t)
	counter := &commandCounter{}
	c.AddHook(counter)
	b := newRedisBroker(c)
	st := layout.Stream(cat, key)
	pub := publish(t, b, key, "", 30)
	l := acquire(t, b, key, owner, time.Minute)
	// Warm the script cache (NOSCRIPT, then EVAL, on first use).
	first, err := b.AckAndReadPartitionFenced(t.Context(), l.Fence, st, group, nil, 10, broker.ReadPendingThenNew)
	if err != nil || !slices.Equal(msgIDs(first), pub[:10]) {
		t.Fatalf("first batch = %v, %v", msgIDs(first), err)
	}
	counter.reset()
	next, err := b.AckAndReadPartitionFenced(t.Context(), l.Fence, st, group, msgIDs(first), 10, broker.ReadPendingThenNew)
	if err != nil || !slices.Equal(msgIDs(next), pub[10:20]) {
		t.Fatalf("second batch = %v, %v", msgIDs(next), err)
	}
	if cmds := counter.reset(); !slices.Equal(cmds, []string{"evalsha"}) {
		t.Fatalf("ack of 10 and read of 10 sent %v, want one EVALSHA", cmds)
	}
	if p := c.XPending(t.Context(), st, group).Val(); p.Count != 10 || p.Lower != pub[10] {
		t.Fatalf("pending = %+v, want the second batch only", p)
	}
}

func TestAckAndReadStaleErrorCarriesTheCall(t *testing.T) {
	b, c := newBroker(t)
	st := layout.Stream(cat, key)
	publish(t, b, key, "", 2)
	l := acquire(t, b, key, owner, time.Minute)
	msgs, err := b.ReadPartitionFenced(t.Context(), l.Fence, st, group, 1, broker.ReadNew)
	if err != nil || len(msgs) != 1 {
		t.Fatal(len(msgs), err)
	}
	stale := broker.Fence{LeaseKey: l.LeaseKey, Token: "node-a:0"}
	before := snapshot(t, c)
	_, err = b.AckAndReadPartitionFenced(t.Context(), stale, st, group, msgIDs(msgs), 10, broker.ReadPendingThenNew)
	var lle *broker.LeaseLostError
	if !errors.As(err, &lle) || lle.Stream != st || lle.LeaseKey != l.LeaseKey || lle.Token != stale.Token || lle.Op == "" {
		t.Fatalf("stale ack-and-read: err = %v (%+v)", err, lle)
	}
	wantUnchanged(t, c, before)
}

func TestAckAndReadOnWrongTypesChangesNothing(t *testing.T) {
	t.Run("stream holds a string", func(t *testing.T) {
		b, c := newBroker(t)
		st := layout.Stream(cat, key)
		l := acquire(t, b, key, owner, time.Minute)
		c.Set(t.Context(), st, "not-a-stream", 0)
		before := snapshot(t, c)
		_, err := b.AckAndReadPartitionFenced(t.Context(), l.Fence, st, group, []string{"1-1"}, 10, broker.ReadPendingThenNew)
		wantWrongType(t, "ack-and-read of a string", err, st, "stream")
		wantUnchanged(t, c, before)
	})
	t.Run("lease holds a hash", func(t *testing.T) {
		b, c := newBroker(t)
		st := layout.Stream(cat, key)
		lk := layout.LeaseKey(group, key)
		c.HSet(t.Context(), lk, "owner", "x")
		publish(t, b, key, "", 1)
		before := snapshot(t, c)
		_, err := b.AckAndReadPartitionFenced(t.Context(), broker.Fence{LeaseKey: lk, Token: "x:1"}, st, group, nil, 10, broker.ReadNew)
		wantWrongType(t, "ack-and-read under a hash lease", err, lk, "string")
		wantUnchanged(t, c, before)
	})
}

// The flat reply of readlib.lua carries the three shapes an entry can
// have: a data field, no data field (another tool's), or no body.
func TestAckAndReadReturnsForeignAndMissingEntries(t *testing.T) {
	b, c := newBroker(t)
	st := layout.Stream(cat, key)
	id1 := c.XAdd(t.Context(), &redis.XAddArgs{Stream: st, Values: []any{"data", "d1"}}).Val()
	id2 := c.XAdd(t.Context(), &redis.XAddArgs{Stream: st, Values: []any{"kind", "ping"}}).Val()
	id3 := c.XAdd(t.Context(), &redis.XAddArgs{Stream: st, Values: []any{"trace", "t", "data", ""}}).Val()
	l := acquire(t, b, key, owner, time.Minute)
	msgs, err := b.AckAndReadPartitionFenced(t.Context(), l.Fence, st, group, nil, 10, broker.ReadNew)
	if err != nil || !slices.Equal(msgIDs(msgs), []string{id1, id2, id3}) {
		t.Fatalf("read = %v, %v", msgIDs(msgs), err)
	}
	if string(msgs[0].Data) != "d1" || string(msgs[1].Data) != `{"kind":"ping"}` || string(msgs[2].Data) != "" || msgs[2].Data == nil {
		t.Fatalf("data = %q %q %q", msgs[0].Data, msgs[1].Data, msgs[2].Data)
	}
	c.XDel(t.Context(), st, id2)
	msgs, err = b.AckAndReadPartitionFenced(t.Context(), l.Fence, st, group, []string{id1}, 10, broker.ReadPendingThenNew)
	if err != nil || !slices.Equal(msgIDs(msgs), []string{id2, id3}) {
		t.Fatalf("pending after acking %s = %v, %v", id1, msgIDs(msgs), err)
	}
	if !msgs[0].Missing || msgs[0].Data != nil || msgs[1].Missing {
		t.Fatalf("pending entries = %+v", msgs)
	}
}

// A batch's data shares one buffer, but no entry's Data can reach into
// its neighbour's: appending to one reallocates.
func TestReadDataOfABatchAreIndependent(t *testing.T) {
	b, _ := newBroker(t)
	st := layout.Stream(cat, key)
	publish(t, b, key, "", 3)
	l := acquire(t, b, key, owner, time.Minute)
	msgs, err := b.ReadPartitionFenced(t.Context(), l.Fence, st, group, 10, broker.ReadNew)
	if err != nil || len(msgs) != 3 {
		t.Fatal(len(msgs), err)
	}
	_ = append(msgs[0].Data, "XXXXXXXX"...)
	msgs[2].Data[0] = '['
	if string(msgs[1].Data) != `{"n":1}` || string(msgs[0].Data) != `{"n":0}` {
		t.Fatalf("data after writing to neighbours = %q, %q", msgs[0].Data, msgs[1].Data)
	}
}
