package partitioned_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/protctl/protctl/internal/testenv"
	"github.com/protctl/protctl/pkg/broker"
	"github.com/protctl/protctl/pkg/runtime"
	"github.com/protctl/protctl/pkg/runtime/partitioned"
)

// protean writes one entry of key as Protean's RedisBroker does, with
// plain commands and no protctl wake-up signal: SADD to the index, XADD to
// the stream.
func protean(t testing.TB, c redis.Cmdable, key string, seq int) {
	t.Helper()
	l := broker.ProteanLayout
	ctx := context.Background()
	pipe := c.Pipeline()
	pipe.SAdd(ctx, l.IndexKey(cat), key)
	pipe.XAdd(ctx, &redis.XAddArgs{Stream: l.Stream(cat, key), Values: []any{broker.DataField, envelope(key, seq)}})
	if _, err := pipe.Exec(ctx); err != nil {
		t.Fatal(err)
	}
}

// Keys another publisher adds to the index are found without waiting
// for the periodic scan (set to an hour here): by the index poll when the
// server publishes no keyspace events, by the events when it does (the
// poll then set to an hour too). On 16f1112 only the scan found them.
func TestRedisNewKeysOfAnyPublisherAreFound(t *testing.T) {
	// noTracking: a default user that may not turn client tracking on (an
	// ACL without client|tracking, or a server older than Redis 6).
	noTracking := []string{"--user", "default", "on", "nopass", "~*", "&*", "+@all", "-client|tracking"}
	for _, tc := range []struct {
		name string
		args []string
		// events: the server announces writes, and the test stops the
		// index poll so that only the announcements can find the keys.
		events bool
		// streamFirst: the publisher appends before it indexes, so the
		// append is announced while the index lacks the key.
		streamFirst bool
	}{
		{"index poll", noTracking, false, false},
		{"client tracking", nil, true, false},
		{"client tracking, stream before index", nil, true, true},
		{"keyspace events", append(append([]string{}, noTracking...), "--notify-keyspace-events", "Et"), true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newRedisEnvOn(t, testenv.StartRedis(t, testenv.WithArgs(tc.args...)))
			rec := newRecorder(t)
			e.start("node-1", rec.handler("node-1"), func(c *partitioned.Config) {
				c.DiscoverEvery = time.Hour
				if tc.events {
					c.DiscoverPollEvery = time.Hour
				}
			}, nil)
			eventually(t, 30*time.Second, 10*time.Millisecond, "the node registered", func() bool {
				n, err := e.c.SCard(context.Background(), broker.ProteanLayout.GroupsKey(cat)).Result()
				return err == nil && n > 0
			})
			keys := keyNames(20)
			for i, k := range keys {
				if tc.streamFirst {
					l := broker.ProteanLayout
					if err := e.c.XAdd(context.Background(), &redis.XAddArgs{Stream: l.Stream(cat, k), Values: []any{broker.DataField, envelope(k, 1)}}).Err(); err != nil {
						t.Fatal(err)
					}
					time.Sleep(time.Millisecond) // the append's announcement is checked first
					if err := e.c.SAdd(context.Background(), l.IndexKey(cat), k).Err(); err != nil {
						t.Fatal(err)
					}
				} else {
					protean(t, e.c, k, 1)
				}
				if i%5 == 4 {
					time.Sleep(20 * time.Millisecond)
				}
			}
			want := wantAll(keys, 1)
			eventually(t, 30*time.Second, 10*time.Millisecond, "every new key handled", func() bool { return rec.complete(want) })
			rec.checkOrder(t, want)
		})
	}
}

