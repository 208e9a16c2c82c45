package redisstore_test

import (
	"context"
	"errors"
	"strconv"
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

	if now, err := s.RequestSeek(ctx, g, "sub", 0, runtime.SeekRequest{ID: "x", Next: 10, Lease: "n1:2"}, time.Minute); err != nil || now != "n1:3" {
		t.Fatalf("request for another lease: lease now %q, %v", now, err)
	}
	if reqs, _ := s.PendingSeeks(ctx, g.String(), "sub"); len(reqs) != 0 {
		t.Fatalf("recorded for another lease: %v", reqs)
	}
	req := runtime.SeekRequest{ID: "r1", Next: 10, Lease: f.Token}
	if now, err := s.RequestSeek(ctx, g, "sub", 0, req, time.Minute); err != nil || now != "" {
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
	if _, err := s.RequestSeek(ctx, g, "sub", 0, runtime.SeekRequest{ID: "r2", Next: 0, Lease: f.Token}, time.Minute); err != nil {
		t.Fatal(err)
	}
	if ok, err := s.CompleteSeek(ctx, f, g.String(), "sub", 0, runtime.SeekResult{ID: "r2", Status: runtime.SeekStale, Next: 0}); err != nil || !ok {
		t.Fatalf("stale answer: %v, %v", ok, err)
	}
	if next, _, _ := s.Load(ctx, g.String(), "sub", 0); next != 10 {
		t.Fatalf("checkpoint %d after a stale answer, want 10", next)
	}
}

// TestSeekRequestOnce: a request whose id the owner already answered is
// not recorded again (a resumed apply of the same plan must not seek a
// second time, and must not read the old answer as the new one's).
func TestSeekRequestOnce(t *testing.T) {
	ctx := context.Background()
	c := testenv.StartRedis(t).Client(t)
	s := redisstore.New(c)
	g := redisstore.TopicLeaseGroup("shop", "orders")
	token := "node-a:3"
	if err := c.Set(ctx, g.LeaseKey(0), token, time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	f := broker.Fence{LeaseKey: g.LeaseKey(0), Token: token}
	req := runtime.SeekRequest{ID: "plan1-sub-0", Next: 100, Lease: token}
	if now, err := s.RequestSeek(ctx, g, "sub", 0, req, time.Minute); err != nil || now != "" {
		t.Fatalf("request %q %v", now, err)
	}
	if ok, err := s.CompleteSeek(ctx, f, g.String(), "sub", 0, runtime.SeekResult{ID: req.ID, Status: runtime.SeekDone, From: 500, Next: 100, Lease: token}); err != nil || !ok {
		t.Fatal(ok, err)
	}
	if now, err := s.RequestSeek(ctx, g, "sub", 0, req, time.Minute); err != nil || now != redisstore.RequestAnswered {
		t.Fatalf("the same request again: %q %v, want %q", now, err, redisstore.RequestAnswered)
	}
	if pend, err := s.PendingSeeks(ctx, g.String(), "sub"); err != nil || len(pend) != 0 {
		t.Fatalf("an answered request recorded again: %v %v", pend, err)
	}
	// Another id is recorded.
	next := req
	next.ID = "plan2-sub-0"
	if now, err := s.RequestSeek(ctx, g, "sub", 0, next, time.Minute); err != nil || now != "" {
		t.Fatalf("a new request %q %v", now, err)
	}
}

// TestSeekWithdraw: a requester that gives up withdraws its request only
// while it is pending under its id; the owner's answer then changes
// nothing. An answered request or another's is left alone. The requests
// hash expires.
func TestSeekWithdraw(t *testing.T) {
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
	req := runtime.SeekRequest{ID: "r1", Next: 10, Lease: f.Token}
	if now, err := s.RequestSeek(ctx, g, "sub", 0, req, 30*time.Second); err != nil || now != "" {
		t.Fatalf("request %q %v", now, err)
	}
	if ttl := c.PTTL(ctx, g.SeeksKey("sub")).Val(); ttl <= 0 || ttl > 30*time.Second {
		t.Fatalf("requests hash TTL %v, want up to 30s", ttl)
	}
	// Another partition's shorter request keeps the longer TTL.
	if err := c.Set(ctx, g.LeaseKey(1), f.Token, time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.RequestSeek(ctx, g, "sub", 1, runtime.SeekRequest{ID: "q1", Next: 1, Lease: f.Token}, time.Second); err != nil {
		t.Fatal(err)
	}
	if ttl := c.PTTL(ctx, g.SeeksKey("sub")).Val(); ttl <= 2*time.Second {
		t.Fatalf("requests hash TTL %v after a shorter request, want the longer kept", ttl)
	}
	if ok, err := s.WithdrawSeek(ctx, g, "sub", 0, "r0"); err != nil || ok {
		t.Fatalf("withdraw of another id: %v %v", ok, err)
	}
	if ok, err := s.WithdrawSeek(ctx, g, "sub", 0, "r1"); err != nil || !ok {
		t.Fatalf("withdraw: %v %v", ok, err)
	}
	done := runtime.SeekResult{ID: "r1", Status: runtime.SeekDone, From: 50, Next: 10, Lease: f.Token}
	if ok, err := s.CompleteSeek(ctx, f, g.String(), "sub", 0, done); err != nil || ok {
		t.Fatalf("answer to a withdrawn request: %v %v", ok, err)
	}
	if next, _, _ := s.Load(ctx, g.String(), "sub", 0); next != 50 {
		t.Fatalf("checkpoint %d after a withdrawn request, want 50", next)
	}
	// Answered, then withdrawn: nothing to withdraw.
	req.ID = "r2"
	if _, err := s.RequestSeek(ctx, g, "sub", 0, req, time.Minute); err != nil {
		t.Fatal(err)
	}
	done.ID = "r2"
	if ok, err := s.CompleteSeek(ctx, f, g.String(), "sub", 0, done); err != nil || !ok {
		t.Fatalf("answer: %v %v", ok, err)
	}
	if ok, err := s.WithdrawSeek(ctx, g, "sub", 0, "r2"); err != nil || ok {
		t.Fatalf("withdraw of an answered request: %v %v", ok, err)
	}
	if res, err := s.SeekResult(ctx, g, "sub", 0); err != nil || res == nil || res.ID != "r2" {
		t.Fatalf("result %+v %v", res, err)
	}
}

// A seek on an unowned partition bumps its generation counter: a counter
// that is not a decimal, or whose successor would have 15 digits (Lua
// would write it as 1e+14, a counter no lease could be taken from), is
// refused with a wrong-type error, and nothing changes.
func TestSetUnownedCheckpointRefusesACounterItCannotBump(t *testing.T) {
	ctx := context.Background()
	c := testenv.StartRedis(t).Client(t)
	s := redisstore.New(c)
	g := redisstore.TopicLeaseGroup("shop", "orders")
	for _, gen := range []string{"seven", "-1", "1.5", "99999999999999", "123456789012345"} {
		if err := c.Set(ctx, g.GenerationKey(0), gen, 0).Err(); err != nil {
			t.Fatal(err)
		}
		_, err := s.SetUnownedCheckpoint(ctx, g, "sub", 0, nil, 7)
		if !errors.Is(err, broker.ErrWrongType) {
			t.Errorf("generation %q: err = %v, want a wrong-type error", gen, err)
		}
		if got := c.Get(ctx, g.GenerationKey(0)).Val(); got != gen {
			t.Errorf("generation %q: counter now %q", gen, got)
		}
		if n := c.Exists(ctx, g.CheckpointsKey("sub")).Val(); n != 0 {
			t.Errorf("generation %q: the checkpoint was set", gen)
		}
	}
	for gen, want := range map[string]int64{"41": 42, "99999999999998": 99999999999999} {
		if err := c.Set(ctx, g.GenerationKey(0), gen, 0).Err(); err != nil {
			t.Fatal(err)
		}
		if err := c.Del(ctx, g.CheckpointsKey("sub")).Err(); err != nil {
			t.Fatal(err)
		}
		out, err := s.SetUnownedCheckpoint(ctx, g, "sub", 0, nil, 7)
		if err != nil || !out.Set || out.Generation != want {
			t.Errorf("generation %q: %+v, %v; want set at %d", gen, out, err, want)
		}
		if got := c.Get(ctx, g.GenerationKey(0)).Val(); got != strconv.FormatInt(want, 10) {
			t.Errorf("generation %q: counter now %q, want %d", gen, got, want)
		}
	}
}
