package partitioned_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/protctl/protctl/pkg/broker"
	"github.com/protctl/protctl/pkg/broker/memorybroker"
	"github.com/protctl/protctl/pkg/runtime"
	"github.com/protctl/protctl/pkg/runtime/ledger"
	"github.com/protctl/protctl/pkg/runtime/memstore"
	"github.com/protctl/protctl/pkg/runtime/partitioned"
)

// memEnv is a service on the in-memory broker and store. Its tests run in
// synctest bubbles: time is fake, so TTLs, heartbeats and idle periods
// pass without sleeping, and a bubble that ends with goroutines still
// blocked fails (a leak check for free).
type memEnv struct {
	t     *testing.T
	b     *memorybroker.Broker
	store *memstore.Store
	pub   *partitioned.Publisher
	nodes []*runtime.Node
}

const (
	memTTL       = 2 * time.Second
	memRenew     = 400 * time.Millisecond
	memHeartbeat = time.Second
)

func newMemEnv(t *testing.T) *memEnv {
	b := memorybroker.New()
	pub, err := partitioned.NewPublisher(b)
	if err != nil {
		t.Fatal(err)
	}
	return &memEnv{t: t, b: b, store: memstore.New(b.Faults()), pub: pub}
}

func (e *memEnv) config(h runtime.Handler) partitioned.Config {
	return partitioned.Config{
		Name:       group,
		Categories: []string{cat},
		Handler:    h,
		Broker:     e.b,
		Ledger:     e.store,
		LeaseTTL:   memTTL,
		RenewEvery: memRenew,
		BatchSize:  10,
		Workers:    8,
		Retry:      runtime.RetryPolicy{Attempts: 3, Backoff: 50 * time.Millisecond},
	}
}

func (e *memEnv) start(id string, h runtime.Handler, mutate func(*partitioned.Config), obs *runtime.Observer) *runtime.Node {
	e.t.Helper()
	cfg := e.config(h)
	if mutate != nil {
		mutate(&cfg)
	}
	sub, err := partitioned.New(cfg)
	if err != nil {
		e.t.Fatal(err)
	}
	n, err := runtime.NewNode(runtime.NodeConfig{
		Service: service, NodeID: id, Membership: e.store, HeartbeatEvery: memHeartbeat, Observer: obs,
	}, sub)
	if err != nil {
		e.t.Fatal(err)
	}
	if err := n.Start(context.Background()); err != nil {
		e.t.Fatal(err)
	}
	e.nodes = append(e.nodes, n)
	return n
}

// stopAll stops every node; tests call it before their bubble ends.
func (e *memEnv) stopAll() {
	for _, n := range e.nodes {
		if err := n.Stop(context.Background()); err != nil {
			e.t.Errorf("stop %s: %v", n.NodeID(), err)
		}
	}
}

func (e *memEnv) lease(key string) (string, bool) {
	v, ok, err := e.b.Faults().GetString(context.Background(), broker.ProteanLayout.LeaseKey(group, key))
	if err != nil {
		e.t.Fatal(err)
	}
	return v, ok
}

func TestPublisher(t *testing.T) {
	ctx := context.Background()
	b := memorybroker.New()
	pub, err := partitioned.NewPublisher(b)
	if err != nil {
		t.Fatal(err)
	}
	for _, bad := range []string{"", "a:b", "dlq", "backfill", "__x__", string(make([]byte, 256))} {
		if _, err := pub.Publish(ctx, cat, bad, envelope("x", 1)); !errors.Is(err, broker.ErrInvalidArgument) {
			t.Errorf("Publish with key %.10q = %v, want ErrInvalidArgument", bad, err)
		}
	}
	if _, err := pub.Publish(ctx, cat, "o-1", envelope("o-1", 1)); err != nil {
		t.Fatal(err)
	}
	if _, err := pub.Publish(ctx, cat, "o-1", envelope("o-1", 2), partitioned.LowPriority()); err != nil {
		t.Fatal(err)
	}
	for stream, want := range map[string]int64{cat + ":o-1": 1, cat + ":o-1:backfill": 1} {
		info, found, err := b.StreamInfo(ctx, stream)
		if err != nil || !found || info.Length != want {
			t.Errorf("stream %s: %+v found=%v err=%v, want %d entries", stream, info, found, err, want)
		}
	}
	keys, err := b.PartitionKeys(ctx, cat)
	if err != nil || !slices.Equal(keys, []string{"o-1"}) {
		t.Errorf("index = %v, %v; want [o-1]", keys, err)
	}

	// Without stream partitioning, every key goes to the category stream.
	inline := memorybroker.NewInline()
	ipub, err := partitioned.NewPublisher(inline)
	if err != nil {
		t.Fatal(err)
	}
	for i, k := range []string{"a", "b"} {
		if _, err := ipub.Publish(ctx, cat, k, envelope(k, i), partitioned.LowPriority()); err != nil {
			t.Fatal(err)
		}
	}
	info, found, err := inline.StreamInfo(ctx, cat)
	if err != nil || !found || info.Length != 2 {
		t.Errorf("category stream on an inline broker: %+v found=%v err=%v, want 2 entries", info, found, err)
	}
	if _, err := ipub.Publish(ctx, cat, "", nil); !errors.Is(err, broker.ErrInvalidArgument) {
		t.Errorf("inline publish with an empty key = %v, want ErrInvalidArgument", err)
	}
}

