package redisbroker

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/protctl/protctl/pkg/broker"
)

// waitChunk bounds the streams of one blocking XREAD. Each chunk holds a
// pooled connection while it blocks, so chunks are large: a node waiting
// on 10,000 idle partitions (20,000 lanes) blocks on 3 connections.
const waitChunk = 8192

// nudgePrefix names the private stream a WaitForEntries call wakes its own
// blocked XREADs with. Each call has its own (random suffix); it expires.
const nudgePrefix = "__protctl__:wait:"

// nudgeAgain is how long a WaitForEntries call that nudged its XREADs
// waits for them before it nudges again. An XREAD a nudge reached returns
// within a round trip, so a second nudge is sent only when the first was
// lost.
const nudgeAgain = 250 * time.Millisecond

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
// return, so it never leaves a pooled connection blocked behind it. The
// append is repeated every nudgeAgain until every chunk has returned: a
// nudge can be lost (its XADD failed, or it expired before an XREAD that
// was slow to leave reached the server), and one lost would leave the
// call blocked for the whole timeout, and with it the caller (a node's
// wait loop, which waits for a cancelled wait to return).
//
// On a Redis Cluster (a *redis.ClusterClient) one XREAD cannot name
// streams of different slots, even on one master (CROSSSLOT), and the
// cluster layout gives every partition a slot of its own; one blocked
// connection per partition is what the design rejects. There the call
// polls instead (pollForEntries): a non-blocking XREAD per slot,
// pipelined per master, repeated every max(1 s, 1 ms x streams) until
// an entry comes, the timeout passes or ctx ends.
func (b *Broker) WaitForEntries(ctx context.Context, after map[string]string, timeout time.Duration) ([]string, error) {
	const op = "wait for entries"
	if timeout < 0 {
		return nil, &broker.InvalidArgumentError{Op: op, Arg: "timeout", Value: timeout.String(), Reason: "must not be negative"}
	}
	streams, err := waitStreams(op, after)
	if err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, mapErr(call{Op: op}, err)
	}
	if _, ok := b.client.(*redis.ClusterClient); ok {
		slices.Sort(streams)
		return b.pollForEntries(ctx, streams, after, timeout)
	}
	if len(streams) > waitChunk {
		// Chunks of the same streams from one call to the next. One chunk
		// needs no order: sorting a thousand names at every issue was a
		// tenth of a node's CPU under a steady flow.
		slices.Sort(streams)
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
		args := nudgedStreams(chunk, after, nudge)
		go func() {
			if b.beforeWait != nil {
				b.beforeWait()
			}
			res, err := b.client.XRead(rctx, &redis.XReadArgs{Streams: args, Count: 1, Block: timeout}).Result()
			if errors.Is(err, redis.Nil) {
				replies <- reply{}
				return
			}
			if err != nil {
				replies <- reply{err: mapErr(call{Op: op, Want: "stream"}, err)}
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
		again    <-chan time.Time // nudge again: some chunk still blocks
		pending  = len(chunks)
		done     = ctx.Done()
	)
	wake := func() {
		nudged = true
		if err := b.nudge(rctx, nudge); err != nil && firstErr == nil {
			firstErr = mapErr(call{Op: op}, err)
		}
		again = time.After(nudgeAgain) // from the end of this nudge
	}
	for pending > 0 {
		select {
		case r := <-replies:
			pending--
			ready = append(ready, r.ready...)
			if r.err != nil && firstErr == nil {
				firstErr = r.err
			}
			if pending > 0 && !nudged && (len(r.ready) > 0 || r.err != nil) {
				wake()
			}
		case <-done:
			done = nil
			if !nudged {
				wake()
			}
		case <-again:
			wake()
		}
	}
	if err := ctx.Err(); err != nil {
		return nil, mapErr(call{Op: op}, err)
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

// nudgedStreams are the STREAMS arguments of an XREAD of streams, each
// from the id after maps it to, and of the nudge stream from "0-0".
func nudgedStreams(streams []string, after map[string]string, nudge string) []string {
	args := make([]string, 0, 2*len(streams)+2)
	args = append(args, streams...)
	args = append(args, nudge)
	for _, s := range streams {
		args = append(args, after[s])
	}
	return append(args, "0-0")
}

// nudge appends to stream, which wakes every XREAD blocked on it from
// "0-0", including one that reaches the server after the append. The
// stream keeps one entry and expires 10 s later.
func (b *Broker) nudge(ctx context.Context, stream string) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	_, err := b.client.Pipelined(ctx, func(p redis.Pipeliner) error {
		p.XAdd(ctx, &redis.XAddArgs{Stream: stream, MaxLen: 1, Values: []any{"wake", 1}})
		p.PExpire(ctx, stream, 10*time.Second)
		return nil
	})
	return err
}

// waitStreams checks the streams and ids of a wait or a check and
// returns the streams.
func waitStreams(op string, after map[string]string) ([]string, error) {
	if len(after) == 0 {
		return nil, &broker.InvalidArgumentError{Op: op, Arg: "after", Value: "{}", Reason: "must name at least one stream"}
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
	return streams, nil
}

// EntriesAfter returns, in lexical order, the streams of after that have
// an entry with an id greater than the one after maps it to (a missing
// stream counts as empty), without blocking: one XREAD COUNT 1 per
// waitChunk streams (per slot on a Redis Cluster), pipelined. It reads
// nothing on behalf of any group. Unlike WaitForEntries it registers
// nothing on the server, so it costs the server a lookup per stream and
// nothing when a stream is appended to later.
func (b *Broker) EntriesAfter(ctx context.Context, after map[string]string) ([]string, error) {
	const op = "entries after"
	streams, err := waitStreams(op, after)
	if err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, mapErr(call{Op: op}, err)
	}
	slices.Sort(streams)
	var groups [][]string
	if _, ok := b.client.(*redis.ClusterClient); ok {
		groups = bySlot(streams)
	} else {
		groups = slices.Collect(slices.Chunk(streams, waitChunk))
	}
	return b.pollOnce(ctx, op, groups, after)
}

// Polling on a cluster: every clusterPollEvery, or every
// clusterPollPerStream per stream when that is longer. A poll sends one
// XREAD per slot, so a node's polls cost at most about 1,000 XREADs a
// second across the cluster however many partitions it watches (500 for
// partitions with two lanes); the price is latency for entries appended
// without a wake-up signal: 1 s up to 1,000 lanes, 20 s for 20,000
// (signalled entries wake the wait at once).
const (
	clusterPollEvery     = time.Second
	clusterPollPerStream = time.Millisecond
)

// pollForEntries is WaitForEntries on a Redis Cluster: streams (sorted)
// are grouped by slot; each poll is one non-blocking XREAD COUNT 1 per
// slot (a partition's lanes share one), pipelined, which go-redis sends
// as one round trip per master. An entry appended between two polls is
// seen by the next one: each poll reads from the ids in after, not from
// the previous poll. Nothing blocks on the server, so ctx is honoured
// between polls and at once.
func (b *Broker) pollForEntries(ctx context.Context, streams []string, after map[string]string, timeout time.Duration) ([]string, error) {
	const op = "wait for entries"
	every := max(clusterPollEvery, time.Duration(len(streams))*clusterPollPerStream)
	var expired <-chan time.Time
	if timeout > 0 {
		t := time.NewTimer(timeout)
		defer t.Stop()
		expired = t.C
	}
	groups := bySlot(streams)
	for {
		ready, err := b.pollOnce(ctx, op, groups, after)
		if err != nil || len(ready) > 0 {
			return ready, err
		}
		t := time.NewTimer(every)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, mapErr(call{Op: op}, ctx.Err())
		case <-expired:
			t.Stop()
			return nil, nil
		case <-t.C:
		}
	}
}

// pollOnce reads, for each group of same-slot streams, whether any has
// an entry after its id in after, and returns those streams in lexical
// order.
func (b *Broker) pollOnce(ctx context.Context, op string, groups [][]string, after map[string]string) ([]string, error) {
	var ready []string
	for chunk := range slices.Chunk(groups, 1000) {
		cmds := make([]*redis.XStreamSliceCmd, len(chunk))
		_, err := b.client.Pipelined(ctx, func(p redis.Pipeliner) error {
			for i, g := range chunk {
				args := make([]string, 0, 2*len(g))
				args = append(args, g...)
				for _, s := range g {
					args = append(args, after[s])
				}
				cmds[i] = p.XRead(ctx, &redis.XReadArgs{Streams: args, Count: 1, Block: -1})
			}
			return nil
		})
		if err := ctx.Err(); err != nil {
			return nil, mapErr(call{Op: op}, err)
		}
		for i, c := range cmds {
			res, cerr := c.Result()
			if errors.Is(cerr, redis.Nil) {
				continue
			}
			if cerr != nil {
				return nil, mapErr(call{Op: op, Key: chunk[i][0], Want: "stream"}, cerr)
			}
			for _, st := range res {
				if len(st.Messages) > 0 {
					ready = append(ready, st.Stream)
				}
			}
		}
		if err != nil && !errors.Is(err, redis.Nil) {
			return nil, mapErr(call{Op: op}, err)
		}
	}
	if len(ready) == 0 {
		return nil, nil
	}
	slices.Sort(ready)
	return ready, nil
}

// bySlot groups sorted streams by Redis Cluster hash slot, keeping each
// group sorted; groups come in the order of their first stream.
func bySlot(streams []string) [][]string {
	idx := make(map[uint16]int)
	var groups [][]string
	for _, s := range streams {
		sl := keySlot(s)
		i, ok := idx[sl]
		if !ok {
			i = len(groups)
			idx[sl] = i
			groups = append(groups, nil)
		}
		groups[i] = append(groups[i], s)
	}
	return groups
}

// keySlot is the Redis Cluster hash slot of key: CRC16 (XMODEM) of its
// hash tag (the text between the first "{" and the next "}", when not
// empty) or of the whole key, modulo 16384.
func keySlot(key string) uint16 {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			key = key[i+1 : i+1+j]
		}
	}
	var crc uint16
	for i := 0; i < len(key); i++ {
		crc ^= uint16(key[i]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc % 16384
}

// LastEntryIDs returns, for each stream, the id of its newest entry, or
// "0-0" for a missing or empty stream: XREVRANGE + - COUNT 1 per stream,
// pipelined (one round trip per 1,000 streams). It is where a caller of
// WaitForEntries waits from when it knows nothing about a stream yet
// (pkg/runtime's StreamTailer). It reads nothing on behalf of any group.
func (b *Broker) LastEntryIDs(ctx context.Context, streams []string) (map[string]string, error) {
	return lastEntryIDs(ctx, b.client.Pipelined, streams)
}

// lastEntryIDs is LastEntryIDs over pipelined (a client's or one
// connection's).
func lastEntryIDs(ctx context.Context, pipelined func(context.Context, func(redis.Pipeliner) error) ([]redis.Cmder, error), streams []string) (map[string]string, error) {
	const op = "last entry ids"
	for _, s := range streams {
		if err := nonEmpty(op, "stream", s); err != nil {
			return nil, err
		}
	}
	out := make(map[string]string, len(streams))
	for chunk := range slices.Chunk(streams, 1000) {
		cmds := make([]*redis.XMessageSliceCmd, len(chunk))
		_, err := pipelined(ctx, func(p redis.Pipeliner) error {
			for i, s := range chunk {
				cmds[i] = p.XRevRangeN(ctx, s, "+", "-", 1)
			}
			return nil
		})
		if err := tailIDs(op, out, chunk, cmds); err != nil {
			return nil, err
		}
		if err != nil {
			return nil, mapErr(call{Op: op}, err)
		}
	}
	return out, nil
}

// tailIDs records in out the newest id that each XREVRANGE + - COUNT 1 of
// cmds found in its stream of streams ("0-0" for none).
func tailIDs(op string, out map[string]string, streams []string, cmds []*redis.XMessageSliceCmd) error {
	for i, c := range cmds {
		msgs, err := c.Result()
		if err != nil {
			return mapErr(call{Op: op, Key: streams[i], Want: "stream"}, err)
		}
		out[streams[i]] = "0-0"
		if len(msgs) > 0 {
			out[streams[i]] = msgs[0].ID
		}
	}
	return nil
}
