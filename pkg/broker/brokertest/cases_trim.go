package brokertest

import (
	"slices"
	"testing"

	"github.com/protctl/protctl/pkg/broker"
)

func (s *Suite) trim(t *testing.T, stream string, maxLen int64) int64 {
	t.Helper()
	n, err := s.B.Trim(s.Ctx, stream, maxLen)
	if err != nil {
		t.Fatalf("trim %s to %d: %v", stream, maxLen, err)
	}
	return n
}

var trimCases = []Case{
	{"TrimRefusesNonPositiveMaxLen", func(t *testing.T, s *Suite) {
		pub := s.publish(t, key, "", 3)
		for _, maxLen := range []int64{0, -1} {
			_, err := s.B.Trim(s.Ctx, s.stream(key), maxLen)
			wantErrIs(t, "trim with maxLen "+itoa(int(maxLen)), err, broker.ErrInvalidArgument)
		}
		if got := s.streamIDs(t, s.stream(key)); !slices.Equal(got, pub) {
			t.Fatalf("refused trim changed the stream: %v", got)
		}
	}},
	{"TrimOfMissingStreamRemovesNothing", func(t *testing.T, s *Suite) {
		if n := s.trim(t, s.stream("nothing"), 5); n != 0 {
			t.Fatalf("trim of a missing stream removed %d", n)
		}
		if s.exists(t, s.stream("nothing")) {
			t.Fatal("trim created the stream")
		}
	}},
	{"TrimWithoutGroupsCapsAtMaxLen", func(t *testing.T, s *Suite) {
		pub := s.publish(t, key, "", 10)
		if n := s.trim(t, s.stream(key), 4); n != 6 {
			t.Fatalf("removed %d, want 6", n)
		}
		if got := s.streamIDs(t, s.stream(key)); !slices.Equal(got, pub[6:]) {
			t.Fatalf("kept %v, want the newest 4 %v", got, pub[6:])
		}
	}},
	{"TrimWithOneCaughtUpGroupCapsAtMaxLen", func(t *testing.T, s *Suite) {
		pub := s.publish(t, key, "", 10)
		l := s.acquire(t, key, owner, long)
		s.drain(t, l.Fence, s.stream(key))
		if n := s.trim(t, s.stream(key), 3); n != 7 {
			t.Fatalf("removed %d, want 7", n)
		}
		if got := s.streamIDs(t, s.stream(key)); !slices.Equal(got, pub[7:]) {
			t.Fatalf("kept %v, want %v", got, pub[7:])
		}
	}},
	{"TrimKeepsUnackedEntries", func(t *testing.T, s *Suite) {
		pub := s.publish(t, key, "", 10)
		l := s.acquire(t, key, owner, long)
		msgs := s.read(t, l.Fence, s.stream(key), 10, broker.ReadNew)
		s.ack(t, l.Fence, s.stream(key), msgs[:4]) // 5th..10th delivered, not acked
		s.trim(t, s.stream(key), 1)
		got := s.streamIDs(t, s.stream(key))
		if !slices.Equal(got, pub[4:]) {
			t.Fatalf("after trim the stream holds %v, want every unacked entry %v", got, pub[4:])
		}
		// The owner can still see and ack every pending entry with its body.
		p := s.read(t, l.Fence, s.stream(key), 10, broker.ReadPending)
		for _, m := range p {
			if m.Missing {
				t.Fatalf("trim deleted the body of pending entry %s", m.ID)
			}
		}
	}},
	{"TrimKeepsWhatALaggingGroupHasNotRead", func(t *testing.T, s *Suite) {
		pub := s.publish(t, key, "", 10)
		l := s.acquire(t, key, owner, long)
		s.drain(t, l.Fence, s.stream(key)) // group is caught up
		lag := broker.Fence{LeaseKey: s.L.LeaseKey("lagging", key)}
		ll, ok, err := s.B.AcquirePartitionLease(s.Ctx, lag.LeaseKey, s.L.GenerationKey("lagging", key), owner, long)
		if err != nil || !ok {
			t.Fatal(err)
		}
		first, err := s.B.ReadPartitionFenced(s.Ctx, ll.Fence, s.stream(key), "lagging", 3, broker.ReadNew)
		if err != nil || len(first) != 3 {
			t.Fatalf("lagging read = %d, %v", len(first), err)
		}
		if _, err := s.B.AckPartitionFenced(s.Ctx, ll.Fence, s.stream(key), "lagging", ids(first)...); err != nil {
			t.Fatal(err)
		}
		s.trim(t, s.stream(key), 1)
		rest, err := s.B.ReadPartitionFenced(s.Ctx, ll.Fence, s.stream(key), "lagging", 100, broker.ReadNew)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(ids(rest), pub[3:]) {
			t.Fatalf("after trim the lagging group reads %v, want %v", ids(rest), pub[3:])
		}
	}},
	{"TrimKeepsEverythingForAGroupThatNeverRead", func(t *testing.T, s *Suite) {
		pub := s.publish(t, key, "", 5)
		if err := s.faults.CreateGroup(s.Ctx, s.stream(key), "idle", "0"); err != nil {
			t.Fatal(err)
		}
		if n := s.trim(t, s.stream(key), 1); n != 0 {
			t.Fatalf("trim removed %d entries a group never read", n)
		}
		if got := s.streamIDs(t, s.stream(key)); !slices.Equal(got, pub) {
			t.Fatalf("stream = %v, want %v", got, pub)
		}
	}},
}
