package partitioned_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/protctl/protctl/internal/testenv"
	"github.com/protctl/protctl/pkg/broker"
	"github.com/protctl/protctl/pkg/broker/redisbroker"
	"github.com/protctl/protctl/pkg/runtime"
	"github.com/protctl/protctl/pkg/runtime/ledger"
	"github.com/protctl/protctl/pkg/runtime/partitioned"
	"github.com/protctl/protctl/pkg/runtime/redisstore"
)

// server is the package's redis-server; Redis tests run one at a time and
// start from an empty database.
var server *testenv.Redis

func TestMain(m *testing.M) { os.Exit(runMain(m)) }

func runMain(m *testing.M) int {
	dir, err := os.MkdirTemp("", "runtime-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	server, err = testenv.NewRedis(dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer server.Stop()
	return m.Run()
}

// Short leases keep the Redis tests fast; every wait below polls with a
// deadline rather than sleeping for a fixed time.
const (
	redisTTL   = 1500 * time.Millisecond
	redisRenew = 300 * time.Millisecond
)

type redisEnv struct {
	t       *testing.T
	addr    string
	clients []*redis.Client
	c       *redis.Client
	b       *redisbroker.Broker
	store   *redisstore.Store
	pub     *partitioned.Publisher
	nodes   []*runtime.Node
	subs    []*partitioned.Subscription // each node's, in start order
}

func newRedisEnv(t *testing.T) *redisEnv {
	t.Helper()
	server.FlushAll(t)
	return newRedisEnvOn(t, server)
}

// newRedisEnvOn is newRedisEnv on a server of the test's own.
func newRedisEnvOn(t *testing.T, srv *testenv.Redis) *redisEnv {
	t.Helper()
	e := &redisEnv{t: t, addr: srv.Addr}
	t.Cleanup(func() {
		e.stopAll()
		e.closeClients()
	})
	c := e.client()
	b := redisbroker.New(c)
	pub, err := partitioned.NewPublisher(b)
	if err != nil {
		t.Fatal(err)
	}
	e.c, e.b, e.store, e.pub = c, b, redisstore.New(c), pub
	return e
}

// client returns a new client, closed after the nodes have stopped.
func (e *redisEnv) client() *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: e.addr})
	e.clients = append(e.clients, c)
	return c
}

