package partitioned_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/protctl/protctl/pkg/broker"
	"github.com/protctl/protctl/pkg/broker/redisbroker"
	"github.com/protctl/protctl/pkg/runtime"
	"github.com/protctl/protctl/pkg/runtime/partitioned"
)

// Announced wake-ups (announce.go, docs/decisions/0049-announced-wake-ups.md).

// waitCounter is the Redis broker with its blocking waits counted.
type waitCounter struct {
	*redisbroker.Broker
	waits atomic.Int64
}

func (b *waitCounter) WaitForEntries(ctx context.Context, after map[string]string, timeout time.Duration) ([]string, error) {
	b.waits.Add(1)
	return b.Broker.WaitForEntries(ctx, after, timeout)
}

// dropAppends is the Redis broker whose append watch loses the names of
// one key's streams without ending: an announcement lost in a way the
// watch cannot notice.
type dropAppends struct {
	*redisbroker.Broker
	drop map[string]bool // stream names
}

func (b dropAppends) WatchAppends(ctx context.Context, category string) (<-chan string, error) {
	in, err := b.Broker.WatchAppends(ctx, category)
	if err != nil {
		return nil, err
	}
	out := make(chan string, cap(in))
	go func() {
		defer close(out)
		for name := range in {
			if !b.drop[name] {
				out <- name
			}
		}
	}()
	return out, nil
}

// appendPlain appends an entry for key's seq with a plain XADD, as a
// publisher other than protctl's (no wake-up signal) does.
func appendPlain(t *testing.T, c *redis.Client, key string, seq int) {
	t.Helper()
	err := c.XAdd(context.Background(), &redis.XAddArgs{Stream: broker.ProteanLayout.Stream(cat, key), Values: []any{broker.DataField, envelope(key, seq)}}).Err()
	if err != nil {
		t.Fatal(err)
	}
}

// idleAndAnnounced waits until every key of want is handled, the node's
// partitions are idle (watched, no lease) and its appends are announced.
func idleAndAnnounced(t *testing.T, sub *partitioned.Subscription, rec *recorder, want map[string]int) {
	t.Helper()
	eventually(t, 30*time.Second, 5*time.Millisecond, "every key handled, idle and announced", func() bool {
		st := sub.Status()
		return rec.complete(want) && len(st.Held) == 0 && st.Counters[runtime.CounterWatched] == int64(len(want)) && partitioned.Announced(sub)
	})
}

// heldAndAnnounced waits until every key of want is handled and leased
// (drained, waiting out IdleAfter) and the node's appends are announced.
func heldAndAnnounced(t *testing.T, sub *partitioned.Subscription, rec *recorder, want map[string]int) {
	t.Helper()
	eventually(t, 30*time.Second, 5*time.Millisecond, "every key handled, leased and announced", func() bool {
		return rec.complete(want) && len(sub.Status().Held) == len(want) && partitioned.Announced(sub)
	})
}

// While appends are announced, a flow over idle partitions is woken by the
// announcements, without a blocking wait issued at every entry (before,
// each entry made the wait on its shard's streams return and be issued
// again: 85µs of the server's time per event at 5,000 events/s).
func TestRedisAnnouncedAppendsIssueNoBlockingWait(t *testing.T) {
	e := newRedisEnv(t)
	rec := newRecorder(t)
	wb := &waitCounter{Broker: redisbroker.New(e.client())}
	e.start("node-1", rec.handler("node-1"), func(c *partitioned.Config) {
		c.Broker = wb
		c.IdleAfter = 20 * time.Millisecond
		c.WaitShards = 4
	}, nil)
	keys := keyNames(40)
	publishAll(t, e.pub, keys, 1, 1)
	idleAndAnnounced(t, e.subs[0], rec, wantAll(keys, 1))
	waits := wb.waits.Load()
	rng := rand.New(rand.NewPCG(1, 2))
	want := wantAll(keys, 1)
	for range 300 {
		k := keys[rng.IntN(len(keys))]
		want[k]++
		appendPlain(t, e.c, k, want[k])
		time.Sleep(time.Duration(rng.IntN(3)) * time.Millisecond)
	}
	eventually(t, 60*time.Second, 10*time.Millisecond, "every entry handled", func() bool { return rec.complete(want) })
	rec.checkOrder(t, want)
	if n := rec.overlap.Load(); n > 0 {
		t.Fatalf("%d overlapping handler calls", n)
	}
	if !partitioned.Announced(e.subs[0]) {
		t.Fatal("the appends' announcements ended during the flow")
	}
	if n := wb.waits.Load() - waits; n != 0 {
		t.Fatalf("%d blocking waits issued while appends were announced, want 0", n)
	}
}

