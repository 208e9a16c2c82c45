package bench

import (
	"context"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/protctl/protctl/internal/testenv"
	"github.com/protctl/protctl/pkg/broker/redisbroker"
	"github.com/protctl/protctl/pkg/runtime"
	"github.com/protctl/protctl/pkg/runtime/partitioned"
	"github.com/protctl/protctl/pkg/runtime/redisstore"
)

// BenchmarkReplicaWait measures what the WAIT options cost (issue 22,
// docs/guarantees.md), against a primary with one replica on loopback,
// with and without them in the same run, alternating which goes first:
//
//   - publish latency: PROTCTL_BENCH_PUBLISHES (2,000) publishes one after
//     the other through redisbroker, plain and with
//     WithPublishReplicas(1): p50 and p99 of each call;
//   - runtime throughput: a node (16 workers, no-op handler) consumes
//     PROTCTL_BENCH_PARTITIONS (1,000) partitions of
//     PROTCTL_BENCH_ENTRIES (20) entries, plain and with
//     WithLeaseReplicas(1) (every acquisition and renewal waits for the
//     replica: what lease.waitReplicas: 1 does), timed from Start to the
//     last handler call.
func BenchmarkReplicaWait(b *testing.B) {
	ctx := context.Background()
	primary := testenv.StartRedis(b)
	testenv.StartReplica(b, primary)
	admin := primary.Client(b)
	publishes := rtEnvInt(b, "PROTCTL_BENCH_PUBLISHES", 2000)
	partitions := rtEnvInt(b, "PROTCTL_BENCH_PARTITIONS", 1000)
	entries := rtEnvInt(b, "PROTCTL_BENCH_ENTRIES", 20)
	one := redisbroker.Replicas{N: 1, Timeout: time.Second}

	var lat [2][]time.Duration // plain, wait
	var dur [2]time.Duration
	var msgs [2]int64
	for i := 0; i < b.N; i++ {
		for k := 0; k < 2; k++ {
			wait := (i+k)%2 == 1
			w := 0
			var opts []redisbroker.Option
			if wait {
				w, opts = 1, []redisbroker.Option{redisbroker.WithPublishReplicas(one)}
			}
			b.StopTimer()
			if err := admin.FlushAll(ctx).Err(); err != nil {
				b.Fatal(err)
			}
			b.StartTimer()
			lat[w] = append(lat[w], benchPublishes(ctx, b, primary.Addr, publishes, opts...)...)

			b.StopTimer()
			if err := admin.FlushAll(ctx).Err(); err != nil {
				b.Fatal(err)
			}
			rtPopulate(ctx, b, admin, rtCategory, partitions, entries)
			b.StartTimer()
			var lopts []redisbroker.Option
			if wait {
				lopts = []redisbroker.Option{redisbroker.WithLeaseReplicas(one)}
			}
			d, n := benchReplicaRuntime(b, primary.Addr, int64(partitions*entries), lopts...)
			dur[w] += d
			msgs[w] += n
		}
	}
	b.StopTimer()
	pct := func(l []time.Duration, p float64) float64 {
		s := slices.Clone(l)
		slices.Sort(s)
		return float64(s[int(p*float64(len(s)-1))].Microseconds())
	}
	b.ReportMetric(pct(lat[0], 0.5), "publish-p50-µs")
	b.ReportMetric(pct(lat[0], 0.99), "publish-p99-µs")
	b.ReportMetric(pct(lat[1], 0.5), "publish-wait-p50-µs")
	b.ReportMetric(pct(lat[1], 0.99), "publish-wait-p99-µs")
	rate := func(w int) float64 { return float64(msgs[w]) / dur[w].Seconds() }
	b.ReportMetric(rate(0), "runtime-msgs/s")
	b.ReportMetric(rate(1), "runtime-wait-msgs/s")
	b.ReportMetric(rate(1)/rate(0), "runtime-wait-ratio")
}

// benchPublishes publishes n envelopes one after the other (over 100
// keys) on a client of its own and returns each call's latency.
func benchPublishes(ctx context.Context, b *testing.B, addr string, n int, opts ...redisbroker.Option) []time.Duration {
	b.Helper()
	c := redis.NewClient(&redis.Options{Addr: addr})
	defer c.Close()
	pub, err := partitioned.NewPublisher(redisbroker.New(c, opts...))
	if err != nil {
		b.Fatal(err)
	}
	out := make([]time.Duration, 0, n)
	env := []byte(`{"data":{"n":1},"metadata":{"headers":{"type":"Bench"}}}`)
	for i := 0; i < n; i++ {
		start := time.Now()
		if _, err := pub.Publish(ctx, rtCategory, rtKey(i%100), env); err != nil {
			b.Fatal(err)
		}
		out = append(out, time.Since(start))
	}
	return out
}

// benchReplicaRuntime runs a node until it handled total messages and
// returns the time from Start and the messages handled; the node is
// stopped after the measurement.
func benchReplicaRuntime(b *testing.B, addr string, total int64, opts ...redisbroker.Option) (time.Duration, int64) {
	b.Helper()
	var handled atomic.Int64
	done := make(chan struct{})
	h := runtime.HandlerFunc(func(context.Context, runtime.Message) error {
		if handled.Add(1) == total {
			close(done)
		}
		return nil
	})
	c := redis.NewClient(&redis.Options{Addr: addr, PoolSize: 64})
	store := redisstore.New(c)
	sub, err := partitioned.New(partitioned.Config{
		Name: rtGroup, Categories: []string{rtCategory}, Handler: h, Broker: redisbroker.New(c, opts...), Ledger: store,
		BatchSize: 100, Workers: 16,
	})
	if err != nil {
		b.Fatal(err)
	}
	n, err := runtime.NewNode(runtime.NodeConfig{Service: rtService, NodeID: "node-1", Membership: store}, sub)
	if err != nil {
		b.Fatal(err)
	}
	start := time.Now()
	if err := n.Start(context.Background()); err != nil {
		b.Fatal(err)
	}
	select {
	case <-done:
	case <-time.After(5 * time.Minute):
		b.Fatalf("runtime handled %d of %d", handled.Load(), total)
	}
	d := time.Since(start)
	b.StopTimer()
	rtStop(b, n, c, time.Minute)
	b.StartTimer()
	if got := sub.Status().Counters; got[runtime.CounterAcquired] == 0 {
		b.Fatalf("no lease acquired: %v", got)
	}
	return d, handled.Load()
}
