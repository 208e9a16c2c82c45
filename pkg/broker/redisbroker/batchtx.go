package redisbroker

import (
	"context"
	"errors"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/protctl/protctl/pkg/broker"
	"github.com/protctl/protctl/pkg/internal/redisadapter"
)

// A batch of fenced reads on one server runs as one optimistic
// transaction of many partitions (fencedtx.go's, widened), not as a
// pipeline of scripts: on one connection,
//
//	round trip 1:  WATCH lease1 lease2 ..., MGET lease1 lease2 ...
//	               (the client compares each value with its token)
//	round trip 2:  MULTI, then per partition whose lease holds its token
//	               XACK stream group ids... (when there are some) and
//	               XREADGROUP GROUP group token COUNT n STREAMS stream id,
//	               EXEC
//
// EXEC runs the queued commands only if no watched lease key was written
// (nor expired) since the WATCH, which came before the MGET: each lease
// was its token when it was read and still is when its XACK and
// XREADGROUP run, the script's guarantee for every partition of the
// batch at once (docs/decisions/0023-fenced-read-transactions.md,
// "Batches"). A refused EXEC (any watched key touched: a renewal, a
// takeover) ran nothing, and the batch is checked again, at most
// txAttempts times; then the scripts decide.
//
// A script's fixed cost dominates what a live flow reads (a few entries
// per partition): EVALSHA, the Lua environment, the calls made from Lua
// (0.8-2.4 µs each against 0.1-0.3 µs sent on their own), the entries'
// conversion to Lua and back. A transaction of 64 partitions reading 2
// entries each and acking the 2 before cost the server 9.8 µs per
// partition, the pipeline of ackread.lua 26.6 µs (docs/benchmarks.md,
// "Batched fenced transactions").
//
// Everything else is the scripts', exactly as for one read (fencedtx.go):
// a lease that is not the token (the script says PROTCTL_LEASELOST, or
// PROTCTL_WRONGTYPE), a read refused with an error reply (NOGROUP: a
// group or stream deleted under its owner, which the script creates from
// 0; WRONGTYPE), a command the server refused to queue. In each of these
// cases nothing changed for that partition (XACK of a missing group or
// key acknowledges nothing, and the read failed), so the script runs
// after the transaction and returns what it always did. A reply that was
// not read (a transport failure, a cancelled context) fails every read of
// the transaction: EXEC may have run, and a script sent now could read
// past entries it delivered.

// txBatchMin is the smallest batch that runs as a transaction. Below it
// the scripts run: a transaction is two round trips where a pipeline of
// scripts is one, and a light flow's batches are small and its latency is
// the round trips. At 5,000 events/s over 1,000 idle keys (a server
// shared with the plain loop) the runtime's p50 was 1.5-2.2 ms with 16,
// 2.7-3.0 ms with 4, for 5% more of the server's time per event
// (BenchmarkLatencyRedis, alternated twice); at 16,000 and 48,000 events/s
// the two were within noise.
const txBatchMin = 16

// txBatchMax bounds the partitions of one transaction; a larger batch
// runs as several, one after the other on the connection. Redis checks
// each key a WATCH names against every key the connection already
// watches (a list), so a transaction's WATCH costs the square of its
// keys: about 1.8 µs a key at 47 keys (BenchmarkSustainableRateRedis at
// 24,000/s), and about five times that at the live path's batches of
// 256, more than a script. Each transaction of a batch costs two round
// trips more: at 64,000 events/s the runtime's p50 was 51-65 ms with 32,
// 37-50 with 64 and 28-50 with 128 (two runs each, docs/benchmarks.md).
const txBatchMax = 64