// An announcement lost without its watch ending (nothing the node can
// notice) delays its entry by at most the safety net's check of the
// watched set, every WaitTimeout here: it is not stranded.
func TestRedisLostAnnouncementIsFoundByTheCheck(t *testing.T) {
	e := newRedisEnv(t)
	rec := newRecorder(t)
	wb := &waitCounter{Broker: redisbroker.New(e.client())}
	e.start("node-1", rec.handler("node-1"), func(c *partitioned.Config) {
		c.Broker = dropAppends{Broker: wb.Broker, drop: map[string]bool{broker.ProteanLayout.Stream(cat, "lost"): true}}
		c.IdleAfter = 20 * time.Millisecond
		c.WaitTimeout = 300 * time.Millisecond
	}, nil)
	keys := []string{"lost", "kept"}
	publishAll(t, e.pub, keys, 1, 1)
	idleAndAnnounced(t, e.subs[0], rec, wantAll(keys, 1))
	appendPlain(t, e.c, "lost", 2)
	appendPlain(t, e.c, "kept", 2)
	want := wantAll(keys, 2)
	eventually(t, 30*time.Second, 10*time.Millisecond, "both entries handled", func() bool { return rec.complete(want) })
	rec.checkOrder(t, want)
	if n := wb.waits.Load(); n != 0 {
		t.Fatalf("%d blocking waits issued while appends were announced, want 0: the check did not find it", n)
	}
}

// The same while the partitions hold their leases (IdleAfter 10 minutes):
// a drained worker waits outside the watched set while announcements
// last, and still joins it every WaitTimeout, so that the join's check
// finds an entry whose announcement was lost, on the main lane and on an
// empty backfill lane (which main-lane wakes leave unread: the second
// key's main lane gets a flow meanwhile). Before the joins, both waited
// for IdleAfter. Found by a reviewer.
func TestRedisLostAnnouncementOfAHeldPartitionIsFoundByTheCheck(t *testing.T) {
	e := newRedisEnv(t)
	rec := newRecorder(t)
	lostMain := broker.ProteanLayout.Stream(cat, "lost")
	lostBackfill := broker.ProteanLayout.LaneStream(cat, "busy", broker.DefaultBackfillSuffix)
	e.start("node-1", rec.handler("node-1"), func(c *partitioned.Config) {
		c.Broker = dropAppends{Broker: redisbroker.New(e.client()), drop: map[string]bool{lostMain: true, lostBackfill: true}}
		c.LeaseTTL, c.RenewEvery, c.IdleAfter = time.Minute, 10*time.Second, 10*time.Minute
		c.WaitTimeout = 300 * time.Millisecond
	}, nil)
	keys := []string{"lost", "busy"}
	publishAll(t, e.pub, keys, 1, 1)
	heldAndAnnounced(t, e.subs[0], rec, wantAll(keys, 1))
	const bfSeq = 1_000_000 // the backfill entry's, apart from the flow's
	start := time.Now()
	appendPlain(t, e.c, "lost", 2)
	if err := e.c.XAdd(context.Background(), &redis.XAddArgs{Stream: lostBackfill, Values: []any{broker.DataField, envelope("busy", bfSeq)}}).Err(); err != nil {
		t.Fatal(err)
	}
	found := func() bool {
		return slices.Contains(rec.handled("lost"), 2) && slices.Contains(rec.handled("busy"), bfSeq)
	}
	for seq := 2; !found(); seq++ {
		if time.Since(start) > time.Minute {
			t.Fatalf("entries whose announcement was lost not handled in a minute (IdleAfter is 10): lost's main entry %v, busy's backfill entry %v",
				slices.Contains(rec.handled("lost"), 2), slices.Contains(rec.handled("busy"), bfSeq))
		}
		// A flow on busy's main lane: wakes that name its main lane only.
		appendPlain(t, e.c, "busy", seq)
		time.Sleep(20 * time.Millisecond)
	}
	t.Logf("both found in %v", time.Since(start).Round(time.Millisecond))
	if got := e.subs[0].Status().Counters["acquired"]; got != 2 {
		t.Fatalf("%d leases acquired, want 2: a partition went idle, which would rescue the entry", got)
	}
}

