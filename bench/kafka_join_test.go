package bench

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/protctl/protctl/internal/testenv"
	"github.com/protctl/protctl/pkg/broker"
	"github.com/protctl/protctl/pkg/broker/redisbroker"
	"github.com/protctl/protctl/pkg/runtime"
	"github.com/protctl/protctl/pkg/runtime/kafkasource"
	"github.com/protctl/protctl/pkg/runtime/redisstore"
	"github.com/protctl/protctl/pkg/runtime/topic"
)

// The join and handoff benchmarks measure how long topic subscriptions
// take to take many partitions (a node joining) and to give a partition
// back with slow handlers (a handoff), on kfake and a real redis-server.

// jSlowLeases delays every call to the real lease manager by d and keeps
// its batch renewal.
type jSlowLeases struct {
	broker.LeaseManager
	batch broker.BatchRenewer
	d     time.Duration
}

func (s *jSlowLeases) AcquirePartitionLease(ctx context.Context, leaseKey, generationKey, owner string, ttl time.Duration) (broker.Lease, bool, error) {
	time.Sleep(s.d)
	return s.LeaseManager.AcquirePartitionLease(ctx, leaseKey, generationKey, owner, ttl)
}

func (s *jSlowLeases) RenewPartitionLease(ctx context.Context, f broker.Fence, ttl time.Duration) (bool, error) {
	time.Sleep(s.d)
	return s.LeaseManager.RenewPartitionLease(ctx, f, ttl)
}

func (s *jSlowLeases) ReleasePartitionLease(ctx context.Context, f broker.Fence) (bool, error) {
	time.Sleep(s.d)
	return s.LeaseManager.ReleasePartitionLease(ctx, f)
}

func (s *jSlowLeases) RenewPartitionLeases(ctx context.Context, fences []broker.Fence, ttl time.Duration) ([]bool, error) {
	time.Sleep(s.d)
	return s.batch.RenewPartitionLeases(ctx, fences, ttl)
}

// jSlowCheckpoints delays every checkpoint call by d.
type jSlowCheckpoints struct {
	runtime.Checkpoints
	d time.Duration
}

func (s *jSlowCheckpoints) Load(ctx context.Context, leaseGroup, subscription string, partition int32) (int64, bool, error) {
	time.Sleep(s.d)
	return s.Checkpoints.Load(ctx, leaseGroup, subscription, partition)
}

func (s *jSlowCheckpoints) Save(ctx context.Context, f broker.Fence, leaseGroup, subscription string, partition int32, next int64) error {
	time.Sleep(s.d)
	return s.Checkpoints.Save(ctx, f, leaseGroup, subscription, partition, next)
}

const (
	jTopic      = "bench.join"
	jPartitions = 1000
)

// jRaw is the baseline: the calls a join must make, made one after
// another with nothing around them: per partition, the lease, its
// checkpoint and its watermarks. The leases are released afterwards (not
// timed).
func jRaw(b *testing.B, leases *jSlowLeases, cps runtime.Checkpoints, src *kafkasource.Source, lg redisstore.LeaseGroup) time.Duration {
	ctx := context.Background()
	start := time.Now()
	fences := make([]broker.Fence, 0, jPartitions)
	for p := int32(0); p < jPartitions; p++ {
		l, ok, err := leases.AcquirePartitionLease(ctx, lg.LeaseKey(p), lg.GenerationKey(p), "raw", 15*time.Second)
		if err != nil || !ok {
			b.Fatalf("raw acquire %d: ok=%v err=%v", p, ok, err)
		}
		fences = append(fences, l.Fence)
		if _, _, err := cps.Load(ctx, lg.String(), "bench.sync", p); err != nil {
			b.Fatal(err)
		}
		if _, err := src.Watermarks(ctx, jTopic, p); err != nil {
			b.Fatal(err)
		}
	}
	took := time.Since(start)
	for _, f := range fences {
		if _, err := leases.LeaseManager.ReleasePartitionLease(ctx, f); err != nil {
			b.Fatal(err)
		}
	}
	return took
}

