package topic_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/protctl/protctl/pkg/broker"
	"github.com/protctl/protctl/pkg/runtime"
	"github.com/protctl/protctl/pkg/runtime/internal/enginetest"
	"github.com/protctl/protctl/pkg/runtime/kafkasource"
	"github.com/protctl/protctl/pkg/runtime/ledger"
	"github.com/protctl/protctl/pkg/runtime/topic"
)

// gateLedger is the runtime's ledger with hooks around the real calls:
// they only delay a call (before it reaches the store, or after the
// store answered and before the caller gets the answer), so the test can
// force an interleaving of the runtime's writes and its ledger polls on
// the real store.
type gateLedger struct {
	ledger.Ledger

	lists atomic.Int64 // ListParked calls started
	// beforePark runs before the real Park; afterList after the real
	// ListParked read the store (n is the call's number, from 1), before
	// its answer is returned. nil: no delay.
	beforePark atomic.Pointer[func(p ledger.Parked)]
	afterList  atomic.Pointer[func(n int64, entries []ledger.Parked)]
	// beforeResolve runs before the real Resolve.
	beforeResolve atomic.Pointer[func(aggregate string)]
}

func (g *gateLedger) Park(ctx context.Context, f broker.Fence, p ledger.Parked) error {
	if h := g.beforePark.Load(); h != nil {
		(*h)(p)
	}
	return g.Ledger.Park(ctx, f, p)
}

func (g *gateLedger) ListParked(ctx context.Context, subscription string) ([]ledger.Parked, error) {
	n := g.lists.Add(1)
	entries, err := g.Ledger.ListParked(ctx, subscription)
	if h := g.afterList.Load(); h != nil && err == nil {
		(*h)(n, entries)
	}
	return entries, err
}

func (g *gateLedger) Resolve(ctx context.Context, f broker.Fence, subscription, aggregate string) error {
	if h := g.beforeResolve.Load(); h != nil {
		(*h)(aggregate)
	}
	return g.Ledger.Resolve(ctx, f, subscription, aggregate)
}

// waitCh waits for ch with a deadline, failing the test (from any
// goroutine: Errorf, then the caller goes on) when it passes.
func waitCh(t testing.TB, ch <-chan struct{}, what string) bool {
	select {
	case <-ch:
		return true
	case <-time.After(20 * time.Second):
		t.Errorf("timed out waiting for %s", what)
		return false
	}
}

// staleListAroundPark makes the agg's park number nth race a ledger poll
// the way issue 16 found it: the poll's ListParked reads the ledger
// before the Park write lands, and its answer reaches the runtime only
// after the runtime recorded the park locally. The list used is the
// second to start after the park began, so that in the old code its
// time was surely after the park's time (taken before the write). It
// returns a channel closed once the stale answer was returned and the
// next poll started (so the stale list was applied).
func staleListAroundPark(t *testing.T, g *gateLedger, n *topicNode, agg string, nth int) <-chan struct{} {
	var (
		parks   atomic.Int32
		armedAt atomic.Int64
		armed   = make(chan struct{})
		read    = make(chan struct{})
		applied = make(chan struct{})
		once    sync.Once
	)
	armedAt.Store(-1)
	before := func(p ledger.Parked) {
		if p.Aggregate != agg || int(parks.Add(1)) != nth {
			return
		}
		armedAt.Store(g.lists.Load())
		close(armed)
		waitCh(t, read, "the ledger poll to read the ledger before the park")
	}
	parkedBefore := n.ts.Counters()[runtime.CounterParked]
	after := func(k int64, entries []ledger.Parked) {
		select {
		case <-armed:
		default:
			return
		}
		at := armedAt.Load()
		switch {
		case k == at+2:
			close(read)
			// Hold the answer until the runtime recorded the park.
			deadline := time.Now().Add(20 * time.Second)
			for n.ts.Counters()[runtime.CounterParked] <= parkedBefore+int64(nth-1) && time.Now().Before(deadline) {
				time.Sleep(5 * time.Millisecond)
			}
		case k >= at+3:
			once.Do(func() { close(applied) })
		}
	}
	g.beforePark.Store(&before)
	g.afterList.Store(&after)
	return applied
}

