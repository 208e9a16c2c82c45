package brokertest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/protctl/protctl/pkg/broker"
)

// replicaCases hold a broker that waits for replica acknowledgements
// (Target.Unreplicated) to broker.ErrNotReplicated's contract when the
// replicas do not acknowledge: an acquisition leaves nobody holding the
// lease (so a promoted replica that lacks the generation cannot hand it
// to a second owner while the first uses it), a renewal is an error (the
// caller must not extend its trust), and a publish names the entry it
// left on the primary. Run runs them only for a target with
// Unreplicated.
var replicaCases = []Case{
	{"UnreplicatedAcquireLeavesTheLeaseFree", func(t *testing.T, s *Suite) {
		u := s.unreplicated(t)
		lk, gk := s.L.LeaseKey(group, key), s.L.GenerationKey(group, key)
		l, ok, err := u.AcquirePartitionLease(s.Ctx, lk, gk, owner, long)
		wantNotReplicated(t, "acquire", err, lk, "")
		if ok || l.Token != "" {
			t.Fatalf("an unreplicated acquisition returned a lease: %+v acquired=%v", l, ok)
		}
		if s.exists(t, lk) {
			t.Fatal("the lease key is still held after an unreplicated acquisition")
		}
		// Another owner takes it at once, at a greater generation: the
		// failed acquisition's generation is never handed out again on
		// this store.
		l2 := s.acquire(t, key, "node-b", long)
		if l2.Generation < 2 {
			t.Fatalf("generation after a failed acquisition = %d, want 2 or more", l2.Generation)
		}
	}},
	{"UnreplicatedBatchAcquireLeavesTheLeaseFree", func(t *testing.T, s *Suite) {
		ba, ok := s.unreplicated(t).(broker.BatchAcquirer)
		if !ok {
			t.Skip("no BatchAcquirer")
		}
		s.publish(t, key, "", 2)
		req := s.leaseRequest(key, owner, 1)
		g := ba.AcquirePartitionLeases(s.Ctx, []broker.LeaseRequest{req})[0]
		wantNotReplicated(t, "batch acquire", g.Err, req.LeaseKey, "")
		if g.Acquired || g.Read != nil {
			t.Fatalf("an unreplicated batch acquisition returned a grant: %+v", g)
		}
		if s.exists(t, req.LeaseKey) {
			t.Fatal("the lease key is still held after an unreplicated batch acquisition")
		}
		// What its read took stays pending for the next owner's reclaim.
		l := s.acquire(t, key, "node-b", long)
		res, err := s.B.ReclaimPartitionPending(s.Ctx, l.Fence, s.stream(key), group, 0, 10)
		if err != nil {
			t.Fatal(err)
		}
		if got := s.drain(t, l.Fence, s.stream(key)); len(got) != 2 {
			t.Fatalf("the next owner read %d entries (reclaimed %d), want both", len(got), res.Claimed)
		}
	}},
	{"UnreplicatedRenewalIsAnError", func(t *testing.T, s *Suite) {
		l := s.acquire(t, key, owner, long)
		u := s.unreplicated(t)
		ok, err := u.RenewPartitionLease(s.Ctx, l.Fence, long)
		wantNotReplicated(t, "renew", err, l.LeaseKey, "")
		if ok {
			t.Fatal("an unreplicated renewal reported the lease renewed")
		}
		if br, isBatch := u.(batchRenewer); isBatch {
			oks, err := br.RenewPartitionLeases(s.Ctx, []broker.Fence{l.Fence}, long)
			wantNotReplicated(t, "batch renew", err, l.LeaseKey, "")
			if oks != nil {
				t.Fatalf("an unreplicated batch renewal answered %v, want nothing known", oks)
			}
		}
	}},
	{"UnreplicatedPublishNamesItsEntry", func(t *testing.T, s *Suite) {
		u := s.unreplicated(t)
		_, err := u.PublishPartitioned(s.Ctx, cat, key, "", payload(key, 0))
		nre := wantNotReplicated(t, "publish", err, s.stream(key), "?")
		if ids := s.streamIDs(t, s.stream(key)); len(ids) != 1 || ids[0] != nre.ID {
			t.Fatalf("stream holds %v, the error names entry %q", ids, nre.ID)
		}
		if got := s.keys(t); len(got) != 1 || got[0] != key {
			t.Fatalf("index = %v, want the key recorded", got)
		}
		_, err = u.Append(s.Ctx, "plain", payload(key, 1))
		nre = wantNotReplicated(t, "append", err, "plain", "?")
		if ids := s.streamIDs(t, "plain"); len(ids) != 1 || ids[0] != nre.ID {
			t.Fatalf("plain holds %v, the error names entry %q", ids, nre.ID)
		}
	}},
}

// batchRenewer is the runtime's BatchRenewer capability.
type batchRenewer interface {
	RenewPartitionLeases(ctx context.Context, fences []broker.Fence, ttl time.Duration) ([]bool, error)
}

func (s *Suite) unreplicated(t *testing.T) broker.PartitionedBroker {
	t.Helper()
	if s.Unreplicated == nil {
		t.Fatal("brokertest: a replica case needs Target.Unreplicated")
	}
	return s.Unreplicated
}

// wantNotReplicated checks that err is a *broker.NotReplicatedError for
// key; id "" wants no entry id, "?" any non-empty one.
func wantNotReplicated(t *testing.T, what string, err error, key, id string) *broker.NotReplicatedError {
	t.Helper()
	var nre *broker.NotReplicatedError
	if !errors.As(err, &nre) || !errors.Is(err, broker.ErrNotReplicated) {
		t.Fatalf("%s: err = %v, want a *broker.NotReplicatedError", what, err)
	}
	if nre.Key != key || nre.Acked >= nre.Want || nre.Want < 1 || nre.Timeout <= 0 {
		t.Fatalf("%s: error %+v, want key %q with fewer acks than asked", what, nre, key)
	}
	switch {
	case id == "" && nre.ID != "":
		t.Fatalf("%s: error names entry %q, want none", what, nre.ID)
	case id == "?" && nre.ID == "":
		t.Fatalf("%s: error names no entry", what)
	}
	return nre
}
