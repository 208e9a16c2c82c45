package redisbroker_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/protctl/protctl/pkg/broker"
)

func TestLeaseLostErrorsCarryTheCall(t *testing.T) {
	b, c := newBroker(t)
	st := layout.Stream(cat, key)
	publish(t, b, key, "", 2)
	l := acquire(t, b, key, owner, time.Minute)
	msgs, err := b.ReadPartitionFenced(t.Context(), l.Fence, st, group, 10, broker.ReadNew)
	if err != nil || len(msgs) != 2 {
		t.Fatalf("read = %d, %v", len(msgs), err)
	}
	stale := broker.Fence{LeaseKey: l.LeaseKey, Token: "node-a:0"}
	before := snapshot(t, c)
	calls := map[string]func() error{
		"read": func() error {
			_, err := b.ReadPartitionFenced(t.Context(), stale, st, group, 10, broker.ReadPendingThenNew)
			return err
		},
		"ack": func() error {
			_, err := b.AckPartitionFenced(t.Context(), stale, st, group, msgIDs(msgs)...)
			return err
		},
		"ack of no ids": func() error {
			// Even an empty ack proves the lease: it tells a stale owner it lost.
			_, err := b.AckPartitionFenced(t.Context(), stale, st, group)
			return err
		},
		"reclaim": func() error {
			_, err := b.ReclaimPartitionPending(t.Context(), stale, st, group, 0, 10)
			return err
		},
		"dead-letter": func() error {
			_, err := b.DeadLetterPartitionFenced(t.Context(), stale, st, group, msgs[0].ID, layout.DLQStream(cat, key), "x")
			return err
		},
	}
	for name, call := range calls {
		err := call()
		var lle *broker.LeaseLostError
		if !errors.As(err, &lle) || !errors.Is(err, broker.ErrLeaseLost) {
			t.Fatalf("%s with a stale token: err = %v, want *LeaseLostError", name, err)
		}
		if lle.Stream != st || lle.LeaseKey != l.LeaseKey || lle.Token != stale.Token || lle.Op == "" {
			t.Fatalf("%s: LeaseLostError = %+v", name, lle)
		}
	}
	wantUnchanged(t, c, before)
}

func TestFencedCallsOnWrongTypesChangeNothing(t *testing.T) {
	st := layout.Stream(cat, key)
	dlq := layout.DLQStream(cat, key)
	tests := []struct {
		name      string
		corrupt   string // key that holds a string
		call      func(t *testing.T, b broker.PartitionedBroker, f broker.Fence) error
		key, want string
	}{
		{"read of a string", st, func(t *testing.T, b broker.PartitionedBroker, f broker.Fence) error {
			_, err := b.ReadPartitionFenced(t.Context(), f, st, group, 10, broker.ReadPendingThenNew)
			return err
		}, st, "stream"},
		{"ack on a string", st, func(t *testing.T, b broker.PartitionedBroker, f broker.Fence) error {
			_, err := b.AckPartitionFenced(t.Context(), f, st, group, "1-1")
			return err
		}, st, "stream"},
		{"reclaim on a string", st, func(t *testing.T, b broker.PartitionedBroker, f broker.Fence) error {
			_, err := b.ReclaimPartitionPending(t.Context(), f, st, group, 0, 10)
			return err
		}, st, "stream"},
		{"dead-letter into a string", dlq, func(t *testing.T, b broker.PartitionedBroker, f broker.Fence) error {
			_, err := b.DeadLetterPartitionFenced(t.Context(), f, st, group, "1-1", dlq, "x")
			return err
		}, dlq, "stream"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, c := newBroker(t)
			l := acquire(t, b, key, owner, time.Minute)
			if tt.corrupt != st {
				publish(t, b, key, "", 1)
				if _, err := b.ReadPartitionFenced(t.Context(), l.Fence, st, group, 10, broker.ReadNew); err != nil {
					t.Fatal(err)
				}
			}
			c.Set(t.Context(), tt.corrupt, "not-a-stream", 0)
			before := snapshot(t, c)
			wantWrongType(t, tt.name, tt.call(t, b, l.Fence), tt.key, tt.want)
			wantUnchanged(t, c, before)
		})
	}
	t.Run("lease holding a hash", func(t *testing.T) {
		b, c := newBroker(t)
		lk := layout.LeaseKey(group, key)
		c.HSet(t.Context(), lk, "owner", "x")
		publish(t, b, key, "", 1)
		before := snapshot(t, c)
		_, err := b.ReadPartitionFenced(t.Context(), broker.Fence{LeaseKey: lk, Token: "x:1"}, st, group, 10, broker.ReadNew)
		wantWrongType(t, "read under a hash lease", err, lk, "string")
		var wte *broker.WrongTypeError
		if errors.As(err, &wte) && wte.Got != "hash" {
			t.Fatalf("Got = %q, want hash", wte.Got)
		}
		wantUnchanged(t, c, before)
	})
}

