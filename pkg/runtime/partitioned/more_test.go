package partitioned_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/protctl/protctl/pkg/broker"
	"github.com/protctl/protctl/pkg/runtime"
	"github.com/protctl/protctl/pkg/runtime/partitioned"
	"github.com/protctl/protctl/pkg/runtime/source"
)

// Streams with the same key in several categories are one unit under one
// lease: one generation holds both, and each category keeps its order.
func TestMemCategoriesShareOneLease(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		e := newMemEnv(t)
		defer e.stopAll()
		const cat2 = "shop::payment"
		var mu sync.Mutex
		got := map[string][]int{}
		gens := map[int64]bool{}
		var inside atomic.Int32
		h := runtime.HandlerFunc(func(ctx context.Context, m runtime.Message) error {
			if inside.Add(1) > 1 {
				t.Errorf("two handlers inside key %s at once", m.Key)
			}
			defer inside.Add(-1)
			mu.Lock()
			defer mu.Unlock()
			got[m.Category] = append(got[m.Category], seqOf(t, m.Data))
			gens[m.Generation] = true
			return nil
		})
		for seq := 1; seq <= 4; seq++ {
			for _, c := range []string{cat, cat2} {
				if _, err := e.pub.Publish(ctx, c, "o-1", envelope("o-1", seq)); err != nil {
					t.Fatal(err)
				}
			}
		}
		var held []runtime.HeldPartition
		n := e.start("node-1", h, func(c *partitioned.Config) {
			c.Categories = []string{cat, cat2}
			c.IdleAfter = time.Hour // keep the lease to look at it
		}, nil)
		eventually(t, time.Minute, 10*time.Millisecond, "both categories handled", func() bool {
			mu.Lock()
			defer mu.Unlock()
			return len(got[cat]) == 4 && len(got[cat2]) == 4
		})
		held = subOf(n).Status().Held
		mu.Lock()
		defer mu.Unlock()
		for _, c := range []string{cat, cat2} {
			if !slices.Equal(got[c], []int{1, 2, 3, 4}) {
				t.Errorf("%s handled %v", c, got[c])
			}
		}
		if len(gens) != 1 {
			t.Errorf("handled under generations %v, want one", gens)
		}
		if len(held) != 2 || held[0].Partition != "o-1" || held[1].Partition != "o-1" || held[0].Generation != held[1].Generation {
			t.Errorf("held = %+v, want o-1 once per category under one generation", held)
		}
		if v, ok := e.lease("o-1"); !ok || !strings.HasPrefix(v, "node-1:") {
			t.Errorf("lease = %q %v", v, ok)
		}
	})
}

// The backfill lane is handled only when the main lane is empty.
func TestMemBackfillAfterMain(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		e := newMemEnv(t)
		defer e.stopAll()
		for seq := 1; seq <= 3; seq++ {
			if _, err := e.pub.Publish(ctx, cat, "k", envelope("k", 100+seq), partitioned.LowPriority()); err != nil {
				t.Fatal(err)
			}
		}
		for seq := 1; seq <= 25; seq++ {
			if _, err := e.pub.Publish(ctx, cat, "k", envelope("k", seq)); err != nil {
				t.Fatal(err)
			}
		}
		var mu sync.Mutex
		var order []int
		var lanes []string
		h := runtime.HandlerFunc(func(ctx context.Context, m runtime.Message) error {
			mu.Lock()
			defer mu.Unlock()
			order = append(order, seqOf(t, m.Data))
			lanes = append(lanes, m.Stream)
			return nil
		})
		e.start("node-1", h, nil, nil)
		eventually(t, time.Minute, 10*time.Millisecond, "all handled", func() bool {
			mu.Lock()
			defer mu.Unlock()
			return len(order) == 28
		})
		mu.Lock()
		defer mu.Unlock()
		want := []int{}
		for i := 1; i <= 25; i++ {
			want = append(want, i)
		}
		want = append(want, 101, 102, 103)
		if !slices.Equal(order, want) {
			t.Errorf("order %v, want the main lane (1..25) before the backfill lane (101..103)", order)
		}
		if lanes[27] != cat+":k:backfill" {
			t.Errorf("last lane %s", lanes[27])
		}
	})
}

