package partitioned_test

import (
	"context"
	"slices"
	"strings"
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

// Announced new keys taken on with an acquisition that checks the index
// (evCandidates, docs/decisions/0052-index-check-with-the-acquisition.md).

// candidateBroker is the Redis broker with its index checks of announced
// names held while hold is set (until the channel it holds is closed),
// and the acquisitions that checked the index recorded per key. Its scans
// of the index leave the test's keys out (hidden): only the
// announcements find them.
type candidateBroker struct {
	*redisbroker.Broker
	hold atomic.Pointer[chan struct{}]

	mu      sync.Mutex
	checked map[string][]broker.LeaseGrant // per key, the grants of acquisitions that checked the index
}

func newCandidateBroker(c *redis.Client) *candidateBroker {
	return &candidateBroker{Broker: redisbroker.New(c), checked: map[string][]broker.LeaseGrant{}}
}

func (b *candidateBroker) PartitionKeysIndexed(ctx context.Context, category string, keys []string) ([]bool, error) {
	if h := b.hold.Load(); h != nil {
		select {
		case <-*h:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return b.Broker.PartitionKeysIndexed(ctx, category, keys)
}

func (b *candidateBroker) AcquirePartitionLeases(ctx context.Context, reqs []broker.LeaseRequest) []broker.LeaseGrant {
	out := b.Broker.AcquirePartitionLeases(ctx, reqs)
	b.mu.Lock()
	defer b.mu.Unlock()
	for i, r := range reqs {
		if r.Index != "" {
			b.checked[r.Member] = append(b.checked[r.Member], out[i])
		}
	}
	return out
}

// hidden is the key candidateBroker's scans of the index leave out, so
// that the announcements alone find it.
func hidden(k string) bool { return strings.HasPrefix(k, "k") }

func (b *candidateBroker) PartitionKeys(ctx context.Context, category string) ([]string, error) {
	keys, err := b.Broker.PartitionKeys(ctx, category)
	return slices.DeleteFunc(keys, hidden), err
}

func (b *candidateBroker) ScanPartitionKeys(ctx context.Context, category string, cursor uint64, count int64) ([]string, uint64, error) {
	keys, next, err := b.Broker.ScanPartitionKeys(ctx, category, cursor, count)
	return slices.DeleteFunc(keys, hidden), next, err
}

// grants returns the grants of key's acquisitions that checked the index.
func (b *candidateBroker) grants(key string) []broker.LeaseGrant {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.checked[key])
}

// startCandidateNode starts one node on a candidateBroker that finds keys
// by their announcements only (no scan, no index poll), and waits until a
// first key, "w", its check answered, is handled: the node places keys.
func startCandidateNode(t *testing.T) (*redisEnv, *recorder, *candidateBroker) {
	t.Helper()
	e := newRedisEnv(t)
	rec := newRecorder(t)
	cb := newCandidateBroker(e.client())
	e.start("node-1", rec.handler("node-1"), func(c *partitioned.Config) {
		c.Broker = cb
		c.DiscoverEvery = time.Hour
		c.DiscoverPollEvery = time.Hour
	}, nil)
	protean(t, e.c, "w", 1)
	eventually(t, 30*time.Second, 5*time.Millisecond, "a first key handled", func() bool {
		return partitioned.Announced(e.subs[0]) && rec.complete(map[string]int{"w": 1})
	})
	return e, rec, cb
}

// The node a new key's HRW owner is handles its first entry without
// waiting for the index check of the announced name: here the check does
// not answer until the entry was handled, its acquisition having checked
// the index. Before, a new key cost two round trips in a row (the check,
// then the acquisition) before its handler.
func TestRedisNewKeyIsTakenOnWithoutWaitingForItsIndexCheck(t *testing.T) {
	e, rec, cb := startCandidateNode(t)

	release := make(chan struct{})
	cb.hold.Store(&release)
	first := []string{"k000"}
	protean(t, e.c, first[0], 1)
	eventually(t, 30*time.Second, 5*time.Millisecond, "the new key handled", func() bool { return rec.complete(wantAll(first, 1)) })
	g := cb.grants(first[0])
	if len(g) == 0 || !g[0].Acquired || g[0].NotIndexed {
		t.Fatalf("%s handled, but its acquisitions that checked the index were %+v", first[0], g)
	}
	// The checks answer from now on; keys keep being taken on, each
	// handled once and in order.
	close(release)
	keys := keyNames(10) // k000 and nine new keys
	want := wantAll(keys, 3)
	want[first[0]] = 4
	for seq := 1; seq <= 3; seq++ {
		for _, k := range keys {
			protean(t, e.c, k, seq+want[k]-3)
		}
	}
	eventually(t, 30*time.Second, 5*time.Millisecond, "every key handled", func() bool { return rec.complete(want) })
	rec.checkOrder(t, want)
}

// An announced append to a stream that only looks like a partition's (a
// name under the category's prefix that no index holds) is not taken
// on: its acquisition, which checks the index, writes nothing (no lease,
// generation or group), the handler never sees it, and the node forgets
// it. A key whose entry arrives next is handled as usual.
func TestRedisAnnouncedStreamOutsideTheIndexIsNotTakenOn(t *testing.T) {
	e, rec, cb := startCandidateNode(t)

	const stray = "stray"
	appendPlain(t, e.c, stray, 1) // an XADD no SADD goes with
	eventually(t, 30*time.Second, 5*time.Millisecond, "the stray stream's acquisition answered", func() bool {
		g := cb.grants(stray)
		return len(g) > 0
	})
	if g := cb.grants(stray); !g[0].NotIndexed || g[0].Acquired {
		t.Fatalf("the acquisition of an unindexed stream = %+v, want NotIndexed", g[0])
	}
	keys := []string{"real"}
	protean(t, e.c, "real", 1) // w and real are assigned, stray is not
	eventually(t, 30*time.Second, 5*time.Millisecond, "the real key handled and the stray one forgotten", func() bool {
		return rec.complete(wantAll(keys, 1)) && e.subs[0].Status().Counters[runtime.CounterAssigned] == 2
	})
	ctx := context.Background()
	l := broker.ProteanLayout
	for _, k := range []string{l.LeaseKey(group, stray), l.GenerationKey(group, stray)} {
		if n, err := e.c.Exists(ctx, k).Result(); err != nil || n != 0 {
			t.Fatalf("%s exists (%d, %v): the refused acquisition wrote it", k, n, err)
		}
	}
	groups, err := e.c.XInfoGroups(ctx, l.Stream(cat, stray)).Result()
	if err != nil || len(groups) != 0 {
		t.Fatalf("groups on the stray stream = %+v, %v; want none", groups, err)
	}
	if got := rec.handled(stray); len(got) != 0 {
		t.Fatalf("the handler saw the stray stream's entries %v", got)
	}
}

// A subscription named like its category (decision 0031 allows it) has
// its lease and generation keys under the category's prefix, C:K:__lease__
// and C:K:__generation__, and every acquisition, renewal and release
// writes them. Read as keys ("K:__lease__"), such names are no keys a
// publisher may write: they are not taken on as candidates, each with an
// acquisition script, but wait for the index check of their batch. Found
// by a review: 36 acquisitions in 3 s for three held keys.
func TestRedisLeaseWritesOfASubscriptionNamedLikeItsCategoryAreNoCandidates(t *testing.T) {
	e := newRedisEnv(t)
	rec := newRecorder(t)
	cb := newCandidateBroker(e.client())
	e.start("node-1", rec.handler("node-1"), func(c *partitioned.Config) {
		c.Name = cat
		c.Broker = cb
		c.IdleAfter = time.Hour // the leases are held, and renewed
	}, nil)
	keys := []string{"a", "b", "c"}
	for _, k := range keys {
		protean(t, e.c, k, 1)
	}
	eventually(t, 30*time.Second, 5*time.Millisecond, "every key handled", func() bool {
		return partitioned.Announced(e.subs[0]) && rec.complete(wantAll(keys, 1))
	})
	r0 := e.subs[0].Status().Counters[runtime.CounterRenewals]
	eventually(t, 30*time.Second, 5*time.Millisecond, "three renewal rounds", func() bool {
		return e.subs[0].Status().Counters[runtime.CounterRenewals] >= r0+3
	})
	cb.mu.Lock()
	defer cb.mu.Unlock()
	for m, gs := range cb.checked {
		if strings.Contains(m, "__") {
			t.Errorf("%d acquisitions checked the index for %q, a lease or generation key's name", len(gs), m)
		}
	}
}

// Keys the node knows from its scan are still checked against the index
// at their first announced append (the check's memory holds only what it
// checked itself); as candidates they are known already, and a batch of
// them places nothing again. Found reading the change: such a batch
// called reassign with no key, which places every known key again and
// reports an assignment each time.
func TestRedisCandidatesTheNodeKnowsPlaceNothingAgain(t *testing.T) {
	e := newRedisEnv(t)
	rec := newRecorder(t)
	keys := keyNames(20)
	for _, k := range keys {
		protean(t, e.c, k, 1) // before the node: found by its scan
	}
	var assignments atomic.Int64
	obs := &runtime.Observer{OnAssignment: func(runtime.AssignmentEvent) { assignments.Add(1) }}
	e.start("node-1", rec.handler("node-1"), func(c *partitioned.Config) {
		c.IdleAfter = 20 * time.Millisecond
		c.DiscoverEvery = time.Hour
		c.DiscoverPollEvery = time.Hour
	}, obs)
	idleAndAnnounced(t, e.subs[0], rec, wantAll(keys, 1))
	before := assignments.Load()
	for _, k := range keys {
		appendPlain(t, e.c, k, 2)
	}
	eventually(t, 30*time.Second, 5*time.Millisecond, "every second entry handled", func() bool { return rec.complete(wantAll(keys, 2)) })
	rec.checkOrder(t, wantAll(keys, 2))
	if n := assignments.Load() - before; n != 0 {
		t.Errorf("%d assignments reported for appends to keys the node holds, want none", n)
	}
}

// A key the node knows from its scan ("old": candidateBroker's scans hide
// only k*) is not in the check's memory, and
// its first announced append is checked against the index; being a
// partition already, it is woken at once, not after the check: here the
// check does not answer until the entry was handled. Before, the first
// append to each idle key after a node's start waited for that round
// trip (idle keys at 50/s, BenchmarkLatencyRedis).
func TestRedisKnownKeyIsWokenWithoutWaitingForItsIndexCheck(t *testing.T) {
	e := newRedisEnv(t)
	rec := newRecorder(t)
	cb := newCandidateBroker(e.client())
	protean(t, e.c, "old", 1) // before the node: found by its scan, never announced
	e.start("node-1", rec.handler("node-1"), func(c *partitioned.Config) {
		c.Broker = cb
		c.IdleAfter = 20 * time.Millisecond
		c.WaitTimeout = time.Hour // no safety net: only a wake finds the entry
		c.DiscoverEvery = time.Hour
		c.DiscoverPollEvery = time.Hour
	}, nil)
	want := map[string]int{"old": 1}
	eventually(t, 30*time.Second, 5*time.Millisecond, "the key handled, idle and announced", func() bool {
		return rec.complete(want) && len(e.subs[0].Status().Held) == 0 && partitioned.Announced(e.subs[0])
	})

	release := make(chan struct{})
	cb.hold.Store(&release)
	defer close(release)
	appendPlain(t, e.c, "old", 2)
	want["old"] = 2
	eventually(t, 30*time.Second, 5*time.Millisecond, "the old key's entry handled", func() bool { return rec.complete(want) })
	rec.checkOrder(t, want)
}
