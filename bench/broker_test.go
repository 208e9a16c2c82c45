package bench

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/protctl/protctl/internal/testenv"
	"github.com/protctl/protctl/pkg/broker"
	"github.com/protctl/protctl/pkg/broker/redisbroker"
)

const (
	benchCategory   = "bench::order"
	benchGroup      = "bench.Consumer"
	benchPartitions = 1000
	benchEntries    = 100
	benchBatch      = 100
)

// populate writes benchEntries entries to each of benchPartitions streams
// of category (pipelined, not measured) and returns the streams.
func populate(ctx context.Context, tb testing.TB, c redis.Cmdable, l broker.Layout, category string) []string {
	tb.Helper()
	body := `{"data":{"n":1},"metadata":{"headers":{"id":"x","type":"Bench"}}}`
	streams := make([]string, benchPartitions)
	pipe := c.Pipeline()
	for p := 0; p < benchPartitions; p++ {
		key := partitionKey(category, p)
		streams[p] = l.Stream(category, key)
		pipe.SAdd(ctx, l.IndexKey(category), key)
		for e := 0; e < benchEntries; e++ {
			pipe.XAdd(ctx, &redis.XAddArgs{Stream: streams[p], Values: []string{broker.DataField, body}})
		}
		if p%50 == 49 {
			if _, err := pipe.Exec(ctx); err != nil {
				tb.Fatal(err)
			}
		}
	}
	if _, err := pipe.Exec(ctx); err != nil {
		tb.Fatal(err)
	}
	return streams
}

// partitionKey names partition p of category; keys differ between
// categories, so that the loops' leases (named by group and key) do not
// collide.
func partitionKey(category string, p int) string {
	return fmt.Sprintf("%s-k%d", strings.ReplaceAll(category, ":", "."), p)
}

// consumePlain is the baseline: the loop a consumer without fencing runs,
// XREADGROUP COUNT n then one XACK of the batch, per partition.
func consumePlain(ctx context.Context, tb testing.TB, c redis.Cmdable, streams []string) int {
	tb.Helper()
	n := 0
	for _, s := range streams {
		if err := c.XGroupCreateMkStream(ctx, s, benchGroup, "0").Err(); err != nil {
			tb.Fatal(err)
		}
		for {
			res, err := c.XReadGroup(ctx, &redis.XReadGroupArgs{
				Group: benchGroup, Consumer: "plain", Streams: []string{s, ">"}, Count: benchBatch, Block: -1,
			}).Result()
			if err == redis.Nil {
				break
			}
			if err != nil {
				tb.Fatal(err)
			}
			msgs := res[0].Messages
			if len(msgs) == 0 {
				break
			}
			ids := make([]string, len(msgs))
			for i, m := range msgs {
				ids[i] = m.ID
			}
			if err := c.XAck(ctx, s, benchGroup, ids...).Err(); err != nil {
				tb.Fatal(err)
			}
			n += len(msgs)
		}
	}
	return n
}

// consumeFenced is the same work through the contract: per partition the
// owner's loop of fenced batched reads (pending first, then new) and one
// fenced ack per batch. Leases are acquired before the clock starts, as a
// node holds them across many batches.
func consumeFenced(ctx context.Context, tb testing.TB, b broker.FencedConsumer, streams []string, fences []broker.Fence) int {
	tb.Helper()
	n := 0
	for i, s := range streams {
		// A new owner first drains its pending list (here empty, as after a
		// reclaim of nothing), then loops on new entries: the runtime's
		// steady state.
		mode := broker.ReadPending
		for {
			msgs, err := b.ReadPartitionFenced(ctx, fences[i], s, benchGroup, benchBatch, mode)
			if err != nil {
				tb.Fatal(err)
			}
			if len(msgs) == 0 {
				if mode == broker.ReadPending {
					mode = broker.ReadNew
					continue
				}
				break
			}
			ids := make([]string, len(msgs))
			for j, m := range msgs {
				ids[j] = m.ID
			}
			if _, err := b.AckPartitionFenced(ctx, fences[i], s, benchGroup, ids...); err != nil {
				tb.Fatal(err)
			}
			n += len(msgs)
		}
	}
	return n
}

// consumeAckRead is the runtime's steady loop through broker.AckReader:
// per partition, each call acknowledges the batch handled last and reads
// the next one (pending first, then new) under one lease check, so a
// partition of one batch costs two calls: read it, then ack it and find
// nothing more.
func consumeAckRead(ctx context.Context, tb testing.TB, ar broker.AckReader, streams []string, fences []broker.Fence) int {
	tb.Helper()
	n := 0
	var handled []string
	for i, s := range streams {
		handled = handled[:0]
		for {
			msgs, err := ar.AckAndReadPartitionFenced(ctx, fences[i], s, benchGroup, handled, benchBatch, broker.ReadPendingThenNew)
			if err != nil {
				// Error, not Fatal: consumeParallel runs this off the
				// benchmark's goroutine; the caller's count check fails.
				tb.Error(err)
				return n
			}
			if len(msgs) == 0 {
				break
			}
			handled = handled[:0]
			for _, m := range msgs {
				handled = append(handled, m.ID)
			}
			n += len(msgs)
		}
	}
	return n
}

