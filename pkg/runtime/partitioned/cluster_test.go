package partitioned_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/protctl/protctl/internal/testenv"
	"github.com/protctl/protctl/pkg/broker"
	"github.com/protctl/protctl/pkg/broker/redisbroker"
	"github.com/protctl/protctl/pkg/runtime"
	"github.com/protctl/protctl/pkg/runtime/partitioned"
	"github.com/protctl/protctl/pkg/runtime/redisstore"
)

// clusterEnv is redisEnv on a real Redis Cluster: every node has its own
// ClusterClient and a broker in the cluster layout.
type clusterEnv struct {
	t       *testing.T
	cl      *testenv.Cluster
	clients []*redis.ClusterClient
	c       *redis.ClusterClient
	pub     *partitioned.Publisher
	nodes   []*runtime.Node
	subs    []*partitioned.Subscription // each node's, in start order
}

func newClusterEnv(t *testing.T, opts ...testenv.ClusterOption) *clusterEnv {
	t.Helper()
	e := &clusterEnv{t: t, cl: testenv.StartCluster(t, opts...)}
	t.Cleanup(func() {
		for _, n := range e.nodes {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			if err := n.Stop(ctx); err != nil {
				t.Errorf("stop %s: %v", n.NodeID(), err)
			}
			cancel()
		}
		for _, c := range e.clients {
			_ = c.Close()
		}
	})
	e.c = e.client()
	pub, err := partitioned.NewPublisher(redisbroker.New(e.c, redisbroker.WithLayout(broker.ClusterLayout)))
	if err != nil {
		t.Fatal(err)
	}
	e.pub = pub
	return e
}

func (e *clusterEnv) client() *redis.ClusterClient {
	c := e.cl.NewClient(nil)
	e.clients = append(e.clients, c)
	return c
}

// start runs a node with its own cluster client, as a separate process
// would, with the settings of the single-node Redis tests.
func (e *clusterEnv) start(id string, h runtime.Handler) *runtime.Node {
	e.t.Helper()
	return e.startWith(id, h, nil)
}

// startWith is start with the subscription's settings changed by mutate.
func (e *clusterEnv) startWith(id string, h runtime.Handler, mutate func(*partitioned.Config)) *runtime.Node {
	e.t.Helper()
	c := e.client()
	b := redisbroker.New(c, redisbroker.WithLayout(broker.ClusterLayout))
	store := redisstore.New(c)
	cfg := partitioned.Config{
		Name:       group,
		Categories: []string{cat},
		Handler:    h,
		Broker:     b,
		Ledger:     store,
		LeaseTTL:   redisTTL,
		RenewEvery: redisRenew,
		BatchSize:  20,
		Workers:    8,
		Retry:      runtime.RetryPolicy{Attempts: 3, Backoff: 20 * time.Millisecond},
	}
	if mutate != nil {
		mutate(&cfg)
	}
	sub, err := partitioned.New(cfg)
	if err != nil {
		e.t.Fatal(err)
	}
	n, err := runtime.NewNode(runtime.NodeConfig{
		Service: service, NodeID: id, Membership: store, HeartbeatEvery: redisRenew, MemberTTL: redisTTL - redisRenew,
	}, sub)
	if err != nil {
		e.t.Fatal(err)
	}
	if err := n.Start(context.Background()); err != nil {
		e.t.Fatal(err)
	}
	e.nodes = append(e.nodes, n)
	e.subs = append(e.subs, sub)
	return n
}

// masterOf is the index in e.cl.Masters of the master serving key.
func (e *clusterEnv) masterOf(key string) int {
	e.t.Helper()
	ctx := context.Background()
	slot, err := e.c.ClusterKeySlot(ctx, key).Result()
	if err != nil {
		e.t.Fatal(err)
	}
	slots, err := e.c.ClusterSlots(ctx).Result()
	if err != nil {
		e.t.Fatal(err)
	}
	for _, s := range slots {
		if int64(s.Start) <= slot && slot <= int64(s.End) && len(s.Nodes) > 0 {
			for i, m := range e.cl.Masters {
				if m.Addr == s.Nodes[0].Addr {
					return i
				}
			}
		}
	}
	e.t.Fatalf("no master serves %s (slot %d)", key, slot)
	return -1
}

// wantStreamLengths fails t unless every key's main lane holds n entries:
// what the publisher was told was appended is in Redis.
func (e *clusterEnv) wantStreamLengths(keys []string, n int64) {
	e.t.Helper()
	for _, k := range keys {
		got, err := e.c.XLen(context.Background(), broker.ClusterLayout.Stream(cat, k)).Result()
		if err != nil || got != n {
			e.t.Errorf("stream of %s: %d entries (%v), want %d", k, got, err, n)
		}
	}
}

