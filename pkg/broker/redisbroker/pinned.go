package redisbroker

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/protctl/protctl/pkg/broker"
)

// A pinned reader runs an owner's fenced reads on one connection that it
// keeps from call to call, so that the WATCH of the next read's
// transaction can ride on the round trip of the last one:
//
//	round trip 1   WATCH lease, GET lease         (only when nothing is carried)
//	round trip 2   MULTI, XACK|XGROUP CREATE, XREADGROUP, EXEC,
//	               WATCH lease, GET lease          (the next read's check)
//	next read      MULTI, XACK, XREADGROUP, EXEC, WATCH lease, GET lease
//
// The guarantee is fencedtx.go's, with the window between the check and
// EXEC stretched over the caller's handling of the batch: WATCH came
// before the GET that returned the token, so EXEC runs the queued
// commands only if nothing wrote the lease key (nor expired it) since
// that GET saw the token. A renewal in between makes EXEC refuse; the
// WATCH and GET that follow the refused EXEC in the same round trip are
// then a fresh check, and the transaction is retried at once. The
// acquisition of a lease carries the WATCH the same way (the script, then
// WATCH and GET, and the lanes' tails if asked, in one round trip), so a
// fresh owner's first read is one round trip too. docs/decisions/0023-fenced-read-transactions.md, "Carried
// watches".

// PinLimit bounds how many connections pinned readers hold at a time. A
// pinned connection is out of its client's pool while it is held, so the
// limit must leave the pool room for everything else on that client:
// lease renewals, heartbeats, the ledger, and the readers past the limit,
// which run on the pool. Every Broker on one client must count against
// the same PinLimit (WithPinLimit): a limit per Broker lets N Brokers pin
// N times as many connections. Safe for concurrent use.
type PinLimit struct {
	max  int64
	held atomic.Int64
}

// NewPinLimit returns a limit of half of client's pool (PoolSize/2) for a
// single-node client (*redis.Client, Sentinel included), and of none for
// any other client, which is never pinned.
func NewPinLimit(client redis.UniversalClient) *PinLimit {
	l := &PinLimit{}
	if c, ok := client.(*redis.Client); ok {
		l.max = int64(c.Options().PoolSize / 2)
	}
	return l
}

// Held returns how many connections are pinned against l now.
func (l *PinLimit) Held() int { return int(l.held.Load()) }

// take takes a place; false when all are held.
func (l *PinLimit) take() bool {
	if l.held.Add(1) <= l.max {
		return true
	}
	l.held.Add(-1)
	return false
}

// give gives back a place take took.
func (l *PinLimit) give() { l.held.Add(-1) }

// PinnedReader returns a reader for one goroutine at a time (not safe for
// concurrent use) and a function that gives its connection back.
//
// The reader's AckAndReadPartitionFenced (an empty ack only reads, as
// ReadPartitionFenced does), AcquirePartitionLease and LastEntryIDs have
// the Broker's contract, errors included, and AcquirePartitionLeaseAndTails
// is the last two in one round trip; in ReadPending and ReadNew mode,
// on a single-node client (*redis.Client, Sentinel included), they run on
// one connection taken from the pool at the first call and kept until
// close, and a fenced read whose lease key the connection still watches
// from the last call costs one round trip instead of two. Everything the
// transaction does not decide runs the Broker's scripts, on the pool.
//
// A pinned connection is out of the client's pool until close, and counts
// against the Broker's PinLimit (WithPinLimit; half of the pool by
// default): a call that finds the limit reached, and every call on a
// Cluster, a Ring or with WithScriptReads, runs as the Broker's own (a
// connection from the pool per call).
//
// close unwatches the connection and gives it back to the pool, with its
// place in the PinLimit. It is bounded by ctx as every call is (New); a
// connection whose UNWATCH did not complete is dropped (go-redis removes
// a connection that failed, context errors included), never pooled while
// it watches a key. The reader may be used again after close: its next
// call pins a connection again, if the limit allows. Closing twice is a
// no-op. A connection left
// pinned and idle for a second or more is checked (UNWATCH, a round trip
// of its own) before its next call, and replaced if a server's timeout or
// a NAT closed it meanwhile.
func (b *Broker) PinnedReader() (broker.AckReader, func(context.Context) error) {
	pc := &pinnedConn{b: b}
	if c, ok := b.client.(*redis.Client); ok && !b.cfg.scriptReads {
		pc.client = c
	}
	return pc, pc.close
}