func TestConfigValidation(t *testing.T) {
	b := memorybroker.New()
	s := memstore.New(b.Faults())
	h := runtime.HandlerFunc(func(context.Context, runtime.Message) error { return nil })
	ok := partitioned.Config{Name: group, Categories: []string{cat}, Handler: h, Broker: b, Ledger: s}
	for name, mutate := range map[string]func(*partitioned.Config){
		"no broker":         func(c *partitioned.Config) { c.Broker = nil },
		"inline broker":     func(c *partitioned.Config) { c.Broker = memorybroker.NewInline() },
		"no name":           func(c *partitioned.Config) { c.Name = "" },
		"no categories":     func(c *partitioned.Config) { c.Categories = nil },
		"duplicate":         func(c *partitioned.Config) { c.Categories = []string{cat, cat} },
		"no handler":        func(c *partitioned.Config) { c.Handler = nil },
		"no ledger":         func(c *partitioned.Config) { c.Ledger = nil },
		"renew >= ttl":      func(c *partitioned.Config) { c.LeaseTTL, c.RenewEvery = time.Second, time.Second },
		"trust >= ttl":      func(c *partitioned.Config) { c.LeaseTTL, c.TrustWindow = time.Second, time.Second },
		"negative duration": func(c *partitioned.Config) { c.IdleAfter = -1 },
		"negative count":    func(c *partitioned.Config) { c.Workers = -1 },
	} {
		cfg := ok
		mutate(&cfg)
		if _, err := partitioned.New(cfg); err == nil {
			t.Errorf("%s: New accepted %+v", name, cfg)
		}
	}
	p, err := partitioned.New(ok)
	if err != nil {
		t.Fatal(err)
	}
	c := p.Config()
	if c.LeaseTTL != 15*time.Second || c.RenewEvery != 3*time.Second || c.TrustWindow != 12*time.Second || c.BatchSize != 100 {
		t.Errorf("defaults: %+v", c)
	}
	// Stop before Start is a no-op.
	if err := p.Stop(context.Background()); err != nil {
		t.Errorf("Stop before Start = %v", err)
	}
}

// Three nodes share many keys while a publisher keeps appending: every
// key's entries are handled in order, none is lost, and no two nodes are
// ever inside the handler for the same key.
func TestMemThreeNodesOrderNoLossNoOverlap(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newMemEnv(t)
		defer e.stopAll()
		rec := newRecorder(t)
		keys := keyNames(60)
		publishAll(t, e.pub, keys, 1, 5)
		for _, id := range []string{"node-1", "node-2", "node-3"} {
			e.start(id, rec.handler(id), nil, nil)
		}
		for batch := 1; batch < 8; batch++ {
			time.Sleep(300 * time.Millisecond)
			publishAll(t, e.pub, keys, batch*5+1, batch*5+5)
		}
		want := wantAll(keys, 40)
		eventually(t, time.Minute, 50*time.Millisecond, "all entries handled", func() bool { return rec.complete(want) })
		rec.checkOrder(t, want)

		// Each node handled a fair share, not everything.
		perNode := map[string]int{}
		for _, n := range e.nodes {
			perNode[n.NodeID()] = len(subOf(n).Assigned())
		}
		for id, n := range perNode {
			if n < 10 || n > 30 {
				t.Errorf("node %s is assigned %d of 60 keys: %v", id, n, perNode)
			}
		}
	})
}

