package redisbroker

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"slices"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/protctl/protctl/pkg/broker"
)

var _ broker.EntryWaiter = (*Broker)(nil)

// waitChunk bounds the streams of one blocking XREAD. Each chunk holds a
// pooled connection while it blocks, so chunks are large: a node waiting
// on 10,000 idle partitions (20,000 lanes) blocks on 3 connections.
const waitChunk = 8192

// nudgePrefix names the private stream a WaitForEntries call wakes its own
// blocked XREADs with. Each call has its own (random suffix); it expires.
const nudgePrefix = "__protctl__:wait:"

// WaitForEntries blocks until at least one stream of after has an entry
// whose id is greater than the one after maps it to (a missing stream
// counts as empty), or timeout passes (0: until ctx ends), and returns
// those streams in lexical order (nil on timeout). It is one XREAD BLOCK
// ... COUNT 1 over all the streams, split into chunks of waitChunk
// streams run in parallel, so a node watching thousands of idle
// partitions costs one command per chunk per wait. It reads nothing on
// behalf of any group.
//
// go-redis cannot interrupt a blocked read, so each call adds a private
// stream of its own to every XREAD; when ctx ends, or one chunk returns
// while others still block, the call appends to that stream (XADD with a
// 10 s expiry), which wakes every chunk at once. Only then does the call
// return, so it never leaves a pooled connection blocked behind it.
//
// The streams of one XREAD must share a slot in Redis Cluster; this
// waiter is for single servers (and Sentinel), like the cross-key
// scripts of the Protean layout.
func (b *Broker) WaitForEntries(ctx context.Context, after map[string]string, timeout time.Duration) ([]string, error) {
	const op = "wait for entries"
	if len(after) == 0 {
		return nil, &broker.InvalidArgumentError{Op: op, Arg: "after", Value: "{}", Reason: "must name at least one stream"}
	}
	if timeout < 0 {
		return nil, &broker.InvalidArgumentError{Op: op, Arg: "timeout", Value: timeout.String(), Reason: "must not be negative"}
	}
	streams := make([]string, 0, len(after))
	for s, id := range after {
		if err := nonEmpty(op, "stream", s); err != nil {
			return nil, err
		}
		if _, err := broker.ParseStreamID(id); err != nil {
			return nil, &broker.InvalidArgumentError{Op: op, Arg: "id", Value: strconv.Quote(id), Reason: `want "<ms>-<seq>"`}
		}
		streams = append(streams, s)
	}
	slices.Sort(streams)
	if err := ctx.Err(); err != nil {
		return nil, mapErr(call{op: op}, err)
	}
	if timeout > 0 && timeout < time.Millisecond {
		timeout = time.Millisecond // BLOCK 0 would mean forever
	}

	var suffix [8]byte
	_, _ = rand.Read(suffix[:])
	nudge := nudgePrefix + hex.EncodeToString(suffix[:])

	type reply struct {
		ready []string
		err   error
	}
	chunks := slices.Collect(slices.Chunk(streams, waitChunk))
	replies := make(chan reply, len(chunks))
	// The XREADs must not be cancelled by ctx: a cancelled go-redis call
	// leaves its connection blocked on the server. ctx is honoured by
	// nudging instead.
	rctx := context.WithoutCancel(ctx)
	for _, chunk := range chunks {
		args := make([]string, 0, 2*len(chunk)+2)
		args = append(args, chunk...)
		args = append(args, nudge)
		for _, s := range chunk {
			args = append(args, after[s])
		}
		args = append(args, "0-0")
		go func() {
			res, err := b.client.XRead(rctx, &redis.XReadArgs{Streams: args, Count: 1, Block: timeout}).Result()
			if errors.Is(err, redis.Nil) {
				replies <- reply{}
				return
			}
			if err != nil {
				replies <- reply{err: mapErr(call{op: op, want: "stream"}, err)}
				return
			}
			var ready []string
			for _, st := range res {
				if st.Stream != nudge && len(st.Messages) > 0 {
					ready = append(ready, st.Stream)
				}
			}
			replies <- reply{ready: ready}
		}()
	}

	var (
		ready    []string
		firstErr error
		nudged   bool
		pending  = len(chunks)
		done     = ctx.Done()
	)
	wake := func() {
		if nudged {
			return
		}
		nudged = true
		nctx, cancel := context.WithTimeout(rctx, 5*time.Second)
		defer cancel()
		_, err := b.client.Pipelined(nctx, func(p redis.Pipeliner) error {
			p.XAdd(nctx, &redis.XAddArgs{Stream: nudge, MaxLen: 1, Values: []any{"wake", 1}})
			p.PExpire(nctx, nudge, 10*time.Second)
			return nil
		})
		if err != nil && firstErr == nil {
			firstErr = mapErr(call{op: op}, err)
		}
	}
	for pending > 0 {
		select {
		case r := <-replies:
			pending--
			ready = append(ready, r.ready...)
			if r.err != nil && firstErr == nil {
				firstErr = r.err
			}
			if pending > 0 && (len(r.ready) > 0 || r.err != nil) {
				wake()
			}
		case <-done:
			done = nil
			wake()
		}
	}
	if err := ctx.Err(); err != nil {
		return nil, mapErr(call{op: op}, err)
	}
	if firstErr != nil && len(ready) == 0 {
		return nil, firstErr
	}
	if len(ready) == 0 {
		return nil, nil
	}
	slices.Sort(ready)
	return ready, nil
}

// LastEntryIDs returns, for each stream, the id of its newest entry, or
// "0-0" for a missing or empty stream: XREVRANGE + - COUNT 1 per stream,
// pipelined (one round trip per 1,000 streams). It is where a caller of
// WaitForEntries waits from when it knows nothing about a stream yet
// (pkg/runtime's StreamTailer). It reads nothing on behalf of any group.
func (b *Broker) LastEntryIDs(ctx context.Context, streams []string) (map[string]string, error) {
	const op = "last entry ids"
	for _, s := range streams {
		if err := nonEmpty(op, "stream", s); err != nil {
			return nil, err
		}
	}
	out := make(map[string]string, len(streams))
	for chunk := range slices.Chunk(streams, 1000) {
		cmds := make([]*redis.XMessageSliceCmd, len(chunk))
		_, err := b.client.Pipelined(ctx, func(p redis.Pipeliner) error {
			for i, s := range chunk {
				cmds[i] = p.XRevRangeN(ctx, s, "+", "-", 1)
			}
			return nil
		})
		for i, c := range cmds {
			msgs, cerr := c.Result()
			if cerr != nil {
				return nil, mapErr(call{op: op, key: chunk[i], want: "stream"}, cerr)
			}
			out[chunk[i]] = "0-0"
			if len(msgs) > 0 {
				out[chunk[i]] = msgs[0].ID
			}
		}
		if err != nil {
			return nil, mapErr(call{op: op}, err)
		}
	}
	return out, nil
}
