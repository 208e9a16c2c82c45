package redisstore

import (
	"context"
	"fmt"
	"strconv"

	"github.com/protctl/protctl/pkg/broker"
	"github.com/protctl/protctl/pkg/runtime/internal/storecontract"
)

// Save stores next as subscription's checkpoint of partition in
// leaseGroup (LeaseGroup.String), in one script that first proves f: a
// lease that does not hold exactly f.Token (expired, released, taken by a
// newer generation) fails with a *broker.LeaseLostError (Op "checkpoint",
// errors.Is broker.ErrLeaseLost) and writes nothing. A next at or below
// the stored checkpoint is ignored: checkpoints never move backwards.
//
// f.LeaseKey should be LeaseGroup.LeaseKey(partition): on Redis Cluster
// it must share the checkpoints' hash tag.
func (s *Store) Save(ctx context.Context, f broker.Fence, leaseGroup, subscription string, partition int32, next int64) error {
	const op = "checkpoint"
	if err := storecontract.Save(op, f, leaseGroup, subscription, partition, next); err != nil {
		return err
	}
	keys := []string{f.LeaseKey, checkpointsKey(leaseGroup, subscription)}
	err := checkpointScript.Run(ctx, s.client, keys, f.Token, partition, strconv.FormatInt(next, 10)).Err()
	if err != nil {
		return mapErr(call{Op: op, Keys: keys, Fence: &f}, err)
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
	key := checkpointsKey(leaseGroup, subscription)
	v, err := s.client.HGet(ctx, key, strconv.FormatInt(int64(partition), 10)).Result()
	if isNil(err) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, mapErr(call{Op: op, Key: key, Want: "hash"}, err)
	}
	next, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		return 0, false, fmt.Errorf("redisstore: %s: partition %d of %q holds %q, not an offset", op, partition, key, v)
	}
	return next, true, nil
}

// LoadAll returns every saved checkpoint of subscription in leaseGroup by
// partition (an empty map when none was saved), in one HGETALL.
func (s *Store) LoadAll(ctx context.Context, leaseGroup, subscription string) (map[int32]int64, error) {
	const op = "load checkpoints"
	if err := storecontract.Checkpoint(op, leaseGroup, subscription, 0); err != nil {
		return nil, err
	}
	key := checkpointsKey(leaseGroup, subscription)
	all, err := s.client.HGetAll(ctx, key).Result()
	if err != nil {
		return nil, mapErr(call{Op: op, Key: key, Want: "hash"}, err)
	}
	out := make(map[int32]int64, len(all))
	for field, v := range all {
		p, perr := strconv.ParseInt(field, 10, 32)
		next, nerr := strconv.ParseInt(v, 10, 64)
		if perr != nil || nerr != nil {
			return nil, fmt.Errorf("redisstore: %s: %q holds %q -> %q, not partition -> offset", op, key, field, v)
		}
		out[int32(p)] = next
	}
	return out, nil
}

// LeaseKeys names partition's lease and fence counter in leaseGroup
// (runtime.Checkpoints): the layout of redisstore.LeaseGroup.
func (s *Store) LeaseKeys(leaseGroup string, partition int32) (lease, generation string) {
	return storecontract.LeaseKeys(leaseGroup, partition)
}