// acquireAll takes the lease of every partition populate wrote for
// category (not timed: a node holds its leases across many batches).
func acquireAll(ctx context.Context, tb testing.TB, b broker.LeaseManager, l broker.Layout, category string) []broker.Fence {
	tb.Helper()
	fences := make([]broker.Fence, benchPartitions)
	for p := range fences {
		key := partitionKey(category, p)
		lease, ok, err := b.AcquirePartitionLease(ctx, l.LeaseKey(benchGroup, key), l.GenerationKey(benchGroup, key), "bench-node", time.Hour)
		if err != nil || !ok {
			tb.Fatalf("acquire %s: %v %v", key, ok, err)
		}
		fences[p] = lease.Fence
	}
	return fences
}

// consumeLoop is one way of consuming partitions, timed and counted.
type consumeLoop struct {
	name  string
	calls *callCounter
	run   func(streams []string, fences []broker.Fence) int

	streams []string
	fences  []broker.Fence
	dur     time.Duration
	msgs    int
	sent    int64
}

// benchChunk is how many partitions one loop consumes before the next
// loop takes its turn.
const benchChunk = 50

// runAlternating populates a category per loop (not timed), then lets the
// loops take turns, benchChunk partitions at a time, rotating which goes
// first, so that whatever else the machine does in the meantime hits all
// of them alike. Only the consuming is timed.
func runAlternating(b *testing.B, ctx context.Context, c redis.Cmdable, lm broker.LeaseManager, l broker.Layout, loops []*consumeLoop) {
	b.Helper()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		if err := flushAll(ctx, c); err != nil {
			b.Fatal(err)
		}
		for _, lp := range loops {
			category := benchCategory + "." + lp.name
			lp.streams = populate(ctx, b, c, l, category)
			lp.fences = nil
			if lp.name != "plain" {
				lp.fences = acquireAll(ctx, b, lm, l, category)
			}
		}
		b.StartTimer()
		for chunk, turn := 0, 0; chunk < benchPartitions; chunk, turn = chunk+benchChunk, turn+1 {
			end := min(chunk+benchChunk, benchPartitions)
			for k := range loops {
				lp := loops[(turn+k)%len(loops)]
				var fences []broker.Fence
				if lp.fences != nil {
					fences = lp.fences[chunk:end]
				}
				before := lp.calls.n.Load()
				start := time.Now()
				lp.msgs += lp.run(lp.streams[chunk:end], fences)
				lp.dur += time.Since(start)
				lp.sent += lp.calls.n.Load() - before
			}
		}
	}
	b.StopTimer()
	want := b.N * benchPartitions * benchEntries
	for _, lp := range loops {
		if lp.msgs != want {
			b.Fatalf("%s consumed %d, want %d", lp.name, lp.msgs, want)
		}
	}
	rate := func(lp *consumeLoop) float64 { return float64(lp.msgs) / lp.dur.Seconds() }
	base := rate(loops[0])
	for _, lp := range loops {
		b.ReportMetric(rate(lp), lp.name+"-msgs/s")
		b.ReportMetric(float64(lp.sent)/float64(lp.msgs), lp.name+"-calls/msg")
		if lp != loops[0] {
			b.ReportMetric(rate(lp)/base, lp.name+"-ratio")
		}
	}
}

// flushAll empties the server, or every master of a cluster.
func flushAll(ctx context.Context, c redis.Cmdable) error {
	if cc, ok := c.(*redis.ClusterClient); ok {
		return cc.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error {
			return m.FlushAll(ctx).Err()
		})
	}
	return c.FlushAll(ctx).Err()
}

// BenchmarkFencedConsume compares two fenced loops against a plain
// XREADGROUP+XACK loop (the first, the baseline), each over its own 1,000
// partitions of 100 entries, batch 100, in one process and one run,
// taking turns 50 partitions at a time:
//
//   - fenced: ReadPartitionFenced then AckPartitionFenced per batch, two
//     scripts per batch;
//   - ackread: AckAndReadPartitionFenced, one script per batch that acks
//     the previous batch and reads the next (the runtime's steady loop).
//
// Reported: messages per second of each, each fenced loop's ratio to the
// plain one (target >= 0.8) and the Redis calls the client sends per
// consumed message (target <= 0.05).
func BenchmarkFencedConsume(b *testing.B) {
	ctx := context.Background()
	srv := testenv.StartRedis(b)
	var plainCalls, fencedCalls callCounter
	plainClient := redis.NewClient(&redis.Options{Addr: srv.Addr})
	plainClient.AddHook(&plainCalls)
	fencedClient := redis.NewClient(&redis.Options{Addr: srv.Addr})
	fencedClient.AddHook(&fencedCalls)
	defer plainClient.Close()
	defer fencedClient.Close()
	rb := redisbroker.New(fencedClient)
	runAlternating(b, ctx, plainClient, rb, broker.ProteanLayout, consumeLoops(ctx, b, plainClient, &plainCalls, rb, &fencedCalls))
}

// consumeLoops returns the plain baseline and the two fenced loops.
func consumeLoops(ctx context.Context, b *testing.B, plain redis.Cmdable, plainCalls *callCounter, rb *redisbroker.Broker, fencedCalls *callCounter) []*consumeLoop {
	return []*consumeLoop{
		{name: "plain", calls: plainCalls, run: func(streams []string, _ []broker.Fence) int {
			return consumePlain(ctx, b, plain, streams)
		}},
		{name: "fenced", calls: fencedCalls, run: func(streams []string, fences []broker.Fence) int {
			return consumeFenced(ctx, b, rb, streams, fences)
		}},
		{name: "ackread", calls: fencedCalls, run: func(streams []string, fences []broker.Fence) int {
			return consumeAckRead(ctx, b, rb, streams, fences)
		}},
	}
}
