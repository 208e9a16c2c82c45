package redisbroker

import (
	"context"
	"errors"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/protctl/protctl/pkg/broker"
	"github.com/protctl/protctl/pkg/internal/redisadapter"
)

// The fenced reads of one id ("0", the pending list, or ">", new entries)
// run as an optimistic transaction instead of a script, so that the
// entries come back in XREADGROUP's own reply instead of going through
// Lua tables (about 3 µs per entry on the server, which a plain consumer
// does not pay). docs/decisions/0023-fenced-read-transactions.md has the
// reasoning and the costs.
//
// On one connection:
//
//	round trip 1:  WATCH lease, GET lease
//	               (the client compares the value with the token)
//	round trip 2:  MULTI, XACK stream group ids... (or, with nothing to
//	               ack, XGROUP CREATE stream group 0 MKSTREAM),
//	               XREADGROUP GROUP group token COUNT n STREAMS stream id, EXEC
//
// EXEC runs the queued commands only if nothing wrote the lease key (nor
// expired it) since the WATCH, which came before the GET: the lease was
// the token when it was read and still is when XACK and XREADGROUP run,
// the same guarantee as the script's GET-and-compare. EXEC refuses (a nil
// reply) when the key was touched, even by the owner's own renewal: then
// the whole check is redone, at most txAttempts times, and after that the
// call runs the script, which always decides.
//
// Everything else the scripts check or handle is left to them: a lease
// that is not the token (the script then raises PROTCTL_LEASELOST, or
// PROTCTL_WRONGTYPE for a stream of the wrong type, which it checks
// first), a lease of the wrong type, a group or stream deleted under an
// owner that acks (NOGROUP: the script creates the group from 0 with
// MKSTREAM and reads again), a stream of the wrong type, a command the server refused to queue. In
// each of these cases the transaction changed nothing (XACK of a missing
// group or key acknowledges nothing; a refused transaction runs nothing),
// so the call runs the script and returns exactly what the script
// returns. ReadPendingThenNew (read new entries only if nothing is
// pending) is a condition inside the write, which MULTI cannot express,
// so that mode always runs the script.

// txAttempts bounds how many times a fenced transaction is tried before
// the call falls back to the script. EXEC refuses only when the lease key
// was written or expired between the WATCH and the EXEC, which for a
// live owner means a renewal (one per lease per renewal period) landed in
// that window of a few hundred microseconds: two refusals in a row are
// already rare.
const txAttempts = 3

// txOutcome says whether a fenced transaction decided the call.
type txOutcome int

const (
	txDecided  txOutcome = iota // msgs and err are the call's result
	txFallback                  // nothing was changed: run the script
)

// txClient returns the client of the server that holds key, on which a
// fenced transaction can run, or nil when the broker's client cannot run
// one (a Ring, or a test double): then the scripts run.
func (b *Broker) txClient(ctx context.Context, key string) *redis.Client {
	if b.cfg.scriptReads {
		return nil
	}
	switch c := b.client.(type) {
	case *redis.Client:
		if !b.multiAllowed(ctx, c) {
			return nil
		}
		return c
	case *redis.ClusterClient:
		// The lease and the stream share a slot in the cluster layout
		// (hash tag {K}). In the Protean layout on a cluster they do not,
		// and the server refuses to queue the XREADGROUP (MOVED): the
		// script then runs and fails as it always did (CROSSSLOT).
		n, err := c.MasterForKey(ctx, key)
		if err != nil || !b.multiAllowed(ctx, n) {
			return nil
		}
		return n
	}
	return nil
}

// tx runs the fenced transaction on pc's connection when pc can (it is
// taken from c, and the PinLimit allows it), else on a connection of its
// own (readTx).
func (b *Broker) tx(ctx context.Context, pc *pinnedConn, c *redis.Client, op string, f broker.Fence, stream, group string, ack []string, count int64, id string) ([]broker.Message, txOutcome, error) {
	if pc != nil && pc.client == c && pc.pin(ctx) {
		return pc.readTx(ctx, op, f, stream, group, ack, count, id)
	}
	return b.readTx(ctx, c, op, f, stream, group, ack, count, id)
}

// readTx runs the fenced transaction for one XREADGROUP of stream from id
// ("0" or ">"), acknowledging ack first. It returns txFallback when the
// script must decide the call.
func (b *Broker) readTx(ctx context.Context, c *redis.Client, op string, f broker.Fence, stream, group string, ack []string, count int64, id string) ([]broker.Message, txOutcome, error) {
	conn := c.Conn()
	defer conn.Close()
	for attempt := 0; attempt < txAttempts; attempt++ {
		msgs, outcome, retry, err := b.readTxOnce(ctx, c, conn, op, f, stream, group, ack, count, id)
		if !retry {
			return msgs, outcome, err
		}
	}
	return nil, txFallback, nil
}