// ackAndReadTx runs the reads idx of reads (valid, in a mode
// txReadID expresses) as fenced transactions on one connection of c,
// filling out, and returns the reads the scripts must decide: nothing was
// changed for them.
func (b *Broker) ackAndReadTx(ctx context.Context, c *redis.Client, reads []broker.FencedRead, idx []int, out []broker.ReadResult) (scripts []int) {
	const op = "ack and read"
	conn := c.Conn()
	defer conn.Close()
	for len(idx) > 0 {
		pending := idx[:min(len(idx), txBatchMax)]
		idx = idx[len(pending):]
		for attempt := 0; attempt < txAttempts && len(pending) > 0; attempt++ {
			var (
				fallback []int
				broken   error
			)
			pending, fallback, broken = b.ackAndReadTxOnce(ctx, c, conn, op, reads, pending, out)
			scripts = append(scripts, fallback...)
			if broken != nil {
				// The connection is gone (or none could be had): the
				// reads not sent yet fail alike at once, instead of
				// each transaction waiting out the pool again. Nothing
				// of theirs ran.
				for _, i := range idx {
					out[i].Err = readErr(op, &reads[i], broken)
				}
				return scripts
			}
		}
		// Refused txAttempts times: the scripts decide.
		scripts = append(scripts, pending...)
	}
	return scripts
}