// Appends race the end of the announcements: the server drops the node's
// subscribed connections (the append watch among them) again and again
// while a publisher other than protctl's appends, so that the wait loops
// go from checking to blocking waits and back, with entries appended
// around each change. Every entry is handled, in order, once at a time.
// With IdleAfter 10 minutes the partitions stay leased and drained through
// every change: while announcements last they wait outside the watched
// set (watchDrained), and each change must put them in it.
func TestRedisAppendsRaceTheEndOfAnnouncements(t *testing.T) {
	for _, tc := range []struct {
		shards int
		idle   time.Duration
	}{{1, 5 * time.Millisecond}, {4, 5 * time.Millisecond}, {1, 10 * time.Minute}} {
		shards := tc.shards
		t.Run(fmt.Sprintf("%d shards, idle after %v", shards, tc.idle), func(t *testing.T) {
			e := newRedisEnv(t)
			seed := time.Now().UnixNano()
			t.Logf("seed %d", seed)
			rng := rand.New(rand.NewPCG(uint64(seed), 9))
			rec := newRecorder(t)
			e.start("node-1", rec.handler("node-1"), func(c *partitioned.Config) {
				c.IdleAfter = tc.idle
				c.WaitTimeout = time.Hour // no safety net: the changes must be exact
				c.DiscoverEvery = time.Hour
				c.WaitShards = shards
			}, nil)
			keys := keyNames(12)
			publishAll(t, e.pub, keys, 1, 1)
			if tc.idle < time.Second {
				idleAndAnnounced(t, e.subs[0], rec, wantAll(keys, 1))
			} else {
				heldAndAnnounced(t, e.subs[0], rec, wantAll(keys, 1))
			}
			want := wantAll(keys, 1)
			// The connections are dropped while the append watch is
			// established, until that happened five times. A watch that
			// ended within a second of its start (rewatch.Settled) is
			// asked for again after a back-off that grows, so each is
			// dropped once it has lasted longer: this takes a few
			// seconds.
			killed := 0
			var since time.Time // when the watch was last seen established
			for i := 0; i < 400 || killed < 5; i++ {
				if i == 20000 {
					t.Fatalf("the append watch ended %d times in %d appends, want 5", killed, i)
				}
				k := keys[rng.IntN(len(keys))]
				want[k]++
				appendPlain(t, e.c, k, want[k])
				if !partitioned.Announced(e.subs[0]) {
					since = time.Time{}
				} else if since.IsZero() {
					since = time.Now()
				}
				if i%25 == 0 && !since.IsZero() && time.Since(since) > 1200*time.Millisecond {
					n, err := e.c.ClientKillByFilter(context.Background(), "TYPE", "pubsub").Result()
					if err != nil {
						t.Fatal(err)
					}
					if n > 0 {
						killed++
						since = time.Time{}
					}
				}
				time.Sleep(time.Duration(rng.IntN(6)) * time.Millisecond)
			}
			eventually(t, 60*time.Second, 10*time.Millisecond, "every entry handled", func() bool { return rec.complete(want) })
			rec.checkOrder(t, want)
			if n := rec.overlap.Load(); n > 0 {
				t.Fatalf("%d overlapping handler calls", n)
			}
		})
	}
}

// A key's watched lanes span every category of the subscription, and an
// append to one whose category's index does not hold the key (a process
// manager's second category, written without its index) is still
// announced: it wakes the known key. Before, the index check dropped the
// name, and with no blocking wait issued the entry waited for the
// safety net (an hour here). Found by a reviewer.
func TestRedisAnnouncedAppendToAnUnindexedLaneWakesItsKey(t *testing.T) {
	const cat2 = "shop::payment"
	e := newRedisEnv(t)
	rec := newRecorder(t)
	e.start("node-1", rec.handler("node-1"), func(c *partitioned.Config) {
		c.Categories = []string{cat, cat2}
		c.IdleAfter = 20 * time.Millisecond
		c.WaitTimeout = time.Hour
		c.DiscoverEvery = time.Hour
	}, nil)
	keys := []string{"k"}
	publishAll(t, e.pub, keys, 1, 1)
	idleAndAnnounced(t, e.subs[0], rec, wantAll(keys, 1))
	err := e.c.XAdd(context.Background(), &redis.XAddArgs{Stream: broker.ProteanLayout.Stream(cat2, "k"), Values: []any{broker.DataField, envelope("k", 2)}}).Err()
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, 10*time.Millisecond, "the other category's entry handled", func() bool { return rec.complete(wantAll(keys, 2)) })
}

