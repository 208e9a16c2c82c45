package broker

import (
	"context"
	"time"
)

// Broker is what every adapter implements: it says what it can do.
type Broker interface {
	// Capabilities is constant for the broker's lifetime.
	Capabilities() Capabilities
}

// Appender writes to a plain stream. Without StreamPartitioning the
// publisher writes every message of a category to the category's own
// stream through it (sequential_by is a deliberate no-op there).
type Appender interface {
	// Append adds data as the entry's data field and returns the entry id.
	Append(ctx context.Context, stream string, data []byte) (string, error)
}

// Fence is the proof of ownership every fenced call carries: the lease key
// and the token the caller believes it holds. The call succeeds only if the
// lease key holds exactly Token at the moment the call runs, checked in
// the same atomic step as the read or write.
type Fence struct {
	LeaseKey string
	Token    string // FenceToken(owner, generation)
}

// Lease is a granted partition lease.
type Lease struct {
	Fence
	Owner      string
	Generation int64 // strictly greater than every earlier generation of the key
}

// ReadMode selects which entries ReadPartitionFenced returns.
type ReadMode int

const (
	// ReadPendingThenNew returns this consumer's pending entries (delivered,
	// not acked, oldest first) and, when there are none, never-delivered
	// entries. It is the mode a partition owner loops on.
	ReadPendingThenNew ReadMode = iota
	// ReadPending returns only this consumer's pending entries.
	ReadPending
	// ReadNew returns only never-delivered entries (XREADGROUP ">").
	ReadNew
)

// ReclaimResult reports what ReclaimPartitionPending moved.
type ReclaimResult struct {
	// Claimed counts the pending entries moved to the caller's consumer;
	// read them with ReadPending.
	Claimed int64
	// Missing lists pending entries whose bodies had been deleted. The
	// server dropped them from the pending list while claiming; they are
	// reported here so that the caller records them (never a silent skip).
	Missing []string
	// Pruned counts the consumers of the group (earlier generations, or
	// names another tool read with) deleted once the pending list was
	// exhausted because they held no pending entries. The caller's own
	// consumer is never among them.
	Pruned int64
}

// ReapResult reports a reap's verdict. When Reaped is false, Stream, Group
// and Reason say what kept the partition (the first blocker found).
type ReapResult struct {
	Reaped bool
	Stream string // the lane that blocked, if any
	Group  string // the group that blocked, if any
	Reason string // e.g. "group g has 3 pending entries"
}

// SeenLease is one group's lease on a partition as a caller saw it, for
// LeaseReaper: Token is the value of Layout.LeaseKey(Group, key), "" when
// the lease was free (no key).
type SeenLease struct {
	Group string
	Token string
}

// LeaseReaper is an optional capability of a Maintainer, found by type
// assertion (both adapters of this module implement it).
//
// ReapPartitionLeases is ReapPartition that also requires, in the same
// atomic step as the lane checks, each of leases to hold exactly the value
// the caller saw (no lease key where Token is ""), and that deletes those
// lease keys with the lanes, so no lease of a reaped partition is left
// behind; the generation counters stay, as with ReapPartition. A lease
// that moved keeps the partition: Reaped is false, Group names the group
// and Reason says what the lease holds now. A lease key of another type
// than string fails with a *WrongTypeError. It is how an operator reaps a
// partition whose lease a live owner holds (with --force): compare and
// delete on the lease value the plan showed, never on whatever is there.
type LeaseReaper interface {
	ReapPartitionLeases(ctx context.Context, category, key string, minIdle time.Duration, backfillSuffix string, leases []SeenLease) (ReapResult, error)
}

