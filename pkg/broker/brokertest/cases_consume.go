package brokertest

import (
	"encoding/json"
	"maps"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/protctl/protctl/pkg/broker"
)

var consumeCases = []Case{
	{"FencedReadReturnsPublishOrder", func(t *testing.T, s *Suite) {
		want := s.publish(t, key, "", 25)
		l := s.acquire(t, key, owner, long)
		var got []broker.Message
		for len(got) < len(want) {
			msgs := s.read(t, l.Fence, s.stream(key), 10, broker.ReadNew)
			if len(msgs) == 0 {
				break
			}
			if len(msgs) > 10 {
				t.Fatalf("read with count 10 returned %d", len(msgs))
			}
			got = append(got, msgs...)
		}
		if !slices.Equal(ids(got), want) {
			t.Fatalf("read order = %v, want %v", ids(got), want)
		}
		for i, m := range got {
			if string(m.Data) != string(payload(key, i)) || m.Stream != s.stream(key) || m.Missing {
				t.Fatalf("message %d = %+v, want data %s from %s", i, m, payload(key, i), s.stream(key))
			}
		}
	}},
	{"ReadCreatesGroupFromTheBeginning", func(t *testing.T, s *Suite) {
		// Entries published before the group exists are still delivered:
		// the group starts at id 0, not at the stream's end.
		want := s.publish(t, key, "", 3)
		l := s.acquire(t, key, owner, long)
		if got := ids(s.read(t, l.Fence, s.stream(key), 10, broker.ReadPendingThenNew)); !slices.Equal(got, want) {
			t.Fatalf("first read = %v, want %v", got, want)
		}
	}},
	{"ReadOfMissingStreamIsEmpty", func(t *testing.T, s *Suite) {
		l := s.acquire(t, key, owner, long)
		if msgs := s.read(t, l.Fence, s.stream(key), 10, broker.ReadPendingThenNew); len(msgs) != 0 {
			t.Fatalf("read of a missing stream = %v", msgs)
		}
	}},
	{"PendingIsReadBeforeNew", func(t *testing.T, s *Suite) {
		all := s.publish(t, key, "", 6)
		l := s.acquire(t, key, owner, long)
		first := s.read(t, l.Fence, s.stream(key), 3, broker.ReadNew)
		// Not acked: the next loop read must return the same three first.
		again := s.read(t, l.Fence, s.stream(key), 10, broker.ReadPendingThenNew)
		if !slices.Equal(ids(again), ids(first)) {
			t.Fatalf("pending-then-new read = %v, want the pending %v", ids(again), ids(first))
		}
		if p := s.read(t, l.Fence, s.stream(key), 10, broker.ReadPending); !slices.Equal(ids(p), all[:3]) {
			t.Fatalf("pending read = %v, want %v", ids(p), all[:3])
		}
		s.ack(t, l.Fence, s.stream(key), first)
		if next := s.read(t, l.Fence, s.stream(key), 10, broker.ReadPendingThenNew); !slices.Equal(ids(next), all[3:]) {
			t.Fatalf("read after ack = %v, want %v", ids(next), all[3:])
		}
	}},
	{"AckManyIdsInOneCall", func(t *testing.T, s *Suite) {
		s.publish(t, key, "", 100)
		l := s.acquire(t, key, owner, long)
		msgs := s.read(t, l.Fence, s.stream(key), 100, broker.ReadNew)
		if len(msgs) != 100 {
			t.Fatalf("read %d, want 100", len(msgs))
		}
		n, err := s.B.AckPartitionFenced(s.Ctx, l.Fence, s.stream(key), group, ids(msgs)...)
		if err != nil || n != 100 {
			t.Fatalf("ack of 100 ids = %d, %v", n, err)
		}
		if p := s.read(t, l.Fence, s.stream(key), 100, broker.ReadPending); len(p) != 0 {
			t.Fatalf("%d entries still pending after ack", len(p))
		}
		if n, err := s.B.AckPartitionFenced(s.Ctx, l.Fence, s.stream(key), group, ids(msgs)...); err != nil || n != 0 {
			t.Fatalf("second ack = %d, %v; want 0 (idempotent)", n, err)
		}
	}},
	{"StaleOwnerCannotReadAckReclaimOrDeadLetter", func(t *testing.T, s *Suite) {
		s.publish(t, key, "", 4)
		old := s.acquire(t, key, owner, 50*time.Millisecond)
		msgs := s.read(t, old.Fence, s.stream(key), 2, broker.ReadNew)
		s.Advance(120 * time.Millisecond) // old owner paused past its TTL
		cur := s.acquire(t, key, "node-b", long)
		if cur.Generation != 2 {
			t.Fatalf("new generation = %d", cur.Generation)
		}
		_, err := s.B.ReadPartitionFenced(s.Ctx, old.Fence, s.stream(key), group, 10, broker.ReadPendingThenNew)
		wantLeaseLost(t, "read", err)
		_, err = s.B.AckPartitionFenced(s.Ctx, old.Fence, s.stream(key), group, ids(msgs)...)
		wantLeaseLost(t, "ack", err)
		_, err = s.B.ReclaimPartitionPending(s.Ctx, old.Fence, s.stream(key), group, 0, 10)
		wantLeaseLost(t, "reclaim", err)
		_, err = s.B.DeadLetterPartitionFenced(s.Ctx, old.Fence, s.stream(key), group, msgs[0].ID, s.L.DLQStream(cat, key), "stale")
		wantLeaseLost(t, "dead-letter", err)
		if s.exists(t, s.L.DLQStream(cat, key)) {
			t.Fatal("a stale dead-letter wrote to the DLQ")
		}
		// Nothing the stale owner tried took effect: its two entries are
		// still pending and the new owner reclaims exactly them.
		res, err := s.B.ReclaimPartitionPending(s.Ctx, cur.Fence, s.stream(key), group, 0, 10)
		if err != nil || res.Claimed != 2 {
			t.Fatalf("reclaim by the new owner = %+v, %v; want 2 claimed", res, err)
		}
		if p := s.read(t, cur.Fence, s.stream(key), 10, broker.ReadPending); !slices.Equal(ids(p), ids(msgs)) {
			t.Fatalf("reclaimed = %v, want %v", ids(p), ids(msgs))
		}
	}},
	{"ExpiredLeaseCannotRead", func(t *testing.T, s *Suite) {
		s.publish(t, key, "", 1)
		l := s.acquire(t, key, owner, 50*time.Millisecond)
		s.Advance(120 * time.Millisecond)
		_, err := s.B.ReadPartitionFenced(s.Ctx, l.Fence, s.stream(key), group, 10, broker.ReadNew)
		wantLeaseLost(t, "read after expiry", err)
		if ok, err := s.B.RenewPartitionLease(s.Ctx, l.Fence, long); err != nil || ok {
			t.Fatalf("renew after expiry = %v, %v; want false", ok, err)
		}
	}},
	{"ReleasedLeaseCannotAck", func(t *testing.T, s *Suite) {
		s.publish(t, key, "", 1)
		l := s.acquire(t, key, owner, long)
		msgs := s.read(t, l.Fence, s.stream(key), 10, broker.ReadNew)
		if ok, _ := s.B.ReleasePartitionLease(s.Ctx, l.Fence); !ok {
			t.Fatal("release failed")
		}
		_, err := s.B.AckPartitionFenced(s.Ctx, l.Fence, s.stream(key), group, ids(msgs)...)
		wantLeaseLost(t, "ack after release", err)
	}},
	{"StaleAckLeavesEntriesPending", func(t *testing.T, s *Suite) {
		s.publish(t, key, "", 3)
		old := s.acquire(t, key, owner, long)
		msgs := s.read(t, old.Fence, s.stream(key), 10, broker.ReadNew)
		if ok, _ := s.B.ReleasePartitionLease(s.Ctx, old.Fence); !ok {
			t.Fatal("release failed")
		}
		cur := s.acquire(t, key, "node-b", long)
		if _, err := s.B.AckPartitionFenced(s.Ctx, old.Fence, s.stream(key), group, ids(msgs)...); err == nil {
			t.Fatal("stale ack succeeded")
		}
		res, err := s.B.ReclaimPartitionPending(s.Ctx, cur.Fence, s.stream(key), group, 0, 10)
		if err != nil || res.Claimed != 3 {
			t.Fatalf("after a refused stale ack, reclaim = %+v, %v; want all 3 still pending", res, err)
		}
	}},
	{"ReclaimMovesAllPendingAcrossBatches", func(t *testing.T, s *Suite) {
		want := s.publish(t, key, "", 230)
		old := s.acquire(t, key, owner, long)
		if got := len(s.read(t, old.Fence, s.stream(key), 1000, broker.ReadNew)); got != 230 {
			t.Fatalf("read %d, want 230", got)
		}
		if ok, _ := s.B.ReleasePartitionLease(s.Ctx, old.Fence); !ok {
			t.Fatal("release failed")
		}
		cur := s.acquire(t, key, "node-b", long)
		res, err := s.B.ReclaimPartitionPending(s.Ctx, cur.Fence, s.stream(key), group, 0, 7)
		if err != nil || res.Claimed != 230 || len(res.Missing) != 0 {
			t.Fatalf("reclaim in batches of 7 = claimed %d missing %v, %v; want 230", res.Claimed, res.Missing, err)
		}
		var got []string
		for {
			p := s.read(t, cur.Fence, s.stream(key), 50, broker.ReadPending)
			if len(p) == 0 {
				break
			}
			got = append(got, ids(p)...)
			s.ack(t, cur.Fence, s.stream(key), p)
		}
		if !slices.Equal(got, want) {
			t.Fatalf("reclaimed entries (%d) differ from published (%d)", len(got), len(want))
		}
	}},
	{"ReclaimRespectsMinIdle", func(t *testing.T, s *Suite) {
		s.publish(t, key, "", 3)
		old := s.acquire(t, key, owner, long)
		s.read(t, old.Fence, s.stream(key), 10, broker.ReadNew)
		s.B.ReleasePartitionLease(s.Ctx, old.Fence)
		cur := s.acquire(t, key, "node-b", long)
		res, err := s.B.ReclaimPartitionPending(s.Ctx, cur.Fence, s.stream(key), group, time.Hour, 10)
		if err != nil || res.Claimed != 0 {
			t.Fatalf("reclaim with min idle 1h of fresh entries = %+v, %v; want none", res, err)
		}
	}},
	{"MissingBodyIsReportedOnPendingRead", func(t *testing.T, s *Suite) {
		pub := s.publish(t, key, "", 3)
		l := s.acquire(t, key, owner, long)
		s.read(t, l.Fence, s.stream(key), 10, broker.ReadNew)
		if err := s.faults.DeleteEntry(s.Ctx, s.stream(key), pub[1]); err != nil {
			t.Fatal(err)
		}
		p := s.read(t, l.Fence, s.stream(key), 10, broker.ReadPending)
		if len(p) != 3 {
			t.Fatalf("pending read returned %d entries, want 3 (the deleted one reported, not skipped)", len(p))
		}
		if !p[1].Missing || p[1].ID != pub[1] || len(p[1].Data) != 0 {
			t.Fatalf("deleted entry = %+v, want Missing with id %s", p[1], pub[1])
		}
		if p[0].Missing || p[2].Missing {
			t.Fatalf("intact entries marked missing: %+v", p)
		}
	}},
	{"MissingBodyIsReportedOnReclaim", func(t *testing.T, s *Suite) {
		pub := s.publish(t, key, "", 3)
		old := s.acquire(t, key, owner, long)
		s.read(t, old.Fence, s.stream(key), 10, broker.ReadNew)
		if err := s.faults.DeleteEntry(s.Ctx, s.stream(key), pub[0]); err != nil {
			t.Fatal(err)
		}
		s.B.ReleasePartitionLease(s.Ctx, old.Fence)
		cur := s.acquire(t, key, "node-b", long)
		res, err := s.B.ReclaimPartitionPending(s.Ctx, cur.Fence, s.stream(key), group, 0, 10)
		if err != nil {
			t.Fatal(err)
		}
		if res.Claimed != 2 || !slices.Equal(res.Missing, []string{pub[0]}) {
			t.Fatalf("reclaim = %+v, want 2 claimed and %s reported missing", res, pub[0])
		}
	}},
	{"DeadLetterCopiesToDLQAndAcks", func(t *testing.T, s *Suite) {
		pub := s.publish(t, key, "", 2)
		l := s.acquire(t, key, owner, long)
		head := s.read(t, l.Fence, s.stream(key), 1, broker.ReadNew)
		dlq := s.L.DLQStream(cat, key)
		id, err := s.B.DeadLetterPartitionFenced(s.Ctx, l.Fence, s.stream(key), group, head[0].ID, dlq, "poison")
		if err != nil || id == "" {
			t.Fatalf("dead-letter = %q, %v", id, err)
		}
		if got := s.streamIDs(t, dlq); !slices.Equal(got, []string{id}) {
			t.Fatalf("dlq ids = %v, want [%s]", got, id)
		}
		if p := s.read(t, l.Fence, s.stream(key), 10, broker.ReadPending); len(p) != 0 {
			t.Fatalf("dead-lettered head still pending: %v", ids(p))
		}
		if next := s.read(t, l.Fence, s.stream(key), 10, broker.ReadNew); !slices.Equal(ids(next), pub[1:]) {
			t.Fatalf("after dead-letter the next read = %v, want %v", ids(next), pub[1:])
		}
	}},
	{"DeadLetterIsInProteanFormat", func(t *testing.T, s *Suite) {
		// A JSON object keeps its members and gains _dlq_metadata, which
		// Protean's dlq tooling reads; other data is kept byte for byte
		// with the metadata beside it; a body already gone leaves the
		// metadata alone, saying so.
		pub := s.publish(t, key, "", 1)
		raw, err := s.B.PublishPartitioned(s.Ctx, cat, key, "", []byte("not json"))
		if err != nil {
			t.Fatal(err)
		}
		gone, err := s.B.PublishPartitioned(s.Ctx, cat, key, "", payload(key, 9))
		if err != nil {
			t.Fatal(err)
		}
		l := s.acquire(t, key, owner, long)
		s.read(t, l.Fence, s.stream(key), 10, broker.ReadNew)
		s.read(t, l.Fence, s.stream(key), 1, broker.ReadPending) // a second delivery of each
		if err := s.faults.DeleteEntry(s.Ctx, s.stream(key), gone); err != nil {
			t.Fatal(err)
		}
		dlq := s.L.DLQStream(cat, key)
		for _, c := range []struct {
			id      string
			reason  string
			payload string
			format  broker.DeadLetterFormat
			missing bool
		}{
			{pub[0], "poison", string(payload(key, 0)), broker.FormatProtean, false},
			{raw, "not json", "not json", broker.FormatProtctlRaw, false},
			{gone, "gone", "", broker.FormatProtean, true},
		} {
			id, err := s.B.DeadLetterPartitionFenced(s.Ctx, l.Fence, s.stream(key), group, c.id, dlq, c.reason)
			if err != nil {
				t.Fatalf("dead-letter %s: %v", c.id, err)
			}
			fields, ok, err := s.faults.EntryFields(s.Ctx, dlq, id)
			if err != nil || !ok {
				t.Fatalf("dead letter %s of %s: %v, %v", id, c.id, ok, err)
			}
			d := broker.ParseDeadLetter(fields)
			if d.Format != c.format || d.OriginalStream != s.stream(key) || d.OriginalID != c.id || d.ConsumerGroup != group ||
				d.Consumer != l.Fence.Token || d.FailureReason != c.reason || d.Missing != c.missing {
				t.Fatalf("dead letter of %s reads as %+v", c.id, d)
			}
			if d.RetryCount == nil || (*d.RetryCount < 1) {
				t.Fatalf("dead letter of %s: retry count %v", c.id, d.RetryCount)
			}
			if _, ok := broker.ParseFailedAt(d.FailedAt); !ok {
				t.Fatalf("dead letter of %s: failed_at %q is not ISO 8601", c.id, d.FailedAt)
			}
			if !c.missing && !sameJSONOrBytes(d.Payload, []byte(c.payload)) {
				t.Fatalf("dead letter of %s: payload %s, want %s", c.id, d.Payload, c.payload)
			}
			if c.format == broker.FormatProtean {
				var env map[string]json.RawMessage
				if err := json.Unmarshal([]byte(fields[broker.DataField]), &env); err != nil || env[broker.DLQMetadataKey] == nil {
					t.Fatalf("dead letter of %s: data %s is not an object with %s", c.id, fields[broker.DataField], broker.DLQMetadataKey)
				}
			}
		}
	}},
	{"ReadsOfOneGenerationDoNotSeeAnothersPending", func(t *testing.T, s *Suite) {
		// Each generation is its own consumer: the new owner's pending list
		// starts empty until it reclaims.
		s.publish(t, key, "", 2)
		old := s.acquire(t, key, owner, long)
		s.read(t, old.Fence, s.stream(key), 10, broker.ReadNew)
		s.B.ReleasePartitionLease(s.Ctx, old.Fence)
		cur := s.acquire(t, key, "node-b", long)
		if p := s.read(t, cur.Fence, s.stream(key), 10, broker.ReadPendingThenNew); len(p) != 0 {
			t.Fatalf("new generation read %v before reclaiming", ids(p))
		}
	}},
	{"ConsumeAcrossLanesKeepsOrderPerLane", func(t *testing.T, s *Suite) {
		main := s.publish(t, key, "", 3)
		bf := s.publish(t, key, broker.DefaultBackfillSuffix, 3)
		l := s.acquire(t, key, owner, long)
		if got := ids(s.drain(t, l.Fence, s.stream(key))); !slices.Equal(got, main) {
			t.Fatalf("main lane = %v, want %v", got, main)
		}
		if got := ids(s.drain(t, l.Fence, s.backfill(key))); !slices.Equal(got, bf) {
			t.Fatalf("backfill lane = %v, want %v", got, bf)
		}
	}},
}

