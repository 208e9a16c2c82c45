package partitioned_test

import (
	"context"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/protctl/protctl/pkg/runtime"
	"github.com/protctl/protctl/pkg/runtime/hrw"
	"github.com/protctl/protctl/pkg/runtime/partitioned"
	"github.com/protctl/protctl/pkg/runtime/placement"
	"github.com/protctl/protctl/pkg/runtime/redisstore"
)

// One undecodable placement record (bad JSON, a newer schema) or a
// placement key of another type must not freeze membership: a node that
// stops is still dropped by the others, and the placement read last
// (node-3 cordoned) stays in force. Review finding H4.
func TestRedisPlacementSurvivesBadRecords(t *testing.T) {
	for _, tc := range []struct {
		name    string
		corrupt func(ctx context.Context, e *redisEnv) error
	}{
		{"undecodable fields", func(ctx context.Context, e *redisEnv) error {
			if err := e.c.HSet(ctx, redisstore.ModesKey(service), "node-9", "{not json").Err(); err != nil {
				return err
			}
			return e.c.HSet(ctx, redisstore.PinsKey(service), redisstore.PinField(group, "k"), `{"node": 7}`).Err()
		}},
		{"wrong type", func(ctx context.Context, e *redisEnv) error {
			return e.c.Set(ctx, redisstore.PinsKey(service), "x", 0).Err()
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newRedisEnv(t)
			ctx := context.Background()
			rec := newRecorder(t)
			seen := &membersSeen{}
			n1 := e.start("node-1", rec.handler("node-1"), nil, seen.observer())
			n2 := e.start("node-2", rec.handler("node-2"), nil, nil)
			e.start("node-3", rec.handler("node-3"), nil, nil)
			membersAre := func(_ *runtime.Node, want ...string) func() bool {
				return func() bool { return slices.Equal(seen.get(), want) }
			}
			eventually(t, 10*time.Second, 10*time.Millisecond, "three members", membersAre(n1, "node-1", "node-2", "node-3"))
			if err := e.store.CASNodeMode(ctx, service, "node-3", nil, &placement.ModeRecord{Mode: placement.Cordoned, At: time.Now()}); err != nil {
				t.Fatal(err)
			}
			eventually(t, 10*time.Second, 10*time.Millisecond, "node-3 cordoned", membersAre(n1, "node-1", "node-2"))
			if err := tc.corrupt(ctx, e); err != nil {
				t.Fatal(err)
			}
			sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			if err := n2.Stop(sctx); err != nil {
				t.Fatal(err)
			}
			eventually(t, 10*time.Second, 10*time.Millisecond, "node-2 dropped, node-3 still cordoned", membersAre(n1, "node-1"))
		})
	}
}

