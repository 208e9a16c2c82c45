package topic_test

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/protctl/protctl/pkg/broker"
	"github.com/protctl/protctl/pkg/runtime"
	"github.com/protctl/protctl/pkg/runtime/kafkasource"
	"github.com/protctl/protctl/pkg/runtime/topic"
)

// slowLeases delays every call to the real lease manager by d, and keeps
// its batch renewal (a wrapper that dropped it would turn one renewal
// call per round into one per lease).
type slowLeases struct {
	broker.LeaseManager
	batch broker.BatchRenewer
	d     time.Duration
}

func (s *slowLeases) AcquirePartitionLease(ctx context.Context, leaseKey, generationKey, owner string, ttl time.Duration) (broker.Lease, bool, error) {
	time.Sleep(s.d)
	return s.LeaseManager.AcquirePartitionLease(ctx, leaseKey, generationKey, owner, ttl)
}

func (s *slowLeases) RenewPartitionLease(ctx context.Context, f broker.Fence, ttl time.Duration) (bool, error) {
	time.Sleep(s.d)
	return s.LeaseManager.RenewPartitionLease(ctx, f, ttl)
}

func (s *slowLeases) ReleasePartitionLease(ctx context.Context, f broker.Fence) (bool, error) {
	time.Sleep(s.d)
	return s.LeaseManager.ReleasePartitionLease(ctx, f)
}

func (s *slowLeases) RenewPartitionLeases(ctx context.Context, fences []broker.Fence, ttl time.Duration) ([]bool, error) {
	time.Sleep(s.d)
	return s.batch.RenewPartitionLeases(ctx, fences, ttl)
}

// slowCheckpoints delays every call to the real checkpoint store by d.
type slowCheckpoints struct {
	runtime.Checkpoints
	d time.Duration
}

func (s *slowCheckpoints) Load(ctx context.Context, leaseGroup, subscription string, partition int32) (int64, bool, error) {
	time.Sleep(s.d)
	return s.Checkpoints.Load(ctx, leaseGroup, subscription, partition)
}

func (s *slowCheckpoints) Save(ctx context.Context, f broker.Fence, leaseGroup, subscription string, partition int32, next int64) error {
	time.Sleep(s.d)
	return s.Checkpoints.Save(ctx, f, leaseGroup, subscription, partition, next)
}

// A node taking 1,000 partitions from a slow store (every lease and
// checkpoint call delayed 2ms, so taking them all outlasts the trust
// window of a 4s lease) keeps every lease it acquired: each partition is
// acquired once, at generation 1, none is lost, dropped as untrusted or
// contested, and all 1,000 are held when it is done. Both ways of taking
// many partitions at once: the join, and partitions gained after it
// (acquireDue, when a member that had half of them leaves).
func TestTopicSlowJoinOf1000PartitionsKeepsEveryLease(t *testing.T) {
	const parts = 1000
	for _, tc := range []struct {
		name  string
		ghost bool // a member that never runs holds half the partitions at the join
	}{
		{"join", false},
		{"gained after the join", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newTopicEnv(t, onRedis, parts)
			br, ok := e.leases.(broker.BatchRenewer)
			if !ok {
				t.Fatal("the redis lease manager does not batch renewals")
			}
			const delay = 2 * time.Millisecond
			cfg := e.config(tsub(topicSub, runtime.HandlerFunc(func(context.Context, runtime.Message) error { return nil })))
			cfg.Leases = &slowLeases{LeaseManager: e.leases, batch: br, d: delay}
			cfg.Checkpoints = &slowCheckpoints{Checkpoints: e.store, d: delay}
			// A trust window of 3s: taking 1,000 partitions at 4ms of
			// delay each (a lease and a checkpoint call) outlasts it, and
			// a renewal round of 1,000 leases in one call gets a second
			// even on a loaded machine.
			cfg.LeaseTTL, cfg.RenewEvery = 4*time.Second, time.Second
			cfg.OpTimeout = 5 * time.Second
			// Empty partitions fetched every 50ms (the env's source) cost
			// kfake much CPU with 1,000 of them; the test reads nothing.
			src, err := kafkasource.New(e.k.Brokers, kafkasource.WithFetchMaxWait(time.Second))
			if err != nil {
				t.Fatal(err)
			}
			defer src.Close()
			cfg.Source = topic.Kafka(src)
			if tc.ghost {
				e.cluster.add("ghost")
			}
			start := time.Now()
			n := e.start("n1", cfg, nil)
			defer e.stopAll()
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel()
			if err := n.ts.AwaitStarted(ctx); err != nil {
				t.Fatalf("AwaitStarted: %v", err)
			}
			if tc.ghost {
				waitFor(t, 5*time.Minute, "the join's half held", func() bool { return len(n.ts.Held()) > 0 })
				e.cluster.remove("ghost")
			}
			explain := func() string { return fmt.Sprintf("held %d, counters %v", len(n.ts.Held()), n.ts.Counters()) }
			waitFor(t, 8*time.Minute, "all 1,000 partitions held", func() bool { return len(n.ts.Held()) == parts }, explain)
			took := time.Since(start)
			// Two more renewal rounds: the leases taken first are renewed
			// after the last one started.
			r0 := n.ts.Counters()[runtime.CounterRenewals]
			waitFor(t, time.Minute, "two more renewal rounds", func() bool { return n.ts.Counters()[runtime.CounterRenewals] >= r0+2 }, explain)
			c := n.ts.Counters()
			t.Logf("took %d partitions in %v (TTL %v, trust window %v); counters %v", parts, took.Round(time.Millisecond), cfg.LeaseTTL, n.ts.Config().TrustWindow, c)
			if took < cfg.LeaseTTL {
				t.Logf("taking the partitions took %v, under the TTL: the test did not stretch the join past the trust window", took)
			}
			if c[runtime.CounterAcquired] != parts || c[runtime.CounterLeaseLost] != 0 || c[runtime.CounterUntrusted] != 0 || c[runtime.CounterContested] != 0 {
				t.Fatalf("counters %v: want %d acquired, none lost, untrusted or contested", c, parts)
			}
			held := n.ts.Held()
			if len(held) != parts {
				t.Fatalf("held %d partitions after the renewals, want %d", len(held), parts)
			}
			lg := e.leaseGroup()
			for p := int32(0); p < parts; p++ {
				if g := held[p]; g != 1 {
					t.Fatalf("partition %d held at generation %d, want 1 (acquired once)", p, g)
				}
				v, err := e.raw.Get(ctx, lg.GenerationKey(p)).Result()
				if err != nil {
					t.Fatalf("generation of partition %d: %v", p, err)
				}
				if v != strconv.Itoa(1) {
					t.Fatalf("partition %d's generation in the store is %s: it was acquired again", p, v)
				}
			}
		})
	}
}
