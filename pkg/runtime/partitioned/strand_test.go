package partitioned_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/protctl/protctl/internal/testenv"
	"github.com/protctl/protctl/pkg/broker"
	"github.com/protctl/protctl/pkg/broker/memorybroker"
	"github.com/protctl/protctl/pkg/broker/redisbroker"
	"github.com/protctl/protctl/pkg/runtime"
	"github.com/protctl/protctl/pkg/runtime/ledger"
	"github.com/protctl/protctl/pkg/runtime/memstore"
	"github.com/protctl/protctl/pkg/runtime/partitioned"
	"github.com/protctl/protctl/pkg/runtime/redisstore"
)

// Issue 17, "no entry is ever stranded", in process: three nodes while
// entries are appended with no wake-up signal (the index, then the stream,
// as Protean writes them; one in five to the key's backfill lane, each
// lane in order of its own) at gaps around a short IdleAfter, and a random
// schedule, drawn from a logged seed, cuts a node off for good (its calls
// block, then fail: a SIGKILL as the others see it; a new node starts
// after a while), pauses one past the lease TTL (its calls block: a
// SIGSTOP as the broker sees it), and breaks the nodes' running waits (the
// wait restarts). Every broker and store call of a node passes a gate that
// delays some of them, before the call and before its reply, and loses a
// few replies (the call happened, the node gets an error), so that the
// idle release, the wait's restarts, takeovers and lease expiry land in
// varied orders. Most keys get their last entry around a fault (only a
// key's last entry can be stranded: a later one rescues it). Asserted:
// every entry is handled (one is stranded when entries are left and no
// handler call began for 30s, or 3 minutes after the last append), and
// testenv.CheckCalls (order, no overlap, no stale generation). A few
// handler calls fail (systemic or aggregate), so that retries and pauses
// race too.
//
// TestMemNoEntryStranded runs on the in-memory broker and fake time (a
// synctest bubble), many rounds in seconds; TestRedisNoEntryStranded on
// the real redis-server, real time and the Redis adapter's pinned readers
// and blocking waits. cmd/protctl's TestRunNodeNoEntryStranded does it
// with `protctl run node` processes and real signals.
//
// PROTCTL_STRAND_ITER=N runs N rounds (defaults: 6 in memory, 1 on
// Redis), PROTCTL_STRAND_SEED sets the first round's seed. A seed replays
// the schedule of appends, faults and gate decisions as drawn, not the
// goroutines' interleaving.
func TestMemNoEntryStranded(t *testing.T) {
	forStrandSeeds(t, 6, func(t *testing.T, seed int64) {
		synctest.Test(t, func(t *testing.T) {
			b := memorybroker.New()
			store := memstore.New(b.Faults())
			runStrand(t, seed, strandEnv{
				ttl: 2 * time.Second, renew: 400 * time.Millisecond,
				node: func(g *gate) (broker.PartitionedBroker, strandStore) {
					return gatedBroker{b, g}, gatedStore{store, g}
				},
				append: func(ctx context.Context, key string, backfill bool, seq int) error {
					if err := b.RecordPartition(ctx, cat, key); err != nil {
						return err
					}
					_, err := b.Append(ctx, strandLane(key, backfill), envelope(key, seq))
					return err
				},
				state: func(key string) string {
					ctx := context.Background()
					l := broker.ProteanLayout
					lease, _, _ := b.Faults().GetString(ctx, l.LeaseKey(group, key))
					info, _, _ := b.StreamInfo(ctx, l.Stream(cat, key))
					pend, _ := b.PendingEntries(ctx, l.Stream(cat, key), group, 20)
					return fmt.Sprintf("lease %q, stream %+v, pending %+v", lease, info, pend)
				},
			})
		})
	})
}

func TestRedisNoEntryStranded(t *testing.T) { testRedisNoEntryStranded(t) }

// The same with every batch of the live path's reads run as one fenced
// transaction (redisbroker.WithTxBatchMin(1)): by default only batches of
// 16 reads or more are, which a round of this size rarely gathers, so
// the transactions would meet the gate's pauses and cuts, the kills and
// the idle releases only by chance.
func TestRedisNoEntryStrandedThroughTransactions(t *testing.T) {
	testRedisNoEntryStranded(t, redisbroker.WithTxBatchMin(1))
}

