package memstore

import (
	"context"
	"time"

	"github.com/protctl/protctl/pkg/broker"
	"github.com/protctl/protctl/pkg/runtime"
	"github.com/protctl/protctl/pkg/runtime/internal/storecontract"
)

// Seeks (docs/decisions/0044-topic-seek.md), as redisstore keeps them:
// a subscription's pending requests by partition, expiring together
// after the longest TTL asked for; the owners' latest answer per
// partition; hints to the lease group's watchers.

var _ runtime.CheckpointSeeker = (*Store)(nil)

// RequestAnswered is what RequestSeek returns when the owner already
// answered a request of the same id (as redisstore.RequestAnswered).
const RequestAnswered = "="

type seekSub struct{ group, sub string }

// seekHash is a subscription's pending requests.
type seekHash struct {
	reqs     map[int32]runtime.SeekRequest
	expireAt time.Time
}

// liveSeeks returns k's pending requests, nil when none or expired. The
// caller holds s.mu.
func (s *Store) liveSeeks(k seekSub) *seekHash {
	h := s.seeks[k]
	if h == nil {
		return nil
	}
	if !s.cfg.clock.Now().Before(h.expireAt) || len(h.reqs) == 0 {
		delete(s.seeks, k)
		return nil
	}
	return h
}

// RequestSeek records req for the owner of partition to carry out, only
// while g's lease of partition is still req.Lease and no answer to req.ID
// is recorded, and signals the lease group's watchers. The lease is the
// one LeaseKeys names. It returns ""
// when recorded, RequestAnswered when req.ID was answered already, or
// else the lease found instead ("-" when free). The subscription's
// requests expire after ttl (a longer TTL already set is kept).
func (s *Store) RequestSeek(ctx context.Context, leaseGroup string, subscription string, partition int32, req runtime.SeekRequest, ttl time.Duration) (string, error) {
	const op = "request seek"
	if err := storecontract.Checkpoint(op, leaseGroup, subscription, partition); err != nil {
		return "", err
	}
	if req.ID == "" {
		return "", storecontract.Invalid(op, "id", `""`, "must not be empty")
	}
	if ttl < time.Millisecond {
		return "", storecontract.Invalid(op, "ttl", ttl.String(), "must be at least 1ms")
	}
	if err := ctxErr(ctx, op); err != nil {
		return "", err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	k := seekSub{leaseGroup, subscription}
	if res, ok := s.seekResults[k][partition]; ok && res.ID == req.ID {
		return RequestAnswered, nil
	}
	leaseKey, _ := s.LeaseKeys(leaseGroup, partition)
	lease, ok, err := s.leases.GetString(ctx, leaseKey)
	if err != nil {
		return "", err
	}
	if !ok {
		return "-", nil
	}
	if lease != req.Lease {
		return lease, nil
	}
	h := s.liveSeeks(k)
	if h == nil {
		h = &seekHash{reqs: make(map[int32]runtime.SeekRequest)}
		s.seeks[k] = h
	}
	h.reqs[partition] = req
	if exp := s.cfg.clock.Now().Add(ttl); exp.After(h.expireAt) {
		h.expireAt = exp
	}
	s.seekWatchers.Signal(k.group, subscription)
	return "", nil
}

// WithdrawSeek removes the request id of partition if it is still
// pending; it reports whether it did.
func (s *Store) WithdrawSeek(ctx context.Context, leaseGroup string, subscription string, partition int32, id string) (bool, error) {
	const op = "withdraw seek"
	if err := storecontract.Checkpoint(op, leaseGroup, subscription, partition); err != nil {
		return false, err
	}
	if err := ctxErr(ctx, op); err != nil {
		return false, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	h := s.liveSeeks(seekSub{leaseGroup, subscription})
	if h == nil {
		return false, nil
	}
	if r, ok := h.reqs[partition]; !ok || r.ID != id {
		return false, nil
	}
	delete(h.reqs, partition)
	return true, nil
}

// SeekResult returns the latest answer to a seek of partition, nil when
// there is none.
func (s *Store) SeekResult(ctx context.Context, leaseGroup string, subscription string, partition int32) (*runtime.SeekResult, error) {
	if err := ctxErr(ctx, "read seek result"); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	res, ok := s.seekResults[seekSub{leaseGroup, subscription}][partition]
	if !ok {
		return nil, nil
	}
	return &res, nil
}

// PendingSeeks implements runtime.CheckpointSeeker.
func (s *Store) PendingSeeks(ctx context.Context, leaseGroup, subscription string) (map[int32]runtime.SeekRequest, error) {
	const op = "read seek requests"
	if err := storecontract.Checkpoint(op, leaseGroup, subscription, 0); err != nil {
		return nil, err
	}
	if err := ctxErr(ctx, op); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[int32]runtime.SeekRequest)
	if h := s.liveSeeks(seekSub{leaseGroup, subscription}); h != nil {
		for p, r := range h.reqs {
			out[p] = r
		}
	}
	return out, nil
}

// WatchSeeks implements runtime.CheckpointSeeker: the subscription of
// every request recorded for leaseGroup after it returns, until ctx ends
// or the reader falls behind by more than the buffer; then the channel
// closes.
func (s *Store) WatchSeeks(ctx context.Context, leaseGroup string) (<-chan string, error) {
	const op = "watch seeks"
	if err := storecontract.Checkpoint(op, leaseGroup, "x", 0); err != nil {
		return nil, err
	}
	if err := ctxErr(ctx, op); err != nil {
		return nil, err
	}
	return s.seekWatchers.Add(ctx, leaseGroup, s.cfg.watchBuffer), nil
}

// CompleteSeek implements runtime.CheckpointSeeker: fenced by f, only for
// the pending request res.ID; with SeekDone it sets the checkpoint to
// res.Next, backwards too, in the same step.
func (s *Store) CompleteSeek(ctx context.Context, f broker.Fence, leaseGroup, subscription string, partition int32, res runtime.SeekResult) (bool, error) {
	const op = "complete seek"
	if err := storecontract.Save(op, f, leaseGroup, subscription, partition, max(res.Next, 0)); err != nil {
		return false, err
	}
	if err := ctxErr(ctx, op); err != nil {
		return false, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.fence(ctx, op, f); err != nil {
		return false, err
	}
	k := seekSub{leaseGroup, subscription}
	h := s.liveSeeks(k)
	if h == nil {
		return false, nil
	}
	if r, ok := h.reqs[partition]; !ok || r.ID != res.ID {
		return false, nil
	}
	if res.Status == runtime.SeekDone {
		subs := s.checkpoints[leaseGroup]
		if subs == nil {
			subs = make(map[string]map[int32]int64)
			s.checkpoints[leaseGroup] = subs
		}
		if subs[subscription] == nil {
			subs[subscription] = make(map[int32]int64)
		}
		subs[subscription][partition] = res.Next
	}
	delete(h.reqs, partition)
	if s.seekResults[k] == nil {
		s.seekResults[k] = make(map[int32]runtime.SeekResult)
	}
	s.seekResults[k][partition] = res
	return true, nil
}
