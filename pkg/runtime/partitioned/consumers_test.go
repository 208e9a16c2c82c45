package partitioned_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/protctl/protctl/pkg/broker"
	"github.com/protctl/protctl/pkg/runtime"
	"github.com/protctl/protctl/pkg/runtime/partitioned"
)

// Issue 16 item 5, driven through the runtime: a partition released when
// idle after every event, by two nodes in turn, must not gain a consumer
// per generation. Before the prune each cycle left its owner:generation
// consumer behind (XINFO CONSUMERS listed node-1:1 ... node-1:N).
func TestRedisIdleReleasesDoNotPileUpConsumers(t *testing.T) {
	e := newRedisEnv(t)
	ctx := context.Background()
	rec := newRecorder(t)
	var released atomic.Int64
	obs := &runtime.Observer{OnLease: func(ev runtime.LeaseEvent) {
		if ev.Kind == runtime.LeaseReleased {
			released.Add(1)
		}
	}}
	idle := func(c *partitioned.Config) { c.IdleAfter = 10 * time.Millisecond }
	nodes := []*runtime.Node{e.start("node-1", rec.handler("node-1"), idle, obs)}
	keys := []string{"o-1"}
	stream := broker.ProteanLayout.Stream(cat, keys[0])
	backfill := broker.ProteanLayout.LaneStream(cat, keys[0], broker.DefaultBackfillSuffix)
	const cycles = 60
	for i := 1; i <= cycles; i++ {
		if i == cycles/2 {
			// Hand the partition over: node-2 takes the rest.
			if err := nodes[0].Stop(ctx); err != nil {
				t.Fatal(err)
			}
			nodes = append(nodes, e.start("node-2", rec.handler("node-2"), idle, obs))
		}
		before := released.Load()
		if i%3 == 0 {
			if _, err := e.pub.Publish(ctx, cat, keys[0], envelope(keys[0], i), partitioned.LowPriority()); err != nil {
				t.Fatal(err)
			}
		} else {
			publishAll(t, e.pub, keys, i, i)
		}
		eventually(t, 20*time.Second, 2*time.Millisecond, "event handled and the lease released when idle", func() bool {
			return len(rec.handled(keys[0])) == i && released.Load() > before
		})
		for _, s := range []string{stream, backfill} {
			cs, err := e.c.XInfoConsumers(ctx, s, group).Result()
			if err != nil && i >= 3 {
				t.Fatalf("cycle %d: XINFO CONSUMERS %s: %v", i, s, err)
			}
			if len(cs) > 2 {
				t.Fatalf("cycle %d: %s has %d consumers %v; want at most 2", i, s, len(cs), cs)
			}
		}
	}
	g, err := e.c.Get(ctx, broker.ProteanLayout.GenerationKey(group, keys[0])).Int64()
	if err != nil || g < cycles/2 {
		t.Fatalf("generation %d, %v: the partition was not released and re-acquired per event", g, err)
	}
}