func testRedisNoEntryStranded(t *testing.T, opts ...redisbroker.Option) {
	forStrandSeeds(t, 1, func(t *testing.T, seed int64) {
		e := newRedisEnv(t)
		// The appends' own client, with long timeouts: an append that
		// timed out may or may not have happened, and the record would
		// then be wrong; a loaded machine answers slowly, not never.
		ac := redis.NewClient(&redis.Options{Addr: e.addr, ReadTimeout: time.Minute, WriteTimeout: time.Minute, PoolTimeout: time.Minute})
		defer ac.Close()
		runStrand(t, seed, strandEnv{
			ttl: redisTTL, renew: redisRenew, appendFor: 6 * time.Second, announced: true,
			node: func(g *gate) (broker.PartitionedBroker, strandStore) {
				c := e.client()
				rb := redisbroker.New(c, opts...)
				return gatedRedis{gatedBroker{rb, g}, rb}, gatedStore{redisstore.New(c), g}
			},
			append: func(ctx context.Context, key string, backfill bool, seq int) error {
				// Two round trips, as Protean sends them: the key is in
				// the index before its stream has the entry.
				l := broker.ProteanLayout
				if err := ac.SAdd(ctx, l.IndexKey(cat), key).Err(); err != nil {
					return err
				}
				return ac.XAdd(ctx, &redis.XAddArgs{Stream: strandLane(key, backfill), Values: []any{broker.DataField, envelope(key, seq)}}).Err()
			},
			state: func(key string) string {
				ctx := context.Background()
				l := broker.ProteanLayout
				lease, _ := e.c.Get(ctx, l.LeaseKey(group, key)).Result()
				gen, _ := e.c.Get(ctx, l.GenerationKey(group, key)).Result()
				groups, _ := e.c.XInfoGroups(ctx, l.Stream(cat, key)).Result()
				pend, _ := e.c.XPendingExt(ctx, &redis.XPendingExtArgs{Stream: l.Stream(cat, key), Group: group, Start: "-", End: "+", Count: 20}).Result()
				last, _ := e.c.XRevRangeN(ctx, l.Stream(cat, key), "+", "-", 1).Result()
				return fmt.Sprintf("lease %q, generation %s, groups %+v, pending %+v, last entry %v", lease, gen, groups, pend, last)
			},
		})
	})
}

// forStrandSeeds runs round once per seed (PROTCTL_STRAND_ITER rounds,
// def by default), stopping at the first failure.
func forStrandSeeds(t *testing.T, def int, round func(t *testing.T, seed int64)) {
	rounds := def
	if s := os.Getenv("PROTCTL_STRAND_ITER"); s != "" {
		v, err := strconv.Atoi(s)
		if err != nil || v < 1 {
			t.Fatalf("PROTCTL_STRAND_ITER=%q: want a positive integer", s)
		}
		rounds = v
	}
	seed := time.Now().UnixNano()
	if s := os.Getenv("PROTCTL_STRAND_SEED"); s != "" {
		v, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			t.Fatalf("PROTCTL_STRAND_SEED: %v", err)
		}
		seed = v
	}
	for i := range rounds {
		s := seed + int64(i)
		ok := t.Run(fmt.Sprintf("seed=%d", s), func(t *testing.T) {
			t.Logf("replay: PROTCTL_STRAND_SEED=%d go test -run '%s' ./pkg/runtime", s, t.Name())
			round(t, s)
		})
		if !ok {
			break
		}
	}
}

// errCut is what a cut-off node's calls return.
var errCut = errors.New("strand test: node cut off")

// gate is one node's way to the shared broker and store.
type gate struct {
	mu     sync.Mutex
	rng    *rand.Rand
	paused chan struct{} // non-nil while paused; closed to resume
	dead   bool          // cut off for good: calls fail
	cut    chan struct{} // closed to break the running waits
	lose   float64       // the share of replies lost
	// batches counts the batched calls (the live path's reads and
	// acquisitions) that passed the gate.
	batches atomic.Int64
	// checks counts the checks of watched streams (EntriesAfter) that
	// passed the gate: the wait loops ran announced (Redis only).
	checks atomic.Int64
}

func newGate(seed int64, n int) *gate {
	return &gate{rng: rand.New(rand.NewPCG(uint64(seed), uint64(1000+n))), cut: make(chan struct{}), lose: 0.003}
}

// errLostReply is what a call whose reply the gate lost returns: it
// happened, and the node cannot know.
var errLostReply = errors.New("strand test: reply lost")

// lost says whether the gate loses the reply of a call that just ran.
func (g *gate) lost() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.rng.Float64() < g.lose
}

