package brokertest

import (
	"testing"
	"time"

	"github.com/protctl/protctl/pkg/broker"
)

var leaseCases = []Case{
	{"FirstAcquireReturnsGenerationOne", func(t *testing.T, s *Suite) {
		l := s.acquire(t, key, owner, long)
		if l.Generation != 1 || l.Token != broker.FenceToken(owner, 1) || l.Owner != owner {
			t.Fatalf("first lease = %+v, want generation 1 token %s", l, broker.FenceToken(owner, 1))
		}
		if l.LeaseKey != s.L.LeaseKey(group, key) {
			t.Fatalf("lease key = %q, want %q", l.LeaseKey, s.L.LeaseKey(group, key))
		}
		v, ok, err := s.faults.GetString(s.Ctx, s.L.LeaseKey(group, key))
		if err != nil || !ok || v != l.Token {
			t.Fatalf("stored lease = %q, %v, %v; want %q", v, ok, err, l.Token)
		}
	}},
	{"SecondAcquirerGetsNothing", func(t *testing.T, s *Suite) {
		first := s.acquire(t, key, owner, long)
		for _, o := range []string{"node-b", owner} {
			if l, ok := s.tryAcquire(t, key, o, long); ok {
				t.Fatalf("%s acquired a held lease: %+v", o, l)
			}
		}
		v, _, _ := s.faults.GetString(s.Ctx, s.L.LeaseKey(group, key))
		if v != first.Token {
			t.Fatalf("a refused acquire changed the lease to %q", v)
		}
		if g, _, _ := s.faults.GetString(s.Ctx, s.L.GenerationKey(group, key)); g != "1" {
			t.Fatalf("a refused acquire moved the generation to %s", g)
		}
	}},
	{"RenewByHolderKeepsLease", func(t *testing.T, s *Suite) {
		l := s.acquire(t, key, owner, 200*time.Millisecond)
		for i := 0; i < 3; i++ {
			s.Advance(100 * time.Millisecond)
			ok, err := s.B.RenewPartitionLease(s.Ctx, l.Fence, 200*time.Millisecond)
			if err != nil || !ok {
				t.Fatalf("renew #%d by the holder = %v, %v; want true", i, ok, err)
			}
		}
		// 300ms have passed: without the renewals the lease would be gone.
		if _, err := s.B.ReadPartitionFenced(s.Ctx, l.Fence, s.stream(key), group, 1, broker.ReadNew); err != nil {
			t.Fatalf("read after renewals: %v", err)
		}
	}},
	{"RenewWithWrongTokenFails", func(t *testing.T, s *Suite) {
		l := s.acquire(t, key, owner, long)
		for _, tok := range []string{broker.FenceToken(owner, 2), broker.FenceToken("node-b", 1), owner} {
			ok, err := s.B.RenewPartitionLease(s.Ctx, broker.Fence{LeaseKey: l.LeaseKey, Token: tok}, long)
			if err != nil || ok {
				t.Fatalf("renew with token %q = %v, %v; want false, nil", tok, ok, err)
			}
		}
	}},
	{"ReleaseWhenNotHeldFails", func(t *testing.T, s *Suite) {
		f := broker.Fence{LeaseKey: s.L.LeaseKey(group, key), Token: broker.FenceToken(owner, 1)}
		if ok, err := s.B.ReleasePartitionLease(s.Ctx, f); err != nil || ok {
			t.Fatalf("release of a free lease = %v, %v; want false", ok, err)
		}
		l := s.acquire(t, key, owner, long)
		stale := broker.Fence{LeaseKey: l.LeaseKey, Token: broker.FenceToken("node-b", 1)}
		if ok, err := s.B.ReleasePartitionLease(s.Ctx, stale); err != nil || ok {
			t.Fatalf("release with another owner's token = %v, %v; want false", ok, err)
		}
		if !s.exists(t, l.LeaseKey) {
			t.Fatal("a refused release deleted the lease")
		}
	}},
	{"ReacquireAfterReleaseReturnsGenerationTwo", func(t *testing.T, s *Suite) {
		l := s.acquire(t, key, owner, long)
		if ok, err := s.B.ReleasePartitionLease(s.Ctx, l.Fence); err != nil || !ok {
			t.Fatalf("release by holder = %v, %v", ok, err)
		}
		if l2 := s.acquire(t, key, "node-b", long); l2.Generation != 2 {
			t.Fatalf("generation after release = %d, want 2", l2.Generation)
		}
	}},
	{"ExpiredLeaseIsAcquiredWithNextGeneration", func(t *testing.T, s *Suite) {
		s.acquire(t, key, owner, 50*time.Millisecond)
		s.Advance(120 * time.Millisecond)
		l2, ok := s.tryAcquire(t, key, "node-b", long)
		if !ok || l2.Generation != 2 {
			t.Fatalf("acquire after expiry = %+v, %v; want generation 2", l2, ok)
		}
	}},
	{"GenerationSurvivesReap", func(t *testing.T, s *Suite) {
		l1 := s.acquire(t, key, owner, long)
		s.publish(t, key, "", 2)
		s.drain(t, l1.Fence, s.stream(key))
		if ok, _ := s.B.ReleasePartitionLease(s.Ctx, l1.Fence); !ok {
			t.Fatal("release failed")
		}
		l2 := s.acquire(t, key, owner, long)
		if ok, _ := s.B.ReleasePartitionLease(s.Ctx, l2.Fence); !ok {
			t.Fatal("release failed")
		}
		res, err := s.B.ReapPartition(s.Ctx, cat, key, 0, "")
		if err != nil || !res.Reaped {
			t.Fatalf("reap of a drained partition = %+v, %v", res, err)
		}
		if l3 := s.acquire(t, key, owner, long); l3.Generation != 3 {
			t.Fatalf("generation after reap = %d, want 3", l3.Generation)
		}
	}},
	{"GenerationsStrictlyIncrease", func(t *testing.T, s *Suite) {
		var last int64
		for i := 0; i < 20; i++ {
			l := s.acquire(t, key, "node-"+itoa(i%3), long)
			if l.Generation <= last {
				t.Fatalf("generation %d after %d", l.Generation, last)
			}
			last = l.Generation
			if ok, _ := s.B.ReleasePartitionLease(s.Ctx, l.Fence); !ok {
				t.Fatal("release failed")
			}
		}
	}},
	{"LeasesAreIndependentPerGroupAndKey", func(t *testing.T, s *Suite) {
		s.acquire(t, "a", owner, long)
		if l, ok := s.tryAcquire(t, "b", "node-b", long); !ok || l.Generation != 1 {
			t.Fatalf("lease on another key = %+v, %v; want a fresh generation 1", l, ok)
		}
		other, ok, err := s.B.AcquirePartitionLease(s.Ctx, s.L.LeaseKey("other-group", "a"), s.L.GenerationKey("other-group", "a"), "node-b", long)
		if err != nil || !ok || other.Generation != 1 {
			t.Fatalf("lease of another group on the same key = %+v, %v, %v", other, ok, err)
		}
	}},
}