// Cold partitions are retired with the broker's conservative reap when
// ReapAfter is set; a later publish brings the key back.
func TestMemReapColdPartitions(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		e := newMemEnv(t)
		defer e.stopAll()
		rec := newRecorder(t)
		keys := keyNames(5)
		publishAll(t, e.pub, keys, 1, 2)
		n := e.start("node-1", rec.handler("node-1"), func(c *partitioned.Config) { c.ReapAfter = 10 * time.Second }, nil)
		eventually(t, time.Minute, 100*time.Millisecond, "handled", func() bool { return rec.complete(wantAll(keys, 2)) })
		eventually(t, 2*time.Minute, 100*time.Millisecond, "reaped", func() bool {
			k, err := e.b.PartitionKeys(ctx, cat)
			return err == nil && len(k) == 0
		})
		if _, found, _ := e.b.StreamInfo(ctx, cat+":k000"); found {
			t.Error("a reaped partition's stream still exists")
		}
		eventually(t, time.Minute, 100*time.Millisecond, "reaped counter at 5", func() bool {
			return subOf(n).Status().Counters[runtime.CounterReaped] == 5
		})
		time.Sleep(time.Minute)
		if c := subOf(n).Status().Counters[runtime.CounterReaped]; c != 5 {
			t.Errorf("reaped counter = %d a minute later, want 5: a reaped partition is not reaped again", c)
		}
		// The generation survives a reap; the key comes back on publish.
		publishAll(t, e.pub, []string{"k002"}, 3, 3)
		eventually(t, time.Minute, 100*time.Millisecond, "revived key handled", func() bool {
			return rec.complete(map[string]int{"k002": 3})
		})
		rec.checkOrder(t, map[string]int{"k002": 3})
	})
}

// A panicking handler is an aggregate failure: retried, then parked with
// the panic in the ledger; the node survives.
func TestMemHandlerPanicParks(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		e := newMemEnv(t)
		defer e.stopAll()
		publishAll(t, e.pub, []string{"k"}, 1, 1)
		var calls atomic.Int32
		h := runtime.HandlerFunc(func(ctx context.Context, m runtime.Message) error {
			calls.Add(1)
			panic("nil map")
		})
		e.start("node-1", h, nil, nil)
		eventually(t, time.Minute, 10*time.Millisecond, "parked", func() bool {
			_, err := e.store.GetParked(ctx, group, "", "k")
			return err == nil
		})
		p, _ := e.store.GetParked(ctx, group, "", "k")
		if !strings.Contains(p.Error, "panicked: nil map") || p.Attempts != 3 || calls.Load() != 3 {
			t.Errorf("parked %+v after %d calls", p, calls.Load())
		}
	})
}

// Stop is bounded by its context: when it ends with a handler still in
// flight, the handler's context is cancelled and Stop returns the
// context's error; the message stays pending for the next owner.
func TestMemStopHonoursItsContext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newMemEnv(t)
		rec := newRecorder(t)
		publishAll(t, e.pub, []string{"k"}, 1, 2)
		entered := make(chan struct{})
		var cancelled atomic.Bool
		rec.setHold(func(ctx context.Context, m runtime.Message) {
			if seqOf(t, m.Data) == 1 && !cancelled.Load() {
				close(entered)
				<-ctx.Done()
				cancelled.Store(true)
			}
		})
		n := e.start("node-1", rec.handler("node-1"), nil, nil)
		<-entered
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		if err := n.Stop(ctx); !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("Stop = %v, want DeadlineExceeded", err)
		}
		if !cancelled.Load() {
			t.Error("the handler's context was not cancelled")
		}
		e.nodes = nil
		// Nothing was acked: the next owner handles entry 1 again.
		e.start("node-2", rec.handler("node-2"), nil, nil)
		defer e.stopAll()
		eventually(t, time.Minute, 10*time.Millisecond, "handled by the next owner", func() bool {
			return rec.complete(map[string]int{"k": 2})
		})
	})
}

// A cap per node: with 2 nodes capped at 40, 80 of 100 keys are assigned
// and the rest wait; a third node takes them.
func TestMemCapPerNode(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newMemEnv(t)
		defer e.stopAll()
		rec := newRecorder(t)
		keys := keyNames(100)
		publishAll(t, e.pub, keys, 1, 1)
		capped := func(c *partitioned.Config) { c.MaxPartitions = 40 }
		a := e.start("node-a", rec.handler("node-a"), capped, nil)
		b := e.start("node-b", rec.handler("node-b"), capped, nil)
		time.Sleep(3 * memHeartbeat)
		synctest.Wait()
		na, nb := len(subOf(a).Assigned()), len(subOf(b).Assigned())
		if na != 40 || nb != 40 {
			t.Errorf("assigned %d and %d, want 40 each", na, nb)
		}
		c := e.start("node-c", rec.handler("node-c"), capped, nil)
		eventually(t, time.Minute, 50*time.Millisecond, "every key handled", func() bool { return rec.complete(wantAll(keys, 1)) })
		total := len(subOf(a).Assigned()) + len(subOf(b).Assigned()) + len(subOf(c).Assigned())
		if total != 100 {
			t.Errorf("assigned %d in total, want 100", total)
		}
		rec.checkOrder(t, wantAll(keys, 1))
	})
}