// Fairness: three nodes and 300 keys settle at 100±20 each within two
// heartbeat intervals; a fourth node takes about a quarter, all of them
// from the others and none moving between the old nodes.
func TestMemFairness(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newMemEnv(t)
		defer e.stopAll()
		rec := newRecorder(t)
		keys := keyNames(300)
		publishAll(t, e.pub, keys, 1, 1)
		for _, id := range []string{"node-1", "node-2", "node-3"} {
			e.start(id, rec.handler(id), nil, nil)
		}
		time.Sleep(2 * memHeartbeat)
		synctest.Wait()
		before := map[string][]string{}
		total := 0
		for _, n := range e.nodes {
			a := subOf(n).Assigned()
			before[n.NodeID()] = a
			total += len(a)
			if len(a) < 80 || len(a) > 120 {
				t.Errorf("after two heartbeats %s holds %d keys, want 100±20", n.NodeID(), len(a))
			}
		}
		if total != 300 {
			t.Errorf("assigned %d keys in total, want 300", total)
		}
		eventually(t, time.Minute, 50*time.Millisecond, "every key handled", func() bool { return rec.complete(wantAll(keys, 1)) })

		n4 := e.start("node-4", rec.handler("node-4"), nil, nil)
		time.Sleep(2 * memHeartbeat)
		synctest.Wait()
		moved := subOf(n4).Assigned()
		if len(moved) < 50 || len(moved) > 100 {
			t.Errorf("the new node took %d of 300 keys, want about a quarter", len(moved))
		}
		total = len(moved)
		for _, n := range e.nodes[:3] {
			after := subOf(n).Assigned()
			total += len(after)
			for _, k := range after {
				if !slices.Contains(before[n.NodeID()], k) {
					t.Errorf("key %s moved to old node %s: moves must all go to the new node", k, n.NodeID())
				}
			}
		}
		if total != 300 {
			t.Errorf("assigned %d keys in total after the join, want 300", total)
		}
		// Handing over idle keys needs no lease traffic, but the new owner
		// handles their next entries.
		publishAll(t, e.pub, keys, 2, 2)
		eventually(t, time.Minute, 50*time.Millisecond, "second entries handled", func() bool { return rec.complete(wantAll(keys, 2)) })
		rec.mu.Lock()
		for _, k := range moved {
			if nodes := rec.nodes[k]; nodes[len(nodes)-1] != "node-4" {
				t.Errorf("key %s moved to node-4 but was handled by %v", k, nodes)
			}
		}
		rec.mu.Unlock()
		rec.checkOrder(t, wantAll(keys, 2))
	})
}

// Idle partitions give their leases back and are woken by new entries,
// including entries appended without a wake-up signal (Protean's
// publisher).
func TestMemIdlePartitionsHoldNoLease(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newMemEnv(t)
		defer e.stopAll()
		rec := newRecorder(t)
		keys := keyNames(20)
		publishAll(t, e.pub, keys, 1, 3)
		n := e.start("node-1", rec.handler("node-1"), nil, nil)
		eventually(t, time.Minute, 50*time.Millisecond, "entries handled", func() bool { return rec.complete(wantAll(keys, 3)) })
		sub := subOf(n)
		eventually(t, time.Minute, 50*time.Millisecond, "leases released", func() bool {
			st := sub.Status()
			return len(st.Held) == 0 && st.Counters[runtime.CounterWatched] == 20
		})
		for _, k := range keys {
			if v, ok := e.lease(k); ok {
				t.Errorf("idle key %s still leased: %s", k, v)
			}
		}
		// A raw append (no wake signal) to one idle key is still seen.
		if _, err := e.b.Append(context.Background(), cat+":k007", envelope("k007", 4)); err != nil {
			t.Fatal(err)
		}
		want := wantAll(keys, 3)
		want["k007"] = 4
		eventually(t, time.Minute, 10*time.Millisecond, "raw append handled", func() bool { return rec.complete(want) })
		rec.checkOrder(t, want)
	})
}

