package broker

import (
	"context"
	"time"
)

// FencedRead is one read of a BatchReader batch: the arguments of
// AckReader.AckAndReadPartitionFenced.
type FencedRead struct {
	Fence  Fence
	Stream string
	Group  string
	Ack    []string
	Count  int64
	Mode   ReadMode
}

// ReadResult is the outcome of one FencedRead (or of one lane read with a
// LeaseRequest): what AckAndReadPartitionFenced would have returned.
type ReadResult struct {
	Messages []Message
	Err      error
}

// BatchReader is an optional capability (found by type assertion): the
// fenced ack-and-reads of many partitions in one round trip. Each read is
// an atomic step of its own, under its own lease check, exactly as
// AckAndReadPartitionFenced: a stale fence changes nothing of its read and
// nothing of the others'. It is how a node that many partitions woke at
// once reads them all for the price of one round trip.
type BatchReader interface {
	// AckAndReadPartitionsFenced runs each read as
	// AckAndReadPartitionFenced would and returns their outcomes in the
	// same order. A transport failure fails every read whose reply was
	// not read.
	AckAndReadPartitionsFenced(ctx context.Context, reads []FencedRead) []ReadResult
}

// WaitReader is an optional capability (found by type assertion): a
// held partition's wait for its next entry and the fenced read of that
// entry in one round trip. A node that waits for news and then reads
// pays two round trips between an append and its handler; a plain
// XREADGROUP BLOCK consumer pays one. The wait itself is not fenced (a
// blocking command cannot check a lease atomically with what it returns):
// it only ends the wait, and the reads behind it are each an atomic step
// under their own lease check, as BatchReader's, run by the server as
// soon as the wait ends. docs/decisions/0054-blocking-reads.md.
type WaitReader interface {
	// WaitAndReadPartitionsFenced acknowledges each read's Ack, fenced
	// by the read's lease (as AckPartitionFenced), waits up to block (1ms
	// at least) for an entry with an id greater than the one after maps
	// its stream to, as EntryWaiter's WaitForEntries does, and then runs
	// the reads as AckAndReadPartitionsFenced would with no ack, whatever
	// the wait found: an entry, nothing, or an error of its own. The acks
	// come before the wait so that what the caller handled is not left
	// pending while it waits. A read's Err is its ack's failure or its
	// own; Messages is what it delivered all the same (a read may run
	// after its ack failed for a reason other than the lease).
	//
	// Closing stop, or ctx ending, ends the wait early; the reads still
	// run, and the call returns only once their replies are read, so that
	// the caller knows what they delivered. Once stop is closed or ctx has
	// ended before the call, nothing is sent.
	//
	// ok is false when nothing was sent because the call cannot run now:
	// stop was closed or ctx had ended already, or no connection may be
	// held for the wait (the broker bounds how many it keeps out of its
	// pool), or the broker cannot wait this way (a Redis Cluster). The
	// caller then waits as it would without this capability. Invalid
	// arguments are not that: the call fails (ok, WaitErr and every read's
	// Err wrapping ErrInvalidArgument) and sends nothing; an invalid read
	// fails alone.
	WaitAndReadPartitionsFenced(ctx context.Context, stop <-chan struct{}, after map[string]string, block time.Duration, reads []FencedRead) (res WaitedReads, ok bool)
}

// WaitedReads is what a WaitReader call found and read.
type WaitedReads struct {
	// Ready is the streams of the wait that had an entry past their id
	// when it ended, in lexical order; nil when it timed out or was
	// stopped. It may name fewer streams than had entries then.
	Ready []string
	// WaitErr is the wait's own failure, if any (the reads ran all the
	// same unless they failed too).
	WaitErr error
	// Reads is each read's outcome, in the order of the call's reads.
	Reads []ReadResult
}

