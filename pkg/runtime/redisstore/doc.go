// Package redisstore implements the runtime's stores on Redis: the
// failure ledger (ledger.Ledger), node membership (runtime.Membership)
// and Kafka checkpoints (runtime.Checkpoints), over any
// redis.UniversalClient, so single servers, Sentinel and Cluster run the
// same code.
//
// # Keys
//
// See keys.go and docs/decisions/0003-runtime-store-layout.md. Every
// script's keys share one hash tag: a service's membership keys carry
// {service}, a lease group's leases and checkpoints carry
// {service|name}, and a parked entry's record extends the lease key it is
// fenced by (RecordKey), so it shares the lease's slot whenever the lease
// key is tagged. The ledger's per-subscription indexes live in their own
// slots and are written by plain commands and one-key scripts
// (docs/decisions/0007-ledger-index-per-partition.md: an aggregate has a
// record per partition it is parked on).
//
// # Scripts
//
// Every check-then-write is one Lua script (embedded *.lua, run with
// redis.Script.Run), and each gets every key it touches in KEYS:
//
//	heartbeat.lua   ZADD node expiry (server TIME + ttl), SET status PX ttl,
//	                ZREMRANGEBYSCORE expired members
//	members.lua     ZRANGEBYSCORE (now, +inf] by the server's clock
//	leave.lua       ZREM node, DEL status
//	checkpoint.lua  lease == token? HSET partition next if next > stored
//	park.lua        lease == token? SET record
//	setstatus.lua   lease == token? record.status = s, record.request = nil
//	resolve.lua     lease == token? DEL record, return its park id
//	request.lua     record exists? (retry: not unrecoverable) set request
//	                {action, reason, by, requestedAt = server TIME}
//	index.lua       add a record (with its park id) to an aggregate's
//	                field of ParkedEntriesKey, or drop it while it holds
//	                the given park id
//	unindex.lua     HDEL index aggregate if it still points at the record
//	                (ParkedIndexKey, the layout before 0007)
//
// Each script checks the TYPE of every key before its first write (Redis
// does not roll a failed script back), so a key of another type fails the
// call with a *broker.WrongTypeError and changes nothing. A stale fence
// fails with a *broker.LeaseLostError; transport failures wrap
// broker.ErrUnavailable. Bad arguments fail with a
// *broker.InvalidArgumentError before any I/O.
//
// # Time
//
// Membership expiry is measured on the server's clock (TIME inside the
// scripts), so nodes' clocks never decide who is live; an operator's
// request is stamped with the server's time too. The local clock (WithNow)
// only fills NodeStatus.LastSeen and Parked.ParkedAt when the caller left
// them zero.
package redisstore
