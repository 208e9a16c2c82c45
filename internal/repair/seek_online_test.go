package repair_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/protctl/protctl/internal/repair"
	"github.com/protctl/protctl/internal/testenv"
	"github.com/protctl/protctl/pkg/broker"
	"github.com/protctl/protctl/pkg/broker/redisbroker"
	"github.com/protctl/protctl/pkg/runtime"
	"github.com/protctl/protctl/pkg/runtime/partitioned"
	"github.com/protctl/protctl/pkg/runtime/redisstore"
)

// TestSeekOnlineOnARunningNode rewinds a group on partitions a running
// node owns while entries keep being published: the node carries the
// seek out between two batches under its lease, so it never stops (one
// generation throughout), never runs a key's handler twice at once, and
// hands every entry after the target back exactly once more, in order.
func TestSeekOnlineOnARunningNode(t *testing.T) {
	ctx := context.Background()
	c := testenv.StartRedis(t).Client(t)
	b := redisbroker.New(c)
	store := redisstore.New(c)
	keys := []string{"k1", "k2", "k3"}

	var mu sync.Mutex
	handled := map[string][]string{}
	gens := map[int64]bool{}
	inFlight := map[string]*atomic.Int32{}
	for _, k := range keys {
		inFlight[k] = new(atomic.Int32)
	}
	var overlaps atomic.Int32
	sub, err := partitioned.New(partitioned.Config{
		Name: seekGroup, Categories: []string{seekCat}, Broker: b, Ledger: store, BatchSize: 5,
		IdleAfter: time.Minute,
		Handler: runtime.HandlerFunc(func(ctx context.Context, m runtime.Message) error {
			if inFlight[m.Key].Add(1) > 1 {
				overlaps.Add(1)
			}
			defer inFlight[m.Key].Add(-1)
			time.Sleep(200 * time.Microsecond) // a handler that takes time: batches overlap the seek
			mu.Lock()
			handled[m.Key] = append(handled[m.Key], m.Position)
			gens[m.Generation] = true
			mu.Unlock()
			return nil
		}),
	})
	if err != nil {
		t.Fatal(err)
	}
	node, err := runtime.NewNode(runtime.NodeConfig{Service: "shop", NodeID: "node-1", Membership: store, HeartbeatEvery: 200 * time.Millisecond}, sub)
	if err != nil {
		t.Fatal(err)
	}
	if err := node.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = node.Stop(context.Background()) })

	pub, err := partitioned.NewPublisher(b)
	if err != nil {
		t.Fatal(err)
	}
	published := map[string][]string{}
	stop := make(chan struct{})
	var stopOnce sync.Once
	halt := func() { stopOnce.Do(func() { close(stop) }) }
	pubDone := make(chan struct{})
	t.Cleanup(func() { halt(); <-pubDone })
	go func() {
		defer close(pubDone)
		for n := 0; ; n++ {
			select {
			case <-stop:
				return
			default:
			}
			k := keys[n%len(keys)]
			id, err := pub.Publish(ctx, seekCat, k, fmt.Appendf(nil, `{"data":{"n":%d}}`, n))
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			published[k] = append(published[k], id)
			mu.Unlock()
			time.Sleep(time.Millisecond)
		}
	}()
	count := func(k string) int {
		mu.Lock()
		defer mu.Unlock()
		return len(handled[k])
	}
	testenv.Eventually(t, 30*time.Second, "every key handled 40 entries", func() (bool, string) {
		for _, k := range keys {
			if count(k) < 40 {
				return false, fmt.Sprintf("%s: %d", k, count(k))
			}
		}
		return true, ""
	})
	mu.Lock()
	target := handled["k1"][20]
	mu.Unlock()

	r := repair.New(c, b, repair.WithSeekWait(20*time.Second))
	to, _ := repair.ParseSeekTo(target, time.Now())
	p, err := r.PlanSeek(ctx, repair.SeekRequest{Category: seekCat, Group: seekGroup, Target: to, By: "test"})
	if err != nil {
		t.Fatal(err)
	}
	for _, it := range p.Items {
		if !it.Allowed || it.Precondition.Seek.Owner != repair.SeekOwnerProtctl || it.Precondition.Seek.OwnerID != "node-1" {
			t.Fatalf("%s: not planned as node-1's: %+v", it.Target.Key, it)
		}
	}
	o, err := r.Apply(ctx, p, repair.ApplyOptions{})
	if err != nil || o != repair.OutcomeApplied {
		t.Fatalf("apply: %v %v %+v", o, err, p.Items)
	}
	for _, it := range p.Items {
		t.Logf("%s: %s", it.Target.Key, it.Detail)
		if it.Precondition.Seek.DoneAt == nil || it.Precondition.Seek.DoneGeneration == nil {
			t.Fatalf("%s: applied without when and under which generation: %+v", it.Target.Key, it)
		}
	}
	// Keep publishing a little after the seek, then let the node drain.
	testenv.Eventually(t, 30*time.Second, "entries handled after the seek", func() (bool, string) {
		return count("k1") > 80, fmt.Sprint(count("k1"))
	})
	halt()
	<-pubDone
	testenv.Eventually(t, 60*time.Second, "everything published handled after the rewind", func() (bool, string) {
		mu.Lock()
		defer mu.Unlock()
		for _, k := range keys {
			pk, hk := published[k], handled[k]
			if len(hk) <= len(pk) || hk[len(hk)-1] != pk[len(pk)-1] {
				return false, fmt.Sprintf("%s: %d handled, %d published", k, len(hk), len(pk))
			}
		}
		return true, ""
	})
	mu.Lock()
	defer mu.Unlock()
	for _, k := range keys {
		pk, hk := published[k], handled[k]
		j := firstAfter(pk, target)
		a := len(hk) - (len(pk) - j)
		if a < j || !slices.Equal(hk[:a], pk[:a]) || !slices.Equal(hk[a:], pk[j:]) {
			t.Fatalf("%s: handled %d entries, not the published %d up to the seek then again everything after %s, once and in order:\nhandled   %v\npublished %v",
				k, len(hk), len(pk), target, hk, pk)
		}
		if a == j {
			t.Errorf("%s: nothing was handed back (the node had not passed %s at the seek)", k, target)
		}
	}
	if n := overlaps.Load(); n > 0 {
		t.Fatalf("a key's handler ran twice at once %d times", n)
	}
	if len(gens) != 1 {
		t.Fatalf("the node's generations changed during the seek (%v): it stopped or lost partitions", gens)
	}
}

