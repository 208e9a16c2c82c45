package partitioned_test

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/protctl/protctl/pkg/broker"
	"github.com/protctl/protctl/pkg/broker/redisbroker"
	"github.com/protctl/protctl/pkg/runtime"
	"github.com/protctl/protctl/pkg/runtime/internal/enginetest"
	"github.com/protctl/protctl/pkg/runtime/partitioned"
	"github.com/protctl/protctl/pkg/runtime/pause"
)

// heldWaitReads is the Redis broker with its WaitAndReadPartitionsFenced
// observed and, while hold is armed, the answer of a call whose reads
// delivered entries held back (after the real call, which changes
// nothing of what the server did) until the test releases it: the worker
// learns of the entries only then, whatever happened meanwhile.
type heldWaitReads struct {
	*redisbroker.Broker
	calls    atomic.Int64 // calls sent
	inFlight atomic.Int64 // calls not yet answered
	mu       sync.Mutex
	hold     chan struct{} // armed: closed by the test to release
	held     chan struct{} // closed when an answer is held
}

var _ broker.WaitReader = (*heldWaitReads)(nil)

func (h *heldWaitReads) WaitAndReadPartitionsFenced(ctx context.Context, stop <-chan struct{}, after map[string]string, block time.Duration, reads []broker.FencedRead) (broker.WaitedReads, bool) {
	h.inFlight.Add(1)
	defer h.inFlight.Add(-1)
	res, ok := h.Broker.WaitAndReadPartitionsFenced(ctx, stop, after, block, reads)
	if !ok {
		return res, ok
	}
	h.calls.Add(1)
	got := delivered(res)
	h.mu.Lock()
	hold, held := h.hold, h.held
	if got && hold != nil {
		h.hold, h.held = nil, nil // once
	}
	h.mu.Unlock()
	if got && hold != nil {
		close(held)
		<-hold
	}
	return res, ok
}

// delivered says whether any read of res delivered entries.
func delivered(res broker.WaitedReads) bool {
	for _, r := range res.Reads {
		if len(r.Messages) > 0 {
			return true
		}
	}
	return false
}

// arm holds the next answer that delivers entries; close the returned
// release to let it through. held is closed once it is held.
func (h *heldWaitReads) arm() (release, held chan struct{}) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.hold, h.held = make(chan struct{}), make(chan struct{})
	return h.hold, h.held
}

// startBlocked starts node id with its broker wrapped (heldWaitReads) and
// a long IdleAfter: a key that drained twice waits with blocking reads.
func startBlocked(t *testing.T, e *redisEnv, rec *recorder, id string, mutate func(*partitioned.Config)) (*runtime.Node, *heldWaitReads) {
	t.Helper()
	var h *heldWaitReads
	n := e.start(id, rec.handler(id), func(c *partitioned.Config) {
		h = &heldWaitReads{Broker: c.Broker.(*redisbroker.Broker)}
		c.Broker = h
		c.IdleAfter = time.Hour
		if mutate != nil {
			mutate(c)
		}
	}, nil)
	return n, h
}

// blocking publishes entries from..to of key one at a time, each once the
// previous one was handled, and waits until the key's worker waits with
// a blocking read (from its generation's second drain on). The entries
// must come within IdleAfter of each other for the generation to last:
// a test on a loaded machine gives IdleAfter seconds.
func blocking(t *testing.T, e *redisEnv, rec *recorder, h *heldWaitReads, key string, from, to int) {
	t.Helper()
	for seq := from; seq <= to; seq++ {
		protean(t, e.c, key, seq)
		eventually(t, 20*time.Second, 5*time.Millisecond, "handled", func() bool { return rec.complete(map[string]int{key: seq}) })
	}
	eventually(t, 20*time.Second, 5*time.Millisecond, "a blocking wait", func() bool { return h.inFlight.Load() > 0 })
}

// heldAnswer waits until an armed answer is held.
func heldAnswer(t *testing.T, held <-chan struct{}) {
	t.Helper()
	select {
	case <-held:
	case <-time.After(20 * time.Second):
		t.Fatal("no answer that delivered entries within 20 s")
	}
}