// PartitionIndex is the discovery half of the contract.
type PartitionIndex interface {
	// RecordPartition adds key to category's index. It is idempotent and
	// one round trip. Publishers call it on every publish (no client-side
	// cache: a reaped key must come back on its next publish).
	RecordPartition(ctx context.Context, category, key string) error

	// PartitionKeys returns category's live keys, read from the index and
	// never from a keyspace scan; an unknown category has no keys (nil, nil).
	// Order is unspecified.
	PartitionKeys(ctx context.Context, category string) ([]string, error)

	// ScanPartitionKeys pages through the index: start with cursor 0, stop
	// when the returned cursor is 0. A key may be returned more than once
	// (as with SSCAN); count, a hint of the page size, must be positive.
	ScanPartitionKeys(ctx context.Context, category string, cursor uint64, count int64) (keys []string, next uint64, err error)

	// RegisterGroup records that group reads category, so that a reap keeps
	// partitions the group has not read yet, even before the group has
	// created itself on their streams. Idempotent.
	RegisterGroup(ctx context.Context, category, group string) error

	// RegisteredGroups returns category's registered groups.
	RegisteredGroups(ctx context.Context, category string) ([]string, error)
}

// LeaseManager grants fenced partition leases.
//
// A lease key holds FenceToken(owner, generation) with a TTL; the
// generation key holds the counter, which only grows and is never deleted.
type LeaseManager interface {
	// AcquirePartitionLease atomically, if leaseKey is free, increments
	// generationKey and sets leaseKey to owner:generation with ttl. It
	// returns acquired=false (and no error) when the lease is held, by
	// anyone, including owner itself.
	AcquirePartitionLease(ctx context.Context, leaseKey, generationKey, owner string, ttl time.Duration) (lease Lease, acquired bool, err error)

	// RenewPartitionLease resets the TTL if the lease holds exactly
	// f.Token; it returns false when it does not (expired, released or
	// superseded): the caller has lost the partition.
	RenewPartitionLease(ctx context.Context, f Fence, ttl time.Duration) (bool, error)

	// ReleasePartitionLease deletes the lease if it holds exactly f.Token;
	// it returns false when it did not. The generation counter stays.
	ReleasePartitionLease(ctx context.Context, f Fence) (bool, error)
}

// FencedConsumer reads and acknowledges partition streams under a lease.
// The consumer name in the group is always the fence token, so each
// generation has its own pending list. Every method returns a
// *LeaseLostError (errors.Is ErrLeaseLost) and changes nothing when the
// lease does not hold f.Token.
type FencedConsumer interface {
	// ReadPartitionFenced reads up to count entries of stream for group.
	// It creates the group (from id 0, creating the stream) when missing
	// and recovers once from a group deleted under it. Pending entries
	// whose bodies were deleted come back with Missing set.
	ReadPartitionFenced(ctx context.Context, f Fence, stream, group string, count int64, mode ReadMode) ([]Message, error)

	// AckPartitionFenced acknowledges ids in one step and returns how
	// many were pending.
	AckPartitionFenced(ctx context.Context, f Fence, stream, group string, ids ...string) (int64, error)

	// ReclaimPartitionPending moves every pending entry of group idle for
	// at least minIdle (from any consumer: earlier generations) to the
	// consumer f.Token, in batches of count, until the pending list is
	// exhausted. Each batch is fenced. Then, in the last fenced batch, it
	// deletes every other consumer of group on stream that holds no
	// pending entries (ReclaimResult.Pruned), so that consumers of earlier
	// generations do not accumulate; one still holding entries (younger
	// than minIdle) is kept.
	ReclaimPartitionPending(ctx context.Context, f Fence, stream, group string, minIdle time.Duration, count int64) (ReclaimResult, error)

	// DeadLetterPartitionFenced copies entry id of stream to dlqStream
	// (with the group, the original stream and id, the consumer it was
	// pending to, its delivery count, the time and reason, in Protean's
	// dead-letter format: DeadLetterEntry, ParseDeadLetter) and acks it,
	// in one atomic step. It returns the dead-letter entry's id. A missing
	// body is dead-lettered as such. It is how a parked head is skipped.
	DeadLetterPartitionFenced(ctx context.Context, f Fence, stream, group, id, dlqStream, reason string) (string, error)
}