// LeaseRequest is one acquisition of a BatchAcquirer batch:
// AcquirePartitionLease's arguments, the lanes whose newest ids to take
// with the lease and, optionally, a first read under the new lease.
type LeaseRequest struct {
	LeaseKey      string
	GenerationKey string
	Owner         string
	TTL           time.Duration
	// Tails are streams whose newest entry ids are taken right after the
	// lease, in the same atomic step ("0-0" for a missing or empty
	// stream, as LastEntryIDs): every read under the lease comes after.
	Tails []string
	// ReadAtGeneration, when not 0, asks for a first read of Read's
	// streams for Group (never-delivered entries, up to Count each, as
	// ReadPartitionFenced in ReadNew mode) in the same atomic step, but
	// only when the generation granted is exactly ReadAtGeneration: the
	// one at which the caller knows that nobody else held the lease since
	// it last released it with nothing pending, so that nothing older
	// than the new entries can be pending.
	ReadAtGeneration int64
	Group            string
	Read             []string
	Count            int64
	// Index, when not empty, makes the acquisition conditional on Member
	// being in the set Index (a category's partition index, as
	// Layout.IndexKey): when it is not, nothing is written (no lease, no
	// generation, no group) and the grant says NotIndexed. It lets a node
	// take on a key an append announced without checking the index in a
	// round trip of its own first (IndexCheckingAcquirer says where it
	// may be set).
	Index, Member string
}

// LeaseGrant is the outcome of one LeaseRequest.
type LeaseGrant struct {
	Lease    Lease
	Acquired bool // false (and no Err): the lease is held by someone
	// Tails maps each of Tails to its newest id; nil when the lease was
	// not acquired.
	Tails map[string]string
	// Read holds the first read of each of Read's streams, in order, when
	// it was done (the generation granted was ReadAtGeneration); nil
	// otherwise.
	Read []ReadResult
	// NotIndexed: the request's Member was not in its Index, and nothing
	// was written (Acquired is false).
	NotIndexed bool
	Err        error
}

// BatchAcquirer is an optional capability (found by type assertion): many
// partitions' lease acquisitions in one round trip, each an atomic step
// of its own (the acquisition, its tails and its first read together), as
// AcquirePartitionLease followed by LastEntryIDs and ReadPartitionFenced
// under the new lease.
type BatchAcquirer interface {
	// AcquirePartitionLeases runs each request and returns their
	// outcomes in the same order. An acquisition whose reply was not read
	// (a transport failure) reports the error; whether it took the lease
	// is unknown, and a lease it took expires with its TTL.
	AcquirePartitionLeases(ctx context.Context, reqs []LeaseRequest) []LeaseGrant
}

// IndexCheckingAcquirer is an optional capability of a BatchAcquirer:
// whether a LeaseRequest's Index is honoured for category's partitions.
// It is not where the index and a partition's lease cannot be read and
// written in one atomic step (a Redis Cluster, where they live in
// different slots); a request that sets Index there fails.
type IndexCheckingAcquirer interface {
	AcquireChecksIndex(category string) bool
}

// LeaseRelease is one release of a BatchReleaser batch: the arguments of
// ConsumerReleaser.ReleasePartitionLeaseConsumer.
type LeaseRelease struct {
	Fence   Fence
	Group   string
	Streams []string
}

// ReleaseResult is the outcome of one LeaseRelease: what
// ReleasePartitionLeaseConsumer would have returned.
type ReleaseResult struct {
	Released bool // false (and no Err): the lease was not the fence's
	Err      error
}

// BatchReleaser is an optional capability (found by type assertion): many
// partitions' lease releases in one round trip, each an atomic step of
// its own under its own lease check, exactly as
// ConsumerReleaser.ReleasePartitionLeaseConsumer: a stale fence changes
// nothing of its release and nothing of the others'. It is how a node
// whose partitions go idle together (a burst handled, IdleAfter reached
// by all at once) gives their leases back without a round trip each.
type BatchReleaser interface {
	// ReleasePartitionLeasesConsumers runs each release and returns their
	// outcomes in the same order. A release whose reply was not read (a
	// transport failure) reports the error; whether it ran is unknown,
	// and a lease it did not release expires with its TTL.
	ReleasePartitionLeasesConsumers(ctx context.Context, rels []LeaseRelease) []ReleaseResult
}
