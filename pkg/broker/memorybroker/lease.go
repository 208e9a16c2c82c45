package memorybroker

import (
	"context"
	"math"
	"strconv"
	"time"

	"github.com/protctl/protctl/pkg/broker"
)

// AcquirePartitionLease, in one atomic step, returns acquired=false when
// leaseKey holds an unexpired value (whoever holds it); otherwise it
// increments generationKey (INCR) and sets leaseKey to
// broker.FenceToken(owner, generation) with ttl.
func (b *Broker) AcquirePartitionLease(ctx context.Context, leaseKey, generationKey, owner string, ttl time.Duration) (broker.Lease, bool, error) {
	const op = "acquire lease"
	if err := b.begin(ctx, "AcquirePartitionLease"); err != nil {
		return broker.Lease{}, false, err
	}
	if err := firstErr(
		nonEmpty(op, "lease key", leaseKey),
		nonEmpty(op, "generation key", generationKey),
		nonEmpty(op, "owner", owner),
	); err != nil {
		return broker.Lease{}, false, err
	}
	ttl, err := ttlOf(op, ttl)
	if err != nil {
		return broker.Lease{}, false, err
	}

	now := b.lock()
	defer b.mu.Unlock()
	return b.acquireLocked(op, leaseKey, generationKey, owner, ttl, now)
}

// acquireLocked is AcquirePartitionLease's step, with the lock held.
func (b *Broker) acquireLocked(op, leaseKey, generationKey, owner string, ttl time.Duration, now time.Time) (broker.Lease, bool, error) {
	lease, err := b.stringAt(op, leaseKey, now)
	if err != nil {
		return broker.Lease{}, false, err
	}
	genObj, err := b.stringAt(op, generationKey, now)
	if err != nil {
		return broker.Lease{}, false, err
	}
	var gen int64
	if genObj != nil {
		// INCR would refuse a value that is not an integer (or would
		// overflow); say which key is wrong, held lease or not, as the
		// Redis adapter does.
		gen, err = strconv.ParseInt(genObj.str, 10, 64)
		if err != nil || gen == math.MaxInt64 {
			return broker.Lease{}, false, &broker.WrongTypeError{Op: op, Key: generationKey, Want: "integer", Got: "string"}
		}
	}
	if lease != nil {
		return broker.Lease{}, false, nil
	}
	gen++
	if genObj != nil {
		genObj.str = strconv.FormatInt(gen, 10)
	} else {
		b.keys[generationKey] = &object{kind: kindString, str: strconv.FormatInt(gen, 10)}
	}
	token := broker.FenceToken(owner, gen)
	b.keys[leaseKey] = &object{kind: kindString, str: token, expireAt: now.Add(ttl)}
	return broker.Lease{
		Fence:      broker.Fence{LeaseKey: leaseKey, Token: token},
		Owner:      owner,
		Generation: gen,
	}, true, nil
}

// RenewPartitionLease resets the lease's TTL to ttl if it holds exactly
// f.Token, and returns false otherwise.
func (b *Broker) RenewPartitionLease(ctx context.Context, f broker.Fence, ttl time.Duration) (bool, error) {
	const op = "renew lease"
	if err := b.begin(ctx, "RenewPartitionLease"); err != nil {
		return false, err
	}
	if err := validFence(op, f); err != nil {
		return false, err
	}
	ttl, err := ttlOf(op, ttl)
	if err != nil {
		return false, err
	}
	now := b.lock()
	defer b.mu.Unlock()
	lease, err := b.stringAt(op, f.LeaseKey, now)
	if err != nil || lease == nil || lease.str != f.Token {
		return false, err
	}
	lease.expireAt = now.Add(ttl)
	return true, nil
}

// ReleasePartitionLease deletes the lease if it holds exactly f.Token, and
// returns false otherwise. The generation key stays.
func (b *Broker) ReleasePartitionLease(ctx context.Context, f broker.Fence) (bool, error) {
	const op = "release lease"
	if err := b.begin(ctx, "ReleasePartitionLease"); err != nil {
		return false, err
	}
	if err := validFence(op, f); err != nil {
		return false, err
	}
	now := b.lock()
	defer b.mu.Unlock()
	lease, err := b.stringAt(op, f.LeaseKey, now)
	if err != nil || lease == nil || lease.str != f.Token {
		return false, err
	}
	delete(b.keys, f.LeaseKey)
	return true, nil
}

// ReleasePartitionLeaseConsumer is ReleasePartitionLease that first
// deletes every consumer of group without pending entries on each of
// streams (broker.ConsumerReleaser), in the same step and only when the
// lease holds f.Token. Every stream is type-checked before anything
// changes.
func (b *Broker) ReleasePartitionLeaseConsumer(ctx context.Context, f broker.Fence, group string, streams ...string) (bool, error) {
	const op = "release lease"
	if err := b.begin(ctx, "ReleasePartitionLeaseConsumer"); err != nil {
		return false, err
	}
	if err := firstErr(validFence(op, f), b.validGroup(op, group)); err != nil {
		return false, err
	}
	for _, s := range streams {
		if err := nonEmpty(op, "stream", s); err != nil {
			return false, err
		}
	}
	now := b.lock()
	defer b.mu.Unlock()
	lease, err := b.stringAt(op, f.LeaseKey, now)
	if err != nil {
		return false, err
	}
	found := make([]*stream, 0, len(streams))
	for _, key := range streams {
		s, err := b.streamAt(op, key, now)
		if err != nil {
			return false, err
		}
		found = append(found, s)
	}
	if lease == nil || lease.str != f.Token {
		return false, nil
	}
	for _, s := range found {
		if s != nil && s.groups[group] != nil {
			s.groups[group].prune("")
		}
	}
	delete(b.keys, f.LeaseKey)
	return true, nil
}

// checkFence is the fencing rule, run with mu held in the same step as the
// operation it guards: the lease key must hold exactly f.Token. Callers
// look up (and type-check) their other keys first, as the Redis scripts
// do, so a wrong type is reported whatever the lease holds.
func (b *Broker) checkFence(op, stream string, f broker.Fence, now time.Time) error {
	lease, err := b.stringAt(op, f.LeaseKey, now)
	if err != nil {
		return err
	}
	if lease == nil || lease.str != f.Token {
		return &broker.LeaseLostError{Op: op, Stream: stream, LeaseKey: f.LeaseKey, Token: f.Token}
	}
	return nil
}