func gatedEnv(t *testing.T, kind storeKind, parts int32) (*topicEnv, *gateLedger) {
	e := newTopicEnv(t, kind, parts)
	return e, &gateLedger{Ledger: e.store}
}

// TestTopicParkRacingALedgerPollStaysParked is issue 16 item 1: a poll
// whose ListParked read the ledger before the Park write landed, answered
// after the park was recorded, must not un-park the aggregate. Before the
// fix the aggregate's later records ran past the parked head and the
// Retry then dropped the head and the records held behind it as handled:
// a0000 handled [1 2 6 7 8], seq 3-5 never.
func TestTopicParkRacingALedgerPollStaysParked(t *testing.T) {
	for _, kind := range []storeKind{onMemory, onRedis} {
		t.Run(string(kind), func(t *testing.T) {
			e, g := gatedEnv(t, kind, 1)
			rec := newTopicRecorder(t)
			rec.setFail(failSeq("a0000", 3))
			cfg := e.config(tsub(topicSub, rec.handler("n1")))
			cfg.Ledger = g
			cfg.LedgerPollEvery = 50 * time.Millisecond
			n := e.start("n1", cfg, nil)
			defer e.stopAll()
			awaitStarted(t, n.ts)
			applied := staleListAroundPark(t, g, n, "a0000", 1)

			aggs := aggNames(2)
			e.produce(aggs, 1, 5)
			waitCh(t, applied, "the stale list to be applied")
			e.produce(aggs, 6, 8)
			waitFor(t, 10*time.Second, "a0001 to flow", func() bool { return rec.complete(topicSub, aggs[1:], 8) })
			// Wait for a0000's lane to settle its records (skipped while
			// parked, or, in the old code, handled).
			waitFor(t, 10*time.Second, "a0000's records settled", func() bool {
				c := n.ts.Counters()
				return c[topic.CounterSkipped]+int64(len(rec.handled(topicSub, "a0000"))) >= 7
			}, func() string {
				return fmt.Sprintf("counters %v, handled %v", n.ts.Counters(), rec.handled(topicSub, "a0000"))
			})
			if got := rec.handled(topicSub, "a0000"); !slices.Equal(got, []int{1, 2}) {
				t.Fatalf("a0000 handled %v while parked, want [1 2]: its later records ran past the parked head", got)
			}

			rec.setFail(nil)
			g.beforePark.Store(nil)
			g.afterList.Store(nil)
			if err := n.ts.Retry(context.Background(), topicSub, "a0000"); err != nil {
				t.Fatalf("Retry: %v", err)
			}
			waitFor(t, 10*time.Second, "the retry to handle a0000 to 8", func() bool {
				return rec.complete(topicSub, []string{"a0000"}, 8)
			}, func() string { return fmt.Sprint(rec.handled(topicSub, "a0000")) })
			waitFor(t, 10*time.Second, "the entry resolved", func() bool {
				ps, err := e.store.ListParked(context.Background(), topicSub)
				return err == nil && len(ps) == 0
			})
			if got := rec.handled(topicSub, "a0000"); !slices.Equal(got, enginetest.SeqRange(1, 8)) {
				t.Fatalf("a0000 handled %v, want 1..8 once each, in order", got)
			}
		})
	}
}