// The status record a node heartbeats tells operators what it holds.
func TestMemNodeStatusRecord(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		e := newMemEnv(t)
		defer e.stopAll()
		rec := newRecorder(t)
		publishAll(t, e.pub, []string{"a", "b"}, 1, 2)
		hold := make(chan struct{})
		rec.setHold(func(ctx context.Context, m runtime.Message) {
			if m.Key == "a" {
				<-hold
			}
		})
		n := e.start("node-1", rec.handler("node-1"), nil, nil)
		defer close(hold)
		eventually(t, time.Minute, 10*time.Millisecond, "b handled", func() bool { return rec.complete(map[string]int{"b": 2}) })
		// The next heartbeat may fire at the same fake instant as the
		// test wakes up: wait for the record that says joined.
		var st runtime.NodeStatus
		eventually(t, time.Minute, memHeartbeat/4, "a joined status record", func() bool {
			members, err := e.store.Members(ctx, service)
			if err != nil || len(members) != 1 {
				t.Fatalf("members = %+v, %v", members, err)
			}
			st = members[0]
			return st.JoinState == runtime.JoinJoined && st.Counters[runtime.CounterProcessed] == 2
		})
		if st.Node != "node-1" || st.Service != service || st.JoinState != runtime.JoinJoined {
			t.Errorf("record: %+v", st)
		}
		var heldA bool
		for _, h := range st.Held {
			if h.Partition == "a" && h.Subscription == group && h.Category == cat && h.Generation == 1 && h.Source == source.Redis {
				heldA = true
			}
		}
		if !heldA {
			t.Errorf("held = %+v, want a (in flight)", st.Held)
		}
		if st.Counters[runtime.CounterProcessed] != 2 || st.Counters[runtime.CounterAssigned] != 2 {
			t.Errorf("counters = %v", st.Counters)
		}
		if n.JoinState() != runtime.JoinJoined || n.Err() != nil {
			t.Errorf("join state %s, err %v", n.JoinState(), n.Err())
		}
	})
}

// fakeSub is a Subscription of another kind (as the Kafka topic runtime
// will be): the node starts it, tells it the members, merges its status
// and stops it.
type fakeSub struct {
	mu      sync.Mutex
	started bool
	stopped int
	members []string
	host    runtime.Host
	quit    chan struct{}
}

func (f *fakeSub) Name() string { return "topic:orders" }

func (f *fakeSub) Start(ctx context.Context, host runtime.Host) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.started, f.host = true, host
	f.quit = make(chan struct{})
	go func() {
		for {
			m, ch := host.Members()
			f.mu.Lock()
			f.members = m
			f.mu.Unlock()
			select {
			case <-ch:
			case <-f.quit:
				return
			}
		}
	}()
	return nil
}

func (f *fakeSub) Stop(ctx context.Context) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.stopped == 0 && f.quit != nil {
		close(f.quit)
	}
	f.stopped++
	return nil
}

func (f *fakeSub) Status() runtime.SubscriptionStatus {
	return runtime.SubscriptionStatus{
		Name: f.Name(), Source: source.Kafka, State: runtime.StateRunning,
		Held:   []runtime.HeldPartition{{Subscription: f.Name(), Source: source.Kafka, Topic: "orders", Partition: "3", Generation: 7}},
		Paused: []string{"3"}, Counters: map[string]int64{runtime.CounterProcessed: 5},
	}
}

func TestNodeRunsAnySubscription(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		e := newMemEnv(t)
		f := &fakeSub{}
		n, err := runtime.NewNode(runtime.NodeConfig{Service: service, NodeID: "node-1", Membership: e.store}, f)
		if err != nil {
			t.Fatal(err)
		}
		if err := n.Stop(ctx); err != nil {
			t.Errorf("Stop before Start = %v", err)
		}
		if err := n.Start(ctx); err != nil {
			t.Fatal(err)
		}
		if err := n.Start(ctx); err == nil {
			t.Error("second Start succeeded")
		}
		time.Sleep(time.Second)
		synctest.Wait()
		f.mu.Lock()
		if !f.started || !slices.Equal(f.members, []string{"node-1"}) {
			t.Errorf("started %v, members %v", f.started, f.members)
		}
		f.mu.Unlock()
		st := n.Status()
		if len(st.Held) != 1 || st.Held[0].Topic != "orders" || !slices.Equal(st.Paused, []string{"topic:orders/3"}) || st.Counters[runtime.CounterProcessed] != 5 {
			t.Errorf("status = %+v", st)
		}
		if err := n.Stop(ctx); err != nil {
			t.Fatal(err)
		}
		if err := n.Stop(ctx); err != nil {
			t.Errorf("second Stop = %v", err)
		}
		f.mu.Lock()
		if f.stopped != 1 {
			t.Errorf("subscription stopped %d times", f.stopped)
		}
		f.mu.Unlock()
		if m, _ := e.store.Members(ctx, service); len(m) != 0 {
			t.Errorf("members after Stop: %v", m)
		}
		// Duplicate names and missing fields are refused.
		if _, err := runtime.NewNode(runtime.NodeConfig{Service: service, Membership: e.store}, f, f); err == nil {
			t.Error("duplicate subscription names accepted")
		}
		if _, err := runtime.NewNode(runtime.NodeConfig{Membership: e.store}); err == nil {
			t.Error("missing service accepted")
		}
	})
}

var _ = broker.ProteanLayout
