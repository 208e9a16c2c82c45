// Package redisbroker implements broker.PartitionedBroker,
// broker.PartitionWatcher, broker.AckReader, broker.BatchReader and
// broker.BatchAcquirer on Redis Streams, over any
// redis.UniversalClient, in the key layout of broker.Layout (Protean's by
// default, so protctl reads and repairs what Protean wrote).
//
// # Scripts and atomicity
//
// Every operation that must check something and then write does both in
// one Lua script, because Redis runs a script without interleaving any
// other command: nothing can change between the check and the write.
// The scripts live in *.lua files beside this one, are embedded with
// go:embed and run with redis.Script.Run (EVALSHA, with EVAL when the
// server does not have the script cached). Each gets every key it touches
// in KEYS, never builds a key name itself.
//
//	acquire.lua     lease free? INCR generation, SET lease owner:g PX ttl
//	renew.lua       lease == token? PEXPIRE
//	release.lua     lease == token? DEL (the generation stays); with
//	                streams and a group (ReleasePartitionLeaseConsumer),
//	                first XGROUP DELCONSUMER of every consumer there
//	                without pending entries
//	read.lua        lease == token? XREADGROUP (pending "0", then new ">"),
//	                creating the group from 0 (MKSTREAM) on NOGROUP, once
//	                (ReadPendingThenNew, and the fallback of the others)
//	ack.lua         lease == token? XACK of all ids
//	ackread.lua     lease == token? XACK of the handled batch, then read.lua's
//	                read (both compose readlib.lua)
//	acquireread.lua acquire.lua, then XREVRANGE + - COUNT 1 of the lanes,
//	                then, at the generation asked for, read.lua's "new"
//	                read of the main lanes (BatchAcquirer)
//	reclaim.lua     lease == token? one XAUTOCLAIM ... JUSTID batch; the
//	                last one also deletes every other consumer of the
//	                group without pending entries (XINFO CONSUMERS,
//	                XGROUP DELCONSUMER)
//	delconsumer.lua consumer not the lease's token and 0 pending?
//	                XGROUP DELCONSUMER (DeleteEmptyConsumer, operators)
//	deadletter.lua  lease == token? XRANGE id, XADD to the DLQ, XACK
//	trim.lua        safe floor over groups (and registered groups not on
//	                the stream yet), cutoff at maxLen, XTRIM MINID
//	reap.lua        every lane drained and cold? SREM index, DEL lanes
//	                (the checks are reaplib.lua's, shared with reaplanes.lua)
//	publish.lua     XADD, SADD index, PUBLISH wake channel
//	reaplanes.lua   cluster layout: every lane drained and cold? DEL lanes
//	append.lua      cluster layout: XADD
//	record.lua      cluster layout: SADD index, PUBLISH wake channel
//	dlqreplay.lua   dead letter still as planned? XADD to its partition,
//	                XDEL it, remember it was replayed (Protean layout: and
//	                SADD index, PUBLISH wake channel)
//	dlqdelete.lua   dead letter still as planned? XDEL it
//
// The batches of BatchReader and BatchAcquirer (AckAndReadPartitionsFenced,
// AcquirePartitionLeases) are pipelines of these scripts, one per
// partition, each its own atomic step, on one connection (batch.go); on a
// single server a batch of 16 fenced reads or more (WithTxBatchMin) runs
// as one optimistic transaction of all its partitions instead, each still
// fenced on its own (batchtx.go).
//
// The fenced reads of one id, ReadPending and ReadNew, alone or with the
// ack of AckAndReadPartitionFenced, are the exception: on a single node or
// a Cluster they run as an optimistic transaction on the lease key (WATCH
// and GET, compare on the client, then MULTI, XACK, XREADGROUP, EXEC),
// which returns the entries in XREADGROUP's own reply instead of through
// Lua. EXEC runs nothing if the lease key was written or expired after
// the WATCH, which is the same guarantee as the script's compare; every
// outcome other than a clean read (a lease that is not the token, a
// missing group, a wrong type, a key touched three times in a row) runs
// the script, which decides. See fencedtx.go and
// docs/decisions/0023-fenced-read-transactions.md. No transaction runs
// where the server refuses this client MULTI (an ACL without +multi),
// which would run the queued commands at once, unfenced: each server is
// asked once (multi.go).
//
// Redis does not roll a script back when a command in it fails, so every
// script checks the TYPE of each key it will touch before its first
// write, or makes that write (or a read of the key before it) a
// typed_call, which checks the type when the command fails for it: a key
// of the wrong type (a string where a stream should be) fails the call
// with a *broker.WrongTypeError and changes nothing. The
// scripts report failures with their own reply prefixes
// (PROTCTL_WRONGTYPE, PROTCTL_LEASELOST; see the prelude.lua of
// pkg/internal/redisadapter, which, with lib.lua, is prepended to every
// script, shared with redisstore), which the Go side maps to the
// contract's typed errors; transport failures unwrap to broker.ErrUnavailable and to their
// cause.
//
// # Fencing
//
// The fencing rule is package broker's (pkg/broker/doc.go, "Leases and
// fencing"); this is how the adapter keeps it. The consumer name in a group is the fence token (owner:generation), so
// each generation has its own pending list. Reads, acks, reclaims and
// dead-letters prove the lease in the same script as their write, so a
// stale owner (paused, partitioned, or slow) is refused with
// broker.ErrLeaseLost even if its lease expired a microsecond earlier.
// ReclaimPartitionPending is a loop of fenced batches rather than one
// script, so that a long pending list never blocks the server; every
// batch proves the lease again.
//
// # Consumers do not pile up
//
// A consumer per generation would grow every group by one at each
// handover or idle release, forever. The last reclaim batch of a new
// owner deletes every other consumer of the group that holds no pending
// entries, and ReleasePartitionLeaseConsumer deletes the releasing
// owner's consumers that hold none, both inside the script that proves
// the lease: the lease holder is the only one who may read the partition,
// so no live reader's consumer is deleted, and XGROUP DELCONSUMER (which
// would destroy pending entries) never runs on a consumer that has any.
// A group so holds the current owner's consumer and, at most, consumers
// with entries still to reclaim.
//
// # What is kept
//
// Trim keeps the newest maxLen entries and everything any group still
// needs: nothing at or after the smallest, over groups, of the
// last-delivered id and the oldest pending id; and nothing at all while a
// group registered for the stream's category has not created itself on
// the stream (it will read from id 0). ReapPartition deletes a
// partition's lanes only when every group on them, and every group
// registered with RegisterGroup, has been delivered everything and has
// nothing pending, and the newest entry is at least minIdle old by the
// server's clock. Neither ever deletes lease or generation keys.
//
// # Layouts
//
// In the Protean layout (the default) publish and reap are each one
// script touching the category's index, its group registry and the
// partition's lanes, so they need every key on one server.
//
// In the cluster layout (broker.ClusterLayout) a partition's lanes,
// leases and generations share the hash tag {K}, so every per-partition
// script touches one Redis Cluster slot. The index and the registry live
// in slots of their own, and no script touches them together with a
// partition's keys:
//
//	publish   TYPE index, append.lua on {K} (XADD), then record.lua on the
//	          index (SADD, PUBLISH wake)
//	reap      SMEMBERS registry, reaplanes.lua "check" on {K}; if cold:
//	          SREM index, reaplanes.lua "delete" on {K}, SADD index back
//	          if it refused
//	trim      SMEMBERS registries, trim.lua on the stream with the groups
//	          as arguments
//
// Append before record, and remove-from-index before delete, keep a
// stream that a publish racing a reap leaves non-empty in the index;
// docs/decisions/0005-cluster-layout.md walks through the interleavings
// and the crash windows, which RecordPartition repairs.
package redisbroker
