package brokertest

import (
	"errors"
	"slices"
	"testing"

	"github.com/protctl/protctl/pkg/broker"
)

// wantUntouched asserts that a refused reap left key's index entry,
// lanes and lease as they were.
func (s *Suite) wantUntouched(t *testing.T, main, bf []string, lease string) {
	t.Helper()
	if !slices.Contains(s.keys(t), key) {
		t.Fatal("refused reap removed the key from the index")
	}
	if !slices.Equal(s.streamIDs(t, s.stream(key)), main) || !slices.Equal(s.streamIDs(t, s.backfill(key)), bf) {
		t.Fatal("refused reap changed a lane")
	}
	got, _, err := s.faults.GetString(s.Ctx, s.L.LeaseKey(group, key))
	if err != nil {
		t.Fatal(err)
	}
	if got != lease {
		t.Fatalf("refused reap left the lease %q, want %q", got, lease)
	}
}

var reapLeaseCases = []Case{
	{"ReapLeasesDeletesTheHeldLeaseItSaw", func(t *testing.T, s *Suite) {
		lr := optional[broker.LeaseReaper](t, s)
		s.coldPartition(t, key)
		l := s.acquire(t, key, owner, long) // a live owner with nothing to do
		res, err := lr.ReapPartitionLeases(s.Ctx, cat, key, 0, "", []broker.SeenLease{{Group: group, Token: l.Fence.Token}})
		if err != nil || !res.Reaped {
			t.Fatalf("reap of a cold partition under the lease seen = %+v, %v", res, err)
		}
		if s.exists(t, s.L.LeaseKey(group, key)) {
			t.Fatal("the reap left the lease key behind")
		}
		if !s.exists(t, s.L.GenerationKey(group, key)) {
			t.Fatal("the reap deleted the generation counter")
		}
		if ks := s.keys(t); len(ks) != 0 {
			t.Fatalf("index after reap = %v", ks)
		}
		if s.exists(t, s.stream(key)) {
			t.Fatal("the main lane survived the reap")
		}
	}},
	{"ReapLeasesKeepsPartitionWhoseLeaseMoved", func(t *testing.T, s *Suite) {
		lr := optional[broker.LeaseReaper](t, s)
		s.coldPartition(t, key)
		l := s.acquire(t, key, owner, long)
		if ok, err := s.B.ReleasePartitionLease(s.Ctx, l.Fence); err != nil || !ok {
			t.Fatalf("release: %v %v", ok, err)
		}
		now := s.acquire(t, key, "node-b", long) // the lease moved to a new generation
		main, bf := s.streamIDs(t, s.stream(key)), s.streamIDs(t, s.backfill(key))
		res, err := lr.ReapPartitionLeases(s.Ctx, cat, key, 0, "", []broker.SeenLease{{Group: group, Token: l.Fence.Token}})
		if err != nil || res.Reaped || res.Group != group || res.Reason == "" {
			t.Fatalf("reap on a lease that moved = %+v, %v; want kept, naming group %q", res, err, group)
		}
		s.wantUntouched(t, main, bf, now.Fence.Token)
	}},
	{"ReapLeasesKeepsPartitionLeasedSinceSeenFree", func(t *testing.T, s *Suite) {
		lr := optional[broker.LeaseReaper](t, s)
		s.coldPartition(t, key)
		now := s.acquire(t, key, owner, long) // acquired after the caller saw it free
		main, bf := s.streamIDs(t, s.stream(key)), s.streamIDs(t, s.backfill(key))
		res, err := lr.ReapPartitionLeases(s.Ctx, cat, key, 0, "", []broker.SeenLease{{Group: group}})
		if err != nil || res.Reaped || res.Group != group {
			t.Fatalf("reap of a partition leased since it was seen free = %+v, %v; want kept", res, err)
		}
		s.wantUntouched(t, main, bf, now.Fence.Token)
	}},
	{"ReapLeasesChecksTheLanesFirst", func(t *testing.T, s *Suite) {
		lr := optional[broker.LeaseReaper](t, s)
		s.coldPartition(t, key)
		s.publish(t, key, "", 1) // not delivered
		l := s.acquire(t, key, owner, long)
		main, bf := s.streamIDs(t, s.stream(key)), s.streamIDs(t, s.backfill(key))
		res, err := lr.ReapPartitionLeases(s.Ctx, cat, key, 0, "", []broker.SeenLease{{Group: group, Token: l.Fence.Token}})
		if err != nil || res.Reaped || res.Stream != s.stream(key) {
			t.Fatalf("reap of a lagging partition under the lease seen = %+v, %v; want kept on %s", res, err, s.stream(key))
		}
		s.wantUntouched(t, main, bf, l.Fence.Token)
	}},
	{"ReapLeasesRefusesWrongTypeLeaseKey", func(t *testing.T, s *Suite) {
		lr := optional[broker.LeaseReaper](t, s)
		s.coldPartition(t, key)
		lk := s.L.LeaseKey(group, key)
		if err := s.faults.CreateGroup(s.Ctx, lk, "x", "0"); err != nil { // a stream where a lease belongs
			t.Fatal(err)
		}
		main, bf := s.streamIDs(t, s.stream(key)), s.streamIDs(t, s.backfill(key))
		_, err := lr.ReapPartitionLeases(s.Ctx, cat, key, 0, "", []broker.SeenLease{{Group: group}})
		var wte *broker.WrongTypeError
		if !errors.As(err, &wte) || wte.Key != lk || wte.Want != "string" {
			t.Fatalf("reap with a stream at the lease key: %v; want a *broker.WrongTypeError naming %s", err, lk)
		}
		if !slices.Contains(s.keys(t), key) || !slices.Equal(s.streamIDs(t, s.stream(key)), main) || !slices.Equal(s.streamIDs(t, s.backfill(key)), bf) || !s.exists(t, lk) {
			t.Fatal("a refused reap changed something")
		}
	}},
}