func TestReadModes(t *testing.T) {
	b, _ := newBroker(t)
	st := layout.Stream(cat, key)
	pub := publish(t, b, key, "", 5)
	l := acquire(t, b, key, owner, time.Minute)
	read := func(mode broker.ReadMode, n int64) []string {
		t.Helper()
		msgs, err := b.ReadPartitionFenced(t.Context(), l.Fence, st, group, n, mode)
		if err != nil {
			t.Fatal(err)
		}
		return msgIDs(msgs)
	}
	if got := read(broker.ReadPending, 10); len(got) != 0 {
		t.Fatalf("pending before any read = %v", got)
	}
	if got := read(broker.ReadNew, 2); !slices.Equal(got, pub[:2]) {
		t.Fatalf("new = %v, want %v", got, pub[:2])
	}
	if got := read(broker.ReadNew, 2); !slices.Equal(got, pub[2:4]) {
		t.Fatalf("second new = %v, want %v", got, pub[2:4])
	}
	// Pending first, limited by count, oldest first.
	if got := read(broker.ReadPendingThenNew, 3); !slices.Equal(got, pub[:3]) {
		t.Fatalf("pending-then-new = %v, want %v", got, pub[:3])
	}
	if n, err := b.AckPartitionFenced(t.Context(), l.Fence, st, group, pub[:4]...); err != nil || n != 4 {
		t.Fatalf("ack = %d, %v", n, err)
	}
	if got := read(broker.ReadPendingThenNew, 10); !slices.Equal(got, pub[4:]) {
		t.Fatalf("pending-then-new with nothing pending = %v, want %v", got, pub[4:])
	}
	_, err := b.ReadPartitionFenced(t.Context(), l.Fence, st, group, 1, broker.ReadMode(42))
	wantInvalid(t, "unknown mode", err, "mode")
}

func TestReadIsOneRoundTrip(t *testing.T) {
	server.FlushAll(t)
	c := server.Client(t)
	counter := &commandCounter{}
	c.AddHook(counter)
	b := newRedisBroker(c)
	st := layout.Stream(cat, key)
	publish(t, b, key, "", 30)
	l := acquire(t, b, key, owner, time.Minute)
	// Warm the script cache: the first call of a script may cost an
	// EVALSHA that fails with NOSCRIPT and an EVAL.
	if _, err := b.ReadPartitionFenced(t.Context(), l.Fence, st, group, 10, broker.ReadPendingThenNew); err != nil {
		t.Fatal(err)
	}
	if _, err := b.AckPartitionFenced(t.Context(), l.Fence, st, group, "0-1"); err != nil {
		t.Fatal(err)
	}
	counter.reset()
	msgs, err := b.ReadPartitionFenced(t.Context(), l.Fence, st, group, 10, broker.ReadPendingThenNew)
	if err != nil || len(msgs) != 10 {
		t.Fatalf("read = %d, %v", len(msgs), err)
	}
	if n, err := b.AckPartitionFenced(t.Context(), l.Fence, st, group, msgIDs(msgs)...); err != nil || n != 10 {
		t.Fatalf("ack = %d, %v", n, err)
	}
	if cmds := counter.reset(); !slices.Equal(cmds, []string{"evalsha", "evalsha"}) {
		t.Fatalf("a read and an ack of 10 entries sent %v, want two EVALSHA", cmds)
	}
}

func TestReadRecoversFromDeletedGroup(t *testing.T) {
	b, c := newBroker(t)
	st := layout.Stream(cat, key)
	pub := publish(t, b, key, "", 3)
	l := acquire(t, b, key, owner, time.Minute)
	if msgs, err := b.ReadPartitionFenced(t.Context(), l.Fence, st, group, 1, broker.ReadNew); err != nil || len(msgs) != 1 {
		t.Fatalf("read = %v, %v", msgs, err)
	}
	// An operator destroys the group under the running owner.
	if err := c.XGroupDestroy(t.Context(), st, group).Err(); err != nil {
		t.Fatal(err)
	}
	msgs, err := b.ReadPartitionFenced(t.Context(), l.Fence, st, group, 10, broker.ReadPendingThenNew)
	if err != nil {
		t.Fatal(err)
	}
	// The group is created again from id 0, so every entry comes again.
	if !slices.Equal(msgIDs(msgs), pub) {
		t.Fatalf("read after the group was destroyed = %v, want %v", msgIDs(msgs), pub)
	}
}

