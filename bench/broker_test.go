package bench

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
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

// consumeAckRead is the owner's steady loop through broker.AckReader:
// per partition, each call acknowledges the batch handled last and reads
// the next one (pending first, then new) under one lease check, so a
// partition of one batch costs two calls: read it, then ack it and find
// nothing more. In ReadPendingThenNew mode the Redis adapter runs one
// script per call.
func consumeAckRead(ctx context.Context, tb testing.TB, ar broker.AckReader, streams []string, fences []broker.Fence) int {
	return consumeAckReadMode(ctx, tb, ar, streams, fences, broker.ReadPendingThenNew)
}

// consumeAckReadMode is consumeAckRead reading in mode. In ReadNew mode
// (the runtime's reads of a lane with nothing pending) the Redis adapter
// runs each call as a fenced transaction (two round trips, the entries
// in XREADGROUP's own reply).
func consumeAckReadMode(ctx context.Context, tb testing.TB, ar broker.AckReader, streams []string, fences []broker.Fence, mode broker.ReadMode) int {
	tb.Helper()
	n := 0
	var handled []string
	for i, s := range streams {
		handled = handled[:0]
		for {
			msgs, err := ar.AckAndReadPartitionFenced(ctx, fences[i], s, benchGroup, handled, benchBatch, mode)
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

// roundTrips is a go-redis hook counting round trips: a command, a
// pipeline or a transaction (MULTI ... EXEC) is one.
type roundTrips struct{ n atomic.Int64 }

func (c *roundTrips) DialHook(next redis.DialHook) redis.DialHook { return next }

func (c *roundTrips) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		c.n.Add(1)
		return next(ctx, cmd)
	}
}

func (c *roundTrips) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		c.n.Add(1)
		return next(ctx, cmds)
	}
}

// consumeLoop is one way of consuming partitions, timed and counted.
type consumeLoop struct {
	name  string
	calls *callCounter
	trips *roundTrips // optional
	run   func(streams []string, fences []broker.Fence) int

	streams []string
	fences  []broker.Fence
	dur     time.Duration
	msgs    int
	sent    int64
	rtts    int64
	// CPU time of the server (INFO cpu) and of this process (the
	// client) while the loop ran; measured only when runAlternating has
	// an admin client.
	redisCPU, procCPU time.Duration
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
	runAlternatingCPU(b, ctx, c, nil, lm, l, loops)
}

// runAlternatingCPU is runAlternating that also measures, when admin is
// not nil, the server's and this process's CPU time per loop (outside
// the timed span, one INFO per turn).
func runAlternatingCPU(b *testing.B, ctx context.Context, c redis.Cmdable, admin *redis.Client, lm broker.LeaseManager, l broker.Layout, loops []*consumeLoop) {
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
				var trips int64
				if lp.trips != nil {
					trips = lp.trips.n.Load()
				}
				var rc, pc time.Duration
				if admin != nil {
					rc, pc = rtRedisCPU(ctx, b, admin), rtProcessCPU()
				}
				start := time.Now()
				lp.msgs += lp.run(lp.streams[chunk:end], fences)
				lp.dur += time.Since(start)
				if admin != nil {
					lp.procCPU += rtProcessCPU() - pc
					lp.redisCPU += rtRedisCPU(ctx, b, admin) - rc
				}
				lp.sent += lp.calls.n.Load() - before
				if lp.trips != nil {
					lp.rtts += lp.trips.n.Load() - trips
				}
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
		if lp.trips != nil {
			b.ReportMetric(float64(lp.rtts)/float64(lp.msgs), lp.name+"-roundtrips/msg")
		}
		if admin != nil {
			perMsg := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1000 / float64(lp.msgs) }
			b.ReportMetric(perMsg(lp.redisCPU), lp.name+"-redis-cpu-µs/msg")
			b.ReportMetric(perMsg(lp.procCPU), lp.name+"-client-cpu-µs/msg")
		}
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

// BenchmarkFencedConsume compares three fenced loops against a plain
// XREADGROUP+XACK loop (the first, the baseline), each over its own 1,000
// partitions of 100 entries, batch 100, in one process and one run,
// taking turns 50 partitions at a time:
//
//   - fenced: ReadPartitionFenced (ReadPending, then ReadNew) then
//     AckPartitionFenced per batch: a fenced transaction per read, a
//     script per ack;
//   - ackread: AckAndReadPartitionFenced in ReadNew mode, one fenced
//     transaction per batch that acks the previous batch and reads the
//     next (the runtime's loop on a lane with nothing pending);
//   - ackread-script: the same loop in ReadPendingThenNew mode, one script
//     per batch (the loop before the transactions).
//
// Reported: messages per second of each, each fenced loop's ratio to the
// plain one (target >= 0.8), the Redis calls the client sends per
// consumed message (a command, or a script, is one; target <= 0.05), the
// round trips per message (a transaction or pipeline is one), and the
// server's and this process's CPU time per message.
func BenchmarkFencedConsume(b *testing.B) {
	ctx := context.Background()
	srv := testenv.StartRedis(b)
	var plainCalls, fencedCalls callCounter
	var plainTrips, fencedTrips roundTrips
	plainClient := redis.NewClient(&redis.Options{Addr: srv.Addr})
	plainClient.AddHook(&plainCalls)
	plainClient.AddHook(&plainTrips)
	fencedClient := redis.NewClient(&redis.Options{Addr: srv.Addr})
	fencedClient.AddHook(&fencedCalls)
	fencedClient.AddHook(&fencedTrips)
	admin := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer plainClient.Close()
	defer fencedClient.Close()
	defer admin.Close()
	rb := redisbroker.New(fencedClient)
	loops := consumeLoops(ctx, b, plainClient, &plainCalls, rb, &fencedCalls)
	loops[0].trips, loops[1].trips, loops[2].trips = &plainTrips, &fencedTrips, &fencedTrips
	loops[2].run = func(streams []string, fences []broker.Fence) int {
		return consumeAckReadMode(ctx, b, rb, streams, fences, broker.ReadNew)
	}
	loops = append(loops, &consumeLoop{name: "ackread-script", calls: &fencedCalls, trips: &fencedTrips,
		run: func(streams []string, fences []broker.Fence) int {
			return consumeAckReadMode(ctx, b, rb, streams, fences, broker.ReadPendingThenNew)
		}})
	runAlternatingCPU(b, ctx, plainClient, admin, rb, broker.ProteanLayout, loops)
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
