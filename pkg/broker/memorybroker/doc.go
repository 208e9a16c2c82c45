// Package memorybroker is the in-memory adapter of the partitioning
// contract (broker.PartitionedBroker, with the optional
// broker.PartitionWatcher and broker.EntryWaiter). It is the embedded
// default: `protctl demo` runs on it with no server, and fast tests of the
// runtime and the CLI run on it. It passes the same conformance suite
// (brokertest.Run) as the Redis adapter.
//
// # It is Redis, in memory
//
// The broker models a Redis keyspace and mirrors the Redis adapter's
// semantics, so that what works on it works on Redis:
//
//   - Every key holds one type: a stream, a set or a string. A call that
//     finds another type under a key it touches fails with a
//     *broker.WrongTypeError and changes nothing, because every check runs
//     before the first write.
//   - Leases are strings with an expiry on the broker's Clock; an expired
//     key behaves as missing. Generation keys are plain integer strings
//     that only grow and are never deleted.
//   - Stream entry ids are "ms-seq" from the Clock, and stay increasing
//     when the clock stands still or goes back (the sequence is bumped, as
//     XADD * does).
//   - Consumer groups have a last-delivered id, consumers and a pending
//     entries list (PEL) recording, for each delivered but unacknowledged
//     entry, its consumer, delivery count and last delivery time. Reads,
//     acks, claims, trims and reaps follow XREADGROUP, XACK, XAUTOCLAIM
//     JUSTID, XTRIM and the Redis adapter's scripts, including pending
//     entries whose bodies were deleted (reported as Missing, never
//     skipped). Times are compared in whole milliseconds, as on Redis:
//     TTLs and minimum idle times round up to the next millisecond.
//
// The consumer name of every fenced read is the fence token, so each
// lease generation has its own pending list:
//
//	AcquirePartitionLease ──▶ lease "node-a:7" (TTL), generation 7
//	        │
//	        ▼
//	ReclaimPartitionPending   earlier generations' pending ──▶ consumer "node-a:7"
//	        │
//	        ▼
//	ReadPartitionFenced ◀──┐  pending first, then new entries
//	        │              │
//	        ▼              │
//	AckPartitionFenced ────┘  (RenewPartitionLease before the TTL runs out)
//
// Each call runs under one mutex and reads the clock once, which gives
// what a Lua script gives on Redis: a fenced call checks the lease and
// reads or writes in one atomic step, so a stale owner can never read, ack,
// reclaim or dead-letter.
//
// # Variants and test hooks
//
// NewInline builds a broker without stream partitioning, for deployments
// that do not partition: Append works, every partitioning method returns a
// *broker.UnsupportedError. WithClock and ManualClock put time in a test's
// hands; Faults corrupts state the way outside tools do (XDEL under a
// pending entry, a string where a stream belongs). StreamInfo,
// PendingEntries and Range are read-only views for operator tools.
//
// Data lives only in the process: nothing is persisted.
package memorybroker
