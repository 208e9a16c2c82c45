package redisbroker

import (
	"context"
	"time"

	"github.com/protctl/protctl/pkg/broker"
)

// AcquirePartitionLease takes leaseKey if it is free, in one script: it
// increments generationKey and sets leaseKey to owner:generation with a PX
// TTL. A held lease (by anyone, owner included) is not an error: it
// returns acquired=false. Because the counter is only ever incremented,
// the new generation is greater than every earlier one, across expiry,
// release and reap.
func (b *Broker) AcquirePartitionLease(ctx context.Context, leaseKey, generationKey, owner string, ttl time.Duration) (broker.Lease, bool, error) {
	const op = "acquire lease"
	ms, err := acquireArgs(op, leaseKey, generationKey, owner, ttl)
	if err != nil {
		return broker.Lease{}, false, err
	}
	keys := []string{leaseKey, generationKey}
	g, err := acquireScript.Run(ctx, b.client, keys, owner, ms).Int64()
	if err != nil {
		return broker.Lease{}, false, mapErr(call{op: op, keys: keys}, err)
	}
	return newLease(leaseKey, owner, g)
}

// acquireArgs validates AcquirePartitionLease's arguments and returns the
// TTL in milliseconds.
func acquireArgs(op, leaseKey, generationKey, owner string, ttl time.Duration) (int64, error) {
	if err := nonEmpty(op, "lease key", leaseKey); err != nil {
		return 0, err
	}
	if err := nonEmpty(op, "generation key", generationKey); err != nil {
		return 0, err
	}
	if err := nonEmpty(op, "owner", owner); err != nil {
		return 0, err
	}
	return ttlMillis(op, ttl)
}

// newLease is the result of acquire.lua's reply g: the new generation,
// or 0 when the lease is held.
func newLease(leaseKey, owner string, g int64) (broker.Lease, bool, error) {
	if g == 0 {
		return broker.Lease{}, false, nil
	}
	return broker.Lease{
		Fence:      broker.Fence{LeaseKey: leaseKey, Token: broker.FenceToken(owner, g)},
		Owner:      owner,
		Generation: g,
	}, true, nil
}

// RenewPartitionLease resets the lease's TTL if it holds exactly f.Token
// (compare and PEXPIRE in one script). false means the caller has lost
// the partition and must stop.
func (b *Broker) RenewPartitionLease(ctx context.Context, f broker.Fence, ttl time.Duration) (bool, error) {
	const op = "renew lease"
	if err := validFence(op, f); err != nil {
		return false, err
	}
	ms, err := ttlMillis(op, ttl)
	if err != nil {
		return false, err
	}
	keys := []string{f.LeaseKey}
	n, err := renewScript.Run(ctx, b.client, keys, f.Token, ms).Int64()
	if err != nil {
		return false, mapErr(call{op: op, keys: keys}, err)
	}
	return n == 1, nil
}

// ReleasePartitionLease deletes the lease if it holds exactly f.Token
// (compare and DEL in one script), so that another owner can take the
// partition at once instead of after the TTL. The generation stays.
func (b *Broker) ReleasePartitionLease(ctx context.Context, f broker.Fence) (bool, error) {
	const op = "release lease"
	if err := validFence(op, f); err != nil {
		return false, err
	}
	keys := []string{f.LeaseKey}
	n, err := releaseScript.Run(ctx, b.client, keys, f.Token).Int64()
	if err != nil {
		return false, mapErr(call{op: op, keys: keys}, err)
	}
	return n == 1, nil
}
