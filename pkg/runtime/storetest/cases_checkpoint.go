package storetest

import (
	"errors"
	"maps"
	"testing"

	"github.com/protctl/protctl/pkg/broker"
)

func (s *Suite) load(t *testing.T, group, subscription string, p int32) (int64, bool) {
	t.Helper()
	next, ok, err := s.Store.Load(s.Ctx, group, subscription, p)
	must(t, "load checkpoint", err)
	return next, ok
}

func (s *Suite) wantCheckpoint(t *testing.T, what string, p int32, want int64) {
	t.Helper()
	next, ok := s.load(t, leaseGroup, sub, p)
	if !ok || next != want {
		t.Fatalf("%s: checkpoint of partition %d is (%d, %v), want %d", what, p, next, ok, want)
	}
}

func wantLeaseLost(t *testing.T, what, op string, err error, f broker.Fence) {
	t.Helper()
	wantErrIs(t, what, err, broker.ErrLeaseLost)
	var lle *broker.LeaseLostError
	if !errors.As(err, &lle) {
		t.Fatalf("%s: %v is not a *broker.LeaseLostError", what, err)
	}
	if lle.Op != op || lle.LeaseKey != f.LeaseKey || lle.Token != f.Token {
		t.Fatalf("%s: lease-lost error %+v, want op %q, lease %q, token %q", what, *lle, op, f.LeaseKey, f.Token)
	}
}

var checkpointCases = []Case{
	{"CheckpointRoundTrips", func(t *testing.T, s *Suite) {
		if _, ok := s.load(t, leaseGroup, sub, 0); ok {
			t.Fatal("a checkpoint was found before any save")
		}
		s.SetLease(t, lease0, tokenA)
		f := broker.Fence{LeaseKey: lease0, Token: tokenA}
		must(t, "save", s.Store.Save(s.Ctx, f, leaseGroup, sub, 0, 42))
		s.wantCheckpoint(t, "after a save", 0, 42)
		must(t, "save offset 0 elsewhere", s.Store.Save(s.Ctx, f, leaseGroup, sub2, 0, 0))
		if next, ok := s.load(t, leaseGroup, sub2, 0); !ok || next != 0 {
			t.Fatalf("checkpoint 0 loaded as (%d, %v)", next, ok)
		}
	}},
	{"CheckpointNeverMovesBackwards", func(t *testing.T, s *Suite) {
		s.SetLease(t, lease0, tokenA)
		f := broker.Fence{LeaseKey: lease0, Token: tokenA}
		must(t, "save 10", s.Store.Save(s.Ctx, f, leaseGroup, sub, 0, 10))
		must(t, "save 5", s.Store.Save(s.Ctx, f, leaseGroup, sub, 0, 5))
		s.wantCheckpoint(t, "after a lower save", 0, 10)
		must(t, "save 10 again", s.Store.Save(s.Ctx, f, leaseGroup, sub, 0, 10))
		s.wantCheckpoint(t, "after an equal save", 0, 10)
		must(t, "save 11", s.Store.Save(s.Ctx, f, leaseGroup, sub, 0, 11))
		s.wantCheckpoint(t, "after a higher save", 0, 11)
		// 9 < 10 as numbers but "9" > "10" as strings.
		must(t, "save 100", s.Store.Save(s.Ctx, f, leaseGroup, sub, 0, 100))
		must(t, "save 99", s.Store.Save(s.Ctx, f, leaseGroup, sub, 0, 99))
		s.wantCheckpoint(t, "after 99 following 100", 0, 100)
		const big = int64(1)<<62 + 1 // not exact as a double
		must(t, "save big", s.Store.Save(s.Ctx, f, leaseGroup, sub, 0, big))
		must(t, "save big-1", s.Store.Save(s.Ctx, f, leaseGroup, sub, 0, big-1))
		s.wantCheckpoint(t, "after big-1 following big", 0, big)
	}},
	{"StaleCheckpointIsRefusedAndWritesNothing", func(t *testing.T, s *Suite) {
		a := broker.Fence{LeaseKey: lease0, Token: tokenA}
		b := broker.Fence{LeaseKey: lease0, Token: tokenB}
		// Never held: nothing is created.
		err := s.Store.Save(s.Ctx, a, leaseGroup, sub, 0, 1)
		wantLeaseLost(t, "save without a lease", "checkpoint", err, a)
		if _, ok := s.load(t, leaseGroup, sub, 0); ok {
			t.Fatal("a refused save created a checkpoint")
		}
		s.SetLease(t, lease0, tokenA)
		must(t, "save by the owner", s.Store.Save(s.Ctx, a, leaseGroup, sub, 0, 5))
		// Superseded by a newer generation.
		s.SetLease(t, lease0, tokenB)
		err = s.Store.Save(s.Ctx, a, leaseGroup, sub, 0, 9)
		wantLeaseLost(t, "save by a superseded owner", "checkpoint", err, a)
		s.wantCheckpoint(t, "after a superseded save", 0, 5)
		must(t, "save by the new owner", s.Store.Save(s.Ctx, b, leaseGroup, sub, 0, 7))
		// Expired or released.
		s.DropLease(t, lease0)
		err = s.Store.Save(s.Ctx, b, leaseGroup, sub, 0, 20)
		wantLeaseLost(t, "save after the lease expired", "checkpoint", err, b)
		s.wantCheckpoint(t, "after a save on an expired lease", 0, 7)
	}},
	{"LoadAllReturnsEveryPartitionOfOneSubscription", func(t *testing.T, s *Suite) {
		all, err := s.Store.LoadAll(s.Ctx, leaseGroup, sub)
		must(t, "load all of nothing", err)
		if len(all) != 0 {
			t.Fatalf("load all before any save: %v", all)
		}
		s.SetLease(t, lease0, tokenA)
		s.SetLease(t, lease1, tokenB)
		f0 := broker.Fence{LeaseKey: lease0, Token: tokenA}
		f1 := broker.Fence{LeaseKey: lease1, Token: tokenB}
		must(t, "save p0", s.Store.Save(s.Ctx, f0, leaseGroup, sub, 0, 3))
		must(t, "save p1", s.Store.Save(s.Ctx, f1, leaseGroup, sub, 1, 8))
		must(t, "save p1 of sub2", s.Store.Save(s.Ctx, f1, leaseGroup, sub2, 1, 100))
		other := "shop|topic:payments"
		otherLease := "protctl:{shop|topic:payments}:lease:0"
		s.SetLease(t, otherLease, tokenA)
		must(t, "save in another group", s.Store.Save(s.Ctx, broker.Fence{LeaseKey: otherLease, Token: tokenA}, other, sub, 0, 77))
		all, err = s.Store.LoadAll(s.Ctx, leaseGroup, sub)
		must(t, "load all", err)
		if want := map[int32]int64{0: 3, 1: 8}; !maps.Equal(all, want) {
			t.Fatalf("load all: %v, want %v", all, want)
		}
		all, err = s.Store.LoadAll(s.Ctx, other, sub)
		must(t, "load all of the other group", err)
		if want := map[int32]int64{0: 77}; !maps.Equal(all, want) {
			t.Fatalf("load all of the other group: %v, want %v", all, want)
		}
	}},
}