// Three in-process nodes on a real 3-master Redis Cluster (cluster
// layout) share 60 keys, whose partitions hash over every master, while
// a publisher keeps appending: every key handled 1..n in order, none
// lost, no two handlers inside one key at once, and every node took a
// share.
func TestClusterThreeNodes(t *testing.T) {
	e := newClusterEnv(t)
	rec := newRecorder(t)
	keys := keyNames(60)
	spread := map[int]bool{}
	for _, k := range keys {
		spread[e.masterOf(broker.ClusterLayout.Stream(cat, k))] = true
	}
	if len(spread) != len(e.cl.Masters) {
		t.Fatalf("keys on %d masters, want %d", len(spread), len(e.cl.Masters))
	}
	publishAll(t, e.pub, keys, 1, 3)
	for _, id := range []string{"node-1", "node-2", "node-3"} {
		e.start(id, rec.handler(id))
	}
	for round := 1; round < 8; round++ {
		publishAll(t, e.pub, keys, round*3+1, round*3+3)
	}
	want := wantAll(keys, 24)
	eventually(t, 45*time.Second, 20*time.Millisecond, "all entries handled", func() bool { return rec.complete(want) })
	rec.checkOrder(t, want)
	for _, n := range e.nodes {
		if len(subOf(n).Assigned()) == 0 {
			t.Errorf("%s was assigned no key", n.NodeID())
		}
	}
	e.wantStreamLengths(keys, 24)
}

