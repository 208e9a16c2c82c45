package redisbroker_test

import (
	"slices"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/protctl/protctl/pkg/broker"
	"github.com/protctl/protctl/pkg/broker/redisbroker"
)

// ownedPartition is partition key with 10 entries, leased by owner, whose
// group has been handed the first read entries and acked the first acked
// (the rest of what was read is pending: prefetched, not handled yet).
func ownedPartition(t *testing.T, read, acked int) (*redisbroker.Broker, *redis.Client, broker.Lease, []string) {
	t.Helper()
	b, c := newBroker(t)
	ids := publish(t, b, key, "", 10)
	l := acquire(t, b, key, owner, 10*time.Second)
	stream := layout.Stream(cat, key)
	got, err := b.ReadPartitionFenced(t.Context(), l.Fence, stream, group, int64(read), broker.ReadNew)
	if err != nil || len(got) != read {
		t.Fatalf("read %d: %v", len(got), err)
	}
	if _, err := b.AckPartitionFenced(t.Context(), l.Fence, stream, group, ids[:acked]...); err != nil {
		t.Fatal(err)
	}
	return b, c, l, ids
}

// handedOnward is what the group is handed from now on, as a worker reads
// it: its pending entries first, then the new ones.
func handedOnward(t *testing.T, b *redisbroker.Broker, l broker.Lease) []string {
	t.Helper()
	stream := layout.Stream(cat, key)
	pend, err := b.ReadPartitionFenced(t.Context(), l.Fence, stream, group, 100, broker.ReadPending)
	if err != nil {
		t.Fatal(err)
	}
	fresh, err := b.ReadPartitionFenced(t.Context(), l.Fence, stream, group, 100, broker.ReadNew)
	if err != nil {
		t.Fatal(err)
	}
	return append(msgIDs(pend), msgIDs(fresh)...)
}

// requestAndApply records a seek request of one lane (planned from
// from, to to) against l and carries it out as the owner does.
func requestAndApply(t *testing.T, b *redisbroker.Broker, l broker.Lease, id, from, to string) redisbroker.SeekOutcome {
	t.Helper()
	stream := layout.Stream(cat, key)
	st, _, err := b.RequestSeek(t.Context(), group, key, redisbroker.SeekRequest{ID: id, Token: l.Token, Lanes: []redisbroker.SeekLane{{Stream: stream, From: from, To: to}}})
	if err != nil || st != "requested" {
		t.Fatalf("request %s: %v", st, err)
	}
	o, err := b.ApplySeekRequest(t.Context(), l.Fence, l.Generation, group, key, []string{stream})
	if err != nil || o.Status != redisbroker.SeekApplied {
		t.Fatalf("apply %+v: %v", o, err)
	}
	return o
}

// The reviewer's H1: the plan saw the group at ids[1] and asked to skip
// forward to ids[4]; the owner handled up to ids[7] before carrying it
// out. The seek must not hand back ids[5..7] (a rewind): the position
// stays ids[7] and only ids[8], ids[9] follow.
func TestSeekPlannedForwardNeverBecomesARewind(t *testing.T) {
	b, _, l, ids := ownedPartition(t, 8, 8)
	o := requestAndApply(t, b, l, "p1", ids[1], ids[4])
	if ln := o.Lanes[0]; ln.From != ids[7] || ln.To != ids[7] || ln.Acked != 0 {
		t.Fatalf("lane %+v, want the position kept at %s (past the target), nothing acked", ln, ids[7])
	}
	if got := handedOnward(t, b, l); !slices.Equal(got, ids[8:]) {
		t.Fatalf("a planned skip forward handed %v, want %v", got, ids[8:])
	}
}

// The owner was handed ids[0..7] but handled only ids[0..2] (ids[3..7]
// prefetched, pending) when it carries out a skip forward to ids[4]
// planned at ids[1]: ids[3], ids[4] are skipped (acked), ids[5..7] were
// delivered past the target and are handed once, first, then ids[8..9].
// Nothing at or before the target is handed.
func TestSeekPlannedForwardWithPrefetchedEntries(t *testing.T) {
	b, _, l, ids := ownedPartition(t, 8, 3)
	o := requestAndApply(t, b, l, "p1", ids[1], ids[4])
	if ln := o.Lanes[0]; ln.To != ids[7] || ln.Acked != 2 || ln.Kept != 3 {
		t.Fatalf("lane %+v, want position %s, 2 pending acked (at or before the target), 3 kept", ln, ids[7])
	}
	if got := handedOnward(t, b, l); !slices.Equal(got, ids[5:]) {
		t.Fatalf("handed %v, want %v: once each, in order, nothing at or before the target", got, ids[5:])
	}
}

