package redisbroker

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"slices"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/protctl/protctl/pkg/broker"
)

var _ broker.WaitReader = (*Broker)(nil)

// waitReadNudges names the nudge stream of each WaitAndReadPartitionsFenced
// call: a prefix drawn once per process and a counter, so that a call
// costs no random draw of its own and no two calls share a stream (a nudge
// left by one would end the next one's wait at once).
var waitReadNudges = struct {
	prefix string
	n      atomic.Uint64
}{prefix: func() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return nudgePrefix + "r:" + hex.EncodeToString(b[:]) + ":"
}()}

// waitReadMargin is how much shorter than the client's ReadTimeout a
// wait may block: go-redis reads a pipeline's replies under ReadTimeout,
// and a wait that outlasted it would fail the connection and lose the
// reads' replies.
const waitReadMargin = 500 * time.Millisecond

// WaitAndReadPartitionsFenced sends, in one pipeline on one connection, a
// PING, ack.lua for each read with ids to acknowledge, an XREAD BLOCK
// COUNT 1 over the streams of after (each from its id) and a private
// nudge stream, then ackread.lua for each read, with no ack: the
// server runs the reads as soon as the XREAD returns, so an entry that
// ends the wait is read, under the lease check, without a round trip of
// its own. The PING comes first for runScriptsOn's reason: go-redis
// decides from the first reply alone whether to send a pipeline again,
// and sending it again would run the reads twice.
//
// go-redis cannot interrupt a blocked read, so stop and ctx are honoured
// as WaitForEntries honours ctx: by appending to the call's nudge stream
// (every nudgeAgain until the call returns), which the XREAD reads from
// "0-0" and so returns at once, even when the nudge reached the server
// first.
//
// Only on a single-node client (*redis.Client, Sentinel included): one
// XREAD cannot name streams of several slots of a Cluster, and a Ring
// gives no connection of its own. The connection is held for the whole
// wait and counts against the Broker's PinLimit (WithPinLimit): when the
// limit is reached, ok is false and nothing is sent. A wait longer than
// the client's ReadTimeout less waitReadMargin is shortened to it.
// Invalid arguments fail the call (WaitErr and every read) without
// sending anything; an invalid read fails alone.
func (b *Broker) WaitAndReadPartitionsFenced(ctx context.Context, stop <-chan struct{}, after map[string]string, block time.Duration, reads []broker.FencedRead) (broker.WaitedReads, bool) {
	const op = "wait and read"
	c, single := b.client.(*redis.Client)
	if !single || ctx.Err() != nil || closed(stop) {
		return broker.WaitedReads{}, false
	}
	out := broker.WaitedReads{Reads: make([]broker.ReadResult, len(reads))}
	streams, err := waitStreams(op, after)
	if err == nil && block < 0 {
		err = &broker.InvalidArgumentError{Op: op, Arg: "block", Value: block.String(), Reason: "must not be negative"}
	}
	if err != nil {
		out.WaitErr = err
		for i := range out.Reads {
			out.Reads[i].Err = err
		}
		return out, true
	}
	valid := make([]int, 0, len(reads))
	for i := range reads {
		if err := b.validRead(op, &reads[i]); err != nil {
			out.Reads[i].Err = err
			continue
		}
		valid = append(valid, i)
	}
	if !b.cfg.pins.take() {
		return broker.WaitedReads{}, false
	}
	defer b.cfg.pins.give()
	if rt := c.Options().ReadTimeout; rt > 0 {
		block = min(block, max(rt-waitReadMargin, rt/2))
	}
	block = max(block, time.Millisecond) // BLOCK 0 would mean forever

	nudge := waitReadNudges.prefix + strconv.FormatUint(waitReadNudges.n.Add(1), 36)
	args := nudgedStreams(streams, after, nudge)
	// The reads run with no ack: their acks go before the wait.
	var (
		acks    []scriptCall
		ackedBy []int // per ack call, its read's index in valid
		bare    = make([]broker.FencedRead, len(reads))
	)
	for j, i := range valid {
		r := reads[i]
		if len(r.Ack) > 0 {
			args := make([]any, 0, 2+len(r.Ack))
			args = append(args, r.Fence.Token, r.Group)
			for _, id := range r.Ack {
				args = append(args, id)
			}
			acks = append(acks, scriptCall{keys: []string{r.Fence.LeaseKey, r.Stream}, args: args})
			ackedBy = append(ackedBy, j)
		}
		r.Ack = nil
		bare[i] = r
	}
	calls := ackReadCalls(bare, valid)

	// The pipeline must not be cancelled by ctx: a cancelled go-redis
	// call leaves its connection blocked on the server, and the reads'
	// replies unread. ctx is honoured by the nudge.
	rctx := context.WithoutCancel(ctx)
	returned := make(chan struct{})
	nudged := make(chan struct{})
	go func() {
		defer close(nudged)
		select {
		case <-returned:
			return
		case <-stop:
		case <-ctx.Done():
		}
		for {
			_ = b.nudge(rctx, nudge) // a failed nudge is sent again
			t := time.NewTimer(nudgeAgain)
			select {
			case <-returned:
				t.Stop()
				return
			case <-t.C:
			}
		}
	}()
	conn := c.Conn()
	defer conn.Close()
	if !b.waitScripts.Load() {
		// Loaded first, once (and again after a NOSCRIPT): an EVALSHA
		// refused behind the wait would send its acks only once the
		// wait ended, leaving what the caller handled pending meanwhile.
		err := ackScript.Load(rctx, conn).Err()
		if err == nil {
			err = ackReadScript.Load(rctx, conn).Err()
		}
		b.waitScripts.Store(err == nil)
	}
	if b.beforeWaitRead != nil {
		b.beforeWaitRead()
	}
	var xread *redis.XStreamSliceCmd
	ackCmds := make([]*redis.Cmd, len(acks))
	cmds := make([]*redis.Cmd, len(calls))
	_, _ = conn.Pipelined(rctx, func(p redis.Pipeliner) error {
		p.Ping(rctx)
		for k, cl := range acks {
			ackCmds[k] = ackScript.EvalSha(rctx, p, cl.keys, cl.args...)
		}
		xread = p.XRead(rctx, &redis.XReadArgs{Streams: args, Count: 1, Block: block})
		for j, cl := range calls {
			cmds[j] = ackReadScript.EvalSha(rctx, p, cl.keys, cl.args...)
		}
		return nil
	})
	close(returned)
	<-nudged

	// A script the server did not know (restarted, or SCRIPT FLUSH) ran
	// nothing: run it again, with its body, without the wait, the acks
	// first.
	noScript := func(cmd *redis.Cmd) bool {
		err := cmd.Err()
		return err != nil && redis.HasErrorPrefix(err, "NOSCRIPT")
	}
	if slices.ContainsFunc(ackCmds, noScript) || slices.ContainsFunc(cmds, noScript) {
		b.waitScripts.Store(false)
		_, _ = conn.Pipelined(rctx, func(p redis.Pipeliner) error {
			p.Ping(rctx)
			for k, cmd := range ackCmds {
				if noScript(cmd) {
					ackCmds[k] = ackScript.Eval(rctx, p, acks[k].keys, acks[k].args...)
				}
			}
			for j, cmd := range cmds {
				if noScript(cmd) {
					cmds[j] = ackReadScript.Eval(rctx, p, calls[j].keys, calls[j].args...)
				}
			}
			return nil
		})
	}
	for j, cmd := range cmds {
		out.Reads[valid[j]] = ackReadResult(op, &reads[valid[j]], calls[j], cmd)
	}
	for k, cmd := range ackCmds {
		if err := cmd.Err(); err != nil {
			i := valid[ackedBy[k]]
			out.Reads[i].Err = mapErr(call{Op: op, Keys: acks[k].keys, Fence: &reads[i].Fence, Stream: reads[i].Stream}, err)
		}
	}

	res, err := xread.Result()
	switch {
	case errors.Is(err, redis.Nil):
	case err != nil:
		out.WaitErr = mapErr(call{Op: op, Want: "stream"}, err)
	default:
		for _, st := range res {
			if st.Stream != nudge && len(st.Messages) > 0 {
				out.Ready = append(out.Ready, st.Stream)
			}
		}
		slices.Sort(out.Ready)
	}
	return out, true
}

// closed reports whether ch is closed (a nil ch never is).
func closed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}
