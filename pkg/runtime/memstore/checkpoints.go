package memstore

import (
	"context"
	"maps"

	"github.com/protctl/protctl/pkg/broker"
	"github.com/protctl/protctl/pkg/runtime/internal/storecontract"
)

// Save stores next as subscription's checkpoint of partition in
// leaseGroup if f's lease holds exactly f.Token; otherwise it returns a
// *broker.LeaseLostError (Op "checkpoint") and writes nothing. A next at
// or below the stored checkpoint is ignored.
func (s *Store) Save(ctx context.Context, f broker.Fence, leaseGroup, subscription string, partition int32, next int64) error {
	const op = "checkpoint"
	if err := storecontract.Save(op, f, leaseGroup, subscription, partition, next); err != nil {
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
	subs := s.checkpoints[leaseGroup]
	if subs == nil {
		subs = make(map[string]map[int32]int64)
		s.checkpoints[leaseGroup] = subs
	}
	parts := subs[subscription]
	if parts == nil {
		parts = make(map[int32]int64)
		subs[subscription] = parts
	}
	if cur, ok := parts[partition]; !ok || next > cur {
		parts[partition] = next
	}
	return nil
}

// Load returns subscription's checkpoint of partition, ok=false when none
// was saved.
func (s *Store) Load(ctx context.Context, leaseGroup, subscription string, partition int32) (int64, bool, error) {
	const op = "load checkpoint"
	if err := storecontract.Checkpoint(op, leaseGroup, subscription, partition); err != nil {
		return 0, false, err
	}
	if err := ctxErr(ctx, op); err != nil {
		return 0, false, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	next, ok := s.checkpoints[leaseGroup][subscription][partition]
	return next, ok, nil
}

// LoadAll returns every saved checkpoint of subscription in leaseGroup by
// partition (an empty map when none was saved).
func (s *Store) LoadAll(ctx context.Context, leaseGroup, subscription string) (map[int32]int64, error) {
	const op = "load checkpoints"
	if err := storecontract.Checkpoint(op, leaseGroup, subscription, 0); err != nil {
		return nil, err
	}
	if err := ctxErr(ctx, op); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[int32]int64)
	maps.Copy(out, s.checkpoints[leaseGroup][subscription])
	return out, nil
}

// LeaseKeys names partition's lease and fence counter in leaseGroup
// (runtime.Checkpoints): the layout of redisstore.LeaseGroup.
func (s *Store) LeaseKeys(leaseGroup string, partition int32) (lease, generation string) {
	return storecontract.LeaseKeys(leaseGroup, partition)
}