// TestTopicLedgerPollInterleavings forces the other orders of a park (or
// a retry's re-park, or a skip) and a ledger poll on the real stores, and
// checks that every record of the aggregate is handled once in order, or
// dropped by the skip only.
func TestTopicLedgerPollInterleavings(t *testing.T) {
	type scenario struct {
		name string
		run  func(t *testing.T, e *topicEnv, g *gateLedger, n *topicNode, rec *topicRecorder)
	}
	ctx := context.Background()
	entries := func(t *testing.T, e *topicEnv) []ledger.Parked {
		ps, err := e.store.ListParked(ctx, topicSub)
		if err != nil {
			t.Fatal(err)
		}
		return ps
	}
	resolved := func(t *testing.T, e *topicEnv) {
		waitFor(t, 10*time.Second, "the entry resolved", func() bool { return len(entries(t, e)) == 0 })
	}
	for _, sc := range []scenario{
		{"the poll reads the ledger after the park landed", func(t *testing.T, e *topicEnv, g *gateLedger, n *topicNode, rec *topicRecorder) {
			// The polls after the park was recorded read the ledger after
			// the Park write returned.
			e.produce(aggNames(2), 1, 5)
			waitFor(t, 10*time.Second, "a0000 parked", func() bool { return n.ts.Counters()[runtime.CounterParked] == 1 })
			at := g.lists.Load()
			waitFor(t, 10*time.Second, "two polls after the park", func() bool { return g.lists.Load() >= at+2 })
			e.produce(aggNames(2), 6, 8)
			waitFor(t, 10*time.Second, "a0001 to flow", func() bool { return rec.complete(topicSub, aggNames(2)[1:], 8) })
			if got := rec.handled(topicSub, "a0000"); !slices.Equal(got, []int{1, 2}) {
				t.Fatalf("a0000 handled %v while parked, want [1 2]", got)
			}
			rec.setFail(nil)
			if err := n.ts.Retry(ctx, topicSub, "a0000"); err != nil {
				t.Fatal(err)
			}
			waitFor(t, 10*time.Second, "a0000 to 8", func() bool { return rec.complete(topicSub, []string{"a0000"}, 8) })
			resolved(t, e)
			if got := rec.handled(topicSub, "a0000"); !slices.Equal(got, enginetest.SeqRange(1, 8)) {
				t.Fatalf("a0000 handled %v, want 1..8", got)
			}
		}},
		{"a retry's re-park races a poll", func(t *testing.T, e *topicEnv, g *gateLedger, n *topicNode, rec *topicRecorder) {
			e.produce(aggNames(2), 1, 5)
			waitFor(t, 10*time.Second, "a0000 parked at 3", func() bool { return n.ts.Counters()[runtime.CounterParked] == 1 })
			// The retry handles 3 and 4 and fails at 5: parked again, and
			// that park races a poll.
			rec.setFail(failSeq("a0000", 5))
			applied := staleListAroundPark(t, g, n, "a0000", 1)
			if err := n.ts.Retry(ctx, topicSub, "a0000"); err != nil {
				t.Fatal(err)
			}
			waitCh(t, applied, "the stale list to be applied")
			g.beforePark.Store(nil)
			g.afterList.Store(nil)
			e.produce(aggNames(2), 6, 8)
			waitFor(t, 10*time.Second, "a0001 to flow", func() bool { return rec.complete(topicSub, aggNames(2)[1:], 8) })
			if got := rec.handled(topicSub, "a0000"); !slices.Equal(got, []int{1, 2, 3, 4}) {
				t.Fatalf("a0000 handled %v after the re-park, want [1 2 3 4]", got)
			}
			rec.setFail(nil)
			if err := n.ts.Retry(ctx, topicSub, "a0000"); err != nil {
				t.Fatal(err)
			}
			waitFor(t, 10*time.Second, "a0000 to 8", func() bool { return rec.complete(topicSub, []string{"a0000"}, 8) })
			resolved(t, e)
			if got := rec.handled(topicSub, "a0000"); !slices.Equal(got, enginetest.SeqRange(1, 8)) {
				t.Fatalf("a0000 handled %v, want 1..8 once each", got)
			}
		}},
		{"a poll that read the entry before a skip answers after it", func(t *testing.T, e *topicEnv, g *gateLedger, n *topicNode, rec *topicRecorder) {
			e.produce(aggNames(2), 1, 5)
			waitFor(t, 10*time.Second, "a0000 parked at 3", func() bool { return n.ts.Counters()[runtime.CounterParked] == 1 })
			read := make(chan struct{})
			skipped := make(chan struct{})
			var once sync.Once
			after := func(k int64, entries []ledger.Parked) {
				if len(entries) == 1 {
					once.Do(func() {
						close(read)
						waitCh(t, skipped, "the skip")
					})
				}
			}
			g.afterList.Store(&after)
			waitCh(t, read, "a poll to read the entry")
			rec.setFail(nil)
			if err := n.ts.Skip(ctx, topicSub, "a0000"); err != nil {
				t.Fatal(err)
			}
			close(skipped)
			at := g.lists.Load()
			waitFor(t, 10*time.Second, "the stale list applied", func() bool { return g.lists.Load() >= at+2 })
			e.produce(aggNames(2), 6, 8)
			waitFor(t, 10*time.Second, "both to 8", func() bool { return rec.complete(topicSub, aggNames(2), 8) })
			resolved(t, e)
			if got := rec.handled(topicSub, "a0000"); !slices.Equal(got, []int{1, 2, 6, 7, 8}) {
				t.Fatalf("a0000 handled %v, want [1 2 6 7 8]: the skip drops 3-5 only", got)
			}
		}},
		{"a poll that read the entry before a retry's resolve answers after it", func(t *testing.T, e *topicEnv, g *gateLedger, n *topicNode, rec *topicRecorder) {
			e.produce(aggNames(2), 1, 5)
			waitFor(t, 10*time.Second, "a0000 parked at 3", func() bool { return n.ts.Counters()[runtime.CounterParked] == 1 })
			read := make(chan struct{})
			resolvedCh := make(chan struct{})
			var once, ronce sync.Once
			after := func(k int64, entries []ledger.Parked) {
				if len(entries) == 1 {
					once.Do(func() {
						close(read)
						waitCh(t, resolvedCh, "the retry's resolve")
					})
				}
			}
			// The retry's resolve waits until a poll read the entry.
			beforeResolve := func(string) {
				ronce.Do(func() { g.afterList.Store(&after); waitCh(t, read, "a poll to read the entry") })
			}
			g.beforeResolve.Store(&beforeResolve)
			rec.setFail(nil)
			if err := n.ts.Retry(ctx, topicSub, "a0000"); err != nil {
				t.Fatal(err)
			}
			waitFor(t, 10*time.Second, "the retry resolved", func() bool { return n.ts.Counters()[runtime.CounterResolved] == 1 })
			close(resolvedCh)
			at := g.lists.Load()
			waitFor(t, 10*time.Second, "the stale list applied", func() bool { return g.lists.Load() >= at+2 })
			e.produce(aggNames(2), 6, 8)
			waitFor(t, 10*time.Second, "both to 8", func() bool { return rec.complete(topicSub, aggNames(2), 8) })
			resolved(t, e)
			if got := rec.handled(topicSub, "a0000"); !slices.Equal(got, enginetest.SeqRange(1, 8)) {
				t.Fatalf("a0000 handled %v, want 1..8", got)
			}
		}},
	} {
		for _, kind := range []storeKind{onMemory, onRedis} {
			t.Run(sc.name+"/"+string(kind), func(t *testing.T) {
				e, g := gatedEnv(t, kind, 1)
				rec := newTopicRecorder(t)
				rec.setFail(failSeq("a0000", 3))
				cfg := e.config(tsub(topicSub, rec.handler("n1")))
				cfg.Ledger = g
				cfg.LedgerPollEvery = 50 * time.Millisecond
				n := e.start("n1", cfg, nil)
				defer e.stopAll()
				awaitStarted(t, n.ts)
				sc.run(t, e, g, n, rec)
				rec.checkOrder(t, topicSub, aggNames(2)[1:], 8)
			})
		}
	}
}