// A key that keeps receiving entries waits with blocking reads whose
// fenced reads deliver each entry with the news; an entry they deliver
// while the worker's wait has outlived its IdleAfter is handled, not
// dropped by the idle release (which would make the next generation
// skip the pending list: the entry stranded). Then the node stops while
// an answer that delivered an entry is held: the entry is left pending
// and the next owner reclaims and handles it, once, in order.
func TestRedisEntriesABlockingWaitDeliversAreNeverDropped(t *testing.T) {
	e := newRedisEnv(t)
	rec := newRecorder(t)
	n1, h := startBlocked(t, e, rec, "node-1", func(c *partitioned.Config) { c.IdleAfter = 2 * time.Second })
	blocking(t, e, rec, h, "k", 1, 3)

	release, held := h.arm()
	protean(t, e.c, "k", 4)
	heldAnswer(t, held)
	time.Sleep(2500 * time.Millisecond) // past IdleAfter while the answer is held
	close(release)
	eventually(t, 20*time.Second, 5*time.Millisecond, "4 handled", func() bool { return rec.complete(map[string]int{"k": 4}) })

	blocking(t, e, rec, h, "k", 5, 6)
	release, held = h.arm()
	protean(t, e.c, "k", 7)
	heldAnswer(t, held)
	stopped := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		stopped <- n1.Stop(ctx)
	}()
	eventually(t, 20*time.Second, 5*time.Millisecond, "node-1 stopping", func() bool {
		return subOf(n1).Status().State != runtime.StateRunning
	})
	close(release)
	if err := <-stopped; err != nil {
		t.Fatal(err)
	}
	e.nodes = nil
	if got := rec.handled("k"); !slices.Equal(got, enginetest.SeqRange(1, 6)) {
		t.Fatalf("node-1 handled %v before it stopped, want 1..6 (7 delivered, not handled)", got)
	}
	e.start("node-2", rec.handler("node-2"), nil, nil)
	eventually(t, 20*time.Second, 5*time.Millisecond, "7 handled by the next owner", func() bool { return rec.complete(map[string]int{"k": 7}) })
	rec.checkOrder(t, map[string]int{"k": 7})
}

// An operator's pause and seek reach a key whose worker waits with a
// blocking read at once, not when the wait ends on its own: at the next
// entry, the idle release (an hour away here) or the end of the lease's
// trust (18 s here, on a client with no ReadTimeout to shorten it). The
// test gives each 10 s; without the wait ended for them, each took 16 s
// or more.
func TestRedisPauseAndSeekEndABlockingWait(t *testing.T) {
	ctx := context.Background()
	e := newRedisEnv(t)
	rec := newRecorder(t)
	n, h := startBlocked(t, e, rec, "node-1", func(c *partitioned.Config) {
		withPauses(e.store)(c)
		c.LeaseTTL, c.RenewEvery = 20*time.Second, 2*time.Second
		long := redis.NewClient(&redis.Options{Addr: e.addr, ReadTimeout: -1})
		e.clients = append(e.clients, long)
		c.Broker.(*heldWaitReads).Broker = redisbroker.New(long)
	})
	blocking(t, e, rec, h, "k", 1, 3)

	if _, err := e.store.SetPause(ctx, "", group, pause.Key("k"), "", "test", ""); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, 5*time.Millisecond, "k held by the pause", func() bool { return pausedBy(n, "k") })
	protean(t, e.c, "k", 4)
	seen, err := e.store.ReadPause(ctx, "", group, pause.Key("k"))
	if err != nil {
		t.Fatal(err)
	}
	if got := rec.handled("k"); !slices.Equal(got, enginetest.SeqRange(1, 3)) {
		t.Fatalf("paused key handled %v", got)
	}
	if _, err := e.store.RemovePause(ctx, "", group, pause.Key("k"), seen); err != nil {
		t.Fatal(err)
	}
	eventually(t, 20*time.Second, 5*time.Millisecond, "4 handled after resume", func() bool { return rec.complete(map[string]int{"k": 4}) })
	blocking(t, e, rec, h, "k", 5, 6)

	// A seek back to the start: the owner carries it out under its
	// lease, and the entries are handled again from the first.
	token, err := e.c.Get(ctx, broker.ProteanLayout.LeaseKey(group, "k")).Result()
	if err != nil {
		t.Fatal(err)
	}
	stream := broker.ProteanLayout.Stream(cat, "k")
	status, detail, err := e.b.RequestSeek(ctx, group, "k", redisbroker.SeekRequest{
		ID: "s-1", Token: token, By: "test", Lanes: []redisbroker.SeekLane{{Stream: stream, To: "0-0", AnyFrom: true}},
	})
	if err != nil || status != "requested" {
		t.Fatalf("request seek = %q %q, %v", status, detail, err)
	}
	eventually(t, 10*time.Second, 5*time.Millisecond, "the seek carried out", func() bool {
		st, ok, err := e.b.SeekRequestStatus(ctx, group, "k", "s-1")
		return err == nil && ok && st.Status == redisbroker.SeekApplied
	})
	eventually(t, 20*time.Second, 5*time.Millisecond, "the entries handled again", func() bool { return len(rec.handled("k")) == 12 })
	want := append(enginetest.SeqRange(1, 6), enginetest.SeqRange(1, 6)...)
	if got := rec.handled("k"); !slices.Equal(got, want) {
		t.Fatalf("handled %v, want %v", got, want)
	}
}