// A planned forward move the owner has not reached moves to the target
// and skips everything pending (all at or before it).
func TestSeekPlannedForwardAheadOfTheOwner(t *testing.T) {
	b, _, l, ids := ownedPartition(t, 3, 1)
	o := requestAndApply(t, b, l, "p1", ids[2], ids[6])
	if ln := o.Lanes[0]; ln.To != ids[6] || ln.Acked != 2 || ln.Kept != 0 {
		t.Fatalf("lane %+v, want position %s, the 2 pending acked", ln, ids[6])
	}
	if got := handedOnward(t, b, l); !slices.Equal(got, ids[7:]) {
		t.Fatalf("handed %v, want %v", got, ids[7:])
	}
}

// A planned rewind never becomes a skip: planned from ids[9] back to
// ids[6], but the group is at ids[3] now (another operator rewound it
// further meanwhile): it stays there, and nothing after it is skipped.
func TestSeekPlannedRewindNeverBecomesASkip(t *testing.T) {
	b, _, l, ids := ownedPartition(t, 4, 4)
	o := requestAndApply(t, b, l, "p1", ids[9], ids[6])
	if ln := o.Lanes[0]; ln.To != ids[3] {
		t.Fatalf("lane %+v, want the position kept at %s", ln, ids[3])
	}
	if got := handedOnward(t, b, l); !slices.Equal(got, ids[4:]) {
		t.Fatalf("handed %v, want %v", got, ids[4:])
	}
}

// A rewind the owner carries out after reading on hands back everything
// after the target once, in order.
func TestSeekPlannedRewindAfterTheOwnerReadOn(t *testing.T) {
	b, _, l, ids := ownedPartition(t, 9, 7) // ids[7], ids[8] pending
	o := requestAndApply(t, b, l, "p1", ids[5], ids[2])
	if ln := o.Lanes[0]; ln.To != ids[2] || ln.Acked != 2 {
		t.Fatalf("lane %+v, want position %s, the 2 pending after it acked", ln, ids[2])
	}
	if got := handedOnward(t, b, l); !slices.Equal(got, ids[3:]) {
		t.Fatalf("handed %v, want %v", got, ids[3:])
	}
}

// SeekFree with AnyFrom (a released foreign owner read on): the planned
// direction still holds.
func TestSeekFreeAnyFromKeepsThePlannedDirection(t *testing.T) {
	b, _, l, ids := ownedPartition(t, 8, 8)
	if ok, err := b.ReleasePartitionLease(t.Context(), l.Fence); err != nil || !ok {
		t.Fatal(ok, err)
	}
	gen := l.Generation
	o, err := b.SeekFree(t.Context(), group, key, &gen, []redisbroker.SeekLane{{Stream: layout.Stream(cat, key), From: ids[1], To: ids[4], AnyFrom: true}})
	if err != nil || o.Status != redisbroker.SeekApplied || o.Lanes[0].To != ids[7] {
		t.Fatalf("free seek %+v: %v, want the position kept at %s", o, err, ids[7])
	}
}

// The reviewer's M1: a refused request leaves nothing in the seeks set,
// so no owner grabs the partition for it.
func TestSeekRefusedRequestLeavesNoSetMember(t *testing.T) {
	b, c := newBroker(t)
	publish(t, b, key, "", 1)
	acquire(t, b, key, owner, 10*time.Second)
	st, _, err := b.RequestSeek(t.Context(), group, key, redisbroker.SeekRequest{ID: "p1", Token: "node-z:9", Lanes: []redisbroker.SeekLane{{Stream: layout.Stream(cat, key), To: "0-0"}}})
	if err != nil || st != redisbroker.SeekLeased {
		t.Fatalf("request %s %v", st, err)
	}
	if m := c.SMembers(t.Context(), redisbroker.SeekRequestsKey(group)).Val(); len(m) != 0 {
		t.Errorf("refused request left %v", m)
	}
}