// A message that always fails parks its key after N attempts while the
// other keys keep flowing; an operator's retry (after the fix) handles it
// and the rest in order; a skip dead-letters the head and goes on.
func TestMemPoisonParkRetrySkip(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		e := newMemEnv(t)
		defer e.stopAll()
		rec := newRecorder(t)
		keys := keyNames(10)
		publishAll(t, e.pub, keys, 1, 5)
		poisoned := map[string]bool{"k003": true, "k006": true}
		var mu sync.Mutex
		attempts := map[string]int{}
		rec.setFail(func(m runtime.Message) error {
			if poisoned[m.Key] && seqOf(t, m.Data) == 3 {
				mu.Lock()
				defer mu.Unlock()
				attempts[m.Key] = m.Attempt
				return fmt.Errorf("cannot project order %s: %w", m.Key, errors.New("bad data"))
			}
			return nil
		})
		var parkedEvents atomic.Int32
		obs := &runtime.Observer{OnParked: func(p ledger.Parked) { parkedEvents.Add(1) }}
		n := e.start("node-1", rec.handler("node-1"), nil, obs)

		// Other keys flow; poisoned ones stop before their third entry.
		want := wantAll(keys, 5)
		for k := range poisoned {
			want[k] = 2
		}
		eventually(t, time.Minute, 50*time.Millisecond, "healthy keys handled", func() bool { return rec.complete(want) })
		eventually(t, time.Minute, 50*time.Millisecond, "two parked", func() bool {
			l, _ := e.store.ListParked(ctx, group)
			return len(l) == 2
		})
		parked, err := e.store.GetParked(ctx, group, "", "k003")
		if err != nil {
			t.Fatal(err)
		}
		if parked.Attempts != 3 || parked.Status != ledger.StatusParked || parked.Category != cat ||
			parked.Stream != cat+":k003" || parked.Owner != "node-1" || parked.Error == "" || parked.Partition != "k003" {
			t.Errorf("parked entry: %+v", parked)
		}
		mu.Lock()
		if attempts["k003"] != 3 {
			t.Errorf("handler saw %d attempts, want 3", attempts["k003"])
		}
		mu.Unlock()
		eventually(t, time.Minute, 50*time.Millisecond, "status counts two parked", func() bool { return subOf(n).Status().Parked == 2 })
		// Parked keys stay parked: new entries do not revive them.
		publishAll(t, e.pub, []string{"k003"}, 6, 6)
		time.Sleep(5 * time.Second)
		if got := rec.handled("k003"); !slices.Equal(got, []int{1, 2}) {
			t.Fatalf("parked key handled %v", got)
		}

		// Fix the handler, then retry k003: it resumes at its head.
		rec.setFail(nil)
		if err := e.store.RequestRetry(ctx, group, "", "k003", "ops"); err != nil {
			t.Fatal(err)
		}
		eventually(t, time.Minute, 50*time.Millisecond, "retried key handled", func() bool {
			return rec.complete(map[string]int{"k003": 6})
		})
		if got := rec.handled("k003"); !slices.Equal(got, []int{1, 2, 3, 4, 5, 6}) {
			t.Errorf("k003 after retry handled %v", got)
		}
		if _, err := e.store.GetParked(ctx, group, "", "k003"); !errors.Is(err, ledger.ErrNotParked) {
			t.Errorf("k003 still in the ledger after a successful retry: %v", err)
		}

		// Skip k006: its head goes to the DLQ, the rest is handled.
		if err := e.store.RequestSkip(ctx, group, "", "k006", "bad data", "ops"); err != nil {
			t.Fatal(err)
		}
		eventually(t, time.Minute, 50*time.Millisecond, "skipped key handled", func() bool {
			return slices.Contains(rec.handled("k006"), 5)
		})
		if got := rec.handled("k006"); !slices.Equal(got, []int{1, 2, 4, 5}) {
			t.Errorf("k006 after skip handled %v, want [1 2 4 5]", got)
		}
		dlq, err := e.b.Range(ctx, cat+":k006:dlq", "-", 10)
		if err != nil || len(dlq) != 1 || seqOf(t, dlq[0].Data) != 3 {
			t.Fatalf("dlq = %+v, %v; want the third entry", dlq, err)
		}
		if _, err := e.store.GetParked(ctx, group, "", "k006"); !errors.Is(err, ledger.ErrNotParked) {
			t.Errorf("k006 still in the ledger after a skip: %v", err)
		}
		st := subOf(n).Status()
		if st.Parked != 0 || st.Counters[runtime.CounterResolved] != 2 || st.Counters[runtime.CounterDeadLetters] != 1 || st.Counters[runtime.CounterParked] != 2 {
			t.Errorf("status after resolving: parked=%d counters=%v", st.Parked, st.Counters)
		}
		if c := parkedEvents.Load(); c != 2 {
			t.Errorf("OnParked called %d times, want 2", c)
		}
	})
}