// consumers returns group's consumers on stream with their pending counts.
func (s *Suite) consumers(t *testing.T, stream string) map[string]int64 {
	t.Helper()
	cs, err := s.faults.Consumers(s.Ctx, stream, group)
	if err != nil {
		t.Fatalf("consumers of %s: %v", stream, err)
	}
	return cs
}

// consumerCases hold the group's consumers to one per live owner plus
// those with entries still to reclaim: without them a group gains a
// consumer (owner:generation) at every handover, forever.
var consumerCases = []Case{
	{"ReclaimDeletesEmptyConsumersOfEarlierGenerations", func(t *testing.T, s *Suite) {
		s.publish(t, key, "", 6)
		g1 := s.acquire(t, key, owner, long)
		s.drain(t, g1.Fence, s.stream(key)) // g1: read and acked all 6, empty
		s.B.ReleasePartitionLease(s.Ctx, g1.Fence)
		s.publish(t, key, "", 3)
		g2 := s.acquire(t, key, "node-b", long)
		held := s.read(t, g2.Fence, s.stream(key), 10, broker.ReadNew) // g2: 3 pending
		s.B.ReleasePartitionLease(s.Ctx, g2.Fence)
		if cs := s.consumers(t, s.stream(key)); len(cs) != 2 {
			t.Fatalf("before the reclaim, consumers = %v; want both earlier generations", cs)
		}
		g3 := s.acquire(t, key, owner, long)
		res, err := s.B.ReclaimPartitionPending(s.Ctx, g3.Fence, s.stream(key), group, 0, 2)
		if err != nil || res.Claimed != 3 || res.Pruned != 2 {
			t.Fatalf("reclaim = %+v, %v; want 3 claimed and 2 consumers pruned", res, err)
		}
		want := map[string]int64{g3.Token: 3}
		if cs := s.consumers(t, s.stream(key)); !maps.Equal(cs, want) {
			t.Fatalf("after the reclaim, consumers = %v; want %v", cs, want)
		}
		if p := s.read(t, g3.Fence, s.stream(key), 10, broker.ReadPending); !slices.Equal(ids(p), ids(held)) {
			t.Fatalf("pending after the prune = %v, want %v (no entry lost)", ids(p), ids(held))
		}
	}},
	{"ReclaimKeepsConsumersThatStillHoldEntries", func(t *testing.T, s *Suite) {
		s.publish(t, key, "", 3)
		old := s.acquire(t, key, owner, long)
		s.read(t, old.Fence, s.stream(key), 10, broker.ReadNew)
		s.B.ReleasePartitionLease(s.Ctx, old.Fence)
		cur := s.acquire(t, key, "node-b", long)
		// Fresh entries are not idle for an hour: they stay with old,
		// and so does old's consumer (deleting it would drop them).
		res, err := s.B.ReclaimPartitionPending(s.Ctx, cur.Fence, s.stream(key), group, time.Hour, 10)
		if err != nil || res.Claimed != 0 || res.Pruned != 0 {
			t.Fatalf("reclaim with min idle 1h = %+v, %v; want nothing claimed or pruned", res, err)
		}
		if cs := s.consumers(t, s.stream(key)); cs[old.Token] != 3 {
			t.Fatalf("consumers = %v; want %s with its 3 pending entries", cs, old.Token)
		}
	}},
	{"StaleOwnerCannotPrune", func(t *testing.T, s *Suite) {
		s.publish(t, key, "", 2)
		old := s.acquire(t, key, owner, 50*time.Millisecond)
		s.drain(t, old.Fence, s.stream(key))
		s.Advance(120 * time.Millisecond)
		cur := s.acquire(t, key, "node-b", long)
		s.publish(t, key, "", 1)
		s.read(t, cur.Fence, s.stream(key), 10, broker.ReadNew) // cur's consumer, 1 pending
		_, err := s.B.ReclaimPartitionPending(s.Ctx, old.Fence, s.stream(key), group, 0, 10)
		wantLeaseLost(t, "reclaim", err)
		if cr, ok := s.B.(broker.ConsumerReleaser); ok {
			if ok, err := cr.ReleasePartitionLeaseConsumer(s.Ctx, old.Fence, group, s.stream(key)); err != nil || ok {
				t.Fatalf("stale release = %v, %v; want false", ok, err)
			}
		}
		if cs := s.consumers(t, s.stream(key)); len(cs) != 2 {
			t.Fatalf("consumers = %v; want both kept (a stale owner deletes nothing)", cs)
		}
	}},
	{"ReleaseDeletesTheOwnersEmptyConsumers", func(t *testing.T, s *Suite) {
		cr, ok := s.B.(broker.ConsumerReleaser)
		if !ok {
			t.Skip("the broker does not implement broker.ConsumerReleaser")
		}
		s.publish(t, key, "", 2)
		s.publish(t, key, broker.DefaultBackfillSuffix, 2)
		l := s.acquire(t, key, owner, long)
		s.drain(t, l.Fence, s.stream(key))
		held := s.read(t, l.Fence, s.backfill(key), 1, broker.ReadNew)
		if ok, err := cr.ReleasePartitionLeaseConsumer(s.Ctx, l.Fence, group, s.stream(key), s.backfill(key), s.L.LaneStream(cat, key, "none")); err != nil || !ok {
			t.Fatalf("release = %v, %v; want true", ok, err)
		}
		if cs := s.consumers(t, s.stream(key)); len(cs) != 0 {
			t.Fatalf("main lane consumers after release = %v; want none", cs)
		}
		if cs := s.consumers(t, s.backfill(key)); !maps.Equal(cs, map[string]int64{l.Token: 1}) {
			t.Fatalf("backfill consumers after release = %v; want %s with its pending entry", cs, l.Token)
		}
		if s.exists(t, s.L.LeaseKey(group, key)) {
			t.Fatal("the lease is still there")
		}
		next := s.acquire(t, key, "node-b", long)
		res, err := s.B.ReclaimPartitionPending(s.Ctx, next.Fence, s.backfill(key), group, 0, 10)
		if err != nil || res.Claimed != 1 || res.Pruned != 1 {
			t.Fatalf("next owner's reclaim = %+v, %v; want the held entry claimed and the old consumer pruned", res, err)
		}
		if p := s.read(t, next.Fence, s.backfill(key), 10, broker.ReadPending); !slices.Equal(ids(p), ids(held)) {
			t.Fatalf("pending = %v, want %v", ids(p), ids(held))
		}
	}},
	{"ManyHandoversKeepAtMostTwoConsumers", func(t *testing.T, s *Suite) {
		cr, _ := s.B.(broker.ConsumerReleaser)
		owners := []string{owner, "node-b", "node-c"}
		published, handled := 0, 0
		for i := 0; i < 200; i++ {
			s.publish(t, key, "", 2)
			published += 2
			l := s.acquire(t, key, owners[i%len(owners)], long)
			if _, err := s.B.ReclaimPartitionPending(s.Ctx, l.Fence, s.stream(key), group, 0, 10); err != nil {
				t.Fatalf("handover %d: reclaim: %v", i, err)
			}
			msgs := s.read(t, l.Fence, s.stream(key), 10, broker.ReadPendingThenNew)
			// Every third owner hands over with an entry in flight.
			keep := 0
			if i%3 == 0 && len(msgs) > 0 {
				keep = 1
			}
			s.ack(t, l.Fence, s.stream(key), msgs[:len(msgs)-keep])
			handled += len(msgs) - keep
			if cr != nil && i%2 == 0 {
				cr.ReleasePartitionLeaseConsumer(s.Ctx, l.Fence, group, s.stream(key))
			} else {
				s.B.ReleasePartitionLease(s.Ctx, l.Fence)
			}
			if cs := s.consumers(t, s.stream(key)); len(cs) > 2 {
				t.Fatalf("after handover %d: %d consumers %v; want at most 2", i, len(cs), cs)
			}
		}
		l := s.acquire(t, key, owner, long)
		if _, err := s.B.ReclaimPartitionPending(s.Ctx, l.Fence, s.stream(key), group, 0, 10); err != nil {
			t.Fatal(err)
		}
		handled += len(s.drain(t, l.Fence, s.stream(key)))
		if handled != published {
			t.Fatalf("handled %d of %d entries: pruning lost some", handled, published)
		}
	}},
}

// sameJSONOrBytes reports whether a and b are equal JSON values, or equal
// bytes when either is not JSON.
func sameJSONOrBytes(a, b []byte) bool {
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return string(a) == string(b)
	}
	return reflect.DeepEqual(x, y)
}