// partRecorder records, per (partition, aggregate), the offsets handled
// in order, and fails each record's first fails(p, offset) attempts.
type partRecorder struct {
	t     testing.TB
	mu    sync.Mutex
	seqs  map[string][]int   // "p/agg" -> seqs handled
	offs  map[string][]int64 // "p/agg" -> offsets handled
	tries map[string]int     // "p/offset" -> attempts
	in    map[string]bool    // "p/agg" inside the handler
	fails func(p int32, off int64, seq int) int
}

func newPartRecorder(t testing.TB) *partRecorder {
	return &partRecorder{t: t, seqs: map[string][]int{}, offs: map[string][]int64{}, tries: map[string]int{}, in: map[string]bool{}}
}

func (r *partRecorder) handler() runtime.Handler {
	return runtime.HandlerFunc(func(ctx context.Context, m runtime.Message) error {
		key := strconv.Itoa(int(m.Partition)) + "/" + m.Aggregate
		off, _ := strconv.ParseInt(m.Position, 10, 64)
		seq, _ := strconv.Atoi(m.Headers.Get("seq"))
		r.mu.Lock()
		if r.in[key] {
			r.t.Errorf("two handlers inside %s at once", key)
		}
		r.in[key] = true
		tk := strconv.Itoa(int(m.Partition)) + "/" + m.Position
		r.tries[tk]++
		try := r.tries[tk]
		fails := r.fails
		r.mu.Unlock()
		defer func() { r.mu.Lock(); r.in[key] = false; r.mu.Unlock() }()
		if fails != nil && try <= fails(m.Partition, off, seq) {
			return fmt.Errorf("cannot handle %s offset %d (try %d)", key, off, try)
		}
		r.mu.Lock()
		r.seqs[key] = append(r.seqs[key], seq)
		r.offs[key] = append(r.offs[key], off)
		r.mu.Unlock()
		return nil
	})
}