// A parked key moves to another node with its ledger entry: the new owner
// sees it is parked and an operator's request reaches it there.
func TestMemParkedKeySurvivesFailover(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		e := newMemEnv(t)
		defer e.stopAll()
		rec := newRecorder(t)
		publishAll(t, e.pub, []string{"k001"}, 1, 3)
		rec.setFail(func(m runtime.Message) error {
			if seqOf(t, m.Data) == 2 {
				return errors.New("poison")
			}
			return nil
		})
		n1 := e.start("node-1", rec.handler("node-1"), nil, nil)
		eventually(t, time.Minute, 50*time.Millisecond, "parked", func() bool {
			_, err := e.store.GetParked(ctx, group, "", "k001")
			return err == nil
		})
		if err := n1.Stop(ctx); err != nil {
			t.Fatal(err)
		}
		rec.setFail(nil)
		n2 := e.start("node-2", rec.handler("node-2"), nil, nil)
		publishAll(t, e.pub, []string{"k001"}, 4, 4)
		time.Sleep(5 * time.Second)
		if got := rec.handled("k001"); !slices.Equal(got, []int{1}) {
			t.Fatalf("new owner handled a parked key: %v", got)
		}
		if st := subOf(n2).Status(); st.Parked != 1 {
			t.Errorf("new owner's status parked = %d, want 1", st.Parked)
		}
		if err := e.store.RequestRetry(ctx, group, "", "k001", "ops"); err != nil {
			t.Fatal(err)
		}
		eventually(t, time.Minute, 50*time.Millisecond, "retried on the new owner", func() bool {
			return rec.complete(map[string]int{"k001": 4})
		})
		rec.checkOrder(t, map[string]int{"k001": 4})
	})
}

// Systemic failures pause the partition and retry, never park; fatal ones
// stop the subscription and are reported to the node.
func TestMemSystemicAndFatal(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		e := newMemEnv(t)
		defer e.stopAll()
		rec := newRecorder(t)
		publishAll(t, e.pub, []string{"a", "b"}, 1, 3)
		var down atomic.Bool
		down.Store(true)
		rec.setFail(func(m runtime.Message) error {
			if m.Key == "a" && down.Load() {
				return runtime.Systemic(errors.New("database down"))
			}
			return nil
		})
		var mu sync.Mutex
		var pauses []runtime.PauseEvent
		obs := &runtime.Observer{OnPause: func(ev runtime.PauseEvent) {
			mu.Lock()
			defer mu.Unlock()
			pauses = append(pauses, ev)
		}}
		n := e.start("node-1", rec.handler("node-1"), nil, obs)
		eventually(t, time.Minute, 50*time.Millisecond, "b handled", func() bool { return rec.complete(map[string]int{"b": 3}) })
		time.Sleep(20 * time.Second)
		st := subOf(n).Status()
		if !slices.Equal(st.Paused, []string{"a"}) {
			t.Errorf("paused = %v, want [a]", st.Paused)
		}
		if l, _ := e.store.ListParked(ctx, group); len(l) != 0 {
			t.Errorf("a systemic failure parked %v", l)
		}
		down.Store(false)
		eventually(t, time.Minute, 50*time.Millisecond, "a handled", func() bool { return rec.complete(map[string]int{"a": 3}) })
		if st := subOf(n).Status(); len(st.Paused) != 0 {
			t.Errorf("still paused: %v", st.Paused)
		}
		mu.Lock()
		if len(pauses) < 2 || !pauses[0].Paused || pauses[len(pauses)-1].Paused {
			t.Errorf("pause events: %+v", pauses)
		}
		mu.Unlock()

		fatal := errors.New("schema mismatch")
		rec.setFail(func(m runtime.Message) error { return runtime.Fatal(fatal) })
		publishAll(t, e.pub, []string{"a"}, 4, 4)
		eventually(t, time.Minute, 50*time.Millisecond, "the subscription failed", func() bool { return subOf(n).Err() != nil })
		if !errors.Is(n.Err(), fatal) || !errors.Is(subOf(n).Err(), fatal) {
			t.Errorf("node err = %v, subscription err = %v", n.Err(), subOf(n).Err())
		}
		if st := subOf(n).Status(); st.State != runtime.StateFailed || len(st.Held) != 0 {
			t.Errorf("after fatal: state %s, held %v", st.State, st.Held)
		}
		eventually(t, time.Minute, 50*time.Millisecond, "lease released", func() bool {
			_, ok := e.lease("a")
			return !ok
		})
	})
}

