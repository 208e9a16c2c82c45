package bench

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/protctl/protctl/internal/testenv"
	"github.com/protctl/protctl/pkg/broker"
	"github.com/protctl/protctl/pkg/broker/redisbroker"
)

// clusterTarget is one place the cluster benchmark consumes from: a
// client, the broker over it, and the partitions populated for the
// current iteration.
type clusterTarget struct {
	name    string
	client  redis.Cmdable
	broker  *redisbroker.Broker
	calls   *callCounter
	streams []string
	fences  []broker.Fence
	dur     time.Duration
	msgs    int
	sent    int64
}

// BenchmarkClusterConsume compares the runtime's consume loop
// (AckAndReadPartitionFenced, batch 100) in the cluster layout on a real
// 3-master Redis Cluster against the same loop and layout on one
// redis-server: 1,000 partitions of 100 entries each, consumed by 1 and
// by 4 workers (each worker owns a share of the partitions, as nodes
// do). The two targets take turns, 100 partitions at a time, so load on
// the machine hits both alike. Reported: msgs/s of each, the ratio
// cluster/one-node, and calls per message.
//
// All servers run on this one machine: the cluster's masters share its
// cores with each other and with the client, so this measures the cost
// of the cluster layout and of cluster routing, not the capacity three
// machines would add.
func BenchmarkClusterConsume(b *testing.B) {
	ctx := context.Background()
	single := testenv.StartRedis(b)
	cl := testenv.StartCluster(b)
	l := broker.ClusterLayout
	var singleCalls, clusterCalls callCounter
	sc := redis.NewClient(&redis.Options{Addr: single.Addr, PoolSize: 16})
	sc.AddHook(&singleCalls)
	cc := cl.NewClient(&redis.ClusterOptions{PoolSize: 16})
	cc.AddHook(&clusterCalls)
	defer sc.Close()
	defer cc.Close()
	for _, workers := range []int{1, 4} {
		b.Run(fmt.Sprintf("workers=%d", workers), func(b *testing.B) {
			targets := []*clusterTarget{
				{name: "one-node", client: sc, broker: redisbroker.New(sc, redisbroker.WithLayout(l)), calls: &singleCalls},
				{name: "cluster", client: cc, broker: redisbroker.New(cc, redisbroker.WithLayout(l)), calls: &clusterCalls},
			}
			runClusterAlternating(b, ctx, l, workers, targets)
		})
	}
}

func runClusterAlternating(b *testing.B, ctx context.Context, l broker.Layout, workers int, targets []*clusterTarget) {
	const turn = 100
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		for _, tg := range targets {
			if err := flushAll(ctx, tg.client); err != nil {
				b.Fatal(err)
			}
			category := benchCategory + "." + tg.name
			tg.streams = populate(ctx, b, tg.client, l, category)
			tg.fences = acquireAll(ctx, b, tg.broker, l, category)
		}
		b.StartTimer()
		for chunk, round := 0, 0; chunk < benchPartitions; chunk, round = chunk+turn, round+1 {
			end := min(chunk+turn, benchPartitions)
			for k := range targets {
				tg := targets[(round+k)%len(targets)]
				before := tg.calls.n.Load()
				start := time.Now()
				tg.msgs += consumeParallel(ctx, b, tg.broker, tg.streams[chunk:end], tg.fences[chunk:end], workers)
				tg.dur += time.Since(start)
				tg.sent += tg.calls.n.Load() - before
			}
		}
	}
	b.StopTimer()
	want := b.N * benchPartitions * benchEntries
	for _, tg := range targets {
		if tg.msgs != want {
			b.Fatalf("%s consumed %d, want %d", tg.name, tg.msgs, want)
		}
	}
	rate := func(tg *clusterTarget) float64 { return float64(tg.msgs) / tg.dur.Seconds() }
	for _, tg := range targets {
		b.ReportMetric(rate(tg), tg.name+"-msgs/s")
		b.ReportMetric(float64(tg.sent)/float64(tg.msgs), tg.name+"-calls/msg")
	}
	b.ReportMetric(rate(targets[1])/rate(targets[0]), "cluster-ratio")
}

// consumeParallel runs the ack-and-read loop over streams with workers
// goroutines, each owning a contiguous share of the partitions.
func consumeParallel(ctx context.Context, tb testing.TB, ar broker.AckReader, streams []string, fences []broker.Fence, workers int) int {
	var wg sync.WaitGroup
	counts := make([]int, workers)
	per := (len(streams) + workers - 1) / workers
	for w := 0; w < workers; w++ {
		lo, hi := w*per, min((w+1)*per, len(streams))
		if lo >= hi {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			counts[w] = consumeAckRead(ctx, tb, ar, streams[lo:hi], fences[lo:hi])
		}()
	}
	wg.Wait()
	n := 0
	for _, c := range counts {
		n += c
	}
	return n
}