// jRuntime starts a Node with topic subscriptions on the topic and
// returns the time from Start until the join took every partition
// (AwaitStarted), with its lease counters; the node is then stopped (not
// timed), which releases every lease.
func jRuntime(b *testing.B, c redis.UniversalClient, leases *jSlowLeases, cps runtime.Checkpoints, src *kafkasource.Source, lg redisstore.LeaseGroup) (time.Duration, map[string]int64) {
	store := redisstore.New(c)
	ts, err := topic.New(topic.Config{
		Topic: jTopic,
		Subscriptions: []topic.Subscription{{Name: "bench.sync",
			Handler: runtime.HandlerFunc(func(context.Context, runtime.Message) error { return nil })}},
		Source:      topic.Kafka(src),
		Leases:      leases,
		Checkpoints: cps,
		Ledger:      store,
	})
	if err != nil {
		b.Fatal(err)
	}
	node, err := runtime.NewNode(runtime.NodeConfig{Service: "bench", NodeID: "n1", Membership: store}, ts)
	if err != nil {
		b.Fatal(err)
	}
	start := time.Now()
	if err := node.Start(context.Background()); err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	if err := ts.AwaitStarted(ctx); err != nil {
		b.Fatalf("AwaitStarted: %v", err)
	}
	took := time.Since(start)
	if n := len(ts.Held()); n != jPartitions {
		b.Fatalf("held %d partitions after the join, want %d", n, jPartitions)
	}
	counters := ts.Counters()
	sctx, scancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer scancel()
	if err := node.Stop(sctx); err != nil {
		b.Fatal(err)
	}
	return took, counters
}

// BenchmarkTopicJoin1000: a node joining a topic of 1,000 partitions
// (kfake) with its leases and checkpoints on a real redis-server, each
// store call delayed by 0 or 1ms (a remote Redis), against the same calls
// made back to back without the runtime in the same run. Metrics: raw_ms
// and join_ms per join, ratio (join over raw), and the join's lease
// counters per join (acquired must be 1,000, untrusted and leaseLost 0).
// Default lease settings (TTL 15s, renewal 5s).
func BenchmarkTopicJoin1000(b *testing.B) {
	for _, delay := range []time.Duration{0, time.Millisecond} {
		b.Run(fmt.Sprintf("delay=%s", delay), func(b *testing.B) {
			k := testenv.StartKafka(b, jPartitions, jTopic)
			r := testenv.StartRedis(b)
			c := r.Client(b)
			src, err := kafkasource.New(k.Brokers)
			if err != nil {
				b.Fatal(err)
			}
			defer src.Close()
			leases := &jSlowLeases{LeaseManager: redisbroker.New(c), d: delay}
			leases.batch = leases.LeaseManager.(broker.BatchRenewer)
			cps := &jSlowCheckpoints{Checkpoints: redisstore.New(c), d: delay}
			lg := redisstore.TopicLeaseGroup("bench", jTopic)
			var rawTotal, rtTotal time.Duration
			var acquired, untrusted, lost atomic.Int64
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				rawTotal += jRaw(b, leases, cps, src, lg)
				took, cnt := jRuntime(b, c, leases, cps, src, lg)
				rtTotal += took
				acquired.Add(cnt[runtime.CounterAcquired])
				untrusted.Add(cnt[runtime.CounterUntrusted])
				lost.Add(cnt[runtime.CounterLeaseLost])
			}
			b.StopTimer()
			n := float64(b.N)
			b.ReportMetric(float64(rawTotal.Milliseconds())/n, "raw_ms")
			b.ReportMetric(float64(rtTotal.Milliseconds())/n, "join_ms")
			b.ReportMetric(rtTotal.Seconds()/rawTotal.Seconds(), "ratio")
			b.ReportMetric(float64(acquired.Load())/n, "acquired")
			b.ReportMetric(float64(untrusted.Load())/n, "untrusted")
			b.ReportMetric(float64(lost.Load())/n, "leaseLost")
			b.ReportMetric(0, "ns/op")
		})
	}
}