func TestReadReturnsDataAndForeignEntries(t *testing.T) {
	b, c := newBroker(t)
	st := layout.Stream(cat, key)
	envelope := `{"data":{"a":1},"metadata":{"headers":{"id":"x"}}}`
	id1 := c.XAdd(t.Context(), &redis.XAddArgs{Stream: st, Values: []any{"data", envelope}}).Val()
	// Written by some other tool: no data field.
	id2 := c.XAdd(t.Context(), &redis.XAddArgs{Stream: st, Values: []any{"kind", "ping", "n", "3"}}).Val()
	// A data field among others wins.
	id3 := c.XAdd(t.Context(), &redis.XAddArgs{Stream: st, Values: []any{"trace", "t", "data", "raw"}}).Val()
	l := acquire(t, b, key, owner, time.Minute)
	msgs, err := b.ReadPartitionFenced(t.Context(), l.Fence, st, group, 10, broker.ReadNew)
	if err != nil || len(msgs) != 3 {
		t.Fatalf("read = %v, %v", msgs, err)
	}
	if msgs[0].ID != id1 || string(msgs[0].Data) != envelope || msgs[0].Stream != st {
		t.Fatalf("entry 1 = %+v", msgs[0])
	}
	var fields map[string]string
	if err := json.Unmarshal(msgs[1].Data, &fields); err != nil || msgs[1].ID != id2 {
		t.Fatalf("entry 2 = %+v (%v)", msgs[1], err)
	}
	if fields["kind"] != "ping" || fields["n"] != "3" {
		t.Fatalf("foreign entry's fields = %v", fields)
	}
	if msgs[2].ID != id3 || string(msgs[2].Data) != "raw" {
		t.Fatalf("entry 3 = %+v", msgs[2])
	}
}

func TestAckOfManyIdsSpansScriptChunks(t *testing.T) {
	b, c := newBroker(t)
	st := layout.Stream(cat, key)
	const n = 2500 // more ids than one Lua unpack takes (the script acks 1000 at a time)
	pipe := c.Pipeline()
	for i := 0; i < n; i++ {
		pipe.XAdd(t.Context(), &redis.XAddArgs{Stream: st, Values: []any{"data", fmt.Sprint(i)}})
	}
	if _, err := pipe.Exec(t.Context()); err != nil {
		t.Fatal(err)
	}
	l := acquire(t, b, key, owner, time.Minute)
	msgs, err := b.ReadPartitionFenced(t.Context(), l.Fence, st, group, n, broker.ReadNew)
	if err != nil || len(msgs) != n {
		t.Fatalf("read = %d, %v", len(msgs), err)
	}
	acked, err := b.AckPartitionFenced(t.Context(), l.Fence, st, group, msgIDs(msgs)...)
	if err != nil || acked != n {
		t.Fatalf("ack of %d ids = %d, %v", n, acked, err)
	}
	if p := c.XPending(t.Context(), st, group).Val(); p.Count != 0 {
		t.Fatalf("%d still pending", p.Count)
	}
}

func TestAckArguments(t *testing.T) {
	b, _ := newBroker(t)
	l := acquire(t, b, key, owner, time.Minute)
	st := layout.Stream(cat, key)
	_, err := b.AckPartitionFenced(t.Context(), l.Fence, st, group, "1-1", "not-an-id")
	wantInvalid(t, "ack of a bad id", err, "id")
	_, err = b.AckPartitionFenced(t.Context(), l.Fence, "", group, "1-1")
	wantInvalid(t, "ack without stream", err, "stream")
	// Acks on a stream or group that does not exist acknowledge nothing.
	if n, err := b.AckPartitionFenced(t.Context(), l.Fence, st, group, "1-1"); err != nil || n != 0 {
		t.Fatalf("ack on a missing stream = %d, %v", n, err)
	}
}

func TestReclaimAcrossManyBatchesReportsMissing(t *testing.T) {
	b, c := newBroker(t)
	st := layout.Stream(cat, key)
	pub := publish(t, b, key, "", 95)
	old := acquire(t, b, key, owner, time.Minute)
	if msgs, err := b.ReadPartitionFenced(t.Context(), old.Fence, st, group, 100, broker.ReadNew); err != nil || len(msgs) != 95 {
		t.Fatalf("read = %d, %v", len(msgs), err)
	}
	// Delete bodies spread over several batches.
	var deleted []string
	for i := 3; i < 95; i += 17 {
		deleted = append(deleted, pub[i])
	}
	if err := c.XDel(t.Context(), st, deleted...).Err(); err != nil {
		t.Fatal(err)
	}
	if ok, _ := b.ReleasePartitionLease(t.Context(), old.Fence); !ok {
		t.Fatal("release failed")
	}
	cur := acquire(t, b, key, "node-b", time.Minute)
	res, err := b.ReclaimPartitionPending(t.Context(), cur.Fence, st, group, 0, 4)
	if err != nil {
		t.Fatal(err)
	}
	if res.Claimed != int64(95-len(deleted)) {
		t.Fatalf("claimed %d, want %d", res.Claimed, 95-len(deleted))
	}
	if !slices.Equal(res.Missing, deleted) {
		t.Fatalf("missing = %v, want %v", res.Missing, deleted)
	}
	// Everything left pending now belongs to the new generation.
	ext := c.XPendingExt(t.Context(), &redis.XPendingExtArgs{Stream: st, Group: group, Start: "-", End: "+", Count: 1000}).Val()
	for _, p := range ext {
		if p.Consumer != cur.Token {
			t.Fatalf("entry %s still pending for %s", p.ID, p.Consumer)
		}
	}
	if len(ext) != int(res.Claimed) {
		t.Fatalf("%d pending after reclaim, want %d", len(ext), res.Claimed)
	}
}