// A cordoned node keeps a partition only while it holds its lease: once
// the partition goes idle and the lease is released, new entries that
// arrive before the node's next heartbeat must not make it take the
// partition again; the next HRW node handles them once the cordoned
// node's status record no longer lists it. Review finding "Low drain".
func TestRedisCordonedNodeDoesNotRetakeReleasedPartition(t *testing.T) {
	e := newRedisEnv(t)
	ctx := context.Background()
	rec := newRecorder(t)
	both := []string{"node-1", "node-2"}
	key := ""
	for _, k := range keyNames(50) {
		if hrw.Owner(k, both) == "node-1" {
			key = k
			break
		}
	}
	gate := make(chan struct{})
	rec.setHold(func(ctx context.Context, m runtime.Message) {
		if m.Key == key {
			select {
			case <-gate:
			case <-ctx.Done():
			}
		}
	})
	// Heartbeats only when poked (by a placement change), so that nothing
	// refreshes the membership between the release and the new entry.
	seen := map[string]*membersSeen{"node-1": {}, "node-2": {}}
	start := func(id string) *runtime.Node {
		c := e.client()
		store := redisstore.New(c)
		sub, err := partitioned.New(e.config(rec.handler(id), e.b, store))
		if err != nil {
			t.Fatal(err)
		}
		n, err := runtime.NewNode(runtime.NodeConfig{Service: service, NodeID: id, Membership: store, HeartbeatEvery: time.Hour, Observer: seen[id].observer()}, sub)
		if err != nil {
			t.Fatal(err)
		}
		if err := n.Start(ctx); err != nil {
			t.Fatal(err)
		}
		e.nodes = append(e.nodes, n)
		return n
	}
	n1, n2 := start("node-1"), start("node-2")
	poke := func(to string) {
		t.Helper()
		_, pins, err := e.store.RawPlacement(ctx, service)
		if err != nil {
			t.Fatal(err)
		}
		var expect *string
		if v, ok := pins[redisstore.PinField("elsewhere", "x")]; ok {
			expect = &v
		}
		if err := e.store.CASPin(ctx, service, "elsewhere", "x", expect, &placement.Pin{Node: to, At: time.Now()}); err != nil {
			t.Fatal(err)
		}
	}
	// pokeUntil pokes a heartbeat out of both nodes every second until
	// cond holds: one poke can be read by a node before the other has
	// written its record, and no later heartbeat would come.
	pokeUntil := func(what, to string, cond func() bool) {
		t.Helper()
		poked := time.Now()
		poke(to)
		eventually(t, 20*time.Second, 10*time.Millisecond, what, func() bool {
			if time.Since(poked) > time.Second {
				poke(to)
				poked = time.Now()
			}
			return cond()
		})
	}
	for _, n := range []*runtime.Node{n1, n2} {
		pokeUntil(n.NodeID()+" sees both", "node-1", func() bool { return slices.Equal(seen[n.NodeID()].get(), both) })
	}
	publishAll(t, e.pub, []string{key}, 1, 1)
	heldBy := func(node string) bool {
		ms, err := e.store.Members(ctx, service)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range ms {
			if m.Node == node && slices.ContainsFunc(m.Held, func(h runtime.HeldPartition) bool { return h.Partition == key }) {
				return true
			}
		}
		return false
	}
	eventually(t, 10*time.Second, 10*time.Millisecond, "node-1 handling the key", func() bool {
		return slices.ContainsFunc(subOf(n1).Status().Held, func(h runtime.HeldPartition) bool { return h.Partition == key })
	})
	pokeUntil("node-1's record lists the key held", "node-2", func() bool { return heldBy("node-1") })
	if err := e.store.CASNodeMode(ctx, service, "node-1", nil, &placement.ModeRecord{Mode: placement.Cordoned, At: time.Now()}); err != nil {
		t.Fatal(err)
	}
	pokeUntil("node-2 sees the key kept by node-1", "node-1", func() bool {
		m := seen["node-2"].get()
		return slices.Equal(m, []string{"node-2"}) && n2.Placement().Owner(group, key, key, m, "node-2", false) == "node-1"
	})
	close(gate)
	eventually(t, 10*time.Second, 10*time.Millisecond, "entry 1 handled", func() bool { return slices.Equal(rec.handled(key), []int{1}) })
	// Idle: the lease is released, and with it the keep.
	eventually(t, 10*time.Second, 10*time.Millisecond, "node-1 gives up the released key", func() bool {
		return !slices.Contains(subOf(n1).Assigned(), key)
	})
	publishAll(t, e.pub, []string{key}, 2, 2)
	pokeUntil("entry 2 handled", "node-1", func() bool { return slices.Equal(rec.handled(key), []int{1, 2}) })
	rec.mu.Lock()
	by := slices.Clone(rec.nodes[key])
	rec.mu.Unlock()
	if by[1] != "node-2" {
		t.Fatalf("entry 2 handled by %s, want node-2 (the cordoned node-1 took the released key back)", by[1])
	}
}

// membersSeen is the member list a node last gave its subscription, as
// its assignment events report it.
type membersSeen struct{ m atomic.Pointer[[]string] }

func (s *membersSeen) observer() *runtime.Observer {
	return &runtime.Observer{OnAssignment: func(ev runtime.AssignmentEvent) { s.m.Store(&ev.Members) }}
}

func (s *membersSeen) get() []string {
	if p := s.m.Load(); p != nil {
		return *p
	}
	return nil
}
