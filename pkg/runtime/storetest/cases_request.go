package storetest

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/protctl/protctl/pkg/broker"
	"github.com/protctl/protctl/pkg/runtime/ledger"
)

func (s *Suite) watch(t *testing.T, subscription string) <-chan string {
	t.Helper()
	ctx, cancel := context.WithCancel(s.Ctx)
	t.Cleanup(cancel)
	ch, err := s.Store.WatchRequests(ctx, subscription)
	must(t, "watch requests", err)
	return ch
}

func wantSignal(t *testing.T, ch <-chan string, want string) {
	t.Helper()
	select {
	case got, ok := <-ch:
		if !ok {
			t.Fatalf("watch channel closed, want signal %q", want)
		}
		if got != want {
			t.Fatalf("signal %q, want %q", got, want)
		}
	case <-time.After(wait):
		t.Fatalf("no signal %q within %s", want, wait)
	}
}

// parkOne parks order-1 of sub under lease0 held as tokenA.
func (s *Suite) parkOne(t *testing.T, status ledger.Status) {
	t.Helper()
	s.SetLease(t, lease0, tokenA)
	p := kafkaEntry(sub, "order-1", t0)
	p.Status = status
	s.park(t, broker.Fence{LeaseKey: lease0, Token: tokenA}, p)
}

// wantStamped checks that a request carries a time. Stores stamp
// requests with their own (server or fake) clock, so only being set is
// portable across targets.
func wantStamped(t *testing.T, r *ledger.Request) {
	t.Helper()
	if r.RequestedAt.IsZero() {
		t.Fatal("the request has no time")
	}
}