func TestReclaimOfMissingStreamOrGroup(t *testing.T) {
	b, c := newBroker(t)
	st := layout.Stream(cat, key)
	l := acquire(t, b, key, owner, time.Minute)
	res, err := b.ReclaimPartitionPending(t.Context(), l.Fence, st, group, 0, 10)
	if err != nil || res.Claimed != 0 || len(res.Missing) != 0 {
		t.Fatalf("reclaim of a missing stream = %+v, %v", res, err)
	}
	publish(t, b, key, "", 1)
	res, err = b.ReclaimPartitionPending(t.Context(), l.Fence, st, group, 0, 10)
	if err != nil || res.Claimed != 0 {
		t.Fatalf("reclaim without a group = %+v, %v", res, err)
	}
	if g := c.XInfoGroups(t.Context(), st).Val(); len(g) != 0 {
		t.Fatalf("reclaim created groups %v", g)
	}
	_, err = b.ReclaimPartitionPending(t.Context(), l.Fence, st, group, -time.Second, 10)
	wantInvalid(t, "negative minIdle", err, "minIdle")
}

func TestDeadLetterFields(t *testing.T) {
	b, c := newBroker(t)
	st := layout.Stream(cat, key)
	dlq := layout.DLQStream(cat, key)
	pub := publish(t, b, key, "", 2)
	l := acquire(t, b, key, owner, time.Minute)
	if _, err := b.ReadPartitionFenced(t.Context(), l.Fence, st, group, 10, broker.ReadNew); err != nil {
		t.Fatal(err)
	}
	if err := c.XDel(t.Context(), st, pub[1]).Err(); err != nil {
		t.Fatal(err)
	}
	id0, err := b.DeadLetterPartitionFenced(t.Context(), l.Fence, st, group, pub[0], dlq, "poison")
	if err != nil {
		t.Fatal(err)
	}
	id1, err := b.DeadLetterPartitionFenced(t.Context(), l.Fence, st, group, pub[1], dlq, "gone")
	if err != nil {
		t.Fatal(err)
	}
	entries := c.XRange(t.Context(), dlq, "-", "+").Val()
	if len(entries) != 2 || entries[0].ID != id0 || entries[1].ID != id1 {
		t.Fatalf("dlq = %+v", entries)
	}
	// {"n":0} is a JSON object: the metadata goes inside it, Protean's
	// format; the second body was gone: the metadata alone.
	for i, e := range entries {
		if len(e.Values) != 1 {
			t.Fatalf("dlq entry %d = %v, want the data field alone", i, e.Values)
		}
		fields := map[string]string{}
		for k, v := range e.Values {
			fields[k] = v.(string)
		}
		d := broker.ParseDeadLetter(fields)
		reason := []string{"poison", "gone"}[i]
		if d.Format != broker.FormatProtean || d.OriginalStream != st || d.OriginalID != pub[i] || d.ConsumerGroup != group ||
			d.Consumer != l.Fence.Token || d.FailureReason != reason || d.RetryCount == nil || *d.RetryCount != 1 || d.Missing != (i == 1) {
			t.Fatalf("dlq entry %d reads as %+v", i, d)
		}
		if at, ok := broker.ParseFailedAt(d.FailedAt); !ok || time.Since(at).Abs() > time.Minute {
			t.Fatalf("dlq entry %d failed_at %q", i, d.FailedAt)
		}
	}
	if got := entries[0].Values["data"]; !strings.HasPrefix(got.(string), `{"n":0,"_dlq_metadata":{`) {
		t.Fatalf("dlq entry 0 data = %s, want the original object with the metadata appended", got)
	}
	if p := c.XPending(t.Context(), st, group).Val(); p.Count != 0 {
		t.Fatalf("%d entries still pending after dead-lettering both", p.Count)
	}
	_, err = b.DeadLetterPartitionFenced(t.Context(), l.Fence, st, group, pub[0], st, "x")
	wantInvalid(t, "dead-letter into its own stream", err, "dlqStream")
}
