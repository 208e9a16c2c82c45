package memorybroker

import (
	"context"
	"time"

	"github.com/protctl/protctl/pkg/broker"
)

// AckAndReadPartitionsFenced runs each read as AckAndReadPartitionFenced
// does, each an atomic step of its own (broker.BatchReader). A read with
// invalid arguments fails alone.
func (b *Broker) AckAndReadPartitionsFenced(ctx context.Context, reads []broker.FencedRead) []broker.ReadResult {
	const op = "ack and read"
	out := make([]broker.ReadResult, len(reads))
	if err := b.begin(ctx, "AckAndReadPartitionsFenced"); err != nil {
		for i := range out {
			out[i].Err = err
		}
		return out
	}
	for i, r := range reads {
		parsed, err := b.checkAckRead(op, r.Fence, r.Stream, r.Group, r.Ack, r.Count, r.Mode)
		if err != nil {
			out[i].Err = err
			continue
		}
		now := b.lock()
		out[i].Messages, out[i].Err = b.ackReadLocked(op, r.Fence, r.Stream, r.Group, parsed, r.Count, r.Mode, now)
		b.mu.Unlock()
	}
	return out
}

// AcquirePartitionLeases runs each request as AcquirePartitionLease,
// LastEntryIDs of its Tails and, at the generation asked for, a
// ReadPartitionFenced (ReadNew) of each of its Read lanes that has an
// entry, in one atomic step per request (broker.BatchAcquirer). Every key
// is type checked before the lease is taken. A request with invalid
// arguments fails alone.
func (b *Broker) AcquirePartitionLeases(ctx context.Context, reqs []broker.LeaseRequest) []broker.LeaseGrant {
	const op = "acquire lease"
	out := make([]broker.LeaseGrant, len(reqs))
	if err := b.begin(ctx, "AcquirePartitionLeases"); err != nil {
		for i := range out {
			out[i].Err = err
		}
		return out
	}
	for i := range reqs {
		out[i] = b.acquireOne(op, &reqs[i])
	}
	return out
}

// AcquireChecksIndex says that AcquirePartitionLeases honours a
// LeaseRequest's Index (broker.IndexCheckingAcquirer): everything here is
// one atomic step.
func (b *Broker) AcquireChecksIndex(string) bool { return true }

func (b *Broker) acquireOne(op string, r *broker.LeaseRequest) broker.LeaseGrant {
	read := r.ReadAtGeneration > 0 && len(r.Read) > 0
	checks := []error{
		nonEmpty(op, "lease key", r.LeaseKey),
		nonEmpty(op, "generation key", r.GenerationKey),
		nonEmpty(op, "owner", r.Owner),
	}
	if r.ReadAtGeneration < 0 {
		checks = append(checks, invalid(op, "read at generation", "negative", "must not be negative"))
	}
	for _, s := range r.Tails {
		checks = append(checks, nonEmpty(op, "stream", s))
	}
	if read {
		for _, s := range r.Read {
			checks = append(checks, nonEmpty(op, "stream", s))
		}
		checks = append(checks, b.validGroup(op, r.Group), positive(op, "count", r.Count))
	}
	switch {
	case r.Index != "":
		checks = append(checks, nonEmpty(op, "member", r.Member))
	case r.Member != "":
		checks = append(checks, invalid(op, "member", r.Member, "is set without an index"))
	}
	if err := firstErr(checks...); err != nil {
		return broker.LeaseGrant{Err: err}
	}
	ttl, err := ttlOf(op, r.TTL)
	if err != nil {
		return broker.LeaseGrant{Err: err}
	}

	now := b.lock()
	defer b.mu.Unlock()
	if r.Index != "" {
		idx, err := b.setAt(op, r.Index, now)
		if err != nil {
			return broker.LeaseGrant{Err: err}
		}
		if idx == nil || !idx.has(r.Member) {
			return broker.LeaseGrant{NotIndexed: true}
		}
	}
	for _, s := range append(append([]string(nil), r.Tails...), r.Read...) {
		if _, err := b.streamAt(op, s, now); err != nil {
			return broker.LeaseGrant{Err: err}
		}
	}
	lease, ok, err := b.acquireLocked(op, r.LeaseKey, r.GenerationKey, r.Owner, ttl, now)
	if err != nil || !ok {
		return broker.LeaseGrant{Err: err}
	}
	g := broker.LeaseGrant{Lease: lease, Acquired: true, Tails: make(map[string]string, len(r.Tails))}
	for _, s := range r.Tails {
		g.Tails[s] = b.tailLocked(s, now).String()
	}
	if !read || lease.Generation != r.ReadAtGeneration {
		return g
	}
	g.Read = make([]broker.ReadResult, len(r.Read))
	for i, s := range r.Read {
		if b.tailLocked(s, now) == (broker.StreamID{}) {
			continue // no entry: not read, its group not created
		}
		g.Read[i].Messages, g.Read[i].Err = b.ackReadLocked(op, lease.Fence, s, r.Group, nil, r.Count, broker.ReadNew, now)
	}
	return g
}

// tailLocked is the newest id of stream key (zero for a missing or empty
// stream, or a key of another type), with the lock held.
func (b *Broker) tailLocked(key string, now time.Time) broker.StreamID {
	s, err := b.streamAt("last entry ids", key, now)
	if err != nil || s == nil {
		return broker.StreamID{}
	}
	id, _ := s.newest()
	return id
}

// ReleasePartitionLeasesConsumers runs each release as
// ReleasePartitionLeaseConsumer does, each an atomic step of its own
// (broker.BatchReleaser).
func (b *Broker) ReleasePartitionLeasesConsumers(ctx context.Context, rels []broker.LeaseRelease) []broker.ReleaseResult {
	out := make([]broker.ReleaseResult, len(rels))
	for i, r := range rels {
		out[i].Released, out[i].Err = b.ReleasePartitionLeaseConsumer(ctx, r.Fence, r.Group, r.Streams...)
	}
	return out
}
