package storetest

import (
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/protctl/protctl/pkg/broker"
	"github.com/protctl/protctl/pkg/runtime/ledger"
)

var raceCases = []Case{
	{"ConcurrentSavesKeepTheHighestOffset", func(t *testing.T, s *Suite) {
		s.SetLease(t, lease0, tokenA)
		f := broker.Fence{LeaseKey: lease0, Token: tokenA}
		var wg sync.WaitGroup
		errs := make(chan error, 8)
		for w := range 8 {
			wg.Go(func() {
				for i := range 25 {
					if err := s.Store.Save(s.Ctx, f, leaseGroup, sub, 0, int64(i*8+w)); err != nil {
						errs <- err
						return
					}
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			must(t, "concurrent save", err)
		}
		s.wantCheckpoint(t, "after concurrent saves", 0, 24*8+7)
	}},
	{"ConcurrentParksRequestsAndResolvesStayConsistent", func(t *testing.T, s *Suite) {
		s.SetLease(t, lease0, tokenA)
		f := broker.Fence{LeaseKey: lease0, Token: tokenA}
		ch := s.watch(t, sub)
		var wg sync.WaitGroup
		errs := make(chan error, 64)
		for w := range 4 {
			wg.Go(func() {
				for i := range 10 {
					agg := "order-" + strconv.Itoa(w) + "-" + strconv.Itoa(i)
					p := kafkaEntry(sub, agg, t0.Add(time.Duration(i)*time.Second))
					if err := s.Store.Park(s.Ctx, f, p); err != nil {
						errs <- err
						return
					}
					if err := s.Store.RequestRetry(s.Ctx, sub, "", agg, "alice"); err != nil {
						errs <- err
						return
					}
					if i%2 == 0 {
						if err := s.Store.Resolve(s.Ctx, f, sub, agg); err != nil {
							errs <- err
							return
						}
					}
				}
			})
			wg.Go(func() {
				for range 20 {
					if _, err := s.Store.ListParked(s.Ctx, ""); err != nil {
						errs <- err
						return
					}
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			must(t, "concurrent ledger call", err)
		}
		ps, err := s.Store.ListParked(s.Ctx, sub)
		must(t, "list", err)
		if len(ps) != 20 {
			t.Fatalf("%d entries left, want 20", len(ps))
		}
		for _, p := range ps {
			if p.Status != ledger.StatusRetrying || p.Request == nil {
				t.Fatalf("entry %s: status %q request %+v, want a retry", p.Aggregate, p.Status, p.Request)
			}
		}
		// At least one signal arrived (they are hints; some may drop).
		select {
		case <-ch:
		case <-time.After(wait):
			t.Fatal("no signal from 40 requests")
		}
	}},
}