// A dead owner's pending entry whose body was deleted is reported and
// never silently skipped; the rest of the partition is handled in order.
func TestMemMissingBodyReported(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		e := newMemEnv(t)
		defer e.stopAll()
		rec := newRecorder(t)
		publishAll(t, e.pub, []string{"k"}, 1, 3)
		l := broker.ProteanLayout
		// A previous owner read everything, then died.
		lease, ok, err := e.b.AcquirePartitionLease(ctx, l.LeaseKey(group, "k"), l.GenerationKey(group, "k"), "dead", time.Second)
		if err != nil || !ok {
			t.Fatal(ok, err)
		}
		msgs, err := e.b.ReadPartitionFenced(ctx, lease.Fence, cat+":k", group, 10, broker.ReadNew)
		if err != nil || len(msgs) != 3 {
			t.Fatal(msgs, err)
		}
		if err := e.b.Faults().DeleteEntry(ctx, cat+":k", msgs[1].ID); err != nil {
			t.Fatal(err)
		}
		var mu sync.Mutex
		var missing []runtime.MissingEvent
		obs := &runtime.Observer{OnMissing: func(ev runtime.MissingEvent) {
			mu.Lock()
			defer mu.Unlock()
			missing = append(missing, ev)
		}}
		n := e.start("node-1", rec.handler("node-1"), nil, obs)
		eventually(t, time.Minute, 50*time.Millisecond, "entries handled", func() bool { return len(rec.handled("k")) == 2 })
		if got := rec.handled("k"); !slices.Equal(got, []int{1, 3}) {
			t.Errorf("handled %v, want [1 3]", got)
		}
		mu.Lock()
		if len(missing) != 1 || missing[0].ID != msgs[1].ID || missing[0].Stream != cat+":k" {
			t.Errorf("missing events: %+v", missing)
		}
		mu.Unlock()
		if c := subOf(n).Status().Counters[runtime.CounterMissing]; c != 1 {
			t.Errorf("missing counter = %d", c)
		}
		e.stopAll()
		pend, err := e.b.PendingEntries(ctx, cat+":k", group, 0)
		if err != nil || len(pend) != 0 {
			t.Errorf("pending after handling: %+v %v", pend, err)
		}
	})
}

// Stop finishes the message in flight, acks it, releases every lease and
// leaves the membership; stopping twice is a no-op.
func TestMemGracefulStop(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		e := newMemEnv(t)
		defer e.stopAll()
		rec := newRecorder(t)
		publishAll(t, e.pub, []string{"a"}, 1, 5)
		entered := make(chan struct{})
		release := make(chan struct{})
		rec.setHold(func(ctx context.Context, m runtime.Message) {
			if seqOf(t, m.Data) == 2 {
				close(entered)
				<-release
			}
		})
		n := e.start("node-1", rec.handler("node-1"), nil, nil)
		<-entered
		stopped := make(chan error, 1)
		go func() { stopped <- n.Stop(ctx) }()
		synctest.Wait()
		select {
		case err := <-stopped:
			t.Fatalf("Stop returned %v with a handler in flight", err)
		default:
		}
		if n.JoinState() != runtime.JoinLeaving {
			t.Errorf("join state while stopping = %s", n.JoinState())
		}
		close(release)
		if err := <-stopped; err != nil {
			t.Fatal(err)
		}
		if got := rec.handled("a"); !slices.Equal(got, []int{1, 2}) {
			t.Errorf("handled %v, want [1 2]: the in-flight message finishes, no new one starts", got)
		}
		if _, ok := e.lease("a"); ok {
			t.Error("lease kept after Stop")
		}
		if m, _ := e.store.Members(ctx, service); len(m) != 0 {
			t.Errorf("members after Stop: %+v", m)
		}
		if n.JoinState() != runtime.JoinLeft {
			t.Errorf("join state after Stop = %s", n.JoinState())
		}
		if err := n.Stop(ctx); err != nil {
			t.Errorf("second Stop = %v", err)
		}
		// The next owner resumes at entry 3.
		e.start("node-2", rec.handler("node-2"), nil, nil)
		eventually(t, time.Minute, 50*time.Millisecond, "rest handled", func() bool { return rec.complete(map[string]int{"a": 5}) })
		if got := rec.handled("a"); !slices.Equal(got, []int{1, 2, 3, 4, 5}) {
			t.Errorf("handled %v", got)
		}
	})
}

