package memstore

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/protctl/protctl/pkg/broker"
	"github.com/protctl/protctl/pkg/runtime/internal/storecontract"
	"github.com/protctl/protctl/pkg/runtime/ledger"
)

// Park creates or replaces the entry of (p.Subscription, p.Aggregate)
// under f's lease; the aggregate's entries under other leases (other
// partitions) stay. A stale f fails with a *broker.LeaseLostError (Op
// "park") and changes nothing. p.Error is cut to ledger.MaxErrorLen
// bytes; an empty p.Status means ledger.StatusParked and a zero
// p.ParkedAt the clock's now.
func (s *Store) Park(ctx context.Context, f broker.Fence, p ledger.Parked) error {
	const op = "park"
	if err := storecontract.Park(op, f, p); err != nil {
		return err
	}
	if err := ctxErr(ctx, op); err != nil {
		return err
	}
	p = storecontract.ParkDefaults(p, s.cfg.clock.Now)
	data, err := storecontract.EncodeParked(p)
	if err != nil {
		return fmt.Errorf("memstore: %s: %w", op, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.fence(ctx, op, f); err != nil {
		return err
	}
	aggs := s.parked[p.Subscription]
	if aggs == nil {
		aggs = make(map[entryID]entry)
		s.parked[p.Subscription] = aggs
	}
	aggs[entryID{p.Aggregate, f.LeaseKey}] = entry{leaseKey: f.LeaseKey, partition: p.Partition, data: data}
	return nil
}

// SetStatus sets the status of the entry parked under f's lease and
// clears its request. A stale f fails with a *broker.LeaseLostError (Op
// "set status"); a missing entry with ledger.ErrNotParked.
func (s *Store) SetStatus(ctx context.Context, f broker.Fence, subscription, aggregate string, status ledger.Status) error {
	const op = "set status"
	if err := storecontract.SetStatus(op, f, subscription, aggregate, status); err != nil {
		return err
	}
	if err := ctxErr(ctx, op); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.fence(ctx, op, f); err != nil {
		return err
	}
	id := entryID{aggregate, f.LeaseKey}
	e, ok := s.parked[subscription][id]
	if !ok {
		return notParked(op, subscription, aggregate)
	}
	return s.edit(op, subscription, id, e, func(p *ledger.Parked) error {
		p.Status = status
		p.Request = nil
		return nil
	})
}

// Resolve deletes the entry parked under f's lease. A stale f fails with a
// *broker.LeaseLostError (Op "resolve") and deletes nothing. Resolving a
// missing entry is not an error.
func (s *Store) Resolve(ctx context.Context, f broker.Fence, subscription, aggregate string) error {
	const op = "resolve"
	if err := storecontract.Entry(op, f, subscription, aggregate); err != nil {
		return err
	}
	if err := ctxErr(ctx, op); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.fence(ctx, op, f); err != nil {
		return err
	}
	delete(s.parked[subscription], entryID{aggregate, f.LeaseKey})
	return nil
}

// ListParked returns subscription's entries ("" for all), oldest ParkedAt
// first (then by subscription and aggregate).
func (s *Store) ListParked(ctx context.Context, subscription string) ([]ledger.Parked, error) {
	const op = "list parked"
	if subscription != "" {
		if err := storecontract.Subscription(op, subscription); err != nil {
			return nil, err
		}
	}
	if err := ctxErr(ctx, op); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []ledger.Parked
	for sub, aggs := range s.parked {
		if subscription != "" && sub != subscription {
			continue
		}
		for _, e := range aggs {
			p, err := storecontract.DecodeParked(e.data)
			if err != nil {
				return nil, fmt.Errorf("memstore: %s: %w", op, err)
			}
			out = append(out, p)
		}
	}
	storecontract.SortParked(out)
	return out, nil
}

// GetParked returns the entry of (subscription, partition, aggregate), or
// ledger.ErrNotParked; partition "" names the aggregate's only entry
// (an *ledger.AmbiguousParkedError when it has several).
func (s *Store) GetParked(ctx context.Context, subscription, partition, aggregate string) (ledger.Parked, error) {
	const op = "get parked"
	if err := storecontract.Aggregate(op, subscription, aggregate); err != nil {
		return ledger.Parked{}, err
	}
	if err := ctxErr(ctx, op); err != nil {
		return ledger.Parked{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	_, e, err := s.lookup(op, subscription, partition, aggregate)
	if err != nil {
		return ledger.Parked{}, err
	}
	p, err := storecontract.DecodeParked(e.data)
	if err != nil {
		return ledger.Parked{}, fmt.Errorf("memstore: %s: %w", op, err)
	}
	return p, nil
}

// lookup finds the entry of (subscription, partition, aggregate); s.mu is
// held.
func (s *Store) lookup(op, subscription, partition, aggregate string) (entryID, entry, error) {
	var (
		id    entryID
		found entry
		parts []string
	)
	for eid, e := range s.parked[subscription] {
		if eid.aggregate != aggregate || (partition != "" && e.partition != partition) {
			continue
		}
		id, found = eid, e
		parts = append(parts, e.partition)
	}
	switch {
	case len(parts) == 0:
		return entryID{}, entry{}, notParked(op, subscription, aggregate)
	case len(parts) > 1:
		slices.Sort(parts)
		return entryID{}, entry{}, &ledger.AmbiguousParkedError{Subscription: subscription, Aggregate: aggregate, Partitions: parts}
	}
	return id, found, nil
}

// RequestRetry records an operator's retry request and sets the entry's
// status to retrying, then signals the subscription's watchers.
// ledger.ErrNotParked, ledger.ErrUnrecoverable,
// ledger.ErrAmbiguousParked.
func (s *Store) RequestRetry(ctx context.Context, subscription, partition, aggregate, by string) error {
	return s.request(ctx, "request retry", ledger.ActionRetry, subscription, partition, aggregate, "", by)
}

// RequestSkip records an operator's skip request (the status stays), then
// signals the subscription's watchers. ledger.ErrNotParked,
// ledger.ErrAmbiguousParked.
func (s *Store) RequestSkip(ctx context.Context, subscription, partition, aggregate, reason, by string) error {
	return s.request(ctx, "request skip", ledger.ActionSkip, subscription, partition, aggregate, reason, by)
}

func (s *Store) request(ctx context.Context, op string, action ledger.Action, subscription, partition, aggregate, reason, by string) error {
	if err := storecontract.Aggregate(op, subscription, aggregate); err != nil {
		return err
	}
	if err := ctxErr(ctx, op); err != nil {
		return err
	}
	// Redis stamps requests with the server's TIME, in microseconds.
	now := s.cfg.clock.Now().UTC().Truncate(time.Microsecond)
	s.mu.Lock()
	defer s.mu.Unlock()
	id, e, err := s.lookup(op, subscription, partition, aggregate)
	if err != nil {
		return err
	}
	err = s.edit(op, subscription, id, e, func(p *ledger.Parked) error {
		if action == ledger.ActionRetry {
			if p.Status == ledger.StatusUnrecoverable {
				return fmt.Errorf("memstore: %s: %q of subscription %q: %w", op, aggregate, subscription, ledger.ErrUnrecoverable)
			}
			p.Status = ledger.StatusRetrying
		}
		p.Request = &ledger.Request{Action: action, Reason: reason, By: by, RequestedAt: now}
		return nil
	})
	if err != nil {
		return err
	}
	s.signal(subscription, aggregate)
	return nil
}

// signal tells subscription's watchers of a request on aggregate; s.mu
// is held, and a full buffer closes the watcher's channel.
func (s *Store) signal(subscription, aggregate string) {
	s.watchers.Signal(subscription, aggregate)
}

// edit decodes e, applies change and stores the result; s.mu is held.
func (s *Store) edit(op, subscription string, id entryID, e entry, change func(*ledger.Parked) error) error {
	p, err := storecontract.DecodeParked(e.data)
	if err != nil {
		return fmt.Errorf("memstore: %s: %w", op, err)
	}
	if err := change(&p); err != nil {
		return err
	}
	data, err := storecontract.EncodeParked(p)
	if err != nil {
		return fmt.Errorf("memstore: %s: %w", op, err)
	}
	e.data = data
	s.parked[subscription][id] = e
	return nil
}

// WatchRequests sends the aggregate of every request recorded for
// subscription after it returns, until ctx ends or the reader falls
// behind by more than the buffer (WithWatchBuffer); then it closes the
// channel, and a reader that wants every request watches again and
// re-reads the ledger. It starts no goroutine.
func (s *Store) WatchRequests(ctx context.Context, subscription string) (<-chan string, error) {
	const op = "watch requests"
	if err := storecontract.Subscription(op, subscription); err != nil {
		return nil, err
	}
	if err := ctxErr(ctx, op); err != nil {
		return nil, err
	}
	return s.watchers.Add(ctx, subscription, s.cfg.watchBuffer), nil
}

func notParked(op, subscription, aggregate string) error {
	return fmt.Errorf("memstore: %s: %q of subscription %q: %w", op, aggregate, subscription, ledger.ErrNotParked)
}