// pinnedConn is PinnedReader's reader.
type pinnedConn struct {
	b *Broker
	// client is the client conn comes from; nil when the reader is never
	// pinned: every call then runs on the pool.
	client *redis.Client
	// conn is the pinned connection, holding a place of b.cfg.pins; nil
	// when none is (before the first call, past the limit, after close or
	// a transport failure).
	conn *redis.Conn
	// watched says conn may watch keys: it must send UNWATCH before it
	// watches another key and before it goes back to the pool.
	watched bool
	// watching is the key conn watches, "" for none (or unknown). seen is
	// what GET answered right after that WATCH, in the same round trip
	// (seenOK is false for a nil or failed GET): EXEC runs only if the key
	// still holds it.
	watching string
	seen     string
	seenOK   bool
	// used is when the connection was last pinned for a call (pin).
	used time.Time
}

var _ broker.AckReader = (*pinnedConn)(nil)

// idleCheck is how long a pinned connection may sit unused before its
// next call checks it first. A server's timeout (redis.conf "timeout",
// whole seconds, 1 at least) or a NAT closes an idle connection; the
// pool checks its own idle connections before it hands them out, but a
// pinned one is out of the pool. A call on a closed socket would fail
// the read, and the runtime would release the lease with an error; a
// fenced read must not be sent twice, so the check is a round trip of
// its own, paid only after an idle gap.
const idleCheck = time.Second

// pin makes sure the reader holds a sound connection, taking one from the
// pool (and a place in the PinLimit) if it holds none; false when it
// cannot be pinned: the call runs on the pool. A connection idle for
// idleCheck or longer is checked first with UNWATCH (which also ends
// whatever it watched; the carried check is dropped): a transport failure
// drops it, and another is taken.
func (pc *pinnedConn) pin(ctx context.Context) bool {
	if pc.conn != nil {
		now := time.Now()
		if now.Sub(pc.used) < idleCheck {
			pc.used = now
			return true
		}
		err := pc.conn.Do(ctx, "unwatch").Err()
		if !transport(err) {
			pc.watched, pc.watching = err != nil, ""
			pc.used = now
			return true
		}
		pc.broken()
	}
	if pc.client == nil || !pc.b.cfg.pins.take() {
		return false
	}
	pc.conn = pc.client.Conn()
	pc.watched, pc.watching = false, ""
	pc.used = time.Now()
	return true
}

// AckAndReadPartitionFenced is the Broker's, on the pinned connection.
func (pc *pinnedConn) AckAndReadPartitionFenced(ctx context.Context, f broker.Fence, stream, group string, ack []string, count int64, mode broker.ReadMode) ([]broker.Message, error) {
	if len(ack) == 0 {
		return pc.b.readPartitionFenced(ctx, pc, f, stream, group, count, mode)
	}
	return pc.b.ackAndReadPartitionFenced(ctx, pc, f, stream, group, ack, count, mode)
}

// AcquirePartitionLease is the Broker's, with the WATCH and GET of the
// lease key in the same round trip, so that the owner's first fenced read
// carries them.
func (pc *pinnedConn) AcquirePartitionLease(ctx context.Context, leaseKey, generationKey, owner string, ttl time.Duration) (broker.Lease, bool, error) {
	// With lease replicas the acquisition needs a WAIT on its own
	// connection (replicas.go): it runs as the Broker's, and the first
	// read checks the lease in a round trip of its own.
	if pc.b.cfg.leaseReplicas.on() || !pc.pin(ctx) {
		return pc.b.AcquirePartitionLease(ctx, leaseKey, generationKey, owner, ttl)
	}
	const op = "acquire lease"
	ms, err := acquireArgs(op, leaseKey, generationKey, owner, ttl)
	if err != nil {
		return broker.Lease{}, false, err
	}
	keys := []string{leaseKey, generationKey}
	g, _, err := pc.acquire(ctx, acquireScript.EvalSha, keys, owner, ms, nil)
	if err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") && pc.conn != nil {
		// Not run (the server lost its scripts): the same round trip
		// with the script's body, which the server caches again.
		g, _, err = pc.acquire(ctx, acquireScript.Eval, keys, owner, ms, nil)
	}
	if err != nil {
		return broker.Lease{}, false, mapErr(call{Op: op, Keys: keys}, err)
	}
	return newLease(leaseKey, owner, g)
}

