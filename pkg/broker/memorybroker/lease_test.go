package memorybroker_test

import (
	"testing"
	"time"

	"github.com/protctl/protctl/pkg/broker"
)

func TestLeaseLivesExactlyItsTTLOnTheClock(t *testing.T) {
	f := newFixture(t)
	lk, gk := f.l.LeaseKey(group, key), f.l.GenerationKey(group, key)
	l := f.acquireAs("node-a", time.Second)
	if l.Generation != 1 || l.Token != "node-a:1" || l.LeaseKey != lk || l.Owner != "node-a" {
		t.Fatalf("lease = %+v", l)
	}
	if _, ok, _ := f.b.AcquirePartitionLease(f.ctx, lk, gk, "node-a", time.Second); ok {
		t.Fatal("the holder itself acquired a held lease")
	}
	f.clock.Advance(999 * time.Millisecond)
	if ok, err := f.b.RenewPartitionLease(f.ctx, l.Fence, time.Second); !ok || err != nil {
		t.Fatalf("renew 1ms before expiry = %v, %v", ok, err)
	}
	f.clock.Advance(999 * time.Millisecond)
	if v, ok, _ := f.fault.GetString(f.ctx, lk); !ok || v != l.Token {
		t.Fatalf("lease 1ms before its renewed expiry = %q, %v", v, ok)
	}
	f.clock.Advance(time.Millisecond)
	if ok, _ := f.fault.Exists(f.ctx, lk); ok {
		t.Fatal("lease exists after its TTL ran out")
	}
	if ok, _ := f.b.RenewPartitionLease(f.ctx, l.Fence, time.Second); ok {
		t.Fatal("an expired lease was renewed")
	}
	l2 := f.acquireAs("node-b", time.Second)
	if l2.Generation != 2 {
		t.Fatalf("generation after expiry = %d, want 2", l2.Generation)
	}
	if ok, _ := f.b.ReleasePartitionLease(f.ctx, l.Fence); ok {
		t.Fatal("a superseded token released the new lease")
	}
	if ok, _ := f.b.ReleasePartitionLease(f.ctx, l2.Fence); !ok {
		t.Fatal("the holder could not release")
	}
	if g, _, _ := f.fault.GetString(f.ctx, gk); g != "2" {
		t.Fatalf("generation key after release = %q, want 2 (never deleted)", g)
	}
	if l3 := f.acquireAs("node-a", time.Second); l3.Generation != 3 {
		t.Fatalf("generation after release = %d, want 3", l3.Generation)
	}
}

func TestLeaseTTLRoundsUpToWholeMilliseconds(t *testing.T) {
	f := newFixture(t)
	f.clock.Advance(300 * time.Microsecond)
	f.acquireAs("node-a", time.Microsecond) // PX 1
	f.clock.Advance(999 * time.Microsecond)
	if ok, _ := f.fault.Exists(f.ctx, f.l.LeaseKey(group, key)); !ok {
		t.Fatal("a 1µs TTL did not last 1ms")
	}
	f.clock.Advance(time.Microsecond)
	if ok, _ := f.fault.Exists(f.ctx, f.l.LeaseKey(group, key)); ok {
		t.Fatal("a 1µs TTL lasted more than 1ms")
	}
}

func TestAcquireContinuesAnExistingGeneration(t *testing.T) {
	f := newFixture(t)
	// A generation written by Protean (or left by a reaped partition).
	if err := f.fault.PutString(f.ctx, f.l.GenerationKey(group, key), "41"); err != nil {
		t.Fatal(err)
	}
	if l := f.acquire(); l.Generation != 42 || l.Token != broker.FenceToken(owner, 42) {
		t.Fatalf("lease = %+v, want generation 42", l)
	}
}