// Nodes list only keys with an open request, and drop the members of
// requests that are done (closed, expired, replaced, or an older
// protctl's bare key without a request), so that no owner is signalled
// forever.
func TestSeekRequestsListsOnlyOpenRequests(t *testing.T) {
	b, c, l, ids := ownedPartition(t, 2, 2)
	ctx := t.Context()
	set := redisbroker.SeekRequestsKey(group)
	stream := layout.Stream(cat, key)
	if st, _, err := b.RequestSeek(ctx, group, key, redisbroker.SeekRequest{ID: "p1", Token: l.Token, Lanes: []redisbroker.SeekLane{{Stream: stream, From: ids[1], To: ids[0]}}}); err != nil || st != "requested" {
		t.Fatal(st, err)
	}
	c.SAdd(ctx, set, "gone-key", redisbroker.SeekRequestMember("p0", "other"))
	got, err := b.SeekRequests(ctx, group)
	if err != nil || !slices.Equal(got, []string{key}) {
		t.Fatalf("listed %v %v, want [%s]", got, err, key)
	}
	if m := c.SMembers(ctx, set).Val(); !slices.Equal(m, []string{redisbroker.SeekRequestMember("p1", key)}) {
		t.Fatalf("members %v: those without a request stay", m)
	}
	if _, err := b.ApplySeekRequest(ctx, l.Fence, l.Generation, group, key, []string{stream}); err != nil {
		t.Fatal(err)
	}
	if got, err := b.SeekRequests(ctx, group); err != nil || len(got) != 0 {
		t.Fatalf("listed %v %v after the request closed", got, err)
	}
	if n := c.SCard(ctx, set).Val(); n != 0 {
		t.Fatalf("%d members left after the request closed", n)
	}
}

// The reviewer's "two operators" race: request p1 is carried out and p2
// replaces it before p1's operator polls. p1's operator still reads what
// became of p1, and forgetting p1 keeps p2 listed.
func TestSeekRacingOperatorsScopedByRequestID(t *testing.T) {
	b, c, l, ids := ownedPartition(t, 5, 5)
	ctx := t.Context()
	stream := layout.Stream(cat, key)
	requestAndApply(t, b, l, "p1", ids[4], ids[1])
	if st, _, err := b.RequestSeek(ctx, group, key, redisbroker.SeekRequest{ID: "p2", Token: l.Token, Lanes: []redisbroker.SeekLane{{Stream: stream, From: ids[1], To: ids[0]}}}); err != nil || st != "requested" {
		t.Fatal(st, err)
	}
	s, ok, err := b.SeekRequestStatus(ctx, group, key, "p1")
	if err != nil || !ok || s.Status != redisbroker.SeekApplied || s.ID != "p1" || len(s.Lanes) != 1 || s.Lanes[0].To != ids[1] {
		t.Fatalf("p1 read as %+v %v %v, want applied to %s", s, ok, err, ids[1])
	}
	if err := b.ForgetSeekRequest(ctx, group, key, "p1"); err != nil {
		t.Fatal(err)
	}
	if m := c.SMembers(ctx, redisbroker.SeekRequestsKey(group)).Val(); !slices.Equal(m, []string{redisbroker.SeekRequestMember("p2", key)}) {
		t.Fatalf("members %v: p2's must stay", m)
	}
	if s, ok, err := b.SeekRequestStatus(ctx, group, key, "p2"); err != nil || !ok || s.Status != "" {
		t.Fatalf("p2 read as %+v %v %v, want open", s, ok, err)
	}
}

// A free seek's wake member is listed for SeekWakeFor, then dropped.
func TestSeekWakeMemberIsListedThenDropped(t *testing.T) {
	b, c := newBroker(t)
	ctx := t.Context()
	now := c.Time(ctx).Val()
	if err := b.MarkSeekWake(ctx, group, "fresh", now); err != nil {
		t.Fatal(err)
	}
	if err := b.MarkSeekWake(ctx, group, "old", now.Add(-redisbroker.SeekWakeFor-time.Second)); err != nil {
		t.Fatal(err)
	}
	got, err := b.SeekRequests(ctx, group)
	if err != nil || !slices.Equal(got, []string{"fresh"}) {
		t.Fatalf("listed %v %v, want [fresh]", got, err)
	}
	if n := c.SCard(ctx, redisbroker.SeekRequestsKey(group)).Val(); n != 1 {
		t.Fatalf("%d members, want the old wake dropped", n)
	}
}