// refusingWaitReads, once armed, appends the next entry right after the
// first call whose reads delivered entries, lets the entry's wake-up
// reach the worker before it answers, and refuses every later call (ok
// false, as when the pin limit is reached or another hot key took the
// last place).
type refusingWaitReads struct {
	*redisbroker.Broker
	calls  atomic.Int64
	armed  atomic.Bool
	refuse atomic.Bool
	append func()
}

func (h *refusingWaitReads) WaitAndReadPartitionsFenced(ctx context.Context, stop <-chan struct{}, after map[string]string, block time.Duration, reads []broker.FencedRead) (broker.WaitedReads, bool) {
	if h.refuse.Load() {
		return broker.WaitedReads{}, false
	}
	res, ok := h.Broker.WaitAndReadPartitionsFenced(ctx, stop, after, block, reads)
	if !ok {
		return res, ok
	}
	h.calls.Add(1)
	if delivered(res) && h.armed.CompareAndSwap(true, false) {
		h.append()
		time.Sleep(300 * time.Millisecond) // the announcement's wake arrives
		h.refuse.Store(true)
	}
	return res, ok
}

// After a short batch from a blocking wait the worker goes to its next
// wait with no read of its own. When that wait cannot be a blocking read,
// the worker waits as before, and the wake-up of an entry appended after
// the first wait's reads must still be there: found by a reviewer, the
// loop had taken it, and the entry waited for WaitTimeout (30 s here; the
// test allows 10).
func TestRedisWakeAfterABlockingBatchIsKeptForTheNextWait(t *testing.T) {
	e := newRedisEnv(t)
	rec := newRecorder(t)
	var h *refusingWaitReads
	e.start("node-1", rec.handler("node-1"), func(c *partitioned.Config) {
		h = &refusingWaitReads{Broker: c.Broker.(*redisbroker.Broker)}
		c.Broker = h
		c.IdleAfter = time.Hour
		c.WaitTimeout = 30 * time.Second
	}, nil)
	for seq := 1; seq <= 3; seq++ {
		protean(t, e.c, "k", seq)
		eventually(t, 20*time.Second, 5*time.Millisecond, "handled", func() bool { return rec.complete(map[string]int{"k": seq}) })
	}
	eventually(t, 20*time.Second, 5*time.Millisecond, "a blocking wait", func() bool { return h.calls.Load() > 0 })
	h.append = func() { protean(t, e.c, "k", 5) }
	h.armed.Store(true)
	protean(t, e.c, "k", 4)
	eventually(t, 10*time.Second, 5*time.Millisecond, "4 and 5 handled", func() bool { return rec.complete(map[string]int{"k": 5}) })
	rec.checkOrder(t, map[string]int{"k": 5})
}