// failingIndexCheck is the Redis broker whose index checks of announced
// names always fail.
type failingIndexCheck struct {
	*redisbroker.Broker
	watches atomic.Int64
}

func (b *failingIndexCheck) WatchAppends(ctx context.Context, category string) (<-chan string, error) {
	b.watches.Add(1)
	return b.Broker.WatchAppends(ctx, category)
}

func (b *failingIndexCheck) PartitionKeysIndexed(context.Context, string, []string) ([]bool, error) {
	return nil, errors.New("index check refused")
}

// A failing index check wakes the known keys it was for and keeps the
// watch: ending it made every failed batch re-establish the watch, with
// no back-off (134 watches for 200 appends, found by a reviewer), and
// flip every wait loop out of and back into announced mode.
func TestRedisFailingIndexCheckKeepsTheWatch(t *testing.T) {
	e := newRedisEnv(t)
	rec := newRecorder(t)
	fb := &failingIndexCheck{Broker: redisbroker.New(e.client())}
	e.start("node-1", rec.handler("node-1"), func(c *partitioned.Config) {
		c.Broker = fb
		c.IdleAfter = 20 * time.Millisecond
		c.WaitTimeout = time.Hour
	}, nil)
	keys := keyNames(10)
	publishAll(t, e.pub, keys, 1, 1)
	idleAndAnnounced(t, e.subs[0], rec, wantAll(keys, 1))
	w0 := fb.watches.Load()
	want := wantAll(keys, 1)
	for i := range 200 {
		k := keys[i%len(keys)]
		want[k]++
		appendPlain(t, e.c, k, want[k])
		time.Sleep(time.Millisecond)
	}
	eventually(t, 30*time.Second, 10*time.Millisecond, "every entry handled", func() bool { return rec.complete(want) })
	rec.checkOrder(t, want)
	if n := fb.watches.Load() - w0; n != 0 {
		t.Fatalf("%d append watches established during 200 appends, want the first kept", n)
	}
}

// A key woken by an announced append its category's index lacks is
// remembered, to be checked again when that index changes; such a check
// finds nothing appended and must wake nothing. Before, every change of
// the index (a publisher adding keys) woke the key again, and each wake
// took its lease: 301 wakes in 15 s with nothing to read, found by a
// reviewer.
func TestRedisIndexChangesDoNotWakeAnUnindexedKeyAgain(t *testing.T) {
	const cat2 = "shop::payment"
	e := newRedisEnv(t)
	rec := newRecorder(t)
	e.start("node-1", rec.handler("node-1"), func(c *partitioned.Config) {
		c.Categories = []string{cat, cat2}
		c.IdleAfter = 10 * time.Millisecond
		c.WaitTimeout = time.Hour
		c.DiscoverEvery = time.Hour
	}, nil)
	keys := []string{"k"}
	publishAll(t, e.pub, keys, 1, 1)
	idleAndAnnounced(t, e.subs[0], rec, wantAll(keys, 1))
	ctx := context.Background()
	l := broker.ProteanLayout
	if err := e.c.XAdd(ctx, &redis.XAddArgs{Stream: l.Stream(cat2, "k"), Values: []any{broker.DataField, envelope("k", 2)}}).Err(); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, 10*time.Millisecond, "the entry handled, idle again", func() bool {
		return rec.complete(wantAll(keys, 2)) && len(e.subs[0].Status().Held) == 0
	})
	gen := func() int64 {
		n, err := e.c.Get(ctx, l.GenerationKey(group, "k")).Int64()
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	before := gen()
	for i := range 40 {
		// Another publisher's new keys in cat2's index, nothing for k.
		if err := e.c.SAdd(ctx, l.IndexKey(cat2), fmt.Sprintf("other%02d", i)).Err(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	// The new keys are taken on (each index change is announced); k's
	// lease is not taken again for them.
	time.Sleep(200 * time.Millisecond)
	if n := gen() - before; n > 1 {
		t.Fatalf("k's lease was taken %d times while only the index changed, want at most once", n)
	}
}

// An append to a lane that was empty, announced while the worker waits
// out a handler's retry, is read by the same generation once the retry
// succeeds. The retry's wait used to drop the wake and keep skipping the
// lane as empty; while appends are announced nothing woke it again, and
// the entry waited for the idle release (IdleAfter) and a new lease: a
// later generation handled it. Found by a review (waitOut in drain.go).
func TestRedisAppendToAnEmptyLaneDuringARetryIsReadAtOnce(t *testing.T) {
	e := newRedisEnv(t)
	rec := newRecorder(t)
	e.start("node-1", rec.handler("node-1"), func(c *partitioned.Config) {
		c.IdleAfter = 2 * time.Second
		c.WaitTimeout = time.Hour // no safety net: only the wake finds it
		c.DiscoverEvery = time.Hour
		c.Retry = runtime.RetryPolicy{Attempts: 5, Backoff: 300 * time.Millisecond, MaxBackoff: 300 * time.Millisecond}
	}, nil)
	keys := []string{"k"}
	publishAll(t, e.pub, keys, 1, 1)
	idleAndAnnounced(t, e.subs[0], rec, wantAll(keys, 1))

	failed := make(chan struct{})
	var failedOnce atomic.Bool
	var gens sync.Map // seq -> generation it was handled under
	rec.setFail(func(m runtime.Message) error {
		seq := seqOf(t, m.Data)
		if seq == 2 && failedOnce.CompareAndSwap(false, true) {
			close(failed)
			return errors.New("transient")
		}
		gens.Store(seq, m.Generation)
		return nil
	})
	appendPlain(t, e.c, "k", 2)
	<-failed // the worker waits out the retry (or is about to)
	bf := broker.ProteanLayout.LaneStream(cat, "k", broker.DefaultBackfillSuffix)
	if err := e.c.XAdd(context.Background(), &redis.XAddArgs{Stream: bf, Values: []any{broker.DataField, envelope("k", 3)}}).Err(); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, 5*time.Millisecond, "seq 3 handled", func() bool { return rec.complete(wantAll(keys, 3)) })
	g2, _ := gens.Load(2)
	g3, _ := gens.Load(3)
	if g2 != g3 {
		t.Errorf("the backfill entry appended during the retry was handled under generation %v, the retried one under %v: it waited for the idle release", g3, g2)
	}
}

// indexCheckLog is the Redis broker with the candidates of its index
// checks recorded.
type indexCheckLog struct {
	*redisbroker.Broker
	mu      sync.Mutex
	checked map[string]int
}

func (b *indexCheckLog) PartitionKeysIndexed(ctx context.Context, category string, keys []string) ([]bool, error) {
	b.mu.Lock()
	for _, k := range keys {
		b.checked[k]++
	}
	b.mu.Unlock()
	return b.Broker.PartitionKeysIndexed(ctx, category, keys)
}

func (b *indexCheckLog) count(key string) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.checked[key]
}