var requestCases = []Case{
	{"RequestRetrySetsTheRequestAndSignals", func(t *testing.T, s *Suite) {
		s.parkOne(t, ledger.StatusParked)
		ch := s.watch(t, sub)
		must(t, "request retry", s.Store.RequestRetry(s.Ctx, sub, "", "order-1", "alice"))
		wantSignal(t, ch, "order-1")
		got := s.get(t, sub, "order-1")
		if got.Status != ledger.StatusRetrying {
			t.Fatalf("status %q after a retry request, want retrying", got.Status)
		}
		if got.Request == nil || got.Request.Action != ledger.ActionRetry || got.Request.By != "alice" || got.Request.Reason != "" {
			t.Fatalf("request %+v, want a retry by alice", got.Request)
		}
		wantStamped(t, got.Request)
		// The rest of the entry is kept.
		want := kafkaEntry(sub, "order-1", t0)
		got.Status, got.Request = want.Status, nil
		if jsonOf(t, got) != jsonOf(t, want) {
			t.Fatalf("a request changed the entry:\n got %s\nwant %s", jsonOf(t, got), jsonOf(t, want))
		}
	}},
	{"RequestSkipSetsTheRequestAndSignals", func(t *testing.T, s *Suite) {
		s.parkOne(t, ledger.StatusParked)
		ch := s.watch(t, sub)
		must(t, "request skip", s.Store.RequestSkip(s.Ctx, sub, "", "order-1", "poison, known bug", "bob"))
		wantSignal(t, ch, "order-1")
		got := s.get(t, sub, "order-1")
		if got.Status != ledger.StatusParked {
			t.Fatalf("status %q after a skip request, want parked (unchanged)", got.Status)
		}
		if got.Request == nil || got.Request.Action != ledger.ActionSkip || got.Request.Reason != "poison, known bug" || got.Request.By != "bob" {
			t.Fatalf("request %+v, want a skip by bob with the reason", got.Request)
		}
		wantStamped(t, got.Request)
	}},
	{"RetryOfAnUnrecoverableEntryIsRefused", func(t *testing.T, s *Suite) {
		s.parkOne(t, ledger.StatusUnrecoverable)
		err := s.Store.RequestRetry(s.Ctx, sub, "", "order-1", "alice")
		wantErrIs(t, "retry of an unrecoverable entry", err, ledger.ErrUnrecoverable)
		got := s.get(t, sub, "order-1")
		if got.Status != ledger.StatusUnrecoverable || got.Request != nil {
			t.Fatalf("a refused retry changed the entry: status %q request %+v", got.Status, got.Request)
		}
		// Skip is what resolves it.
		must(t, "skip of an unrecoverable entry", s.Store.RequestSkip(s.Ctx, sub, "", "order-1", "gone from the topic", "alice"))
		if got := s.get(t, sub, "order-1"); got.Request == nil || got.Request.Action != ledger.ActionSkip || got.Status != ledger.StatusUnrecoverable {
			t.Fatalf("after a skip request: status %q request %+v", got.Status, got.Request)
		}
	}},
	{"RequestsOnMissingEntriesAreNotParked", func(t *testing.T, s *Suite) {
		err := s.Store.RequestRetry(s.Ctx, sub, "", "order-1", "alice")
		wantErrIs(t, "retry of nothing", err, ledger.ErrNotParked)
		err = s.Store.RequestSkip(s.Ctx, sub, "", "order-1", "r", "alice")
		wantErrIs(t, "skip of nothing", err, ledger.ErrNotParked)
		// Nor after a resolve.
		s.parkOne(t, ledger.StatusParked)
		must(t, "resolve", s.Store.Resolve(s.Ctx, broker.Fence{LeaseKey: lease0, Token: tokenA}, sub, "order-1"))
		err = s.Store.RequestRetry(s.Ctx, sub, "", "order-1", "alice")
		wantErrIs(t, "retry after resolve", err, ledger.ErrNotParked)
		// A refused park leaves nothing to request on.
		a := broker.Fence{LeaseKey: lease1, Token: tokenA}
		if err := s.Store.Park(s.Ctx, a, kafkaEntry(sub, "order-2", t0)); err == nil {
			t.Fatal("park without a lease succeeded")
		}
		err = s.Store.RequestSkip(s.Ctx, sub, "", "order-2", "r", "alice")
		wantErrIs(t, "skip after a refused park", err, ledger.ErrNotParked)
	}},
	{"RequestsNeedNoLease", func(t *testing.T, s *Suite) {
		s.parkOne(t, ledger.StatusParked)
		s.DropLease(t, lease0) // the owner died; nobody holds the partition
		must(t, "request retry", s.Store.RequestRetry(s.Ctx, sub, "", "order-1", "alice"))
		if got := s.get(t, sub, "order-1"); got.Request == nil {
			t.Fatal("the request was not recorded")
		}
	}},
	{"WatchersSeeOnlyTheirSubscription", func(t *testing.T, s *Suite) {
		s.SetLease(t, lease0, tokenA)
		f := broker.Fence{LeaseKey: lease0, Token: tokenA}
		s.park(t, f, kafkaEntry(sub, "order-1", t0))
		s.park(t, f, kafkaEntry(sub2, "order-2", t0))
		ch := s.watch(t, sub)
		ch2 := s.watch(t, sub2)
		must(t, "skip in sub2", s.Store.RequestSkip(s.Ctx, sub2, "", "order-2", "r", "alice"))
		must(t, "retry in sub", s.Store.RequestRetry(s.Ctx, sub, "", "order-1", "alice"))
		wantSignal(t, ch, "order-1") // first, so sub2's signal did not reach it
		wantSignal(t, ch2, "order-2")
	}},
	{"WatchChannelClosesWhenTheContextEnds", func(t *testing.T, s *Suite) {
		ctx, cancel := context.WithCancel(s.Ctx)
		ch, err := s.Store.WatchRequests(ctx, sub)
		must(t, "watch", err)
		cancel()
		deadline := time.After(wait)
		for {
			select {
			case _, ok := <-ch:
				if !ok {
					return
				}
			case <-deadline:
				t.Fatalf("the watch channel is open %s after its context ended", wait)
			}
		}
	}},
	{"ASlowWatcherNeverBlocksRequests", func(t *testing.T, s *Suite) {
		s.parkOne(t, ledger.StatusParked)
		_ = s.watch(t, sub) // never read
		done := make(chan error, 1)
		go func() {
			for i := range 500 {
				if err := s.Store.RequestSkip(s.Ctx, sub, "", "order-1", strconv.Itoa(i), "alice"); err != nil {
					done <- err
					return
				}
			}
			done <- nil
		}()
		select {
		case err := <-done:
			must(t, "500 requests with a full watcher", err)
		case <-time.After(30 * time.Second):
			t.Fatal("requests blocked on a watcher that does not read")
		}
		if got := s.get(t, sub, "order-1").Request; got == nil || got.Reason != "499" {
			t.Fatalf("the last request is %+v, want reason 499", got)
		}
	}},
}
