package storetest

import (
	"errors"
	"strconv"
	"sync"
	"testing"

	"github.com/protctl/protctl/pkg/broker"
	"github.com/protctl/protctl/pkg/runtime/ledger"
)

// pinned returns the store's ledger.PinnedRequester; every store of the
// suite implements the capability.
func (s *Suite) pinned(t *testing.T) ledger.PinnedRequester {
	t.Helper()
	pr, ok := s.Store.(ledger.PinnedRequester)
	if !ok {
		t.Fatalf("%T does not implement ledger.PinnedRequester", s.Store)
	}
	return pr
}

// retryOf is a pinned retry of order-1 of sub as read now, with token.
func (s *Suite) retryOf(t *testing.T, token string) ledger.PinnedRequest {
	t.Helper()
	return ledger.PinnedRequest{
		Action: ledger.ActionRetry, Subscription: sub, Aggregate: "order-1", By: "alice",
		Pin: ledger.PinOf(s.get(t, sub, "order-1")), Token: token,
	}
}

func wantAlready(t *testing.T, what string, err error, action ledger.Action) {
	t.Helper()
	var ar *ledger.AlreadyRequestedError
	if !errors.As(err, &ar) || !errors.Is(err, ledger.ErrAlreadyRequested) {
		t.Fatalf("%s: got %v, want an *AlreadyRequestedError", what, err)
	}
	if ar.Action != action || ar.At.IsZero() {
		t.Fatalf("%s: the earlier request is %s at %s, want a %s with a time", what, ar.Action, ar.At, action)
	}
}