func (e *redisEnv) config(h runtime.Handler, b *redisbroker.Broker, store *redisstore.Store) partitioned.Config {
	return partitioned.Config{
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
}

// start runs a node with its own Redis client, as a separate process
// would.
func (e *redisEnv) start(id string, h runtime.Handler, mutate func(*partitioned.Config), obs *runtime.Observer) *runtime.Node {
	e.t.Helper()
	c := e.client()
	b := redisbroker.New(c)
	store := redisstore.New(c)
	cfg := e.config(h, b, store)
	if mutate != nil {
		mutate(&cfg)
	}
	sub, err := partitioned.New(cfg)
	if err != nil {
		e.t.Fatal(err)
	}
	n, err := runtime.NewNode(runtime.NodeConfig{
		Service: service, NodeID: id, Membership: store, HeartbeatEvery: redisRenew, MemberTTL: redisTTL - redisRenew, Observer: obs,
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

func (e *redisEnv) stopAll() {
	for _, n := range e.nodes {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		if err := n.Stop(ctx); err != nil {
			e.t.Errorf("stop %s: %v", n.NodeID(), err)
		}
		cancel()
	}
	e.nodes = nil
}

func (e *redisEnv) closeClients() {
	for _, c := range e.clients {
		_ = c.Close()
	}
}

// Three nodes on a real Redis share 100 keys while a publisher keeps
// appending: order per key, no loss, no overlap; then every lease is
// released on stop.
func TestRedisThreeNodes(t *testing.T) {
	e := newRedisEnv(t)
	rec := newRecorder(t)
	keys := keyNames(100)
	publishAll(t, e.pub, keys, 1, 3)
	for _, id := range []string{"node-1", "node-2", "node-3"} {
		e.start(id, rec.handler(id), nil, nil)
	}
	for round := 1; round < 10; round++ {
		publishAll(t, e.pub, keys, round*3+1, round*3+3)
		time.Sleep(20 * time.Millisecond)
	}
	want := wantAll(keys, 30)
	eventually(t, 60*time.Second, 20*time.Millisecond, "all entries handled", func() bool { return rec.complete(want) })
	rec.checkOrder(t, want)
	share := map[string]int{}
	for _, n := range e.nodes {
		share[n.NodeID()] = len(subOf(n).Assigned())
	}
	for id, n := range share {
		if n < 15 || n > 55 {
			t.Errorf("%s assigned %d of 100 keys: %v", id, n, share)
		}
	}
	e.stopAll()
	leases, err := e.c.Keys(context.Background(), group+":*:__lease__").Result()
	if err != nil || len(leases) != 0 {
		t.Errorf("leases left after stop: %v %v", leases, err)
	}
	members, err := e.store.Members(context.Background(), service)
	if err != nil || len(members) != 0 {
		t.Errorf("members after stop: %v %v", members, err)
	}
}

// Fairness on Redis: 3 nodes and 300 keys settle at 100±20 each; a fourth
// node takes about a quarter, all from the others.
func TestRedisFairness(t *testing.T) {
	e := newRedisEnv(t)
	rec := newRecorder(t)
	keys := keyNames(300)
	publishAll(t, e.pub, keys, 1, 1)
	start := time.Now()
	for _, id := range []string{"node-1", "node-2", "node-3"} {
		e.start(id, rec.handler(id), nil, nil)
	}
	settled := func(nodes []*runtime.Node, lo, hi int) bool {
		total := 0
		for _, n := range nodes {
			a := len(subOf(n).Assigned())
			if a < lo || a > hi {
				return false
			}
			total += a
		}
		return total == 300
	}
	eventually(t, 30*time.Second, 10*time.Millisecond, "3 nodes at 100±20", func() bool { return settled(e.nodes, 80, 120) })
	t.Logf("3 nodes settled after %s (heartbeat %s)", time.Since(start), redisRenew)
	eventually(t, 30*time.Second, 20*time.Millisecond, "every key handled", func() bool { return rec.complete(wantAll(keys, 1)) })
	before := map[string][]string{}
	for _, n := range e.nodes {
		before[n.NodeID()] = subOf(n).Assigned()
	}
	start = time.Now()
	n4 := e.start("node-4", rec.handler("node-4"), nil, nil)
	eventually(t, 30*time.Second, 10*time.Millisecond, "4 nodes settled", func() bool { return settled(e.nodes, 50, 100) })
	t.Logf("4th node settled after %s", time.Since(start))
	moved := subOf(n4).Assigned()
	for _, n := range e.nodes[:3] {
		for _, k := range subOf(n).Assigned() {
			if !slices.Contains(before[n.NodeID()], k) {
				t.Errorf("key %s moved to old node %s", k, n.NodeID())
			}
		}
	}
	t.Logf("the 4th node took %d of 300 keys", len(moved))
	publishAll(t, e.pub, keys, 2, 2)
	eventually(t, 30*time.Second, 20*time.Millisecond, "second entries handled", func() bool { return rec.complete(wantAll(keys, 2)) })
	rec.checkOrder(t, wantAll(keys, 2))
}

// A node whose renewals are blocked is fenced: a lease taken from it
// mid-handler (an operator released it, another owner acquired it) makes
// its next ack fail with ErrLeaseLost, and a lease that runs out on the
// server while renewals stall is dropped by the trust window before any
// further handler call. Nothing it handled is acked: the new owners get
// those entries again.
func TestRedisStalledNodeIsFenced(t *testing.T) {
	ctx := context.Background()
	e := newRedisEnv(t)
	rec := newRecorder(t)
	publishAll(t, e.pub, []string{"stall", "steal"}, 1, 2)
	entered := map[string]chan struct{}{"stall": make(chan struct{}), "steal": make(chan struct{})}
	release := map[string]chan struct{}{"stall": make(chan struct{}), "steal": make(chan struct{})}
	rec.setHold(func(ctx context.Context, m runtime.Message) {
		if seqOf(t, m.Data) == 1 {
			close(entered[m.Key])
			<-release[m.Key]
		}
	})
	var stalled atomic.Bool
	unstall := make(chan struct{})
	var lost, untrusted atomic.Int32
	obs := &runtime.Observer{OnLease: func(ev runtime.LeaseEvent) {
		switch {
		case ev.Kind == runtime.LeaseLost && ev.Partition == "steal":
			lost.Add(1)
		case ev.Kind == runtime.LeaseUntrusted && ev.Partition == "stall":
			untrusted.Add(1)
		}
	}}
	c := e.client()
	b := redisbroker.New(c)
	store := redisstore.New(c)
	sub, err := partitioned.New(e.config(rec.handler("node-1"), b, store))
	if err != nil {
		t.Fatal(err)
	}
	partitioned.SetRenewGate(sub, func(ctx context.Context) {
		if stalled.Load() {
			select {
			case <-unstall:
			case <-ctx.Done():
			}
		}
	})
	n, err := runtime.NewNode(runtime.NodeConfig{Service: service, NodeID: "node-1", Membership: store, HeartbeatEvery: redisRenew, Observer: obs}, sub)
	if err != nil {
		t.Fatal(err)
	}
	if err := n.Start(ctx); err != nil {
		t.Fatal(err)
	}
	e.nodes = append(e.nodes, n)
	for _, ch := range entered {
		select {
		case <-ch:
		case <-time.After(10 * time.Second):
			t.Fatal("handlers not entered")
		}
	}
	stalled.Store(true)
	l := broker.ProteanLayout

	// Steal: an operator releases "steal" and another owner takes it. The
	// node cannot know (its renewals stall) and goes on, but its ack is
	// refused.
	token, err := e.c.Get(ctx, l.LeaseKey(group, "steal")).Result()
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := e.b.ReleasePartitionLease(ctx, broker.Fence{LeaseKey: l.LeaseKey(group, "steal"), Token: token}); err != nil || !ok {
		t.Fatal(ok, err)
	}
	thief, ok, err := e.b.AcquirePartitionLease(ctx, l.LeaseKey(group, "steal"), l.GenerationKey(group, "steal"), "thief", time.Minute)
	if err != nil || !ok {
		t.Fatal(ok, err)
	}
	close(release["steal"])
	eventually(t, 10*time.Second, 5*time.Millisecond, "steal dropped on a refused ack", func() bool { return lost.Load() > 0 })

	// Stall: "stall"'s lease runs out on the server; another owner takes
	// it. By then the node no longer trusts its lease.
	eventually(t, 10*time.Second, 10*time.Millisecond, "stall's lease to expire", func() bool {
		return e.c.Exists(ctx, l.LeaseKey(group, "stall")).Val() == 0
	})
	intruder, ok, err := e.b.AcquirePartitionLease(ctx, l.LeaseKey(group, "stall"), l.GenerationKey(group, "stall"), "intruder", time.Minute)
	if err != nil || !ok {
		t.Fatal(ok, err)
	}
	close(release["stall"])
	eventually(t, 10*time.Second, 10*time.Millisecond, "stall dropped", func() bool { return len(sub.Status().Held) == 0 })
	// The lease was dropped at its trust deadline (the handler's context
	// ended then); the event comes when the worker ends, once the
	// handler, which ignores its context here, returns.
	eventually(t, 10*time.Second, 10*time.Millisecond, "an untrusted event for the stalled lease", func() bool { return untrusted.Load() > 0 })
	if got := rec.handled("stall"); len(got) > 1 {
		t.Errorf("the stalled node handled %v: nothing may start after the trust window", got)
	}
	// Nothing was acked under the stale leases: the new owners read every
	// entry again, entry 1 first.
	for key, owner := range map[string]broker.Lease{"steal": thief, "stall": intruder} {
		if _, err := e.b.ReclaimPartitionPending(ctx, owner.Fence, cat+":"+key, group, 0, 10); err != nil {
			t.Fatal(err)
		}
		msgs, err := e.b.ReadPartitionFenced(ctx, owner.Fence, cat+":"+key, group, 10, broker.ReadPendingThenNew)
		if err != nil || len(msgs) != 2 || seqOf(t, msgs[0].Data) != 1 {
			t.Errorf("%s: the new owner reads %d entries (%v), want both, entry 1 first", key, len(msgs), err)
		}
	}
	close(unstall)
}

// Interop: a category written by Protean with plain Redis commands, one
// key still leased by a Protean instance ("other:1", short TTL), is
// consumed in order; the leased key waits for the lease to expire and is
// then taken with generation 2.
func TestRedisProteanInterop(t *testing.T) {
	ctx := context.Background()
	e := newRedisEnv(t)
	rec := newRecorder(t)
	keys := []string{"o-1", "o-2", "o-3"}
	for seq := 1; seq <= 5; seq++ {
		for _, k := range keys {
			if err := e.c.XAdd(ctx, &redis.XAddArgs{Stream: cat + ":" + k, Values: []any{"data", string(envelope(k, seq))}}).Err(); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := e.c.SAdd(ctx, cat+":__partitions__", "o-1", "o-2", "o-3").Err(); err != nil {
		t.Fatal(err)
	}
	if err := e.c.Set(ctx, group+":o-2:__lease__", "other:1", 800*time.Millisecond).Err(); err != nil {
		t.Fatal(err)
	}
	if err := e.c.Set(ctx, group+":o-2:__generation__", "1", 0).Err(); err != nil {
		t.Fatal(err)
	}
	var mu = make(chan struct{}, 1)
	gens := map[string]int64{}
	obs := &runtime.Observer{OnLease: func(ev runtime.LeaseEvent) {
		if ev.Kind == runtime.LeaseAcquired {
			mu <- struct{}{}
			if gens[ev.Partition] == 0 {
				gens[ev.Partition] = ev.Generation
			}
			<-mu
		}
	}}
	e.start("node-1", rec.handler("node-1"), nil, obs)
	eventually(t, 20*time.Second, 20*time.Millisecond, "o-1 and o-3 handled", func() bool {
		return rec.complete(map[string]int{"o-1": 5, "o-3": 5})
	})
	if e.c.Exists(ctx, group+":o-2:__lease__").Val() == 1 {
		if got := rec.handled("o-2"); len(got) != 0 {
			t.Errorf("o-2 handled %v while Protean's lease was live", got)
		}
	}
	eventually(t, 20*time.Second, 20*time.Millisecond, "o-2 handled after the lease expired", func() bool {
		return rec.complete(map[string]int{"o-2": 5})
	})
	rec.checkOrder(t, wantAll(keys, 5))
	mu <- struct{}{}
	if gens["o-2"] != 2 {
		t.Errorf("o-2 taken with generation %d, want 2", gens["o-2"])
	}
	<-mu
	// Protean's stream layout is unchanged: one group, every entry acked.
	groups, err := e.c.XInfoGroups(ctx, cat+":o-2").Result()
	if err != nil || len(groups) != 1 || groups[0].Name != group || groups[0].Pending != 0 {
		t.Errorf("groups on o-2: %+v %v", groups, err)
	}
	reg, err := e.c.SMembers(ctx, cat+":__groups__").Result()
	if err != nil || !slices.Equal(reg, []string{group}) {
		t.Errorf("registered groups: %v %v", reg, err)
	}
}

// Poison on Redis (redisstore's ledger): park after N attempts, retry and
// skip from the ledger's requests, the DLQ stream in Protean's layout.
func TestRedisPoisonParkRetrySkip(t *testing.T) {
	ctx := context.Background()
	e := newRedisEnv(t)
	rec := newRecorder(t)
	keys := []string{"a", "b", "c"}
	publishAll(t, e.pub, keys, 1, 4)
	var fixed atomic.Bool
	rec.setFail(func(m runtime.Message) error {
		if m.Key != "c" && seqOf(t, m.Data) == 2 && !fixed.Load() {
			return errors.New("poison")
		}
		return nil
	})
	e.start("node-1", rec.handler("node-1"), nil, nil)
	eventually(t, 20*time.Second, 20*time.Millisecond, "c handled", func() bool { return rec.complete(map[string]int{"c": 4}) })
	eventually(t, 20*time.Second, 20*time.Millisecond, "a and b parked", func() bool {
		l, _ := e.store.ListParked(ctx, group)
		return len(l) == 2
	})
	p, err := e.store.GetParked(ctx, group, "", "a")
	if err != nil || p.Attempts != 3 || p.Stream != cat+":a" || p.Status != ledger.StatusParked {
		t.Fatalf("parked a: %+v %v", p, err)
	}
	fixed.Store(true)
	if err := e.store.RequestRetry(ctx, group, "", "a", "ops"); err != nil {
		t.Fatal(err)
	}
	if err := e.store.RequestSkip(ctx, group, "", "b", "bad", "ops"); err != nil {
		t.Fatal(err)
	}
	eventually(t, 20*time.Second, 20*time.Millisecond, "a retried and b skipped", func() bool {
		return rec.complete(map[string]int{"a": 4}) && slices.Contains(rec.handled("b"), 4)
	})
	if got := rec.handled("b"); !slices.Equal(got, []int{1, 3, 4}) {
		t.Errorf("b handled %v, want [1 3 4]", got)
	}
	dlq, err := e.c.XRange(ctx, cat+":b:dlq", "-", "+").Result()
	if err != nil || len(dlq) != 1 || seqOf(t, []byte(dlq[0].Values["data"].(string))) != 2 {
		t.Errorf("dlq: %+v %v", dlq, err)
	}
	if l, _ := e.store.ListParked(ctx, group); len(l) != 0 {
		t.Errorf("ledger after retry and skip: %+v", l)
	}
}

// Start does no I/O: a node started while Redis is down joins, registers
// its group and consumes once Redis is back (here restarted empty).
func TestRedisNodeStartsWhileRedisIsDown(t *testing.T) {
	ctx := context.Background()
	e := newRedisEnv(t)
	rec := newRecorder(t)
	server.Kill()
	restarted := false
	defer func() {
		if !restarted {
			if err := server.Restart(); err != nil {
				t.Fatal(err)
			}
		}
	}()
	n := e.start("node-1", rec.handler("node-1"), nil, nil)
	// Start returned (with Redis down) before anything reached Redis.
	if n.JoinState() != runtime.JoinJoining {
		t.Errorf("join state with Redis down = %s", n.JoinState())
	}
	time.Sleep(2 * redisRenew) // a few failed heartbeats and registrations
	if err := server.Restart(); err != nil {
		t.Fatal(err)
	}
	restarted = true
	eventually(t, 20*time.Second, 20*time.Millisecond, "joined", func() bool { return n.JoinState() == runtime.JoinJoined })
	eventually(t, 20*time.Second, 20*time.Millisecond, "group registered", func() bool {
		g, _ := e.c.SMembers(ctx, cat+":__groups__").Result()
		return slices.Contains(g, group)
	})
	keys := keyNames(5)
	publishAll(t, e.pub, keys, 1, 3)
	eventually(t, 30*time.Second, 20*time.Millisecond, "handled after the restart", func() bool { return rec.complete(wantAll(keys, 3)) })
	rec.checkOrder(t, wantAll(keys, 3))
}

// Redis restarted mid-run (with its AOF, so leases and generations
// survive): the nodes ride over the outage, and every entry is handled
// in order, none lost, with no overlap.
func TestRedisRestartMidRun(t *testing.T) {
	srv := testenv.StartRedis(t, testenv.WithArgs("--appendonly", "yes", "--appendfsync", "always"))
	e := newRedisEnvOn(t, srv)
	rec := newRecorder(t)
	keys := keyNames(20)
	for _, id := range []string{"node-1", "node-2"} {
		e.start(id, rec.handler(id), nil, nil)
	}
	// Slow handlers keep partitions busy while Redis goes away.
	rec.setHold(func(ctx context.Context, m runtime.Message) { time.Sleep(2 * time.Millisecond) })
	publishAll(t, e.pub, keys, 1, 10)
	eventually(t, 20*time.Second, 5*time.Millisecond, "processing under way", func() bool { return rec.calls.Load() > 20 })
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	publishAll(t, e.pub, keys, 11, 15)
	want := wantAll(keys, 15)
	eventually(t, 60*time.Second, 20*time.Millisecond, "every entry handled after the restart", func() bool { return rec.complete(want) })
	rec.checkOrder(t, want)
}

// readCounter counts a client's fenced reads by kind: transactions
// (EXEC, on the slot's pinned reader or the pool) and the live path's
// scripts, which go in pipelines of scripts alone: ack-and-reads
// (ackread.lua: two keys, the lease and the lane) and acquisitions
// (acquireread.lua: the lease, the generation and the lanes).
type readCounter struct{ execs, ackreads, acquires atomic.Int64 }

func (h *readCounter) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (h *readCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (h *readCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if len(cmds) == 2 && cmds[0].Name() == "multi" && cmds[1].Name() == "exec" {
			// The broker's one-time check that the server allows
			// MULTI (redisbroker's multi.go), not a read.
			return next(ctx, cmds)
		}
		// A batch of the live path is a PING, then its scripts.
		scripts := true
		for i, c := range cmds {
			switch c.Name() {
			case "exec":
				h.execs.Add(1)
				scripts = false
			case "evalsha", "eval":
			case "ping":
				scripts = scripts && i == 0
			default:
				scripts = false
			}
		}
		err := next(ctx, cmds)
		for _, c := range cmds {
			if c.Name() == "ping" {
				continue
			}
			if !scripts || redis.HasErrorPrefix(c.Err(), "NOSCRIPT") {
				continue // sent again with the script's body: counted then
			}
			if n, _ := c.Args()[2].(int); n == 2 {
				h.ackreads.Add(1)
			} else {
				h.acquires.Add(1)
			}
		}
		return err
	}
}

// A generation's reads, counted by kind (BatchSize 20). The lease comes
// with the first read of a fresh lane (one script on the live path, of at
// most 16 entries); a full read keeps the worker's slot, and the reads
// after it are fenced transactions of 20 on the slot's pinned reader,
// each acking the batch before, to the one that comes back empty; a
// short batch read on the live path gives the slot back, and the read
// that acks it goes on the live path too. A fresh lane of 45 entries
// costs the acquisition's read (16) and three transactions (20, 9, 0); 40
// cost the acquisition's read and three transactions (20, 4, 0). A
// generation that inherits pending entries (a previous owner read them
// and died) reads nothing with its lease, reclaims them and handles them
// first, all on its slot: 30 pending of 50 cost transactions pending 20,
// pending 10, new 20, new 0; 40 pending of 50 cost pending 20, 20, 0, new
// 10, new 0. No more reads than that, and every entry once, in order.
func TestRedisLaneReads(t *testing.T) {
	for _, tc := range []struct {
		entries, pending int
		execs, ackreads  int64
		readWithTheLease bool
	}{{45, 0, 3, 0, true}, {40, 0, 3, 0, true}, {50, 30, 4, 0, false}, {50, 40, 5, 0, false}} {
		t.Run(fmt.Sprintf("%d entries %d pending", tc.entries, tc.pending), func(t *testing.T) {
			e := newRedisEnv(t)
			rec := newRecorder(t)
			keys := keyNames(1)
			publishAll(t, e.pub, keys, 1, tc.entries)
			st := broker.ProteanLayout.Stream(cat, keys[0])
			if tc.pending > 0 {
				// A previous owner read tc.pending entries and died; its
				// lease is gone.
				lk := broker.ProteanLayout.LeaseKey(group, keys[0])
				old, ok, err := e.b.AcquirePartitionLease(context.Background(), lk, broker.ProteanLayout.GenerationKey(group, keys[0]), "node-dead", time.Minute)
				if err != nil || !ok {
					t.Fatal(ok, err)
				}
				msgs, err := e.b.ReadPartitionFenced(context.Background(), old.Fence, st, group, int64(tc.pending), broker.ReadNew)
				if err != nil || len(msgs) != tc.pending {
					t.Fatal(len(msgs), err)
				}
				e.c.Del(context.Background(), lk)
			}
			reads := &readCounter{}
			c := e.client()
			c.AddHook(reads)
			store := redisstore.New(c)
			cfg := e.config(rec.handler("node-1"), redisbroker.New(c), store)
			cfg.LeaseTTL, cfg.RenewEvery = time.Minute, 10*time.Second // no renewal inside the test
			sub, err := partitioned.New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			n, err := runtime.NewNode(runtime.NodeConfig{Service: service, NodeID: "node-1", Membership: store}, sub)
			if err != nil {
				t.Fatal(err)
			}
			if err := n.Start(context.Background()); err != nil {
				t.Fatal(err)
			}
			e.nodes = append(e.nodes, n)
			want := wantAll(keys, tc.entries)
			eventually(t, 30*time.Second, 10*time.Millisecond, "all entries handled", func() bool { return rec.complete(want) })
			rec.checkOrder(t, want)
			// The worker acks the last batch and reads once more; wait for
			// it to have gone idle (nothing pending), then count.
			eventually(t, 10*time.Second, 10*time.Millisecond, "last batch acked", func() bool {
				p, err := e.c.XPending(context.Background(), st, group).Result()
				return err == nil && p.Count == 0
			})
			if got := reads.acquires.Load(); got != 1 {
				t.Errorf("%d live acquisitions, want 1", got)
			}
			if got := reads.execs.Load(); got != tc.execs {
				t.Errorf("took %d transactions, want %d", got, tc.execs)
			}
			if got := reads.ackreads.Load(); got != tc.ackreads {
				t.Errorf("took %d live reads, want %d", got, tc.ackreads)
			}
			wantReads := tc.execs + tc.ackreads
			if tc.readWithTheLease {
				wantReads++
			}
			// The counter moves when the read's reply is back, after the
			// server saw the ack that emptied the pending list: wait for
			// it to reach the count, then check it went no further.
			eventually(t, 10*time.Second, 10*time.Millisecond, "the last read counted", func() bool {
				return sub.Status().Counters[runtime.CounterReads] >= wantReads
			})
			if got := sub.Status().Counters[runtime.CounterReads]; got != wantReads {
				t.Errorf("counted %d reads, want %d", got, wantReads)
			}
		})
	}
}

// A subscription on the Redis adapter reads a backlog through pinned
// readers, one per worker slot: the first 16 entries of a fresh
// partition come with its lease on the live path, and the worker keeps
// its slot after that full read; its pinned reader then costs four round
// trips for a partition of 45 entries in batches of 20 (the lease check,
// the reads of 20 and 9, and the read that acks the last batch). When the node stops every pinned connection is back in the
// pool, unwatched (a watch left behind would refuse the next transaction
// on that connection).
func TestRedisPinnedReaders(t *testing.T) {
	e := newRedisEnv(t)
	rec := newRecorder(t)
	keys := keyNames(30)
	publishAll(t, e.pub, keys, 1, 45)
	// The acquisition's script cached: no NOSCRIPT retry to count.
	if _, _, err := e.b.AcquirePartitionLease(context.Background(), "warm:lease", "warm:gen", "x", time.Minute); err != nil {
		t.Fatal(err)
	}
	trips := &tripCounter{}
	c := e.client()
	c.AddHook(trips)
	store := redisstore.New(c)
	cfg := e.config(rec.handler("node-1"), redisbroker.New(c), store)
	cfg.Workers = 4
	cfg.LeaseTTL, cfg.RenewEvery = time.Minute, 10*time.Second // no renewal inside the test
	sub, err := partitioned.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	n, err := runtime.NewNode(runtime.NodeConfig{Service: service, NodeID: "node-1", Membership: store}, sub)
	if err != nil {
		t.Fatal(err)
	}
	if err := n.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	e.nodes = append(e.nodes, n)
	want := wantAll(keys, 45)
	eventually(t, 30*time.Second, 10*time.Millisecond, "all entries handled", func() bool { return rec.complete(want) })
	rec.checkOrder(t, want)
	for _, k := range keys {
		st := broker.ProteanLayout.Stream(cat, k)
		eventually(t, 10*time.Second, 10*time.Millisecond, "last batch acked", func() bool {
			p, err := e.c.XPending(context.Background(), st, group).Result()
			return err == nil && p.Count == 0
		})
	}
	// A slot's connection left idle for a second is checked (a lone
	// UNWATCH) before its next use; on a machine stalled that long a slot
	// may pay it once, so each slot is allowed one.
	if got, want := trips.partition.Load(), 4*int64(len(keys)); got < want || got > want+int64(cfg.Workers) {
		t.Errorf("%d round trips of the pinned readers for %d partitions, want 4 each (and at most one idle check per slot)", got, len(keys))
	}
	// The background: two tiers of blocking waits over the main lanes
	// (each shard) and over the backfill lanes.
	if s := c.PoolStats(); s.TotalConns-s.IdleConns > uint32(cfg.Workers)+2*partitioned.DefaultWaitShards+2 {
		t.Errorf("pool %+v: more connections in use than the slots' and the background's", s)
	}
	e.stopAll()
	s := c.PoolStats()
	if s.TotalConns != s.IdleConns {
		t.Fatalf("pool %+v after stop: connections not returned", s)
	}
	// Every lease was released at stop, which touched it: a connection
	// still watching one would refuse a transaction.
	conns := make([]*redis.Conn, s.IdleConns)
	for i := range conns {
		conns[i] = c.Conn()
		if err := conns[i].Ping(context.Background()).Err(); err != nil {
			t.Fatal(err)
		}
	}
	for i, cn := range conns {
		_, err := cn.TxPipelined(context.Background(), func(p redis.Pipeliner) error {
			p.Set(context.Background(), "other", "1", 0)
			return nil
		})
		if err != nil {
			t.Errorf("connection %d: %v (a watch was left)", i, err)
		}
		_ = cn.Close()
	}
}

// tripCounter counts the round trips of pinned readers: the pipelines
// that acquire a lease (EVALSHA then WATCH), take tails (XREVRANGE),
// check a lease (WATCH, GET) or carry a transaction (EXEC), and the
// UNWATCH that checks an idle connection or gives it back.
type tripCounter struct{ partition atomic.Int64 }

func (h *tripCounter) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *tripCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if cmd.Name() == "unwatch" {
			h.partition.Add(1)
		}
		return next(ctx, cmd)
	}
}

func (h *tripCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, c := range cmds {
			if n := c.Name(); n == "exec" || n == "xrevrange" || n == "watch" && cmds[0].Name() != "multi" {
				h.partition.Add(1)
				break
			}
		}
		return next(ctx, cmds)
	}
}

// Two subscriptions whose Brokers share one client share its PinLimit
// (as the node builder wires them): with every worker of both busy in a
// handler, at most half of the pool is pinned, and the client still
// serves everything else (a Ping here; renewals, heartbeats and the
// ledger in a node). With a limit per Broker, each would pin half of the
// pool, and together all of it.
func TestRedisSubscriptionsShareThePinLimit(t *testing.T) {
	e := newRedisEnv(t)
	keys := keyNames(12)
	// Batches of one: the first entry comes with the lease (live path),
	// fills the batch and keeps the slot; the second is read on the
	// slot's pinned reader, and its handler holds the worker.
	publishAll(t, e.pub, keys, 1, 2)
	c := redis.NewClient(&redis.Options{Addr: e.addr, PoolSize: 16, PoolTimeout: 2 * time.Second})
	t.Cleanup(func() { _ = c.Close() })
	pins := redisbroker.NewPinLimit(c)
	store := redisstore.New(c)
	release := make(chan struct{})
	var busy, maxPinned atomic.Int64
	hold := func(ctx context.Context, m runtime.Message) {
		if seqOf(t, m.Data) == 1 {
			return
		}
		busy.Add(1)
		defer busy.Add(-1)
		select {
		case <-release:
		case <-ctx.Done():
		}
	}
	var subs []runtime.Subscription
	var recs []*recorder
	for i, name := range []string{group, group + "-2"} {
		rec := newRecorder(t)
		rec.hold.Store(&hold)
		recs = append(recs, rec)
		cfg := e.config(rec.handler("node-1"), redisbroker.New(c, redisbroker.WithPinLimit(pins)), store)
		cfg.Name = name
		cfg.Workers = 6
		cfg.BatchSize = 1
		cfg.LeaseTTL, cfg.RenewEvery = 5*time.Second, time.Second
		sub, err := partitioned.New(cfg)
		if err != nil {
			t.Fatal(i, err)
		}
		subs = append(subs, sub)
	}
	n, err := runtime.NewNode(runtime.NodeConfig{Service: service, NodeID: "node-1", Membership: store}, subs...)
	if err != nil {
		t.Fatal(err)
	}
	if err := n.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	e.nodes = append(e.nodes, n)
	eventually(t, 20*time.Second, time.Millisecond, "every worker of both subscriptions busy", func() bool {
		if p := int64(pins.Held()); p > maxPinned.Load() {
			maxPinned.Store(p)
		}
		return busy.Load() == 12
	})
	if p := pins.Held(); p != 8 {
		t.Errorf("%d connections pinned with twelve workers busy, want half of the pool of 16", p)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatalf("ping with every worker busy: %v", err)
	}
	if m := maxPinned.Load(); m > 8 {
		t.Errorf("%d connections pinned at once, want at most half of the pool of 16", m)
	}
	close(release)
	want := wantAll(keys, 2)
	for _, rec := range recs {
		eventually(t, 20*time.Second, 10*time.Millisecond, "all entries handled", func() bool { return rec.complete(want) })
	}
	e.stopAll()
	if p := pins.Held(); p != 0 {
		t.Errorf("%d connections still pinned after stop", p)
	}
}

// A pinned connection that idled is checked before its next call: a
// server that closes idle connections (timeout 1) closes the slots'
// pinned connections while the partitions idle, and the next acquisition
// takes another instead of failing on the closed socket (which the
// runtime reported as an error and answered by releasing the lease).
func TestRedisPinnedReadersSurviveAnIdleTimeout(t *testing.T) {
	e := newRedisEnv(t)
	admin := e.client()
	if err := admin.ConfigSet(context.Background(), "timeout", "1").Err(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = admin.ConfigSet(context.Background(), "timeout", "0").Err() })
	rec := newRecorder(t)
	var errs atomic.Int64
	obs := &runtime.Observer{OnError: func(ev runtime.ErrorEvent) {
		errs.Add(1)
		t.Logf("error event: %+v", ev)
	}}
	keys := keyNames(3)
	publishAll(t, e.pub, keys, 1, 5)
	e.start("node-1", rec.handler("node-1"), func(c *partitioned.Config) {
		c.Workers = 2
		c.IdleAfter = 50 * time.Millisecond
	}, obs)
	eventually(t, 20*time.Second, 10*time.Millisecond, "first entries handled", func() bool { return rec.complete(wantAll(keys, 5)) })
	// The server closes connections idle for more than a second: wait
	// for the slots' connections to idle past it (a wait for a time to
	// pass, which is what this test is about).
	time.Sleep(2500 * time.Millisecond)
	publishAll(t, e.pub, keys, 6, 10)
	want := wantAll(keys, 10)
	eventually(t, 20*time.Second, 10*time.Millisecond, "later entries handled", func() bool { return rec.complete(want) })
	rec.checkOrder(t, want)
	if n := errs.Load(); n != 0 {
		t.Errorf("%d error events after an idle gap", n)
	}
}

// A parked head that fails again after an operator's retry is parked
// again with its attempts added (3 + 3 = 6), and Message.Attempt goes on
// counting (4, 5, 6, then 7 on the retry that succeeds), as
// docs/operations.md says (issue 18 item 9).
func TestRedisRetryKeepsCountingAttempts(t *testing.T) {
	ctx := context.Background()
	e := newRedisEnv(t)
	rec := newRecorder(t)
	publishAll(t, e.pub, []string{"a"}, 1, 2)
	var fixed atomic.Bool
	var mu sync.Mutex
	var seen []int
	rec.setFail(func(m runtime.Message) error {
		if seqOf(t, m.Data) != 1 {
			return nil
		}
		mu.Lock()
		seen = append(seen, m.Attempt)
		mu.Unlock()
		if fixed.Load() {
			return nil
		}
		return errors.New("poison")
	})
	e.start("node-1", rec.handler("node-1"), nil, nil)
	parkedWith := func(n int) func() bool {
		return func() bool {
			p, err := e.store.GetParked(ctx, group, "", "a")
			return err == nil && p.Attempts == n && p.Status == ledger.StatusParked
		}
	}
	eventually(t, 20*time.Second, 20*time.Millisecond, "a parked with 3 attempts", parkedWith(3))
	if err := e.store.RequestRetry(ctx, group, "", "a", "ops"); err != nil {
		t.Fatal(err)
	}
	eventually(t, 20*time.Second, 20*time.Millisecond, "a parked again with 6 attempts", parkedWith(6))
	fixed.Store(true)
	if err := e.store.RequestRetry(ctx, group, "", "a", "ops"); err != nil {
		t.Fatal(err)
	}
	eventually(t, 20*time.Second, 20*time.Millisecond, "a retried", func() bool { return rec.complete(map[string]int{"a": 2}) })
	mu.Lock()
	defer mu.Unlock()
	if !slices.Equal(seen, []int{1, 2, 3, 4, 5, 6, 7}) {
		t.Errorf("attempts seen %v, want 1..7", seen)
	}
}
