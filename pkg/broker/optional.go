package broker

import (
	"context"
	"time"
)

// Optional capabilities of a PartitionedBroker that only the runtime's
// partitioned engine uses (the others, EntryWaiter, PartitionWatcher,
// AckReader, ConsumerReleaser, BatchReader, BatchAcquirer and BatchReleaser, are in
// broker.go and batch.go). The runtime finds each by type assertion and
// logs once at start which it lacks and what that costs; each adapter
// asserts at compile time the ones it implements.

// StreamTailer is an optional broker capability (found by type
// assertion) the partitioned subscription needs, with EntryWaiter,
// to wait on idle partitions instead of polling them: the id a wait
// starts from must be a stream's newest entry when nothing about the
// stream was read yet.
type StreamTailer interface {
	// LastEntryIDs returns the id of the newest entry of each stream, "0-0"
	// for a missing or empty stream, in one round trip. It reads nothing
	// on behalf of any group.
	LastEntryIDs(ctx context.Context, streams []string) (map[string]string, error)
}

// EntryChecker is an optional broker capability (found by type
// assertion): a non-blocking EntryWaiter. While a category's appends are
// announced (AppendWatcher), the subscription wakes idle partitions from
// the announcements and checks its watched streams with EntriesAfter
// only as a safety net, instead of keeping a blocking wait issued over
// them, which a flow makes return, and costs a re-issue over every
// watched stream, at every entry
// (docs/decisions/0049-announced-wake-ups.md).
type EntryChecker interface {
	// EntriesAfter returns the streams of after that have an entry with
	// an id greater than the id after maps it to (a missing stream counts
	// as empty), at once, without waiting. It reads nothing on behalf of
	// any group.
	EntriesAfter(ctx context.Context, after map[string]string) ([]string, error)
}

// BatchRenewer is an optional broker capability (found by type assertion):
// it renews many leases in one round trip, so that a node renews all its
// leases with one call per renewal period. Without it the renewer calls
// RenewPartitionLease once per lease.
type BatchRenewer interface {
	// RenewPartitionLeases renews each lease as RenewPartitionLease does;
	// ok[i] says whether fences[i] still held its lease. An error means
	// nothing is known about any of them.
	RenewPartitionLeases(ctx context.Context, fences []Fence, ttl time.Duration) (ok []bool, err error)
}

// PartitionCounter is an optional broker capability (found by type
// assertion): the number of keys in a category's index, in one cheap call
// whatever the index's size (the Redis adapter's SCARD). The subscription
// polls it every DiscoverPollEvery and scans the index as soon as the
// count changes, so that keys written by any publisher (Protean's, with a
// plain SADD and XADD) are found in about a poll rather than at the next
// DiscoverEvery scan (docs/decisions/0031-new-key-discovery.md).
type PartitionCounter interface {
	CountPartitionKeys(ctx context.Context, category string) (int64, error)
}

// AppendWatcher is an optional broker capability: the names of the
// streams of a category anybody appends to, as the server announces them
// (the Redis adapter's client tracking of the category's prefix, or
// keyspace events where tracking is refused and the server publishes
// them), and a check of candidate keys against the index. WatchAppends fails
// when the server announces nothing; the subscription then relies on the
// index poll and asks again every DiscoverEvery. The channel closes when
// ctx ends or a name may have been missed (a lost connection, a caller
// that fell behind); names are hints.
type AppendWatcher interface {
	WatchAppends(ctx context.Context, category string) (<-chan string, error)
	PartitionKeysIndexed(ctx context.Context, category string, keys []string) ([]bool, error)
}

// ReaderPinner is an optional broker capability (found by type
// assertion, together with AckReader): a reader for one goroutine
// at a time that keeps one connection between its calls, so that each
// fenced read can carry the next one's lease check (the Redis adapter's
// PinnedReader). The reader's AckAndReadPartitionFenced, and
// AcquirePartitionLease and LastEntryIDs when it has them, keep the
// broker's contract; close gives the connection back and must not block
// past ctx, and the reader may be used again after it (it takes a
// connection again).
//
// The subscription keeps one pinned reader per worker slot (at most
// Workers): a worker uses its slot's reader for the lease acquisition,
// the tails and every read, and the next worker to take the slot (any
// partition) inherits it, connection included. They are closed when the
// subscription stops.
type ReaderPinner interface {
	PinnedReader() (reader AckReader, close func(ctx context.Context) error)
}

// PartitionSeeker is an optional capability of Config.Broker
// (found by type assertion; redisBroker has it): operators' seek
// requests (`protctl partitions seek` on a partition a node owns), which
// the owner carries out between two batches under its own fence, so that
// the node keeps running and never handles a key twice at once
// (docs/decisions/0043-partition-seek.md).
type PartitionSeeker interface {
	// SeekRequests lists group's partition keys with an open seek
	// request, or moved by a seek while free (whose idle watcher must
	// read again): only those, so that no partition is activated forever
	// for a request that is done. It is re-read every RenewEvery: signals
	// are hints, and this is what makes a lost one cost one period.
	SeekRequests(ctx context.Context, group string) ([]string, error)
	// WatchSeekRequests sends the key of every request signalled after it
	// returns, until ctx ends or a signal may have been lost (the
	// subscription broke, the reader fell behind); then it closes the
	// channel, and the caller watches again and re-reads SeekRequests.
	WatchSeekRequests(ctx context.Context, group string) (<-chan string, error)
	// ApplyPartitionSeek carries out the request waiting for group on
	// key, if any, in one step fenced by f (generation gen) over the
	// lanes streams: moved reports that the group's positions changed.
	// ErrLeaseLost when f no longer holds.
	ApplyPartitionSeek(ctx context.Context, f Fence, gen int64, group, key string, streams []string) (moved bool, err error)
}
