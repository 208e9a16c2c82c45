package redisstore_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/protctl/protctl/internal/testenv"
	"github.com/protctl/protctl/pkg/broker"
	"github.com/protctl/protctl/pkg/runtime"
	"github.com/protctl/protctl/pkg/runtime/redisstore"
)

// TestSeekRequestAndAnswer: a request is recorded only for the lease it
// names; the answer is fenced by the owner's lease, sets the checkpoint
// backwards (the one path that may) only for the pending request, and
// removes it; a stale answer changes no checkpoint.
func TestSeekRequestAndAnswer(t *testing.T) {
	ctx := context.Background()
	c := testenv.StartRedis(t).Client(t)
	s := redisstore.New(c)
	g := redisstore.TopicLeaseGroup("shop", "orders")
	f := broker.Fence{LeaseKey: g.LeaseKey(0), Token: "n1:3"}
	if err := c.Set(ctx, f.LeaseKey, f.Token, time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	if err := s.Save(ctx, f, g.String(), "sub", 0, 50); err != nil {
		t.Fatal(err)
	}

	if now, err := s.RequestSeek(ctx, g, "sub", 0, runtime.SeekRequest{ID: "x", Next: 10, Lease: "n1:2"}); err != nil || now != "n1:3" {
		t.Fatalf("request for another lease: lease now %q, %v", now, err)
	}
	if reqs, _ := s.PendingSeeks(ctx, g.String(), "sub"); len(reqs) != 0 {
		t.Fatalf("recorded for another lease: %v", reqs)
	}
	req := runtime.SeekRequest{ID: "r1", Next: 10, Lease: f.Token}
	if now, err := s.RequestSeek(ctx, g, "sub", 0, req); err != nil || now != "" {
		t.Fatalf("request: %q, %v", now, err)
	}
	if reqs, err := s.PendingSeeks(ctx, g.String(), "sub"); err != nil || reqs[0].ID != "r1" || reqs[0].Next != 10 {
		t.Fatalf("pending %v, %v", reqs, err)
	}

	done := runtime.SeekResult{ID: "r1", Status: runtime.SeekDone, From: 50, Next: 10, Lease: f.Token}
	stale := broker.Fence{LeaseKey: f.LeaseKey, Token: "n1:2"}
	if _, err := s.CompleteSeek(ctx, stale, g.String(), "sub", 0, done); !errors.Is(err, broker.ErrLeaseLost) {
		t.Fatalf("answer under a stale fence: %v, want lease lost", err)
	}
	other := done
	other.ID = "r0"
	if ok, err := s.CompleteSeek(ctx, f, g.String(), "sub", 0, other); err != nil || ok {
		t.Fatalf("answer to another request: %v, %v", ok, err)
	}
	if next, _, _ := s.Load(ctx, g.String(), "sub", 0); next != 50 {
		t.Fatalf("checkpoint %d after refused answers, want 50", next)
	}
	if ok, err := s.CompleteSeek(ctx, f, g.String(), "sub", 0, done); err != nil || !ok {
		t.Fatalf("answer: %v, %v", ok, err)
	}
	if next, _, _ := s.Load(ctx, g.String(), "sub", 0); next != 10 {
		t.Fatalf("checkpoint %d, want 10 (moved back)", next)
	}
	if reqs, _ := s.PendingSeeks(ctx, g.String(), "sub"); len(reqs) != 0 {
		t.Fatalf("request still pending: %v", reqs)
	}
	if res, err := s.SeekResult(ctx, g, "sub", 0); err != nil || res == nil || res.ID != "r1" || res.Status != runtime.SeekDone || res.From != 50 {
		t.Fatalf("result %+v, %v", res, err)
	}
	// Saves go on forward only.
	if err := s.Save(ctx, f, g.String(), "sub", 0, 5); err != nil {
		t.Fatal(err)
	}
	if next, _, _ := s.Load(ctx, g.String(), "sub", 0); next != 10 {
		t.Fatalf("checkpoint %d after a lower save, want 10", next)
	}

	// A stale answer records the result and leaves the checkpoint.
	if _, err := s.RequestSeek(ctx, g, "sub", 0, runtime.SeekRequest{ID: "r2", Next: 0, Lease: f.Token}); err != nil {
		t.Fatal(err)
	}
	if ok, err := s.CompleteSeek(ctx, f, g.String(), "sub", 0, runtime.SeekResult{ID: "r2", Status: runtime.SeekStale, Next: 0}); err != nil || !ok {
		t.Fatalf("stale answer: %v, %v", ok, err)
	}
	if next, _, _ := s.Load(ctx, g.String(), "sub", 0); next != 10 {
		t.Fatalf("checkpoint %d after a stale answer, want 10", next)
	}
}