// Appends to a known key's backfill lane are that key's: the lane's name
// read as a key of its own ("k:backfill") is not checked against the
// index at each append (a review found every lane append costing an
// index check and filling the unindexed candidates with names that are
// no keys).
func TestRedisAnnouncedLaneAppendsOfAKnownKeyCheckNoIndex(t *testing.T) {
	e := newRedisEnv(t)
	rec := newRecorder(t)
	ib := &indexCheckLog{Broker: redisbroker.New(e.client()), checked: map[string]int{}}
	e.start("node-1", rec.handler("node-1"), func(c *partitioned.Config) {
		c.Broker = ib
		c.IdleAfter = 20 * time.Millisecond
		c.WaitTimeout = time.Hour
		c.DiscoverEvery = time.Hour
	}, nil)
	keys := []string{"k"}
	publishAll(t, e.pub, keys, 1, 1)
	idleAndAnnounced(t, e.subs[0], rec, wantAll(keys, 1))
	// The main lane's announcement made "k" known indexed.
	appendPlain(t, e.c, "k", 2)
	eventually(t, 30*time.Second, 5*time.Millisecond, "seq 2 handled", func() bool { return rec.complete(wantAll(keys, 2)) })
	eventually(t, 30*time.Second, 5*time.Millisecond, "k checked", func() bool { return ib.count("k") > 0 })

	bf := broker.ProteanLayout.LaneStream(cat, "k", broker.DefaultBackfillSuffix)
	for seq := 3; seq <= 12; seq++ {
		if err := e.c.XAdd(context.Background(), &redis.XAddArgs{Stream: bf, Values: []any{broker.DataField, envelope("k", seq)}}).Err(); err != nil {
			t.Fatal(err)
		}
		eventually(t, 30*time.Second, 5*time.Millisecond, fmt.Sprintf("seq %d handled", seq), func() bool { return rec.complete(wantAll(keys, seq)) })
	}
	if n := ib.count("k:" + broker.DefaultBackfillSuffix); n != 0 {
		t.Errorf("the backfill lane's name was checked as a key %d times for 10 appends to a known key's lane", n)
	}
}