// TestSeekOnlineOnTwoRunningNodes is TestSeekOnlineOnARunningNode with
// two nodes sharing the partitions while entries keep being published:
// each owner carries out the seek of its own partitions; every entry
// after the target is handled again exactly once, in order, and no key's
// handler runs on two nodes at once.
func TestSeekOnlineOnTwoRunningNodes(t *testing.T) {
	ctx := context.Background()
	c := testenv.StartRedis(t).Client(t)
	b := redisbroker.New(c)
	store := redisstore.New(c)
	keys := []string{"k1", "k2", "k3", "k4", "k5", "k6"}

	var mu sync.Mutex
	handled := map[string][]string{}
	gens := map[int64]bool{}
	inFlight := map[string]*atomic.Int32{}
	for _, k := range keys {
		inFlight[k] = new(atomic.Int32)
	}
	var overlaps atomic.Int32
	owners := map[string]map[string]bool{} // key -> nodes that handled it
	for _, id := range []string{"node-1", "node-2"} {
		sub, err := partitioned.New(partitioned.Config{
			Name: seekGroup, Categories: []string{seekCat}, Broker: b, Ledger: store, BatchSize: 5,
			IdleAfter: time.Minute,
			Handler: runtime.HandlerFunc(func(ctx context.Context, m runtime.Message) error {
				if inFlight[m.Key].Add(1) > 1 {
					overlaps.Add(1)
				}
				defer inFlight[m.Key].Add(-1)
				time.Sleep(200 * time.Microsecond)
				mu.Lock()
				handled[m.Key] = append(handled[m.Key], m.Position)
				gens[m.Generation] = true
				if owners[m.Key] == nil {
					owners[m.Key] = map[string]bool{}
				}
				owners[m.Key][id] = true
				mu.Unlock()
				return nil
			}),
		})
		if err != nil {
			t.Fatal(err)
		}
		node, err := runtime.NewNode(runtime.NodeConfig{Service: "shop", NodeID: id, Membership: store, HeartbeatEvery: 200 * time.Millisecond}, sub)
		if err != nil {
			t.Fatal(err)
		}
		if err := node.Start(ctx); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = node.Stop(context.Background()) })
	}

	pub, err := partitioned.NewPublisher(b)
	if err != nil {
		t.Fatal(err)
	}
	published := map[string][]string{}
	stop := make(chan struct{})
	var stopOnce sync.Once
	halt := func() { stopOnce.Do(func() { close(stop) }) }
	pubDone := make(chan struct{})
	t.Cleanup(func() { halt(); <-pubDone })
	go func() {
		defer close(pubDone)
		for n := 0; ; n++ {
			select {
			case <-stop:
				return
			default:
			}
			k := keys[n%len(keys)]
			id, err := pub.Publish(ctx, seekCat, k, fmt.Appendf(nil, `{"data":{"n":%d}}`, n))
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			published[k] = append(published[k], id)
			mu.Unlock()
			time.Sleep(time.Millisecond)
		}
	}()
	count := func(k string) int {
		mu.Lock()
		defer mu.Unlock()
		return len(handled[k])
	}
	testenv.Eventually(t, 30*time.Second, "every key handled 40 entries", func() (bool, string) {
		for _, k := range keys {
			if count(k) < 40 {
				return false, fmt.Sprintf("%s: %d", k, count(k))
			}
		}
		return true, ""
	})
	mu.Lock()
	target := handled["k1"][20]
	mu.Unlock()

	r := repair.New(c, b, repair.WithSeekWait(20*time.Second))
	to, _ := repair.ParseSeekTo(target, time.Now())
	p, err := r.PlanSeek(ctx, repair.SeekRequest{Category: seekCat, Group: seekGroup, Target: to, By: "test"})
	if err != nil {
		t.Fatal(err)
	}
	for _, it := range p.Items {
		if !it.Allowed || it.Precondition.Seek.Owner != repair.SeekOwnerProtctl {
			t.Fatalf("%s: not planned as a protctl node's: %+v", it.Target.Key, it)
		}
	}
	o, err := r.Apply(ctx, p, repair.ApplyOptions{})
	if err != nil || o != repair.OutcomeApplied {
		t.Fatalf("apply: %v %v %+v", o, err, p.Items)
	}
	for _, it := range p.Items {
		t.Logf("%s: %s", it.Target.Key, it.Detail)
		if it.Precondition.Seek.DoneAt == nil || it.Precondition.Seek.DoneGeneration == nil {
			t.Fatalf("%s: applied without when and under which generation: %+v", it.Target.Key, it)
		}
	}
	// Keep publishing a little after the seek, then let the node drain.
	testenv.Eventually(t, 30*time.Second, "entries handled after the seek", func() (bool, string) {
		return count("k1") > 80, fmt.Sprint(count("k1"))
	})
	halt()
	<-pubDone
	testenv.Eventually(t, 60*time.Second, "everything published handled after the rewind", func() (bool, string) {
		mu.Lock()
		defer mu.Unlock()
		for _, k := range keys {
			pk, hk := published[k], handled[k]
			if len(hk) <= len(pk) || hk[len(hk)-1] != pk[len(pk)-1] {
				return false, fmt.Sprintf("%s: %d handled, %d published", k, len(hk), len(pk))
			}
		}
		return true, ""
	})
	mu.Lock()
	defer mu.Unlock()
	for _, k := range keys {
		pk, hk := published[k], handled[k]
		j := firstAfter(pk, target)
		a := len(hk) - (len(pk) - j)
		if a < j || !slices.Equal(hk[:a], pk[:a]) || !slices.Equal(hk[a:], pk[j:]) {
			t.Fatalf("%s: handled %d entries, not the published %d up to the seek then again everything after %s, once and in order:\nhandled   %v\npublished %v",
				k, len(hk), len(pk), target, hk, pk)
		}
		if a == j {
			t.Errorf("%s: nothing was handed back (the node had not passed %s at the seek)", k, target)
		}
	}
	if n := overlaps.Load(); n > 0 {
		t.Fatalf("a key's handler ran twice at once %d times", n)
	}
	nodes := map[string]bool{}
	for _, o := range owners {
		for n := range o {
			nodes[n] = true
		}
	}
	if len(nodes) != 2 {
		t.Fatalf("the partitions were handled by %v, want both nodes", owners)
	}
}

// firstAfter is the index of the first id after target.
func firstAfter(ids []string, target string) int {
	t, _ := broker.ParseStreamID(target)
	for i, id := range ids {
		if v, _ := broker.ParseStreamID(id); t.Less(v) {
			return i
		}
	}
	return len(ids)
}
