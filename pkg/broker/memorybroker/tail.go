package memorybroker

import (
	"context"
	"time"

	"github.com/protctl/protctl/pkg/broker"
)

// LastEntryIDs returns, for each stream, the id of its newest entry, or
// "0-0" for a missing or empty stream (XREVRANGE + - COUNT 1 on Redis). It
// is what a caller of WaitForEntries waits from when it knows nothing
// about a stream yet (pkg/runtime's StreamTailer). It reads nothing on
// behalf of any group; a key of another type is refused with a
// *broker.WrongTypeError. It works on inline brokers too.
func (b *Broker) LastEntryIDs(ctx context.Context, streams []string) (map[string]string, error) {
	const op = "last entry ids"
	if err := ctxErr(ctx, op); err != nil {
		return nil, err
	}
	for _, s := range streams {
		if err := nonEmpty(op, "stream", s); err != nil {
			return nil, err
		}
	}
	now := b.lock()
	defer b.mu.Unlock()
	out := make(map[string]string, len(streams))
	for _, key := range streams {
		s, err := b.streamAt(op, key, now)
		if err != nil {
			return nil, err
		}
		id := broker.StreamID{}
		if s != nil {
			if newest, ok := s.newest(); ok {
				id = newest
			}
		}
		out[key] = id.String()
	}
	return out, nil
}

// RenewPartitionLeases renews each lease as RenewPartitionLease does and
// reports, per fence, whether it still held its lease (pkg/runtime's
// BatchRenewer: one call per renewal round). Each renewal is its own
// atomic step; an invalid fence fails the call before any is renewed.
func (b *Broker) RenewPartitionLeases(ctx context.Context, fences []broker.Fence, ttl time.Duration) ([]bool, error) {
	const op = "renew leases"
	if err := b.begin(ctx, "RenewPartitionLeases"); err != nil {
		return nil, err
	}
	for _, f := range fences {
		if err := validFence(op, f); err != nil {
			return nil, err
		}
	}
	if _, err := ttlOf(op, ttl); err != nil {
		return nil, err
	}
	oks := make([]bool, len(fences))
	for i, f := range fences {
		ok, err := b.RenewPartitionLease(ctx, f, ttl)
		if err != nil {
			return nil, err
		}
		oks[i] = ok
	}
	return oks, nil
}