// More hot partitions than Workers, each written faster than a worker
// handles it so that none ever drains: every partition is handled while
// the flow goes on. On 16f1112 the first Workers partitions kept their
// slots for as long as they had entries and the others waited for the
// flow to stop.
func TestRedisHotPartitionsBeyondWorkersAllProgress(t *testing.T) {
	e := newRedisEnv(t)
	const workers, hot = 2, 6
	handled := make([]atomic.Int64, hot)
	keys := keyNames(hot)
	index := map[string]int{}
	for i, k := range keys {
		index[k] = i
		protean(t, e.c, k, 0) // the partitions exist before the flow
	}
	h := runtime.HandlerFunc(func(ctx context.Context, m runtime.Message) error {
		time.Sleep(time.Millisecond)
		handled[index[m.Key]].Add(1)
		return nil
	})
	e.start("node-1", h, func(c *partitioned.Config) {
		c.Workers = workers
		c.BatchSize = 10
	}, nil)

	// The publisher keeps every partition's backlog above a batch: it
	// writes whenever the backlog runs low, until the test is done.
	ctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		pc := e.client()
		seq := 1
		for ctx.Err() == nil {
			pipe := pc.Pipeline()
			for _, k := range keys {
				for range 20 {
					pipe.XAdd(ctx, &redis.XAddArgs{Stream: broker.ProteanLayout.Stream(cat, k), Values: []any{broker.DataField, envelope(k, seq)}})
				}
			}
			seq++
			if _, err := pipe.Exec(ctx); err != nil && ctx.Err() == nil {
				t.Error(err)
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
	}()
	defer func() { stop(); wg.Wait() }()
	// Every partition handles a good share of what it got while all are
	// hot: 50 entries each (five batches), the flow still running.
	eventually(t, 60*time.Second, 10*time.Millisecond, "every hot partition handled while the flow goes on", func() bool {
		for i := range handled {
			if handled[i].Load() < 50 {
				return false
			}
		}
		return true
	})
	if ctx.Err() != nil {
		t.Fatal("the flow stopped before every partition was handled")
	}
}

// Entries appended with plain XADD (no wake-up signal) race the idle
// release (a very short IdleAfter) and the wait's restarts (partitions
// drain and join the watched set all the time): every entry is handled,
// in order, within a bound far below the wait's timeout (an hour here,
// so no entry can be found by a wait that merely timed out and started
// again). Randomized; the seed is logged.
func TestRedisAppendsRaceIdleReleaseAndWaitRestart(t *testing.T) {
	// One wait over the main lanes, and the wait sharded by key (run
	// node's 4): a partition's streams move between shards' watch sets
	// never, between held, draining, idle and watched always.
	for _, shards := range []int{1, 4} {
		t.Run(fmt.Sprintf("%d shards", shards), func(t *testing.T) { appendsRaceIdleRelease(t, shards) })
	}
}

func appendsRaceIdleRelease(t *testing.T, shards int) {
	e := newRedisEnv(t)
	seed := time.Now().UnixNano()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(uint64(seed), 7))
	rec := newRecorder(t)
	e.start("node-1", rec.handler("node-1"), func(c *partitioned.Config) {
		c.IdleAfter = 5 * time.Millisecond
		c.WaitTimeout = time.Hour
		c.DiscoverEvery = time.Hour
		c.Workers = 4
		c.WaitShards = shards
	}, nil)
	keys := keyNames(12)
	next := map[string]int{}
	for _, k := range keys {
		next[k] = 1
	}
	// Known keys (published with protctl's signal), so that only the wait
	// is raced: new-key discovery has its own test.
	publishAll(t, e.pub, keys, 1, 1)
	eventually(t, 30*time.Second, 5*time.Millisecond, "every key handled once", func() bool { return rec.complete(wantAll(keys, 1)) })
	const rounds = 300
	for i := 0; i < rounds; i++ {
		k := keys[rng.IntN(len(keys))]
		next[k]++
		xadd := e.c.XAdd(context.Background(), &redis.XAddArgs{Stream: broker.ProteanLayout.Stream(cat, k), Values: []any{broker.DataField, envelope(k, next[k])}})
		if err := xadd.Err(); err != nil {
			t.Fatal(err)
		}
		// Around IdleAfter: some appends land while the partition still
		// holds its lease, some while it releases it, some once watched.
		time.Sleep(time.Duration(rng.IntN(12)) * time.Millisecond)
	}
	want := map[string]int{}
	for k, n := range next {
		want[k] = n
	}
	eventually(t, 60*time.Second, 10*time.Millisecond, "every entry handled", func() bool { return rec.complete(want) })
	rec.checkOrder(t, want)
	if n := rec.overlap.Load(); n > 0 {
		t.Fatalf("%d overlapping handler calls", n)
	}
}

// An announced name is read as the partition keys it may be a lane of.
// In the cluster layout only the lanes count: a subscription named like
// its category writes C:{K}:__lease__ under the category's prefix, and
// reading that as K would wake K for its own lease writes forever.
func TestStreamKeysOfAnnouncedNames(t *testing.T) {
	for _, tc := range []struct {
		layout broker.Layout
		name   string
		want   []string
	}{
		{broker.ProteanLayout, "shop::order:o-1", []string{"o-1"}},
		{broker.ProteanLayout, "shop::order:o-1:backfill", []string{"o-1:backfill", "o-1"}},
		{broker.ProteanLayout, "other:o-1", nil},
		{broker.ClusterLayout, "shop::order:{o-1}", []string{"o-1"}},
		{broker.ClusterLayout, "shop::order:{o-1}:backfill", []string{"o-1"}},
		{broker.ClusterLayout, "shop::order:{o-1}:__lease__", nil},
		{broker.ClusterLayout, "shop::order:{o-1}:__generation__", nil},
		{broker.ClusterLayout, "shop::order:o-1", nil},
	} {
		got := partitioned.StreamKeys(tc.layout, "shop::order", "backfill", tc.name)
		if !slices.Equal(got, tc.want) {
			t.Errorf("%s %q: %q, want %q", tc.layout, tc.name, got, tc.want)
		}
	}
}
