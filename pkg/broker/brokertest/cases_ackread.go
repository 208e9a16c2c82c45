package brokertest

import (
	"slices"
	"testing"
	"time"

	"github.com/protctl/protctl/pkg/broker"
)

func (s *Suite) ackRead(t *testing.T, ar broker.AckReader, f broker.Fence, ack []string, count int64, mode broker.ReadMode) []broker.Message {
	t.Helper()
	msgs, err := ar.AckAndReadPartitionFenced(s.Ctx, f, s.stream(key), group, ack, count, mode)
	if err != nil {
		t.Fatalf("ack %d and read %d: %v", len(ack), count, err)
	}
	return msgs
}

var ackReadCases = []Case{
	{"AckAndReadLoopConsumesInOrder", func(t *testing.T, s *Suite) {
		ar := optional[broker.AckReader](t, s)
		want := s.publish(t, key, "", 25)
		l := s.acquire(t, key, owner, long)
		// The owner's steady loop: each call acks the previous batch and
		// reads the next one.
		var got []broker.Message
		var prev []string
		for calls := 0; ; calls++ {
			if calls > 10 {
				t.Fatal("the loop does not end")
			}
			msgs := s.ackRead(t, ar, l.Fence, prev, 10, broker.ReadPendingThenNew)
			if len(msgs) > 10 {
				t.Fatalf("read with count 10 returned %d", len(msgs))
			}
			if len(msgs) == 0 {
				break
			}
			got = append(got, msgs...)
			prev = ids(msgs)
		}
		if !slices.Equal(ids(got), want) {
			t.Fatalf("ack-and-read order = %v, want %v", ids(got), want)
		}
		for i, m := range got {
			if string(m.Data) != string(payload(key, i)) || m.Stream != s.stream(key) || m.Missing {
				t.Fatalf("message %d = %+v, want data %s from %s", i, m, payload(key, i), s.stream(key))
			}
		}
		if p := s.read(t, l.Fence, s.stream(key), 100, broker.ReadPending); len(p) != 0 {
			t.Fatalf("%d entries still pending after the loop acked every batch: %v", len(p), ids(p))
		}
	}},
	{"AckAndReadAcksBeforeItReads", func(t *testing.T, s *Suite) {
		ar := optional[broker.AckReader](t, s)
		all := s.publish(t, key, "", 10)
		l := s.acquire(t, key, owner, long)
		first := s.read(t, l.Fence, s.stream(key), 5, broker.ReadNew)
		// Had the read come first, pending-then-new would return the five
		// pending entries again; acked first, they are gone and the next
		// five come.
		next := s.ackRead(t, ar, l.Fence, ids(first[:4]), 10, broker.ReadPendingThenNew)
		if !slices.Equal(ids(next), all[4:5]) {
			t.Fatalf("after acking 4 of 5 the read = %v, want the one still pending %v", ids(next), all[4:5])
		}
		next = s.ackRead(t, ar, l.Fence, ids(next), 10, broker.ReadPendingThenNew)
		if !slices.Equal(ids(next), all[5:]) {
			t.Fatalf("after acking the rest the read = %v, want %v", ids(next), all[5:])
		}
		// ReadNew acks and reads only new entries, leaving the rest pending.
		if got := s.ackRead(t, ar, l.Fence, ids(next[:2]), 10, broker.ReadNew); len(got) != 0 {
			t.Fatalf("ack and read-new with nothing new = %v", ids(got))
		}
		if p := s.read(t, l.Fence, s.stream(key), 10, broker.ReadPending); !slices.Equal(ids(p), all[7:]) {
			t.Fatalf("pending = %v, want %v", ids(p), all[7:])
		}
	}},
	{"AckAndReadWithStaleFenceChangesNothing", func(t *testing.T, s *Suite) {
		ar := optional[broker.AckReader](t, s)
		pub := s.publish(t, key, "", 4)
		old := s.acquire(t, key, owner, 50*time.Millisecond)
		msgs := s.read(t, old.Fence, s.stream(key), 2, broker.ReadNew)
		s.Advance(120 * time.Millisecond) // the old owner paused past its TTL
		cur := s.acquire(t, key, "node-b", long)
		for _, mode := range []broker.ReadMode{broker.ReadPendingThenNew, broker.ReadNew, broker.ReadPending} {
			_, err := ar.AckAndReadPartitionFenced(s.Ctx, old.Fence, s.stream(key), group, ids(msgs), 10, mode)
			wantLeaseLost(t, "ack and read", err)
		}
		// Not acked: the new owner reclaims exactly the two entries.
		res, err := s.B.ReclaimPartitionPending(s.Ctx, cur.Fence, s.stream(key), group, 0, 10)
		if err != nil || res.Claimed != 2 {
			t.Fatalf("reclaim by the new owner = %+v, %v; want the 2 the stale call tried to ack", res, err)
		}
		// Not read: the two never-delivered entries are still new.
		if got := s.read(t, cur.Fence, s.stream(key), 10, broker.ReadNew); !slices.Equal(ids(got), pub[2:]) {
			t.Fatalf("new entries after the stale call = %v, want %v (it must not have read them)", ids(got), pub[2:])
		}
	}},
	{"AckAndReadWithEmptyAckJustReads", func(t *testing.T, s *Suite) {
		ar := optional[broker.AckReader](t, s)
		l := s.acquire(t, key, owner, long)
		if got := s.ackRead(t, ar, l.Fence, nil, 10, broker.ReadPendingThenNew); len(got) != 0 {
			t.Fatalf("ack-and-read of a missing stream = %v", ids(got))
		}
		pub := s.publish(t, key, "", 3)
		if got := s.ackRead(t, ar, l.Fence, nil, 10, broker.ReadPendingThenNew); !slices.Equal(ids(got), pub) {
			t.Fatalf("ack of nothing and read = %v, want %v", ids(got), pub)
		}
		// Nothing was acked: the same three are pending and come again.
		if got := s.ackRead(t, ar, l.Fence, []string{}, 10, broker.ReadPendingThenNew); !slices.Equal(ids(got), pub) {
			t.Fatalf("ack of an empty list and read = %v, want the pending %v", ids(got), pub)
		}
	}},
	{"AckAndReadRefusesBadInput", func(t *testing.T, s *Suite) {
		ar := optional[broker.AckReader](t, s)
		s.publish(t, key, "", 3)
		l := s.acquire(t, key, owner, long)
		msgs := s.read(t, l.Fence, s.stream(key), 10, broker.ReadNew)
		_, err := ar.AckAndReadPartitionFenced(s.Ctx, l.Fence, s.stream(key), group, []string{msgs[0].ID, "not-an-id"}, 10, broker.ReadPendingThenNew)
		wantErrIs(t, "ack of a bad id", err, broker.ErrInvalidArgument)
		for _, count := range []int64{0, -1} {
			_, err = ar.AckAndReadPartitionFenced(s.Ctx, l.Fence, s.stream(key), group, ids(msgs), count, broker.ReadPendingThenNew)
			wantErrIs(t, "count "+itoa(int(count)), err, broker.ErrInvalidArgument)
		}
		_, err = ar.AckAndReadPartitionFenced(s.Ctx, l.Fence, s.stream(key), group, ids(msgs), 10, broker.ReadMode(42))
		wantErrIs(t, "unknown mode", err, broker.ErrInvalidArgument)
		// None of the refused calls acked anything.
		if p := s.read(t, l.Fence, s.stream(key), 10, broker.ReadPending); !slices.Equal(ids(p), ids(msgs)) {
			t.Fatalf("pending after refused calls = %v, want %v", ids(p), ids(msgs))
		}
	}},
}