func (r *partRecorder) handled(p int32, agg string) []int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.seqs[strconv.Itoa(int(p))+"/"+agg])
}

func (r *partRecorder) offsets(p int32, agg string) []int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.offs[strconv.Itoa(int(p))+"/"+agg])
}

// headerRecord is record seq of agg on partition p, its aggregate in the
// "agg" header (so that one aggregate can be on several partitions).
func headerRecord(p int32, agg string, seq int) *kgo.Record {
	s := strconv.Itoa(seq)
	id := strconv.Itoa(int(p)) + "/" + agg + "/" + s
	return &kgo.Record{Topic: topicName, Partition: p, Key: []byte(id), Value: []byte(`{"n":` + s + `}`),
		Headers: []kgo.RecordHeader{{Key: "id", Value: []byte(id)}, {Key: "seq", Value: []byte(s)}, {Key: "agg", Value: []byte(agg)}}}
}

// TestTopicAggregateParkedOnTwoPartitions is issue 16 item 2: an
// aggregate (from a header) parked on partition 0 and then on partition 1
// keeps both entries. Before the fix the ledger index had one slot per
// aggregate: partition 0's entry was orphaned, the ledger poll un-parked
// it, its later records ran past its parked head, and a Retry acted on
// partition 1 only.
func TestTopicAggregateParkedOnTwoPartitions(t *testing.T) {
	for _, kind := range []storeKind{onMemory, onRedis} {
		t.Run(string(kind), func(t *testing.T) {
			e, g := gatedEnv(t, kind, 2)
			rec := newPartRecorder(t)
			rec.fails = func(p int32, off int64, seq int) int {
				if seq == 2 {
					return 1
				}
				return 0
			}
			cfg := e.config(tsub(topicSub, rec.handler()))
			cfg.Ledger = g
			cfg.Aggregate = kafkasource.AggregateFrom{Header: "agg"}
			cfg.LedgerPollEvery = 50 * time.Millisecond
			n := e.start("n1", cfg, nil)
			defer e.stopAll()
			awaitStarted(t, n.ts)
			ctx := context.Background()

			// Partition 0 parks first, then partition 1.
			e.k.Produce(t, e.prod, headerRecord(0, "x", 1), headerRecord(0, "x", 2), headerRecord(0, "x", 3))
			waitFor(t, 10*time.Second, "x parked on partition 0", func() bool { return n.ts.Counters()[runtime.CounterParked] == 1 })
			e.k.Produce(t, e.prod, headerRecord(1, "x", 1), headerRecord(1, "x", 2), headerRecord(1, "x", 3))
			waitFor(t, 10*time.Second, "x parked on partition 1", func() bool { return n.ts.Counters()[runtime.CounterParked] == 2 })
			// Several polls later, both are still parked.
			at := g.lists.Load()
			waitFor(t, 10*time.Second, "four more ledger polls", func() bool { return g.lists.Load() >= at+4 })
			e.k.Produce(t, e.prod, headerRecord(0, "x", 4), headerRecord(1, "x", 4))
			e.k.Produce(t, e.prod, headerRecord(0, "y", 1), headerRecord(1, "y", 1))
			waitFor(t, 10*time.Second, "y handled on both", func() bool {
				return len(rec.handled(0, "y")) == 1 && len(rec.handled(1, "y")) == 1
			})
			for _, p := range []int32{0, 1} {
				if got := rec.handled(p, "x"); !slices.Equal(got, []int{1}) {
					t.Fatalf("partition %d: x handled %v while parked, want [1]", p, got)
				}
			}
			ps, err := e.store.ListParked(ctx, topicSub)
			if err != nil || len(ps) != 2 || ps[0].Partition == ps[1].Partition {
				t.Fatalf("listed %+v (%v), want x's entries of partitions 0 and 1", ps, err)
			}
			if err := n.ts.Retry(ctx, topicSub, "x"); err != nil {
				t.Fatalf("Retry: %v", err)
			}
			for _, p := range []int32{0, 1} {
				waitFor(t, 10*time.Second, fmt.Sprintf("x retried on partition %d", p), func() bool {
					return len(rec.handled(p, "x")) >= 4
				}, func() string { return fmt.Sprint(rec.handled(p, "x")) })
			}
			waitFor(t, 10*time.Second, "both resolved", func() bool {
				ps, err := e.store.ListParked(ctx, topicSub)
				return err == nil && len(ps) == 0
			})
			for _, p := range []int32{0, 1} {
				if got := rec.handled(p, "x"); !slices.Equal(got, enginetest.SeqRange(1, 4)) {
					t.Fatalf("partition %d: x handled %v, want 1..4 once each", p, got)
				}
			}
		})
	}
}