// AcquirePartitionLeaseAndTails is AcquirePartitionLease followed, in the
// same round trip, by LastEntryIDs(streams): the streams' newest ids taken
// right after the lease was, before anything its owner reads. Without the
// lease (acquired false) it returns no tails, and with it, nil tails when
// they could not be read (the caller then calls LastEntryIDs, which
// reports why).
func (pc *pinnedConn) AcquirePartitionLeaseAndTails(ctx context.Context, leaseKey, generationKey, owner string, ttl time.Duration, streams []string) (broker.Lease, bool, map[string]string, error) {
	if pc.b.cfg.leaseReplicas.on() || !pc.pin(ctx) {
		l, ok, err := pc.b.AcquirePartitionLease(ctx, leaseKey, generationKey, owner, ttl)
		if err != nil || !ok {
			return l, ok, nil, err
		}
		tails, err := pc.b.LastEntryIDs(ctx, streams)
		if err != nil {
			// The lease is held: the caller must have it, to release it,
			// and takes the tails again with LastEntryIDs, which reports
			// why they could not be read.
			return l, ok, nil, nil
		}
		return l, ok, tails, nil
	}
	const op = "acquire lease"
	ms, err := acquireArgs(op, leaseKey, generationKey, owner, ttl)
	if err != nil {
		return broker.Lease{}, false, nil, err
	}
	for _, s := range streams {
		if err := nonEmpty("last entry ids", "stream", s); err != nil {
			return broker.Lease{}, false, nil, err
		}
	}
	keys := []string{leaseKey, generationKey}
	g, tails, err := pc.acquire(ctx, acquireScript.EvalSha, keys, owner, ms, streams)
	if err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") && pc.conn != nil {
		g, tails, err = pc.acquire(ctx, acquireScript.Eval, keys, owner, ms, streams)
	}
	if err != nil {
		return broker.Lease{}, false, nil, mapErr(call{Op: op, Keys: keys}, err)
	}
	l, ok, _ := newLease(leaseKey, owner, g)
	if !ok {
		tails = nil
	}
	return l, ok, tails, nil
}

// acquire sends acquire.lua with run (EVALSHA or EVAL), then WATCH and
// GET of the lease key, then XREVRANGE + - COUNT 1 of each of streams, in
// one round trip; nil tails when they could not be read. pc holds a
// connection.
func (pc *pinnedConn) acquire(ctx context.Context, run func(context.Context, redis.Scripter, []string, ...any) *redis.Cmd, keys []string, owner string, ms int64, streams []string) (int64, map[string]string, error) {
	conn := pc.conn
	unwatch := pc.watched
	pc.watching = ""
	var (
		acq   *redis.Cmd
		watch *redis.Cmd
		get   *redis.StringCmd
		revs  = make([]*redis.XMessageSliceCmd, len(streams))
	)
	_, _ = conn.Pipelined(ctx, func(p redis.Pipeliner) error {
		if unwatch {
			p.Do(ctx, "unwatch")
		}
		acq = run(ctx, p, keys, owner, ms)
		watch = p.Do(ctx, "watch", keys[0])
		get = p.Get(ctx, keys[0])
		for i, s := range streams {
			revs[i] = p.XRevRangeN(ctx, s, "+", "-", 1)
		}
		return nil
	})
	pc.carry(keys[0], watch, get)
	g, err := acq.Int64()
	if err != nil || len(streams) == 0 {
		return g, nil, err
	}
	for _, r := range revs {
		if transport(r.Err()) && pc.conn != nil {
			pc.broken()
			break
		}
	}
	tails := make(map[string]string, len(streams))
	if tailIDs("last entry ids", tails, streams, revs) != nil {
		// The caller takes them again, and meets the error there.
		return g, nil, nil
	}
	return g, tails, nil
}

// LastEntryIDs is the Broker's, on the pinned connection.
func (pc *pinnedConn) LastEntryIDs(ctx context.Context, streams []string) (map[string]string, error) {
	if !pc.pin(ctx) {
		return pc.b.LastEntryIDs(ctx, streams)
	}
	// Judged on the pipeline's own error, not the mapped one: an error
	// reply (WRONGTYPE) leaves the connection as it was, watch included,
	// and it stays pinned; only a transport failure drops it.
	var perr error
	ids, err := lastEntryIDs(ctx, func(ctx context.Context, fn func(redis.Pipeliner) error) ([]redis.Cmder, error) {
		cmds, err := pc.conn.Pipelined(ctx, fn)
		perr = err
		return cmds, err
	}, streams)
	if transport(perr) {
		pc.broken()
	}
	return ids, err
}

// broken drops the connection after a transport failure (a reply was not
// read): go-redis has marked it bad, so Close removes it from the pool
// instead of returning it, watch and all. Only for transport failures: a
// connection that got an error reply is sound and may be watching, and
// Close would pool it; it stays pinned instead, and its next round trip,
// or close, unwatches it.
func (pc *pinnedConn) broken() {
	_ = pc.conn.Close()
	pc.conn = nil
	pc.watched, pc.watching = false, ""
	pc.b.cfg.pins.give()
}