// readTxOnce is one attempt of readTx. retry says EXEC refused because
// the lease key was touched after the WATCH.
func (b *Broker) readTxOnce(ctx context.Context, c *redis.Client, conn *redis.Conn, op string, f broker.Fence, stream, group string, ack []string, count int64, id string) (msgs []broker.Message, outcome txOutcome, retry bool, err error) {
	fail := func(err error) ([]broker.Message, txOutcome, bool, error) {
		return nil, txDecided, false, mapErr(call{Op: op, Keys: []string{f.LeaseKey, stream}, Fence: &f, Stream: stream}, err)
	}
	var get *redis.StringCmd
	_, err = conn.Pipelined(ctx, func(p redis.Pipeliner) error {
		p.Do(ctx, "watch", f.LeaseKey)
		get = p.Get(ctx, f.LeaseKey)
		return nil
	})
	// From here until EXEC (or UNWATCH) the connection watches the lease
	// key; every way out that does not reach EXEC unwatches, so that the
	// connection goes back to the pool clean. A transport failure closes
	// the connection instead (go-redis drops a connection in a bad state,
	// and a Conn never hands out another one), and with it the watch.
	if err != nil && !errors.Is(err, redis.Nil) {
		if redisadapter.Unavailable(err) {
			_ = unwatch(ctx, conn, op) // a reply such as LOADING leaves the connection usable
			return fail(err)
		}
		// WRONGTYPE (the lease is not a string), MOVED, ...: the
		// script's checks name the error.
		return nil, txFallback, false, unwatch(ctx, conn, op)
	}
	if v, gerr := get.Result(); gerr != nil || v != f.Token {
		// Not the token (or no lease at all): the script returns
		// PROTCTL_LEASELOST, or PROTCTL_WRONGTYPE when the stream is not
		// a stream, which it checks before the lease.
		return nil, txFallback, false, unwatch(ctx, conn, op)
	}
	if b.betweenTx != nil {
		b.betweenTx()
	}

	var (
		ackCmd *redis.IntCmd
		create *redis.StatusCmd
	)
	read := redis.NewRawCmd(ctx, "xreadgroup", "group", group, f.Token, "count", count, "streams", stream, id)
	_, err = conn.TxPipelined(ctx, func(p redis.Pipeliner) error {
		if len(ack) > 0 {
			ackCmd = p.XAck(ctx, stream, group, ack...)
		} else {
			// A call without acks is often an owner's first read of the
			// lane, for which the group may not exist yet: create it as
			// the script does on NOGROUP (from 0, MKSTREAM), here ahead
			// of the read. An existing group refuses (BUSYGROUP) and
			// stays as it is. With acks the group existed at the read
			// that returned them; if it was deleted since, the read
			// fails with NOGROUP and the script recovers.
			create = p.XGroupCreateMkStream(ctx, stream, group, "0")
		}
		return p.Process(ctx, read)
	})
	queued := []redis.Cmder{read}
	if ackCmd != nil {
		queued = append(queued, ackCmd)
	}
	if create != nil {
		queued = append(queued, create)
	}
	if b.multiRefusedBy(c, err, queued...) {
		// The commands ran at once, unfenced, and their replies are not
		// read: whether they ran is unknown to the caller, as with a
		// script whose reply was lost. The call fails; the script must
		// not run. The connection is dropped, not used again.
		return fail(err)
	}
	rerr := read.Err()
	if errors.Is(err, redis.TxFailedErr) || errors.Is(rerr, redis.TxFailedErr) {
		// The lease key was written (a renewal, a takeover) or expired
		// after the WATCH: nothing ran. Look again.
		return nil, txDecided, true, nil
	}
	if redis.IsExecAbortError(err) {
		// The server refused to queue a command (OOM, NOPERM, ...) and
		// discarded the transaction: nothing ran, and the commands it
		// queued hold no reply (go-redis reports the refusal as the
		// pipeline's error, on the refused command only).
		return nil, txFallback, false, nil
	}
	if rerr == nil {
		// EXEC ran. The raw reply is the read's own: entries, or an
		// error reply (a replyError).
		msgs, rerr = parseRawReadGroup(stream, read.Val())
		var re replyError
		if rerr == nil || !errors.As(rerr, &re) {
			if ackCmd != nil && ackCmd.Err() != nil {
				// XREADGROUP ran, so XACK met the same stream and group:
				// it cannot fail where the read did not. Report it all
				// the same.
				return fail(ackCmd.Err())
			}
			if rerr != nil {
				return nil, txDecided, false, fmt.Errorf("redisbroker: %s: %w", op, rerr)
			}
			return msgs, txDecided, false, nil
		}
	}
	var re replyError
	switch {
	case errors.As(rerr, &re):
		// EXEC ran and the read failed with an error reply (NOGROUP: the
		// group or the stream is missing; WRONGTYPE).
		if ackCmd == nil || ackCmd.Err() != nil || ackCmd.Val() == 0 {
			// Nothing was acknowledged either: nothing changed, the
			// script decides.
			return nil, txFallback, false, nil
		}
		// Acknowledged but not read: the read failed for a reason that
		// did not stop XACK on the same stream and group. Not expected;
		// the acks stand (the lease was held), the error is the caller's.
		return fail(rerr)
	case redis.IsExecAbortError(rerr):
		// The server refused to queue a command (MOVED, ...) and
		// discarded the transaction: nothing ran.
		return nil, txFallback, false, nil
	default:
		// The reply was not read (a transport failure, a cancelled
		// context, an error reply to MULTI): whether EXEC ran is unknown,
		// as with a script whose reply was lost, so the call fails; the
		// script must not run, since it could read past entries this
		// EXEC delivered. Let the watch go if the connection is usable.
		_ = unwatch(ctx, conn, op)
		return fail(rerr)
	}
}

// unwatch releases the watch on conn when the transaction stops before
// EXEC.
func unwatch(ctx context.Context, conn *redis.Conn, op string) error {
	if err := conn.Do(ctx, "unwatch").Err(); err != nil {
		return mapErr(call{Op: op}, err)
	}
	return nil
}

// txReadID returns the XREADGROUP id of a read mode that a transaction
// can express, or "" for ReadPendingThenNew, which only the script can.
func txReadID(mode broker.ReadMode) string {
	switch mode {
	case broker.ReadPending:
		return "0"
	case broker.ReadNew:
		return ">"
	}
	return ""
}