// TestTopicLedgerRandomized parks many aggregates on several partitions
// (one aggregate can be parked on more than one), with the ledger's calls
// delayed at random, concurrent ledger polls, and an operator retrying or
// skipping entries as they appear. The audit at the end: for every
// (partition, aggregate) the records handled are in offset order, none
// twice, and every record not handled starts a run that an explicit skip
// of that very entry dropped.
func TestTopicLedgerRandomized(t *testing.T) {
	for _, kind := range []storeKind{onMemory, onRedis} {
		t.Run(string(kind), func(t *testing.T) {
			seed := time.Now().UnixNano()
			t.Logf("seed %d", seed)
			rnd := rand.New(rand.NewPCG(uint64(seed), 16))
			const (
				parts = 3
				aggs  = 12
				seqs  = 12
			)
			e := newTopicEnv(t, kind, parts)
			g := &gateLedger{Ledger: e.store}
			var rmu sync.Mutex
			jitter := func(maxMS int) time.Duration {
				rmu.Lock()
				defer rmu.Unlock()
				return time.Duration(rnd.IntN(maxMS+1)) * time.Millisecond
			}
			beforePark := func(ledger.Parked) { time.Sleep(jitter(30)) }
			afterList := func(int64, []ledger.Parked) { time.Sleep(jitter(40)) }
			beforeResolve := func(string) { time.Sleep(jitter(20)) }
			g.beforePark.Store(&beforePark)
			g.afterList.Store(&afterList)
			g.beforeResolve.Store(&beforeResolve)

			// Each record fails 0 (most), 1 or 2 times before it succeeds.
			failures := map[string]int{}
			var records []*kgo.Record
			for seq := 1; seq <= seqs; seq++ {
				for a := range aggs {
					agg := "g" + strconv.Itoa(a)
					// Each aggregate lives on two partitions.
					for _, p := range []int32{int32(a % parts), int32((a + 1) % parts)} {
						r := headerRecord(p, agg, seq)
						records = append(records, r)
						k := rnd.IntN(100)
						switch {
						case k < 6:
							failures[string(r.Key)] = 1
						case k < 8:
							failures[string(r.Key)] = 2
						}
					}
				}
			}
			rec := newPartRecorder(t)
			rec.fails = func(p int32, off int64, seq int) int { return 0 }
			var fmu sync.Mutex
			idFails := map[string]int{}
			for k, v := range failures {
				idFails[k] = v
			}
			h := rec.handler()
			handler := runtime.HandlerFunc(func(ctx context.Context, m runtime.Message) error {
				fmu.Lock()
				n := idFails[m.Headers.Get("id")]
				if n > 0 {
					idFails[m.Headers.Get("id")] = n - 1
				}
				fmu.Unlock()
				if n > 0 {
					return errors.New("planned failure")
				}
				return h.Handle(ctx, m)
			})
			cfg := e.config(tsub(topicSub, handler))
			cfg.Ledger = g
			cfg.Aggregate = kafkasource.AggregateFrom{Header: "agg"}
			cfg.LedgerPollEvery = 30 * time.Millisecond
			cfg.ParkBurst = 1000
			n := e.start("n1", cfg, nil)
			defer e.stopAll()
			awaitStarted(t, n.ts)

			produced := e.k.Produce(t, e.prod, records...)

			// The operator: retries (mostly) or skips what is parked, by
			// entry, through the node and through the ledger's requests.
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			var smu sync.Mutex
			skips := map[string]bool{} // "p/position" of entries skipped
			opDone := make(chan struct{})
			go func() {
				defer close(opDone)
				for ctx.Err() == nil {
					ps, err := e.store.ListParked(ctx, topicSub)
					if err != nil {
						time.Sleep(10 * time.Millisecond)
						continue
					}
					for _, p := range ps {
						if p.Request != nil || p.Status == ledger.StatusRetrying {
							continue
						}
						rmu.Lock()
						k := rnd.IntN(10)
						rmu.Unlock()
						switch {
						case k < 2:
							smu.Lock()
							skips[p.Partition+"/"+p.Position] = true
							smu.Unlock()
							if err := e.store.RequestSkip(ctx, topicSub, p.Partition, p.Aggregate, "test", "op"); err != nil && !errors.Is(err, ledger.ErrNotParked) {
								t.Errorf("request skip: %v", err)
							}
						default:
							if err := e.store.RequestRetry(ctx, topicSub, p.Partition, p.Aggregate, "op"); err != nil &&
								!errors.Is(err, ledger.ErrNotParked) && !errors.Is(err, ledger.ErrUnrecoverable) {
								t.Errorf("request retry: %v", err)
							}
						}
					}
					time.Sleep(jitter(50))
				}
			}()

			// Done: every record handled or dropped by a skip, nothing
			// parked.
			type pagg struct {
				p   int32
				agg string
			}
			byKey := map[pagg][]*kgo.Record{}
			for _, r := range produced {
				k := pagg{r.Partition, string(r.Headers[2].Value)}
				byKey[k] = append(byKey[k], r)
			}
			audit := func() []string {
				var bad []string
				smu.Lock()
				defer smu.Unlock()
				for k, rs := range byKey {
					p := k.p
					got := rec.offsets(p, k.agg)
					set := map[int64]bool{}
					for i, o := range got {
						if set[o] {
							bad = append(bad, fmt.Sprintf("%v: offset %d handled twice (%v)", k, o, got))
						}
						set[o] = true
						if i > 0 && o < got[i-1] {
							bad = append(bad, fmt.Sprintf("%v: offset %d handled after %d", k, o, got[i-1]))
						}
					}
					// Each run of records not handled must start at a skipped
					// entry's position.
					for i, r := range rs {
						if set[r.Offset] {
							continue
						}
						if i > 0 && !set[rs[i-1].Offset] {
							continue // inside a run
						}
						if !skips[strconv.Itoa(int(p))+"/"+strconv.FormatInt(r.Offset, 10)] {
							bad = append(bad, fmt.Sprintf("%v: offset %d (seq %s) never handled and not skipped", k, r.Offset, r.Headers[1].Value))
						}
					}
				}
				slices.Sort(bad)
				return bad
			}
			waitFor(t, 60*time.Second, "every record handled or skipped and nothing parked", func() bool {
				ps, err := e.store.ListParked(context.Background(), topicSub)
				return err == nil && len(ps) == 0 && len(audit()) == 0
			}, func() string {
				ps, _ := e.store.ListParked(context.Background(), topicSub)
				bad := audit()
				if len(bad) > 10 {
					bad = bad[:10]
				}
				return fmt.Sprintf("%d parked, audit: %v, counters %v", len(ps), bad, n.ts.Counters())
			})
			cancel()
			<-opDone
			c := n.ts.Counters()
			if c[runtime.CounterParked] == 0 {
				t.Fatalf("nothing was parked (counters %v): the test proved nothing", c)
			}
			t.Logf("counters %v, %d skipped entries", c, len(skips))
		})
	}
}
