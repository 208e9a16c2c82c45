package bench

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/protctl/protctl/internal/testenv"
	"github.com/protctl/protctl/pkg/runtime"
	"github.com/protctl/protctl/pkg/runtime/partitioned"
)

// rtPlainConsume is the baseline: workers goroutines take partitions one
// at a time and run the loop a consumer without fencing runs on each,
// XREADGROUP COUNT batch then one XACK of the batch, until the partition
// is drained. It returns the messages consumed.
func rtPlainConsume(ctx context.Context, tb testing.TB, c *redis.Client, streams []string, group string, batch, workers int) int64 {
	tb.Helper()
	var n atomic.Int64
	work := make(chan string, len(streams))
	for _, s := range streams {
		work <- s
	}
	close(work)
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for s := range work {
				if err := c.XGroupCreateMkStream(ctx, s, group, "0").Err(); err != nil {
					tb.Error(err)
					return
				}
				for {
					res, err := c.XReadGroup(ctx, &redis.XReadGroupArgs{
						Group: group, Consumer: "plain", Streams: []string{s, ">"}, Count: int64(batch), Block: -1,
					}).Result()
					if err == redis.Nil {
						break
					}
					if err != nil {
						tb.Error(err)
						return
					}
					msgs := res[0].Messages
					if len(msgs) == 0 {
						break
					}
					ids := make([]string, len(msgs))
					for i, m := range msgs {
						ids[i] = m.ID // the no-op "handler"
					}
					if err := c.XAck(ctx, s, group, ids...).Err(); err != nil {
						tb.Error(err)
						return
					}
					n.Add(int64(len(msgs)))
				}
			}
		}()
	}
	wg.Wait()
	return n.Load()
}

