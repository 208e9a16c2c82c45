package memstore

import (
	"context"
	"fmt"
	"time"

	"github.com/protctl/protctl/pkg/runtime/internal/storecontract"
	"github.com/protctl/protctl/pkg/runtime/ledger"
)

var _ ledger.PinnedRequester = (*Store)(nil)

// pinnedName is a pinned request's token and the entry it named, as
// asked (the partition may be "").
type pinnedName struct {
	token, subscription, partition, aggregate string
}

// pinnedMark is what the store remembers of a recorded pinned request.
// Calls run under s.mu, so the mark is set in the same step as the
// request.
type pinnedMark struct {
	action   ledger.Action
	by       string
	at       time.Time
	expireAt time.Time
}

// RequestPinned records r on its entry only while the entry matches
// r.Pin, and at most once per r.Token (ledger.PinnedRequester).
// The token is remembered for WithRequestTokenTTL on the store's clock.
func (s *Store) RequestPinned(ctx context.Context, r ledger.PinnedRequest) error {
	const op = "request pinned"
	if err := storecontract.Pinned(op, r); err != nil {
		return err
	}
	if err := ctxErr(ctx, op); err != nil {
		return err
	}
	now := s.cfg.clock.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	name := pinnedName{r.Token, r.Subscription, r.Partition, r.Aggregate}
	mark, ok := s.requested[name]
	if ok && !now.Before(mark.expireAt) {
		delete(s.requested, name)
		ok = false
	}
	if ok {
		return fmt.Errorf("memstore: %s: %w", op, &ledger.AlreadyRequestedError{
			Subscription: r.Subscription, Partition: r.Partition, Aggregate: r.Aggregate,
			Token: r.Token, Action: mark.action, By: mark.by, At: mark.at})
	}
	id, e, err := s.lookup(op, r.Subscription, r.Partition, r.Aggregate)
	if err != nil {
		return err
	}
	cur, err := storecontract.DecodeParked(e.data)
	if err != nil {
		return fmt.Errorf("memstore: %s: %w", op, err)
	}
	if ledger.PinOf(cur) != r.Pin {
		return fmt.Errorf("memstore: %s: %w", op, &ledger.ParkChangedError{
			Subscription: r.Subscription, Partition: r.Partition, Aggregate: r.Aggregate, Pin: r.Pin, Now: cur})
	}
	// Redis stamps requests with the server's TIME, in microseconds.
	at := now.UTC().Truncate(time.Microsecond)
	err = s.edit(op, r.Subscription, id, e, func(p *ledger.Parked) error {
		if r.Action == ledger.ActionRetry {
			if p.Status == ledger.StatusUnrecoverable {
				return fmt.Errorf("memstore: %s: %q of subscription %q: %w", op, r.Aggregate, r.Subscription, ledger.ErrUnrecoverable)
			}
			p.Status = ledger.StatusRetrying
		}
		p.Request = &ledger.Request{Action: r.Action, Reason: r.SkipReason(), By: r.By, RequestedAt: at, Token: r.Token}
		return nil
	})
	if err != nil {
		return err
	}
	s.requested[name] = pinnedMark{action: r.Action, by: r.By, at: at, expireAt: now.Add(s.cfg.tokenTTL)}
	s.signal(r.Subscription, r.Aggregate)
	return nil
}