// ackAndReadTxOnce is one attempt of ackAndReadTx: retry are the reads of
// a transaction EXEC refused (nothing ran), scripts those the scripts
// must decide; every other read of idx has its result in out. broken is
// the transport failure that left conn unusable, if one did.
func (b *Broker) ackAndReadTxOnce(ctx context.Context, c *redis.Client, conn *redis.Conn, op string, reads []broker.FencedRead, idx []int, out []broker.ReadResult) (retry, scripts []int, broken error) {
	fail := func(i int, err error) { out[i].Err = readErr(op, &reads[i], err) }
	watch := make([]any, 1, 1+len(idx))
	watch[0] = "watch"
	leases := make([]string, len(idx))
	for j, i := range idx {
		leases[j] = reads[i].Fence.LeaseKey
		watch = append(watch, leases[j])
	}
	var get *redis.SliceCmd
	_, err := conn.Pipelined(ctx, func(p redis.Pipeliner) error {
		p.Do(ctx, watch...)
		get = p.MGet(ctx, leases...)
		return nil
	})
	// From here until EXEC (or UNWATCH) the connection watches the lease
	// keys; every way out that does not reach EXEC unwatches, but after a
	// transport failure, which leaves the connection to be dropped (a Conn
	// that failed never goes back to the pool, nor hands out another).
	if err != nil {
		if redisadapter.Unavailable(err) {
			for _, i := range idx {
				fail(i, err)
			}
			if !transport(err) {
				// A reply such as LOADING leaves the connection usable.
				_ = unwatch(ctx, conn, op)
				return nil, nil, nil
			}
			// No reply (or no connection at all: a pool timeout): an
			// UNWATCH would wait for the same, and the connection is
			// dropped, not pooled, with whatever it watched.
			return nil, nil, err
		}
		// An error reply (NOPERM, ...): the scripts name the error.
		_ = unwatch(ctx, conn, op)
		return nil, idx, nil
	}
	vals := get.Val()
	held := make([]int, 0, len(idx))
	for j, i := range idx {
		if v, ok := vals[j].(string); !ok || v != reads[i].Fence.Token {
			// Not the token, no lease, or a lease of another type (MGET
			// reads it as nil): the script says which. Its key stays
			// watched: if it changes before EXEC, the others are checked
			// again without it.
			scripts = append(scripts, i)
			continue
		}
		held = append(held, i)
	}
	if len(held) == 0 {
		return nil, scripts, unwatchTx(ctx, conn)
	}
	if b.betweenTx != nil {
		b.betweenTx()
	}

	acks := make([]*redis.IntCmd, len(held))
	rds := make([]*redis.RawCmd, len(held))
	_, err = conn.TxPipelined(ctx, func(p redis.Pipeliner) error {
		for j, i := range held {
			r := &reads[i]
			if len(r.Ack) > 0 {
				acks[j] = p.XAck(ctx, r.Stream, r.Group, r.Ack...)
			}
			rds[j] = redis.NewRawCmd(ctx, "xreadgroup", "group", r.Group, r.Fence.Token, "count", r.Count, "streams", r.Stream, txReadID(r.Mode))
			if err := p.Process(ctx, rds[j]); err != nil {
				return err
			}
		}
		return nil
	})
	if errors.Is(err, redis.TxFailedErr) {
		// A watched lease key was written (a renewal, a takeover) or
		// expired after the WATCH: nothing ran. Look again.
		return held, scripts, nil
	}
	if redis.IsExecAbortError(err) {
		// The server refused to queue a command (OOM, NOPERM, ...) and
		// discarded the transaction: nothing ran, and the commands it
		// did queue hold no reply. The scripts decide.
		return nil, append(scripts, held...), nil
	}
	queued := make([]redis.Cmder, 0, 2*len(held))
	for j := range held {
		if acks[j] != nil {
			queued = append(queued, acks[j])
		}
		queued = append(queued, rds[j])
	}
	if b.multiRefusedBy(c, err, queued...) {
		// The commands ran at once, unfenced, and their replies are not
		// read: whether they ran is unknown, the reads fail and no
		// script may run in their place. The connection is not used
		// again (go-redis drops it): the batch's other transactions
		// fail alike.
		for _, i := range held {
			fail(i, err)
		}
		return nil, scripts, err
	}
	var lost error
	for j, i := range held {
		r := &reads[i]
		rerr := rds[j].Err()
		if rerr == nil {
			// EXEC ran. The raw reply is the read's own: entries, or an
			// error reply (a replyError).
			msgs, perr := parseRawReadGroup(r.Stream, rds[j].Val())
			var re replyError
			if perr == nil || !errors.As(perr, &re) {
				switch {
				case acks[j] != nil && acks[j].Err() != nil:
					// XREADGROUP ran, so XACK met the same stream and
					// group: it cannot fail where the read did not.
					// Report it all the same.
					fail(i, acks[j].Err())
				case perr != nil:
					out[i].Err = fmt.Errorf("redisbroker: %s: %w", op, perr)
				default:
					out[i].Messages = msgs
				}
				continue
			}
			rerr = perr
		}
		var re replyError
		switch {
		case errors.As(rerr, &re):
			// EXEC ran and the read failed with an error reply (NOGROUP,
			// WRONGTYPE).
			if acks[j] == nil || acks[j].Err() != nil || acks[j].Val() == 0 {
				// Nothing was acknowledged either: nothing changed, the
				// script decides.
				scripts = append(scripts, i)
				continue
			}
			// Acknowledged but not read: not expected (fencedtx.go); the
			// acks stand, the error is the caller's.
			fail(i, rerr)
		case redis.IsExecAbortError(rerr):
			// The server refused to queue a command and discarded the
			// transaction: nothing ran.
			scripts = append(scripts, i)
		default:
			// The reply was not read: whether EXEC ran is unknown, so the
			// read fails, and no script may run in its place.
			if lost == nil {
				lost = rerr
			}
			fail(i, rerr)
		}
	}
	if lost != nil && transport(lost) {
		// The connection is dropped, watch and all.
		return nil, scripts, lost
	}
	if lost != nil {
		_ = unwatch(ctx, conn, op)
	}
	return nil, scripts, nil
}

// unwatchTx ends conn's watch when a transaction stops before MULTI, and
// returns the transport failure that left conn unusable, if one did: an
// error reply leaves it sound.
func unwatchTx(ctx context.Context, conn *redis.Conn) error {
	if err := conn.Do(ctx, "unwatch").Err(); transport(err) {
		return err
	}
	return nil
}

// readErr maps err, the failure of r, as the single read maps its own.
func readErr(op string, r *broker.FencedRead, err error) error {
	return mapErr(call{Op: op, Keys: []string{r.Fence.LeaseKey, r.Stream}, Fence: &r.Fence, Stream: r.Stream}, err)
}