// A node whose renewals stall stops handling before its lease can expire
// (the trust window), and once another owner has the partition its acks
// are refused: nothing it handled late is acknowledged.
func TestMemStalledRenewalsAreFenced(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		e := newMemEnv(t)
		defer e.stopAll()
		rec := newRecorder(t)
		publishAll(t, e.pub, []string{"k"}, 1, 3)
		stall := make(chan struct{})
		unstall := make(chan struct{})
		entered := make(chan struct{})
		release := make(chan struct{})
		rec.setHold(func(ctx context.Context, m runtime.Message) {
			if seqOf(t, m.Data) == 1 {
				close(entered)
				<-release
			}
		})
		var lost atomic.Int32
		obs := &runtime.Observer{OnLease: func(ev runtime.LeaseEvent) {
			if ev.Kind == runtime.LeaseLost || ev.Kind == runtime.LeaseUntrusted {
				lost.Add(1)
			}
		}}
		cfg := e.config(rec.handler("node-1"))
		sub, err := partitioned.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		partitioned.SetRenewGate(sub, func(ctx context.Context) {
			select {
			case <-stall:
				select {
				case <-unstall:
				case <-ctx.Done():
				}
			default:
			}
		})
		n, err := runtime.NewNode(runtime.NodeConfig{Service: service, NodeID: "node-1", Membership: e.store, HeartbeatEvery: memHeartbeat, Observer: obs}, sub)
		if err != nil {
			t.Fatal(err)
		}
		if err := n.Start(ctx); err != nil {
			t.Fatal(err)
		}
		e.nodes = append(e.nodes, n)
		<-entered
		held, ok := e.lease("k")
		if !ok {
			t.Fatal("not leased while handling")
		}
		close(stall)
		// The lease expires on the broker; another owner takes it.
		time.Sleep(memTTL + memRenew)
		if _, ok := e.lease("k"); ok {
			t.Fatal("lease still held after its TTL without renewals")
		}
		l := broker.ProteanLayout
		intruder, ok, err := e.b.AcquirePartitionLease(ctx, l.LeaseKey(group, "k"), l.GenerationKey(group, "k"), "intruder", time.Hour)
		if err != nil || !ok {
			t.Fatal(ok, err)
		}
		close(release)
		synctest.Wait()
		time.Sleep(time.Second)
		if got := rec.handled("k"); len(got) > 1 {
			t.Errorf("the fenced node kept handling: %v", got)
		}
		if lost.Load() == 0 {
			t.Error("no lease-lost event")
		}
		// Nothing was acked by the stale owner: the new owner reclaims
		// every entry, the one handled late included.
		res, err := e.b.ReclaimPartitionPending(ctx, intruder.Fence, cat+":k", group, 0, 10)
		if err != nil {
			t.Fatal(err)
		}
		msgs, err := e.b.ReadPartitionFenced(ctx, intruder.Fence, cat+":k", group, 10, broker.ReadPendingThenNew)
		if err != nil || len(msgs) == 0 || seqOf(t, msgs[0].Data) != 1 {
			t.Errorf("intruder's pending after reclaim (%d claimed): %v %v; want entry 1 first", res.Claimed, msgs, err)
		}
		if v, _ := e.lease("k"); v != intruder.Token {
			t.Errorf("lease = %q, want the intruder's %q (held before: %q)", v, intruder.Token, held)
		}
		close(unstall)
		_, _ = e.b.ReleasePartitionLease(ctx, intruder.Fence)
	})
}