var pinnedCases = []Case{
	{"PinnedRetryRecordsTheRequestWithItsToken", func(t *testing.T, s *Suite) {
		s.parkOne(t, ledger.StatusParked)
		ch := s.watch(t, sub)
		must(t, "pinned retry", s.pinned(t).RequestPinned(s.Ctx, s.retryOf(t, "plan-1")))
		wantSignal(t, ch, "order-1")
		got := s.get(t, sub, "order-1")
		if got.Status != ledger.StatusRetrying || got.Request == nil || got.Request.Action != ledger.ActionRetry ||
			got.Request.By != "alice" || got.Request.Token != "plan-1" || got.Request.Reason != "" {
			t.Fatalf("after a pinned retry: status %q request %+v", got.Status, got.Request)
		}
		wantStamped(t, got.Request)
	}},
	{"PinnedSkipKeepsTheStatusAndRecordsTheReason", func(t *testing.T, s *Suite) {
		s.parkOne(t, ledger.StatusUnrecoverable)
		r := s.retryOf(t, "plan-1")
		r.Action, r.Reason = ledger.ActionSkip, "gone from the topic"
		must(t, "pinned skip", s.pinned(t).RequestPinned(s.Ctx, r))
		got := s.get(t, sub, "order-1")
		if got.Status != ledger.StatusUnrecoverable || got.Request == nil || got.Request.Action != ledger.ActionSkip || got.Request.Reason != "gone from the topic" {
			t.Fatalf("after a pinned skip: status %q request %+v", got.Status, got.Request)
		}
	}},
	{"ARepeatedTokenIsRecognisedAndChangesNothing", func(t *testing.T, s *Suite) {
		s.parkOne(t, ledger.StatusParked)
		r := s.retryOf(t, "plan-1")
		must(t, "pinned retry", s.pinned(t).RequestPinned(s.Ctx, r))
		before := jsonOf(t, s.get(t, sub, "order-1"))
		wantAlready(t, "the same request again", s.pinned(t).RequestPinned(s.Ctx, r), ledger.ActionRetry)
		if after := jsonOf(t, s.get(t, sub, "order-1")); after != before {
			t.Fatalf("a repeat changed the entry:\n got %s\nwant %s", after, before)
		}
	}},
	{"ATokenIsRecognisedAfterTheOwnerResolvedOrReparked", func(t *testing.T, s *Suite) {
		// The owner acts on the request before the caller repeats it
		// (a plan resumed after an interruption): resolved, the token is
		// still known; parked again (the retry failed), the new park is
		// not requested again.
		s.parkOne(t, ledger.StatusParked)
		f := broker.Fence{LeaseKey: lease0, Token: tokenA}
		r := s.retryOf(t, "plan-1")
		must(t, "pinned retry", s.pinned(t).RequestPinned(s.Ctx, r))
		must(t, "resolve", s.Store.Resolve(s.Ctx, f, sub, "order-1"))
		wantAlready(t, "a repeat after the resolve", s.pinned(t).RequestPinned(s.Ctx, r), ledger.ActionRetry)

		again := kafkaEntry(sub, "order-1", t0)
		again.Attempts = 6
		s.park(t, f, again)
		wantAlready(t, "a repeat after a new park", s.pinned(t).RequestPinned(s.Ctx, r), ledger.ActionRetry)
		if got := s.get(t, sub, "order-1"); got.Request != nil || got.Status != ledger.StatusParked {
			t.Fatalf("a repeat requested the new park: status %q request %+v", got.Status, got.Request)
		}
		// Another token is another request: it is decided on the new
		// park and recorded.
		must(t, "a new plan's retry", s.pinned(t).RequestPinned(s.Ctx, s.retryOf(t, "plan-2")))
	}},
	{"AnEntryThatMovedFromThePinIsAChange", func(t *testing.T, s *Suite) {
		s.parkOne(t, ledger.StatusParked)
		f := broker.Fence{LeaseKey: lease0, Token: tokenA}
		cases := []struct {
			name   string
			change func(t *testing.T)
		}{
			{"parked again with more attempts", func(t *testing.T) {
				p := kafkaEntry(sub, "order-1", t0)
				p.Attempts = 6
				s.park(t, f, p)
			}},
			{"parked again at another position", func(t *testing.T) {
				p := kafkaEntry(sub, "order-1", t0)
				p.Position = "1300"
				s.park(t, f, p)
			}},
			{"parked again under a new generation", func(t *testing.T) {
				p := kafkaEntry(sub, "order-1", t0)
				p.Generation = 2
				s.park(t, f, p)
			}},
			{"requested by someone else", func(t *testing.T) {
				must(t, "skip", s.Store.RequestSkip(s.Ctx, sub, "", "order-1", "by hand", "bob"))
			}},
		}
		for i, c := range cases {
			s.park(t, f, kafkaEntry(sub, "order-1", t0))
			r := s.retryOf(t, "plan-"+strconv.Itoa(i))
			c.change(t)
			before := jsonOf(t, s.get(t, sub, "order-1"))
			err := s.pinned(t).RequestPinned(s.Ctx, r)
			var ce *ledger.ParkChangedError
			if !errors.As(err, &ce) || !errors.Is(err, ledger.ErrParkChanged) {
				t.Fatalf("%s: got %v, want a *ParkChangedError", c.name, err)
			}
			if ledger.PinOf(ce.Now) == r.Pin {
				t.Fatalf("%s: the error's entry %+v matches the pin", c.name, ce.Now)
			}
			if after := jsonOf(t, s.get(t, sub, "order-1")); after != before {
				t.Fatalf("%s: a refused request changed the entry:\n got %s\nwant %s", c.name, after, before)
			}
		}
	}},
	{"PinnedRequestsOnMissingOrUnrecoverableEntries", func(t *testing.T, s *Suite) {
		r := ledger.PinnedRequest{Action: ledger.ActionRetry, Subscription: sub, Aggregate: "order-1",
			Pin: ledger.Pin{Status: ledger.StatusParked, Position: "1234", Attempts: 3, Generation: 1}, Token: "plan-1"}
		wantErrIs(t, "retry of nothing", s.pinned(t).RequestPinned(s.Ctx, r), ledger.ErrNotParked)
		s.parkOne(t, ledger.StatusUnrecoverable)
		r.Pin.Status = ledger.StatusUnrecoverable
		wantErrIs(t, "retry of an unrecoverable entry", s.pinned(t).RequestPinned(s.Ctx, r), ledger.ErrUnrecoverable)
		if got := s.get(t, sub, "order-1"); got.Request != nil {
			t.Fatalf("a refused retry recorded %+v", got.Request)
		}
		// Refused, so not remembered: a skip with the token records.
		r.Action, r.Reason = ledger.ActionSkip, "gone"
		must(t, "skip", s.pinned(t).RequestPinned(s.Ctx, r))
	}},
	{"PinnedRequestsNameTheirPartition", func(t *testing.T, s *Suite) {
		s.SetLease(t, lease0, tokenA)
		s.SetLease(t, lease1, tokenA)
		p1 := kafkaEntry(sub, "order-1", t0)
		p1.Partition = "1"
		s.park(t, broker.Fence{LeaseKey: lease0, Token: tokenA}, kafkaEntry(sub, "order-1", t0))
		s.park(t, broker.Fence{LeaseKey: lease1, Token: tokenA}, p1)
		r := ledger.PinnedRequest{Action: ledger.ActionRetry, Subscription: sub, Aggregate: "order-1",
			Pin: ledger.PinOf(p1), Token: "plan-1"}
		wantErrIs(t, "no partition for an aggregate on two", s.pinned(t).RequestPinned(s.Ctx, r), ledger.ErrAmbiguousParked)
		r.Partition = "1"
		must(t, "retry on partition 1", s.pinned(t).RequestPinned(s.Ctx, r))
		got0, err := s.Store.GetParked(s.Ctx, sub, "0", "order-1")
		must(t, "get partition 0", err)
		got1, err := s.Store.GetParked(s.Ctx, sub, "1", "order-1")
		must(t, "get partition 1", err)
		if got0.Request != nil || got1.Request == nil || got1.Request.Token != "plan-1" {
			t.Fatalf("partition 0 request %+v, partition 1 request %+v", got0.Request, got1.Request)
		}
		// The same token on the other partition's entry is another item.
		r.Partition, r.Pin = "0", ledger.PinOf(got0)
		must(t, "retry on partition 0", s.pinned(t).RequestPinned(s.Ctx, r))
	}},
	{"ConcurrentPinnedRequestsWithOneTokenRecordOnce", func(t *testing.T, s *Suite) {
		s.parkOne(t, ledger.StatusParked)
		r := s.retryOf(t, "plan-1")
		const n = 8
		errs := make([]error, n)
		var wg sync.WaitGroup
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				errs[i] = s.pinned(t).RequestPinned(s.Ctx, r)
			}()
		}
		wg.Wait()
		recorded := 0
		for _, err := range errs {
			switch {
			case err == nil:
				recorded++
			case errors.Is(err, ledger.ErrAlreadyRequested):
			default:
				t.Fatalf("concurrent pinned request: %v", err)
			}
		}
		if recorded != 1 {
			t.Fatalf("%d of %d concurrent calls with one token recorded the request, want 1", recorded, n)
		}
	}},
	{"PinnedRequestsCheckTheirArguments", func(t *testing.T, s *Suite) {
		s.parkOne(t, ledger.StatusParked)
		good := s.retryOf(t, "plan-1")
		for name, change := range map[string]func(*ledger.PinnedRequest){
			"no token":        func(r *ledger.PinnedRequest) { r.Token = "" },
			"a token with :":  func(r *ledger.PinnedRequest) { r.Token = "a:b" },
			"an action":       func(r *ledger.PinnedRequest) { r.Action = "delete" },
			"a skip reason":   func(r *ledger.PinnedRequest) { r.Action = ledger.ActionSkip },
			"a pinned status": func(r *ledger.PinnedRequest) { r.Pin.Status = "" },
			"no aggregate":    func(r *ledger.PinnedRequest) { r.Aggregate = "" },
		} {
			r := good
			change(&r)
			wantErrIs(t, name, s.pinned(t).RequestPinned(s.Ctx, r), broker.ErrInvalidArgument)
		}
		if got := s.get(t, sub, "order-1"); got.Request != nil {
			t.Fatalf("an invalid call recorded %+v", got.Request)
		}
	}},
}