// Maintainer removes what nobody needs any more. Both methods are
// conservative: when in doubt they keep data.
type Maintainer interface {
	// ReapPartition atomically removes key from category's index and
	// deletes its main and backfill lanes, only when, on every lane, every
	// consumer group and every registered group has been delivered up to
	// the last entry and has nothing pending, a non-empty lane has at least
	// one group, and the newest entry is at least minIdle old by the
	// server's clock. The generation counters stay. An empty
	// backfillSuffix means DefaultBackfillSuffix.
	ReapPartition(ctx context.Context, category, key string, minIdle time.Duration, backfillSuffix string) (ReapResult, error)

	// Trim removes the oldest entries of stream beyond the newest maxLen,
	// but never an entry some group still needs: nothing at or after the
	// safe floor, the smallest over groups of the last-delivered id and the
	// oldest pending id. It computes and applies in one atomic step and
	// returns how many entries it removed (0 for a missing stream). A
	// non-positive maxLen is refused.
	Trim(ctx context.Context, stream string, maxLen int64) (int64, error)
}

// PartitionPublisher appends to a partition and records it in the index
// as one atomic step where the layout allows (see Layout).
type PartitionPublisher interface {
	// PublishPartitioned validates key, appends data to the partition's
	// lane (lane "" is the main lane, otherwise a lane suffix such as
	// DefaultBackfillSuffix) and records key in category's index. It
	// returns the entry id.
	PublishPartitioned(ctx context.Context, category, key, lane string, data []byte) (string, error)
}

// PartitionedBroker is the whole partitioning contract. An adapter whose
// Capabilities lack StreamPartitioning still implements it, and every
// method then returns an *UnsupportedError.
type PartitionedBroker interface {
	Broker
	Appender
	PartitionIndex
	LeaseManager
	FencedConsumer
	Maintainer
	PartitionPublisher
	// Layout is the key layout the broker uses.
	Layout() Layout
}

// PartitionWatcher is an optional capability (found by type assertion):
// it signals partitions that received new entries, so that idle
// partitions need no polling. Signals are hints; they may be duplicated,
// so a consumer still reads fenced to learn what is there, and a lost one
// closes the channel.
type PartitionWatcher interface {
	// WatchPartitions sends the key of every partition of category that
	// is published to, until ctx ends or a signal may have been lost (the
	// subscription broke, the reader fell behind); then the channel is
	// closed, and a consumer watches again and reads each partition it
	// waits on once.
	WatchPartitions(ctx context.Context, category string) (<-chan string, error)
}

// EntryWaiter is an optional capability (found by type assertion, and
// a blocking read): one call waits on many streams at once, so
// a node watching thousands of idle partitions spends almost no commands
// while nothing happens. Unlike PartitionWatcher it sees entries appended
// by any publisher, including ones that send no wake-up signal (Protean).
// (On Redis Cluster, where one blocking read cannot span slots, the Redis
// adapter polls instead, at a bounded rate: see redisbroker.)
type EntryWaiter interface {
	// WaitForEntries blocks until at least one stream of after has an
	// entry with an id greater than the id after maps it to (a missing
	// stream counts as empty), or timeout passes (0 waits until ctx
	// ends). It returns the streams that have such entries, nil on
	// timeout. It reads nothing on behalf of any group.
	WaitForEntries(ctx context.Context, after map[string]string, timeout time.Duration) ([]string, error)
}

// ConsumerReleaser is an optional capability of a LeaseManager (found by
// type assertion): a release that leaves no empty consumer behind, so
// that a partition released when idle does not keep one consumer per
// generation in its group.
type ConsumerReleaser interface {
	// ReleasePartitionLeaseConsumer is ReleasePartitionLease that, in the
	// same atomic step and only when the lease holds f.Token, first
	// deletes every consumer of group on each of streams that holds no
	// pending entries (the caller's own included; consumers holding
	// entries stay for the next owner's reclaim). A missing stream or
	// group is skipped. It returns false, and changes nothing, when the
	// lease does not hold f.Token.
	ReleasePartitionLeaseConsumer(ctx context.Context, f Fence, group string, streams ...string) (bool, error)
}

// AckReader is an optional capability (found by type assertion): it acks
// the batch an owner just handled and reads the next one in one atomic,
// fenced step, so an owner's steady loop costs one round trip per batch
// instead of two. Semantics are exactly AckPartitionFenced(ack...)
// followed by ReadPartitionFenced, under one lease check: a stale fence
// changes nothing, neither the ack nor the read.
type AckReader interface {
	AckAndReadPartitionFenced(ctx context.Context, f Fence, stream, group string, ack []string, count int64, mode ReadMode) ([]Message, error)
}
