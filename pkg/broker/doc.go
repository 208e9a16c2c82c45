// Package broker is the partitioning contract protctl's runtime stands on:
// a category is split into one stream per partition key, and exactly one
// owner at a time processes a key, fenced by a generation that only grows.
//
// # Leases and fencing
//
// A partition's lease for one group lives in two keys (see Layout):
// the lease key, holding "owner:generation" with a TTL, and the generation
// key, a counter that is never deleted or reset. The lease moves through
// these states:
//
//	         Acquire (INCR generation, SET lease owner:g PX ttl)
//	free ───────────────────────────────────────────────▶ held(g)
//	 ▲  ▲                                                │  │  │
//	 │  │  Release(owner:g)                              │  │  │ Renew(owner:g)
//	 │  └────────────────────────────────────────────────┘  │  └──▶ held(g), TTL reset
//	 │               TTL runs out                           │
//	 └──────────────────────────────────────────────────────┘
//
// Acquire succeeds only from free and always yields a generation greater
// than every earlier one, across expiry, release and reap. Renew and
// Release act only when the lease holds the caller's token exactly.
//
// The fencing rule: every read, ack, reclaim, dead-letter and checkpoint
// carries a Fence (lease key and token) and is refused with ErrLeaseLost
// unless the lease holds that token at the moment the operation runs,
// checked in the same atomic step. A stale owner (paused by GC, cut off by
// the network, or simply slow) therefore cannot process or acknowledge a
// key a newer generation owns. The consumer name in the group is the token
// itself, so each generation has its own pending list, and a new owner
// reclaims its predecessors' pending entries explicitly.
//
// # Conservative maintenance
//
// ReapPartition and Trim never delete an entry some group has not both
// received and acknowledged, including groups that registered with
// RegisterGroup but have not created themselves on a stream yet.
//
// # Adapters
//
// redisbroker implements the contract on Redis Streams with Lua scripts;
// memorybroker implements it in memory. brokertest.Run is the conformance
// suite both pass and any new adapter must pass.
package broker