// pass is the gate, before a call and before its reply: it waits while the
// node is paused, fails once it is cut off, and sometimes delays.
func (g *gate) pass(ctx context.Context) error {
	g.mu.Lock()
	paused := g.paused
	var d time.Duration
	switch r := g.rng.Float64(); {
	case r < 0.2:
		d = time.Duration(g.rng.IntN(20_000)) * time.Microsecond
	case r < 0.21:
		d = time.Duration(g.rng.IntN(1500)) * time.Millisecond
	}
	g.mu.Unlock()
	if paused != nil {
		select {
		case <-paused:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	g.mu.Lock()
	dead := g.dead
	g.mu.Unlock()
	if dead {
		return errCut
	}
	if d > 0 {
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

func (g *gate) pause() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.paused == nil {
		g.paused = make(chan struct{})
	}
}

func (g *gate) resume(dead bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.dead = g.dead || dead
	if g.paused != nil {
		close(g.paused)
		g.paused = nil
	}
}

func (g *gate) breakWaits() {
	g.mu.Lock()
	defer g.mu.Unlock()
	close(g.cut)
	g.cut = make(chan struct{})
}

// gated runs f between two passes of g.
func gated[T any](ctx context.Context, g *gate, f func() (T, error)) (T, error) {
	var zero T
	if err := g.pass(ctx); err != nil {
		return zero, err
	}
	v, err := f()
	if perr := g.pass(ctx); perr != nil {
		return zero, perr
	}
	if g.lost() {
		return zero, errLostReply
	}
	return v, err
}

// strandBroker is what the runtime finds on the in-memory and the Redis
// brokers: the contract and every optional capability they share.
type strandBroker interface {
	broker.PartitionedBroker
	broker.EntryWaiter
	broker.PartitionWatcher
	broker.AckReader
	broker.ConsumerReleaser
	broker.StreamTailer
	broker.BatchRenewer
	broker.BatchReader
	broker.BatchAcquirer
	broker.BatchReleaser
}

// gatedBroker is a broker behind a node's gate. The calls a node makes are
// overridden to pass the gate; the others are the broker's.
type gatedBroker struct {
	strandBroker
	g *gate
}

type acquired struct {
	l  broker.Lease
	ok bool
}

func (b gatedBroker) AcquirePartitionLease(ctx context.Context, leaseKey, generationKey, owner string, ttl time.Duration) (broker.Lease, bool, error) {
	a, err := gated(ctx, b.g, func() (acquired, error) {
		l, ok, err := b.strandBroker.AcquirePartitionLease(ctx, leaseKey, generationKey, owner, ttl)
		return acquired{l, ok}, err
	})
	return a.l, a.ok, err
}

func (b gatedBroker) RenewPartitionLease(ctx context.Context, f broker.Fence, ttl time.Duration) (bool, error) {
	return gated(ctx, b.g, func() (bool, error) { return b.strandBroker.RenewPartitionLease(ctx, f, ttl) })
}

func (b gatedBroker) RenewPartitionLeases(ctx context.Context, fences []broker.Fence, ttl time.Duration) ([]bool, error) {
	return gated(ctx, b.g, func() ([]bool, error) { return b.strandBroker.RenewPartitionLeases(ctx, fences, ttl) })
}

func (b gatedBroker) ReleasePartitionLease(ctx context.Context, f broker.Fence) (bool, error) {
	return gated(ctx, b.g, func() (bool, error) { return b.strandBroker.ReleasePartitionLease(ctx, f) })
}

func (b gatedBroker) ReleasePartitionLeaseConsumer(ctx context.Context, f broker.Fence, group string, streams ...string) (bool, error) {
	return gated(ctx, b.g, func() (bool, error) {
		return b.strandBroker.ReleasePartitionLeaseConsumer(ctx, f, group, streams...)
	})
}

func (b gatedBroker) ReadPartitionFenced(ctx context.Context, f broker.Fence, stream, group string, count int64, mode broker.ReadMode) ([]broker.Message, error) {
	return gated(ctx, b.g, func() ([]broker.Message, error) {
		return b.strandBroker.ReadPartitionFenced(ctx, f, stream, group, count, mode)
	})
}

func (b gatedBroker) AckAndReadPartitionFenced(ctx context.Context, f broker.Fence, stream, group string, ack []string, count int64, mode broker.ReadMode) ([]broker.Message, error) {
	return gated(ctx, b.g, func() ([]broker.Message, error) {
		return b.strandBroker.AckAndReadPartitionFenced(ctx, f, stream, group, ack, count, mode)
	})
}

func (b gatedBroker) AckPartitionFenced(ctx context.Context, f broker.Fence, stream, group string, ids ...string) (int64, error) {
	return gated(ctx, b.g, func() (int64, error) { return b.strandBroker.AckPartitionFenced(ctx, f, stream, group, ids...) })
}

func (b gatedBroker) ReclaimPartitionPending(ctx context.Context, f broker.Fence, stream, group string, minIdle time.Duration, count int64) (broker.ReclaimResult, error) {
	return gated(ctx, b.g, func() (broker.ReclaimResult, error) {
		return b.strandBroker.ReclaimPartitionPending(ctx, f, stream, group, minIdle, count)
	})
}

func (b gatedBroker) LastEntryIDs(ctx context.Context, streams []string) (map[string]string, error) {
	return gated(ctx, b.g, func() (map[string]string, error) { return b.strandBroker.LastEntryIDs(ctx, streams) })
}

func (b gatedBroker) ScanPartitionKeys(ctx context.Context, category string, cursor uint64, count int64) ([]string, uint64, error) {
	type page struct {
		keys []string
		next uint64
	}
	p, err := gated(ctx, b.g, func() (page, error) {
		keys, next, err := b.strandBroker.ScanPartitionKeys(ctx, category, cursor, count)
		return page{keys, next}, err
	})
	return p.keys, p.next, err
}

func (b gatedBroker) RegisterGroup(ctx context.Context, category, group string) error {
	_, err := gated(ctx, b.g, func() (struct{}, error) { return struct{}{}, b.strandBroker.RegisterGroup(ctx, category, group) })
	return err
}

// WaitForEntries passes the gate, and ends with an error when the test
// breaks the node's waits (a lost connection).
func (b gatedBroker) WaitForEntries(ctx context.Context, after map[string]string, timeout time.Duration) ([]string, error) {
	return gated(ctx, b.g, func() ([]string, error) {
		b.g.mu.Lock()
		cut := b.g.cut
		b.g.mu.Unlock()
		wctx, cancel := context.WithCancel(ctx)
		defer cancel()
		go func() {
			select {
			case <-cut:
				cancel()
			case <-wctx.Done():
			}
		}()
		streams, err := b.strandBroker.WaitForEntries(wctx, after, timeout)
		if ctx.Err() == nil && wctx.Err() != nil {
			return nil, errors.New("strand test: wait connection lost")
		}
		return streams, err
	})
}

// gatedRedis is the Redis broker behind a node's gate, with the
// capabilities only it has: pinned readers (whose calls pass the gate
// too) and new-key discovery.
type gatedRedis struct {
	gatedBroker
	rb *redisbroker.Broker
}

func (b gatedRedis) CountPartitionKeys(ctx context.Context, category string) (int64, error) {
	return gated(ctx, b.g, func() (int64, error) { return b.rb.CountPartitionKeys(ctx, category) })
}

// WatchAppends is the Redis broker's append watch (client tracking),
// which the test's breaks end as they end the waits: the wait loops then
// go from checking (announce.go) back to blocking waits, and come back
// when the next watch is established. A name the gate loses ends the
// watch too, as the adapter's watch ends when it drops one.
func (b gatedRedis) WatchAppends(ctx context.Context, category string) (<-chan string, error) {
	in, err := gated(ctx, b.g, func() (<-chan string, error) { return b.rb.WatchAppends(ctx, category) })
	if err != nil {
		return nil, err
	}
	b.g.mu.Lock()
	cut := b.g.cut
	b.g.mu.Unlock()
	out := make(chan string)
	go func() {
		defer func() {
			close(out)
			for range in { // the adapter closes it once ctx ends
			}
		}()
		for {
			select {
			case <-cut:
				return
			case name, ok := <-in:
				if !ok {
					return
				}
				if b.g.pass(ctx) != nil || b.g.lost() {
					return
				}
				select {
				case out <- name:
				case <-cut:
					return
				case <-ctx.Done():
					return
				}
			}
		}
	}()
	return out, nil
}

func (b gatedRedis) PartitionKeysIndexed(ctx context.Context, category string, keys []string) ([]bool, error) {
	return gated(ctx, b.g, func() ([]bool, error) { return b.rb.PartitionKeysIndexed(ctx, category, keys) })
}

func (b gatedRedis) EntriesAfter(ctx context.Context, after map[string]string) ([]string, error) {
	b.g.checks.Add(1)
	return gated(ctx, b.g, func() ([]string, error) { return b.rb.EntriesAfter(ctx, after) })
}

func (b gatedRedis) PinnedReader() (broker.AckReader, func(context.Context) error) {
	r, closeFn := b.rb.PinnedReader()
	return gatedPinned{r: r.(pinnedReader), g: b.g}, closeFn
}

// pinnedReader is what the Redis broker's pinned reader offers.
type pinnedReader interface {
	broker.AckReader
	broker.StreamTailer
	AcquirePartitionLease(ctx context.Context, leaseKey, generationKey, owner string, ttl time.Duration) (broker.Lease, bool, error)
	AcquirePartitionLeaseAndTails(ctx context.Context, leaseKey, generationKey, owner string, ttl time.Duration, streams []string) (broker.Lease, bool, map[string]string, error)
}

type gatedPinned struct {
	r pinnedReader
	g *gate
}

func (p gatedPinned) AckAndReadPartitionFenced(ctx context.Context, f broker.Fence, stream, group string, ack []string, count int64, mode broker.ReadMode) ([]broker.Message, error) {
	return gated(ctx, p.g, func() ([]broker.Message, error) {
		return p.r.AckAndReadPartitionFenced(ctx, f, stream, group, ack, count, mode)
	})
}

func (p gatedPinned) LastEntryIDs(ctx context.Context, streams []string) (map[string]string, error) {
	return gated(ctx, p.g, func() (map[string]string, error) { return p.r.LastEntryIDs(ctx, streams) })
}

func (p gatedPinned) AcquirePartitionLease(ctx context.Context, leaseKey, generationKey, owner string, ttl time.Duration) (broker.Lease, bool, error) {
	a, err := gated(ctx, p.g, func() (acquired, error) {
		l, ok, err := p.r.AcquirePartitionLease(ctx, leaseKey, generationKey, owner, ttl)
		return acquired{l, ok}, err
	})
	return a.l, a.ok, err
}

func (p gatedPinned) AcquirePartitionLeaseAndTails(ctx context.Context, leaseKey, generationKey, owner string, ttl time.Duration, streams []string) (broker.Lease, bool, map[string]string, error) {
	type acq struct {
		l     broker.Lease
		ok    bool
		tails map[string]string
	}
	a, err := gated(ctx, p.g, func() (acq, error) {
		l, ok, tails, err := p.r.AcquirePartitionLeaseAndTails(ctx, leaseKey, generationKey, owner, ttl, streams)
		return acq{l, ok, tails}, err
	})
	return a.l, a.ok, a.tails, err
}

// strandStore is the membership and the ledger.
type strandStore interface {
	ledger.Ledger
	runtime.Membership
}

// gatedStore is a store behind a node's gate (membership and the ledger
// reads a node makes).
type gatedStore struct {
	strandStore
	g *gate
}

func (s gatedStore) Heartbeat(ctx context.Context, st runtime.NodeStatus, ttl time.Duration) error {
	_, err := gated(ctx, s.g, func() (struct{}, error) { return struct{}{}, s.strandStore.Heartbeat(ctx, st, ttl) })
	return err
}

func (s gatedStore) Members(ctx context.Context, service string) ([]runtime.NodeStatus, error) {
	return gated(ctx, s.g, func() ([]runtime.NodeStatus, error) { return s.strandStore.Members(ctx, service) })
}

func (s gatedStore) Live(ctx context.Context, service string) ([]runtime.NodeStatus, error) {
	return gated(ctx, s.g, func() ([]runtime.NodeStatus, error) { return s.strandStore.Live(ctx, service) })
}

func (s gatedStore) Held(ctx context.Context, service string, nodes []string) (map[string][]runtime.HeldPartition, error) {
	return gated(ctx, s.g, func() (map[string][]runtime.HeldPartition, error) { return s.strandStore.Held(ctx, service, nodes) })
}

func (s gatedStore) Leave(ctx context.Context, service, node string) error {
	_, err := gated(ctx, s.g, func() (struct{}, error) { return struct{}{}, s.strandStore.Leave(ctx, service, node) })
	return err
}

func (s gatedStore) GetParked(ctx context.Context, subscription, partition, aggregate string) (ledger.Parked, error) {
	return gated(ctx, s.g, func() (ledger.Parked, error) {
		return s.strandStore.GetParked(ctx, subscription, partition, aggregate)
	})
}

func (s gatedStore) ListParked(ctx context.Context, subscription string) ([]ledger.Parked, error) {
	return gated(ctx, s.g, func() ([]ledger.Parked, error) { return s.strandStore.ListParked(ctx, subscription) })
}

// memStrand is one round's record.
type memStrand struct {
	t     *testing.T
	t0    time.Time
	mu    sync.Mutex
	calls []*testenv.HandlerCall
	rng   *rand.Rand // the handler's holds, under mu
	// appended is, per key, the last seq appended.
	appended map[string]int
	failed   map[*testenv.HandlerCall]bool
}

func (m *memStrand) handler(node string) runtime.Handler {
	return runtime.HandlerFunc(func(ctx context.Context, msg runtime.Message) error {
		c := &testenv.HandlerCall{Node: node, Key: strandKey(msg.Key, msg.Stream == strandLane(msg.Key, true)), Gen: msg.Generation, Attempt: msg.Attempt}
		c.Seq = seqOf(m.t, msg.Data)
		m.mu.Lock()
		c.Begin = time.Since(m.t0)
		m.calls = append(m.calls, c)
		var hold time.Duration
		switch r := m.rng.IntN(20); {
		case r < 5:
			hold = time.Duration(m.rng.IntN(5000)) * time.Microsecond
		case r == 5:
			hold = time.Duration(10+m.rng.IntN(90)) * time.Millisecond
		}
		// A few calls fail, so that retries and pauses are raced too:
		// 2% systemic (the partition pauses, keeping its lease), 1% an
		// aggregate failure (retried at once; five attempts make a park
		// too unlikely to matter).
		var err error
		switch n := m.rng.IntN(100); {
		case n < 2:
			err = runtime.Systemic(errors.New("strand test: dependency down"))
		case n < 3:
			err = errors.New("strand test: aggregate failure")
		}
		m.mu.Unlock()
		if hold > 0 {
			time.Sleep(hold)
		}
		m.mu.Lock()
		c.End = time.Since(m.t0)
		if err != nil {
			m.failed[c] = true
		}
		m.mu.Unlock()
		return err
	})
}

// missing returns the appended entries no call has handled, "key/seq",
// and when the last call began.
func (m *memStrand) missing() ([]string, time.Duration) {
	m.mu.Lock()
	defer m.mu.Unlock()
	done := map[string]bool{}
	var last time.Duration
	for _, c := range m.calls {
		if c.End > 0 && !m.failed[c] {
			done[c.Key+"/"+strconv.Itoa(c.Seq)] = true
		}
		last = max(last, c.Begin)
	}
	var out []string
	for k, n := range m.appended {
		for s := 1; s <= n; s++ {
			if !done[k+"/"+strconv.Itoa(s)] {
				out = append(out, k+"/"+strconv.Itoa(s))
			}
		}
	}
	sort.Strings(out)
	return out, last
}

// strandBackfill marks a key's backfill lane where a strand round
// records entries and calls by key: each lane has its own seqs.
const strandBackfill = "~bf"

// strandKey is what a strand round records key's entries of a lane as.
func strandKey(key string, backfill bool) string {
	if backfill {
		return key + strandBackfill
	}
	return key
}

// strandLane is key's main or backfill lane.
func strandLane(key string, backfill bool) string {
	if backfill {
		return broker.ProteanLayout.LaneStream(cat, key, broker.DefaultBackfillSuffix)
	}
	return broker.ProteanLayout.Stream(cat, key)
}

// strandEnv is where a strand round runs.
type strandEnv struct {
	ttl, renew time.Duration
	// appendFor is how long the round appends (0: 10-20s, drawn).
	appendFor time.Duration
	// node returns a new node's broker and store, behind g.
	node func(g *gate) (broker.PartitionedBroker, strandStore)
	// append writes key's entry seq as Protean does, with no signal, to
	// its main lane or its backfill lane (each lane has its own seqs).
	append func(ctx context.Context, key string, backfill bool, seq int) error
	// state describes key's partition (lease, group, pending entries)
	// when an entry is stranded.
	state func(key string) string
	// announced: the broker announces appends (its nodes' wait loops
	// check rather than wait while the watch is established).
	announced bool
}

func runStrand(t *testing.T, seed int64, env strandEnv) {
	rng := rand.New(rand.NewPCG(uint64(seed), 17))
	ttl, renew := env.ttl, env.renew
	idleAfter := []time.Duration{time.Millisecond, 20 * time.Millisecond, 100 * time.Millisecond, renew}[rng.IntN(4)]
	batch := []int{1, 3, 10}[rng.IntN(3)]
	workers := []int{1, 2, 8}[rng.IntN(3)]
	nKeys := 20 + rng.IntN(31)
	appendFor := time.Duration(10+rng.IntN(10)) * time.Second
	if env.appendFor > 0 {
		appendFor = env.appendFor
	}
	t.Logf("%d keys, IdleAfter %s, BatchSize %d, Workers %d, appending for %s", nKeys, idleAfter, batch, workers, appendFor)

	// The round's clock starts a millisecond early: in a synctest bubble
	// a call can begin and end at the very start, and a time of 0 marks a
	// call still running (testenv.HandlerCall).
	m := &memStrand{t: t, t0: time.Now().Add(-time.Millisecond), rng: rand.New(rand.NewPCG(uint64(seed), 18)), appended: map[string]int{}, failed: map[*testenv.HandlerCall]bool{}}
	type node struct {
		n *runtime.Node
		g *gate
	}
	nodes := map[string]*node{}
	var all []*node
	next := 1
	start := func() string {
		id := fmt.Sprintf("node-%d", next)
		g := newGate(seed, next)
		next++
		b, store := env.node(g)
		sub, err := partitioned.New(partitioned.Config{
			Name: group, Categories: []string{cat}, Handler: m.handler(id),
			Broker: b, Ledger: store,
			LeaseTTL: ttl, RenewEvery: renew, IdleAfter: idleAfter, BatchSize: batch, Workers: workers,
			// Only the waits find entries: an entry a wait misses is
			// not rescued by a timed-out wait issued again.
			WaitTimeout: time.Hour, DiscoverEvery: 200 * time.Millisecond,
			Retry: runtime.RetryPolicy{Attempts: 5, Backoff: 20 * time.Millisecond},
		})
		if err != nil {
			t.Fatal(err)
		}
		n, err := runtime.NewNode(runtime.NodeConfig{
			Service: service, NodeID: id, Membership: store, HeartbeatEvery: renew, MemberTTL: ttl,
		}, sub)
		if err != nil {
			t.Fatal(err)
		}
		if err := n.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		nodes[id] = &node{n, g}
		all = append(all, nodes[id])
		return id
	}
	defer func() {
		for _, nd := range all {
			nd.g.resume(true) // the cut-off ones fail from now on
		}
		for _, nd := range all {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			_ = nd.n.Stop(ctx)
			cancel()
		}
	}()
	// Two keys in three exist before the nodes start; the others are new
	// keys found while entries flow.
	keys := keyNames(nKeys)
	for i, k := range keys {
		if i%3 != 2 {
			if err := env.append(context.Background(), k, false, 1); err != nil {
				t.Fatal(err)
			}
			m.appended[k] = 1
		}
	}
	for range 3 {
		start()
	}

	now := func() time.Duration { return time.Since(m.t0) }
	// The faults, drawn up front so that the seed alone gives them.
	kinds := []string{"cut", "pause"}
	for range 1 + rng.IntN(4) {
		kinds = append(kinds, "break")
	}
	if rng.IntN(2) == 0 {
		kinds = append(kinds, "pause")
	}
	if rng.IntN(3) == 0 {
		kinds = append(kinds, "cut")
	}
	faultAt := make([]time.Duration, len(kinds))
	for i := range kinds {
		faultAt[i] = time.Second/2 + time.Duration(rng.Int64N(int64(appendFor-time.Second)))
	}
	until := testenv.LastAppends(rng, keys, faultAt, 0, appendFor)

	// The appenders: one per quarter of the keys (one writer per key
	// keeps its order), each with gaps around IdleAfter.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for a := range 4 {
		arng := rand.New(rand.NewPCG(uint64(seed), uint64(100+a)))
		var own []string
		for i, k := range keys {
			if i%4 == a {
				own = append(own, k)
			}
		}
		gap := func() time.Duration { return testenv.AppendGap(arng, idleAfter) }
		lanes := rand.New(rand.NewPCG(uint64(seed), uint64(200+a)))
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := testenv.AppendEach(own, until, now, gap, stop, func(k string) error {
				// One append in five goes to the key's backfill lane,
				// recorded as a key of its own (strandKey): wake-ups
				// name their lanes, and an empty lane is read only
				// when one names it.
				backfill := lanes.IntN(5) == 0
				rk := strandKey(k, backfill)
				m.mu.Lock()
				seq := m.appended[rk] + 1
				m.mu.Unlock()
				if err := env.append(context.Background(), k, backfill, seq); err != nil {
					return err
				}
				m.mu.Lock()
				m.appended[rk] = seq
				m.mu.Unlock()
				return nil
			})
			if err != nil {
				t.Error(err)
			}
		}()
	}

	// Faults run on this goroutine; a pause's end and a cut-off node's
	// successor are scheduled by the fault and run here too.
	var sched testenv.Schedule
	busy := map[string]bool{} // paused or cut off
	pick := func() (string, bool) {
		var ids []string
		for id := range nodes {
			if !busy[id] {
				ids = append(ids, id)
			}
		}
		return testenv.PickNode(rng, ids)
	}
	run := func(kind string) {
		switch kind {
		case "cut":
			id, ok := pick()
			if !ok {
				return
			}
			nodes[id].g.pause()
			busy[id] = true
			after := time.Duration(200+rng.IntN(2800)) * time.Millisecond
			t.Logf("%s: %s cut off; a node starts %s later", now(), id, after)
			sched.At(now()+after, func() {
				delete(nodes, id)
				delete(busy, id)
				t.Logf("%s: %s started", now(), start())
			})
		case "pause":
			id, ok := pick()
			if !ok {
				return
			}
			g := nodes[id].g
			g.pause()
			busy[id] = true
			d := ttl + time.Duration(rng.IntN(2000))*time.Millisecond
			t.Logf("%s: %s paused for %s", now(), id, d)
			sched.At(now()+d, func() {
				g.resume(false)
				delete(busy, id)
			})
		case "break":
			for _, nd := range nodes {
				nd.g.breakWaits()
			}
		}
	}
	for i, kind := range kinds {
		sched.At(faultAt[i], func() { run(kind) })
	}
	sched.Run(now)
	time.Sleep(max(0, appendFor-now()))
	close(stop)
	wg.Wait()
	last := now()

	for {
		miss, lastBegin := m.missing()
		if len(miss) == 0 {
			break
		}
		// Stranded: entries are left and no call began for 30s (nothing
		// works on them), or 3 minutes passed. A slow but busy round (one
		// worker slot, a loaded machine) is not stranded.
		if n := now(); n-max(lastBegin, last) > 30*time.Second || n-last > 3*time.Minute {
			n := len(miss)
			if n > 20 {
				miss = append(miss[:20], "...")
			}
			keys := map[string]bool{}
			for _, km := range miss {
				k, _, _ := strings.Cut(km, "/")
				keys[strings.TrimSuffix(k, strandBackfill)] = true
			}
			for k := range keys {
				var where []string
				for id, nd := range nodes {
					if slices.Contains(subOf(nd.n).Assigned(), k) {
						where = append(where, id+" assigned")
					}
					for _, h := range subOf(nd.n).Status().Held {
						if h.Partition == k {
							where = append(where, fmt.Sprintf("%s holds generation %d", id, h.Generation))
						}
					}
				}
				var calls []string
				m.mu.Lock()
				for _, c := range m.calls {
					if c.Key == k || c.Key == k+strandBackfill {
						calls = append(calls, fmt.Sprintf("%s seq %d gen %d attempt %d [%s, %s] failed %v", c.Node, c.Seq, c.Gen, c.Attempt, c.Begin, c.End, m.failed[c]))
					}
				}
				m.mu.Unlock()
				if len(calls) > 24 {
					calls = append(calls[:12], calls[len(calls)-12:]...)
				}
				t.Logf("key %s: %v; %s; calls (the first and last 12):\n  %s", k, where, env.state(k), strings.Join(calls, "\n  "))
			}
			t.Fatalf("%d entries stranded (last append at %s, last call began at %s, now %s): %v", n, last, lastBegin, now(), miss)
		}
		time.Sleep(10 * time.Millisecond)
	}
	m.mu.Lock()
	backfill := 0
	for k, n := range m.appended {
		if strings.HasSuffix(k, strandBackfill) {
			backfill += n
		}
	}
	m.mu.Unlock()
	t.Logf("every entry handled %s after the last append (%d of them on backfill lanes)", now()-last, backfill)
	m.mu.Lock()
	calls := make([]testenv.HandlerCall, len(m.calls))
	for i, c := range m.calls {
		calls[i] = *c
	}
	total := 0
	for _, n := range m.appended {
		total += n
	}
	m.mu.Unlock()
	st := testenv.CheckCalls(t, calls, testenv.CallRules{MaxInFlight: batch})
	var batches, checks int64
	for _, nd := range all {
		batches += nd.g.batches.Load()
		checks += nd.g.checks.Load()
	}
	if batches == 0 {
		t.Error("no batched read or acquisition passed a gate: the live path did not run")
	}
	if env.announced && checks == 0 {
		t.Error("no check of the watched streams passed a gate: the wait loops never ran announced")
	}
	t.Logf("%d calls for %d entries, %d replays, %d batched calls, %d checks", st.Calls, total, st.Replays, batches, checks)
}
