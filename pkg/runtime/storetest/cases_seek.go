package storetest

import (
	"testing"

	"github.com/protctl/protctl/pkg/broker"
	"github.com/protctl/protctl/pkg/runtime"
)

// seeker returns the store's CheckpointSeeker, failing t when the
// store has none (every store the suite runs on answers seeks: without
// it, topics seek requests go unanswered).
func (s *Suite) seeker(t *testing.T) runtime.CheckpointSeeker {
	t.Helper()
	sk, ok := s.Store.(runtime.CheckpointSeeker)
	if !ok {
		t.Fatalf("%T is not a runtime.CheckpointSeeker", s.Store)
	}
	if s.RequestSeek == nil || s.WithdrawSeek == nil {
		t.Fatal("storetest: a CheckpointSeeker store needs Target.RequestSeek and WithdrawSeek")
	}
	return sk
}

var seekCases = []Case{
	// decision 0044: a request is recorded only for the lease it names
	// and only once per id; the answer is fenced, only for the pending
	// request, and sets the checkpoint backwards too.
	{"SeekAnsweredOnceFencedAndBackwards", func(t *testing.T, s *Suite) {
		sk := s.seeker(t)
		s.SetLease(t, lease0, tokenA)
		f := broker.Fence{LeaseKey: lease0, Token: tokenA}
		must(t, "save", s.Store.Save(s.Ctx, f, leaseGroup, sub, 0, 50))
		req := runtime.SeekRequest{ID: "r1", Next: 10, Lease: tokenB}
		if now := s.RequestSeek(t, sub, 0, req); now != tokenA {
			t.Fatalf("request for another lease: %q, want the lease %q", now, tokenA)
		}
		req.Lease = tokenA
		if now := s.RequestSeek(t, sub, 0, req); now != "" {
			t.Fatalf("request: %q, want recorded", now)
		}
		pend, err := sk.PendingSeeks(s.Ctx, leaseGroup, sub)
		must(t, "pending", err)
		if len(pend) != 1 || pend[0].ID != "r1" || pend[0].Next != 10 {
			t.Fatalf("pending %v", pend)
		}
		done := runtime.SeekResult{ID: "r1", Status: runtime.SeekDone, From: 50, Next: 10, Lease: tokenA}
		stale := broker.Fence{LeaseKey: lease0, Token: tokenB}
		_, err = sk.CompleteSeek(s.Ctx, stale, leaseGroup, sub, 0, done)
		wantErrIs(t, "answer under a stale fence", err, broker.ErrLeaseLost)
		other := done
		other.ID = "r0"
		if ok, err := sk.CompleteSeek(s.Ctx, f, leaseGroup, sub, 0, other); err != nil || ok {
			t.Fatalf("answer to another request: %v %v", ok, err)
		}
		s.wantCheckpoint(t, "after refused answers", 0, 50)
		if ok, err := sk.CompleteSeek(s.Ctx, f, leaseGroup, sub, 0, done); err != nil || !ok {
			t.Fatalf("answer: %v %v", ok, err)
		}
		s.wantCheckpoint(t, "after the answer", 0, 10)
		if now := s.RequestSeek(t, sub, 0, req); now != "=" {
			t.Fatalf("the answered request again: %q, want \"=\" (not recorded)", now)
		}
		pend, err = sk.PendingSeeks(s.Ctx, leaseGroup, sub)
		must(t, "pending", err)
		if len(pend) != 0 {
			t.Fatalf("pending after the answer: %v", pend)
		}
	}},
	// A withdrawn request is not carried out; only a pending one of the
	// same id is withdrawn.
	{"SeekWithdrawnOnlyWhilePending", func(t *testing.T, s *Suite) {
		sk := s.seeker(t)
		s.SetLease(t, lease0, tokenA)
		f := broker.Fence{LeaseKey: lease0, Token: tokenA}
		must(t, "save", s.Store.Save(s.Ctx, f, leaseGroup, sub, 0, 50))
		if now := s.RequestSeek(t, sub, 0, runtime.SeekRequest{ID: "r1", Next: 10, Lease: tokenA}); now != "" {
			t.Fatalf("request: %q", now)
		}
		if s.WithdrawSeek(t, sub, 0, "r0") {
			t.Fatal("withdrew another id")
		}
		if !s.WithdrawSeek(t, sub, 0, "r1") {
			t.Fatal("did not withdraw the pending request")
		}
		done := runtime.SeekResult{ID: "r1", Status: runtime.SeekDone, From: 50, Next: 10, Lease: tokenA}
		if ok, err := sk.CompleteSeek(s.Ctx, f, leaseGroup, sub, 0, done); err != nil || ok {
			t.Fatalf("answer to a withdrawn request: %v %v", ok, err)
		}
		s.wantCheckpoint(t, "after a withdrawn request", 0, 50)
		if s.WithdrawSeek(t, sub, 0, "r1") {
			t.Fatal("withdrew twice")
		}
	}},
}