// One master of the cluster is killed (SIGKILL) and restarted mid-run
// while three nodes consume. Persistence: every master runs with
// --appendonly yes --appendfsync always, so Redis fsyncs each write to
// its AOF before acknowledging it, and everything it acknowledged
// (appends, acks, leases, generations) survives the restart; with the
// default appendfsync everysec, the last second or two of acknowledged
// writes may be lost and this test's guarantees would not hold. The
// master restarted is the one holding the category's index, and the
// keys' partitions hash over all three masters, so some partitions go
// down with it and others keep flowing.
//
// Checked: every entry whose publish Redis acknowledged (before and
// after the restart) is handled and still in its stream; per key the
// handled sequence is 1..n where the only step back allowed is a
// redelivery of entries not acked before the restart, replayed in order
// (orderErr: no gap, no reordering); no two handlers inside one key at
// once.
func TestClusterMasterRestartMidRun(t *testing.T) {
	e := newClusterEnv(t, testenv.WithClusterArgs("--appendonly", "yes", "--appendfsync", "always"))
	rec := newRecorder(t)
	keys := keyNames(24)
	for _, id := range []string{"node-1", "node-2", "node-3"} {
		e.start(id, rec.handler(id))
	}
	// Slow handlers keep partitions busy while the master goes away.
	rec.setHold(func(ctx context.Context, m runtime.Message) { time.Sleep(2 * time.Millisecond) })
	publishAll(t, e.pub, keys, 1, 10)
	eventually(t, 20*time.Second, 5*time.Millisecond, "processing under way", func() bool { return rec.calls.Load() > 30 })

	victim := e.masterOf(broker.ClusterLayout.IndexKey(cat))
	onVictim := 0
	for _, k := range keys {
		if e.masterOf(broker.ClusterLayout.Stream(cat, k)) == victim {
			onVictim++
		}
	}
	if onVictim == 0 || onVictim == len(keys) {
		t.Fatalf("%d of %d partitions on the restarted master: the test needs some on it and some elsewhere", onVictim, len(keys))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := e.cl.RestartMaster(ctx, victim); err != nil {
		t.Fatal(err)
	}
	// Everything acknowledged before the kill survived it.
	e.wantStreamLengths(keys, 10)

	publishAll(t, e.pub, keys, 11, 15)
	want := wantAll(keys, 15)
	eventually(t, 45*time.Second, 20*time.Millisecond, "every entry handled after the restart", func() bool { return rec.complete(want) })
	rec.checkOrder(t, want)
	e.wantStreamLengths(keys, 15)
}

// Idle partitions on every master of the cluster are read again when an
// entry comes: one appended without a wake-up signal (a Protean
// publisher, XADD by hand) is noticed by the node's wait, which on a
// cluster polls every slot it watches (a blocking XREAD cannot span
// slots); one published with protctl's publisher is also announced by
// its wake-up signal. SweepEvery is an hour, so nothing but the wait can
// notice the unsignalled entries within the test's deadline. The
// measured times are logged.
func TestClusterIdlePartitionsWakeOnEveryMaster(t *testing.T) {
	e := newClusterEnv(t)
	rec := newRecorder(t)
	ctx := context.Background()
	// Keys until every master holds a partition; perMaster is one each.
	var keys, perMaster []string
	seen := map[int]bool{}
	for i := 0; len(keys) < 20 || len(seen) < len(e.cl.Masters); i++ {
		k := fmt.Sprintf("idle%03d", i)
		keys = append(keys, k)
		if m := e.masterOf(broker.ClusterLayout.Stream(cat, k)); !seen[m] {
			seen[m] = true
			perMaster = append(perMaster, k)
		}
	}
	e.startWith("node-1", rec.handler("node-1"), func(c *partitioned.Config) {
		c.IdleAfter = 200 * time.Millisecond
		c.SweepEvery = time.Hour
	})
	publishAll(t, e.pub, keys, 1, 1)
	eventually(t, 30*time.Second, 10*time.Millisecond, "the first entries handled", func() bool { return rec.complete(wantAll(keys, 1)) })
	// Idle: every lease released after IdleAfter.
	eventually(t, 30*time.Second, 20*time.Millisecond, "every partition idle (lease released)", func() bool {
		for _, k := range keys {
			if n, err := e.c.Exists(ctx, broker.ClusterLayout.LeaseKey(group, k)).Result(); err != nil || n != 0 {
				return false
			}
		}
		return true
	})

	wake := func(what string, seq int, add func(k string)) {
		t.Helper()
		at := time.Now()
		for _, k := range perMaster {
			add(k)
		}
		want := map[string]int{}
		for _, k := range perMaster {
			want[k] = seq
		}
		eventually(t, 15*time.Second, 5*time.Millisecond, what, func() bool { return rec.complete(want) })
		t.Logf("%s: %d idle partitions, one per master, handled after %s", what, len(perMaster), time.Since(at).Round(time.Millisecond))
	}
	wake("entries appended without a wake-up signal", 2, func(k string) {
		err := e.c.XAdd(ctx, &redis.XAddArgs{Stream: broker.ClusterLayout.Stream(cat, k), Values: []string{"data", string(envelope(k, 2))}}).Err()
		if err != nil {
			t.Fatal(err)
		}
	})
	// Idle again before the next round.
	eventually(t, 30*time.Second, 20*time.Millisecond, "the partitions idle again", func() bool {
		for _, k := range perMaster {
			if n, err := e.c.Exists(ctx, broker.ClusterLayout.LeaseKey(group, k)).Result(); err != nil || n != 0 {
				return false
			}
		}
		return true
	})
	wake("entries published", 3, func(k string) {
		if _, err := e.pub.Publish(ctx, cat, k, envelope(k, 3)); err != nil {
			t.Fatal(err)
		}
	})
	want := wantAll(keys, 1)
	for _, k := range perMaster {
		want[k] = 3
	}
	rec.checkOrder(t, want)
}

// In the cluster layout an append nobody announces (a master added after
// the append watch began is watched by nobody) is found by the safety
// net within about a second, the cadence of the poll the adapter ran on
// a Cluster before announcements, however long WaitTimeout is (an hour
// here: with it the entry would have waited an hour).
func TestClusterUnannouncedAppendIsFoundWithinTheClusterPoll(t *testing.T) {
	e := newClusterEnv(t)
	rec := newRecorder(t)
	ctx := context.Background()
	l := broker.ClusterLayout
	var keys []string
	drop := map[string]bool{}
	seen := map[int]bool{}
	for i := 0; len(seen) < len(e.cl.Masters); i++ {
		k := fmt.Sprintf("quiet%03d", i)
		if m := e.masterOf(l.Stream(cat, k)); !seen[m] {
			seen[m] = true
			keys = append(keys, k)
			drop[l.Stream(cat, k)] = true
		}
	}
	e.startWith("node-1", rec.handler("node-1"), func(c *partitioned.Config) {
		c.Broker = dropAppends{Broker: c.Broker.(*redisbroker.Broker), drop: drop}
		c.IdleAfter = 50 * time.Millisecond
		c.WaitTimeout = time.Hour
		c.SweepEvery = time.Hour
		c.DiscoverEvery = time.Hour
	})
	publishAll(t, e.pub, keys, 1, 1)
	eventually(t, 30*time.Second, 10*time.Millisecond, "the first entries handled, idle and announced", func() bool {
		if !rec.complete(wantAll(keys, 1)) || !partitioned.Announced(e.subs[0]) {
			return false
		}
		for _, k := range keys {
			if n, err := e.c.Exists(ctx, l.LeaseKey(group, k)).Result(); err != nil || n != 0 {
				return false
			}
		}
		return true
	})
	for _, k := range keys {
		if err := e.c.XAdd(ctx, &redis.XAddArgs{Stream: l.Stream(cat, k), Values: []string{"data", string(envelope(k, 2))}}).Err(); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, 30*time.Second, 10*time.Millisecond, "the unannounced entries handled", func() bool { return rec.complete(wantAll(keys, 2)) })
}