// BenchmarkRuntimeThroughput compares the partitioned runtime (a Node with
// one subscription, no-op handler, 16 workers) with plain XREADGROUP+XACK
// consumers on the same streams in the same run: 1,000 partitions of 100
// entries (PROTCTL_BENCH_PARTITIONS, PROTCTL_BENCH_ENTRIES), batch 100.
// Each iteration writes the streams once; every consumer reads all of
// them with its own group, in rotating order:
//
//   - plain16: 16 goroutines, each draining one partition at a time (the
//     same parallelism as the runtime);
//   - plain1: one loop over the partitions (the baseline of the broker
//     benchmark, bench/broker_test.go).
//
// The runtime's time runs from Start to the last handler call, so it
// includes joining, discovery, and per partition a lease acquisition, the
// tails of its lanes and (here never needed) the reclaim and ledger check
// of a handover. Reported: messages per second of each, the runtime's
// ratio to each baseline (target >= 0.8), the calls the runtime's client
// sent per message (a command or a script counts as one, a transaction
// as its commands) and its round trips per message (plain16 makes 4 per
// partition: 0.04), and the server's and each client's CPU time per
// message.
func BenchmarkRuntimeThroughput(b *testing.B) {
	ctx := context.Background()
	srv := testenv.StartRedis(b)
	partitions := rtEnvInt(b, "PROTCTL_BENCH_PARTITIONS", 1000)
	entries := rtEnvInt(b, "PROTCTL_BENCH_ENTRIES", 100)
	const (
		batch   = 100
		workers = 16
	)
	admin := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer admin.Close()
	plain := redis.NewClient(&redis.Options{Addr: srv.Addr, PoolSize: 64})
	defer plain.Close()

	type result struct {
		dur      time.Duration
		msgs     int64
		redisCPU time.Duration // the server's CPU time (INFO cpu)
		procCPU  time.Duration // this process's CPU time (consumer side)
	}
	measure := func(r *result, run func() int64) {
		rc, pc := rtRedisCPU(ctx, b, admin), rtProcessCPU()
		start := time.Now()
		r.msgs += run()
		r.dur += time.Since(start)
		r.redisCPU += rtRedisCPU(ctx, b, admin) - rc
		r.procCPU += rtProcessCPU() - pc
	}
	var (
		plain16, plain1, rt result
		rtSent, rtTrips     int64
	)
	total := int64(partitions * entries)
	var (
		runNode func() int64
		stopped chan struct{}
	)
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		if err := admin.FlushAll(ctx).Err(); err != nil {
			b.Fatal(err)
		}
		streams := rtPopulate(ctx, b, admin, rtCategory, partitions, entries)
		b.StartTimer()

		runPlain := func(r *result, group string, workers int) func() {
			return func() {
				measure(r, func() int64 { return rtPlainConsume(ctx, b, plain, streams, group, batch, workers) })
			}
		}
		runRuntime := func() { measure(&rt, runNode) }
		runNode = func() int64 {
			var handled atomic.Int64
			done := make(chan struct{})
			h := runtime.HandlerFunc(func(context.Context, runtime.Message) error {
				if handled.Add(1) == total {
					close(done)
				}
				return nil
			})
			n, _, calls, c := rtNode(b, srv.Addr, "node-1", rtCategory, h, func(cfg *partitioned.Config) {
				cfg.BatchSize = batch
				cfg.Workers = workers
			}, nil)
			select {
			case <-done:
			case <-time.After(5 * time.Minute):
				b.Fatalf("runtime handled %d of %d", handled.Load(), total)
			}
			rtSent += calls.n.Load()
			rtTrips += calls.trips.Load()
			// Stopping is not part of consuming: it runs after the
			// measurement (measure reads the clocks when this returns,
			// so stop in the background and wait before the next run).
			stopped = make(chan struct{})
			go func() {
				defer close(stopped)
				sctx, cancel := context.WithTimeout(ctx, time.Minute)
				defer cancel()
				if err := n.Stop(sctx); err != nil {
					b.Error(err)
				}
				_ = c.Close()
			}()
			return handled.Load()
		}
		runs := []func(){runPlain(&plain16, "plain16.Consumer", workers), runRuntime, runPlain(&plain1, "plain1.Consumer", 1)}
		for k := range runs {
			runs[(i+k)%len(runs)]()
			if stopped != nil {
				b.StopTimer()
				<-stopped
				stopped = nil
				b.StartTimer()
			}
		}
	}
	b.StopTimer()
	want := int64(b.N) * total
	if plain16.msgs != want || plain1.msgs != want || rt.msgs != want {
		b.Fatalf("consumed plain16=%d plain1=%d runtime=%d, want %d each", plain16.msgs, plain1.msgs, rt.msgs, want)
	}
	rate := func(r result) float64 { return float64(r.msgs) / r.dur.Seconds() }
	b.ReportMetric(rate(plain16), "plain16-msgs/s")
	b.ReportMetric(rate(plain1), "plain1-msgs/s")
	b.ReportMetric(rate(rt), "runtime-msgs/s")
	b.ReportMetric(rate(rt)/rate(plain16), "ratio-vs-plain16")
	b.ReportMetric(rate(rt)/rate(plain1), "ratio-vs-plain1")
	b.ReportMetric(float64(rtSent)/float64(rt.msgs), "runtime-calls/msg")
	b.ReportMetric(float64(rtTrips)/float64(rt.msgs), "runtime-roundtrips/msg")
	perMsg := func(d time.Duration, r result) float64 { return float64(d.Nanoseconds()) / 1000 / float64(r.msgs) }
	b.ReportMetric(perMsg(rt.redisCPU, rt), "runtime-redis-cpu-µs/msg")
	b.ReportMetric(perMsg(plain16.redisCPU, plain16), "plain16-redis-cpu-µs/msg")
	b.ReportMetric(perMsg(rt.procCPU, rt), "runtime-client-cpu-µs/msg")
	b.ReportMetric(perMsg(plain16.procCPU, plain16), "plain16-client-cpu-µs/msg")
	// On a machine where CPU, not latency, bounds both, this is the
	// throughput ratio to expect at equal parallelism.
	b.ReportMetric(float64(plain16.redisCPU+plain16.procCPU)/float64(plain16.msgs)/(float64(rt.redisCPU+rt.procCPU)/float64(rt.msgs)), "cpu-ratio-vs-plain16")
}