// carry records the WATCH and GET that ended a round trip: the
// connection watches key since just before get read it. A transport
// failure leaves the connection unusable.
func (pc *pinnedConn) carry(key string, watch *redis.Cmd, get *redis.StringCmd) {
	switch {
	case transport(watch.Err()) || transport(get.Err()):
		pc.broken()
		return
	case watch.Err() != nil:
		// Not watching (an error reply): nothing is carried.
		pc.watching = ""
	default:
		pc.watching = key
		v, err := get.Result()
		pc.seen, pc.seenOK = v, err == nil
	}
	pc.watched = true
}

// transport says err is not a reply of the server (nor redis.Nil): the
// connection's state is unknown.
func transport(err error) bool {
	if err == nil {
		return false // before re, which escapes to the heap
	}
	var re redis.Error
	return !errors.As(err, &re)
}

// close gives the connection back to the pool, unwatched, and its place
// in the PinLimit.
func (pc *pinnedConn) close(ctx context.Context) error {
	if pc.conn == nil {
		return nil
	}
	var err error
	if pc.watched {
		// Bounded by ctx as every call is (New): go-redis either sends
		// UNWATCH and reads its reply, or fails, and any failure that is
		// not an error reply, ctx's included, is a bad connection to it,
		// which Close then removes from the pool instead of returning it
		// watching. (It does not look at a done ctx before sending, so
		// checking ctx.Err() here first would pool a watching
		// connection.)
		err = pc.conn.Do(ctx, "unwatch").Err()
	}
	cerr := pc.conn.Close()
	pc.conn = nil
	pc.watched, pc.watching = false, ""
	pc.b.cfg.pins.give()
	if err != nil {
		return mapErr(call{Op: "close pinned reader"}, err)
	}
	return cerr
}

// readTx is Broker.readTx on the pinned connection, carrying the watch
// from one call to the next.
func (pc *pinnedConn) readTx(ctx context.Context, op string, f broker.Fence, stream, group string, ack []string, count int64, id string) ([]broker.Message, txOutcome, error) {
	fail := func(err error) ([]broker.Message, txOutcome, error) {
		fc := f // escapes only on failure
		return nil, txDecided, mapErr(call{Op: op, Keys: []string{f.LeaseKey, stream}, Fence: &fc, Stream: stream}, err)
	}
	for attempt := 0; attempt < txAttempts; attempt++ {
		if pc.watching != f.LeaseKey || !pc.seenOK || pc.seen != f.Token {
			if err := pc.watch(ctx, f.LeaseKey); err != nil {
				return fail(err)
			}
			if pc.watching != f.LeaseKey || !pc.seenOK || pc.seen != f.Token {
				// Not the token (or no lease, or a GET or WATCH that
				// failed): nothing was sent but the check, the script
				// decides (fencedtx.go). The watch stays with this
				// connection, which nobody else uses.
				return nil, txFallback, nil
			}
		}
		if pc.b.betweenTx != nil {
			pc.b.betweenTx()
		}
		msgs, outcome, retry, err := pc.execOnce(ctx, op, f, stream, group, ack, count, id)
		if !retry {
			if err != nil && outcome == txDecided {
				return fail(err)
			}
			return msgs, outcome, err
		}
	}
	return nil, txFallback, nil
}

// watch makes the connection watch key alone and read it (one round
// trip): the check of a transaction that carries none.
func (pc *pinnedConn) watch(ctx context.Context, key string) error {
	if !pc.pin(ctx) {
		// Dropped by a transport failure after a refused EXEC, and no
		// place left: nothing is carried, the script decides.
		return nil
	}
	conn := pc.conn
	unwatch := pc.watched
	pc.watching = ""
	var (
		watch *redis.Cmd
		get   *redis.StringCmd
	)
	_, err := conn.Pipelined(ctx, func(p redis.Pipeliner) error {
		if unwatch {
			// WATCH adds to what a connection watches, and a key touched
			// since its WATCH keeps the connection's EXEC refused.
			p.Do(ctx, "unwatch")
		}
		watch = p.Do(ctx, "watch", key)
		get = p.Get(ctx, key)
		return nil
	})
	pc.carry(key, watch, get)
	if transport(err) {
		return err
	}
	return nil
}

// errExecDecode marks an EXEC reply that could not be decoded.
var errExecDecode = errors.New("unexpected EXEC reply")

// execOnce sends the transaction and the next call's WATCH and GET in one
// round trip. retry says EXEC refused (the lease key was touched since
// the WATCH); the WATCH and GET sent after it are then the next attempt's
// check. A non-nil err with txDecided is the call's failure, to be mapped.
func (pc *pinnedConn) execOnce(ctx context.Context, op string, f broker.Fence, stream, group string, ack []string, count int64, id string) (msgs []broker.Message, outcome txOutcome, retry bool, err error) {
	var (
		multi *redis.Cmd
		watch *redis.Cmd
		get   *redis.StringCmd
	)
	exec := redis.NewRawCmd(ctx, "exec")
	_, _ = pc.conn.Pipelined(ctx, func(p redis.Pipeliner) error {
		multi = p.Do(ctx, "multi")
		if len(ack) > 0 {
			// By pointer: boxing a *string does not allocate, a
			// string does.
			args := make([]any, 0, 3+len(ack))
			args = append(args, "xack", stream, group)
			for i := range ack {
				args = append(args, &ack[i])
			}
			p.Do(ctx, args...)
		} else {
			// As in readTx: maybe the lane's first read.
			p.Do(ctx, "xgroup", "create", stream, group, "0", "mkstream")
		}
		p.Do(ctx, "xreadgroup", "group", group, f.Token, "count", count, "streams", stream, id)
		_ = p.Process(ctx, exec)
		watch = p.Do(ctx, "watch", f.LeaseKey)
		get = p.Get(ctx, f.LeaseKey)
		return nil
	})
	// EXEC ended the watch (or the connection failed); the WATCH after it
	// is the next check.
	pc.watching = ""
	for _, err := range []error{exec.Err(), multi.Err()} {
		if err == nil {
			continue
		}
		// The reply of EXEC was not read, or MULTI was refused: whether
		// the commands ran is unknown, as with a script whose reply was
		// lost. The call fails; the script must not run (fencedtx.go).
		// After a transport failure the connection goes; after an error
		// reply it is sound and stays, and the WATCH sent after EXEC,
		// if it ran, is undone by the next round trip's UNWATCH.
		if transport(err) {
			pc.broken()
		} else {
			pc.watched = true
		}
		if isRedisError(multi.Err()) {
			// MULTI refused (the ACL changed since multiAllowed asked):
			// the scripts run from now on.
			pc.b.multi.of(pc.client).state.Store(multiRefused)
		}
		return nil, txDecided, false, err
	}
	pc.carry(f.LeaseKey, watch, get)

	raw := exec.Val()
	r := &respReader{b: raw}
	n, _, err := r.aggregate(false)
	switch {
	case errors.Is(err, errNilReply):
		// The lease key was written or expired after the WATCH: nothing
		// ran. The WATCH and GET sent after EXEC decide the retry.
		return nil, txDecided, true, nil
	case isReplyError(err) && strings.HasPrefix(err.Error(), "EXECABORT"):
		// A command was refused when queued (MOVED, ...): nothing ran.
		return nil, txFallback, false, nil
	case err != nil:
		return nil, txDecided, false, err
	case n != 2:
		return nil, txDecided, false, fmt.Errorf("%w: %d replies", errExecDecode, n)
	}
	// The first reply is XACK's (an integer) or XGROUP CREATE's (OK, or
	// BUSYGROUP, which changes nothing).
	t, line, err := r.header()
	if err != nil {
		return nil, txDecided, false, fmt.Errorf("%w: %w", errExecDecode, err)
	}
	var (
		ackErr error
		acked  int
	)
	switch t {
	case ':':
		if acked, err = length(line); err != nil {
			return nil, txDecided, false, fmt.Errorf("%w: %w", errExecDecode, err)
		}
	case '-', '!':
		ackErr = replyError(line)
	case '+':
	default:
		return nil, txDecided, false, fmt.Errorf("%w: reply type %q", errExecDecode, t)
	}
	if len(ack) == 0 {
		ackErr, acked = nil, 0
	}
	msgs, rerr := parseRawReadGroup(stream, raw[r.i:])
	switch {
	case rerr == nil:
		if ackErr != nil {
			// As in readTx: XACK cannot fail where XREADGROUP did not.
			return nil, txDecided, false, ackErr
		}
		return msgs, txDecided, false, nil
	case isReplyError(rerr):
		// EXEC ran and the read failed with an error reply (NOGROUP,
		// WRONGTYPE).
		if len(ack) == 0 || ackErr != nil || acked == 0 {
			return nil, txFallback, false, nil
		}
		return nil, txDecided, false, rerr
	default:
		return nil, txDecided, false, rerr
	}
}

// isReplyError says err is (or wraps) an error reply found in a raw
// reply.
func isReplyError(err error) bool {
	if err == nil {
		return false // before re, which escapes to the heap
	}
	var re replyError
	return errors.As(err, &re)
}
