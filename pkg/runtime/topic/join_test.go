package topic_test

import (
	"context"
	"errors"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/protctl/protctl/internal/testenv"
	"github.com/protctl/protctl/pkg/broker"
	"github.com/protctl/protctl/pkg/broker/redisbroker"
	"github.com/protctl/protctl/pkg/runtime"
	"github.com/protctl/protctl/pkg/runtime/kafkasource"
	"github.com/protctl/protctl/pkg/runtime/redisstore"
	"github.com/protctl/protctl/pkg/runtime/source"
	"github.com/protctl/protctl/pkg/runtime/topic"
)

// TestTopicJoinConsumeAndStop: a node joins (AwaitStarted), holds every
// partition, handles every record in per-aggregate order, and its Stop
// saves every checkpoint at the head and releases every lease; a second
// Stop does nothing.
func TestTopicJoinConsumeAndStop(t *testing.T) {
	for _, kind := range []storeKind{onMemory, onRedis} {
		t.Run(string(kind), func(t *testing.T) {
			e := newTopicEnv(t, kind, 4)
			rec := newTopicRecorder(t)
			aggs := aggNames(20)
			e.produce(aggs, 1, 10)
			n := e.start("n1", e.config(tsub(topicSub, rec.handler("n1"))), nil)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if err := n.ts.AwaitStarted(ctx); err != nil {
				t.Fatalf("AwaitStarted: %v", err)
			}
			if got := n.ts.JoinState(); got != runtime.JoinJoined {
				t.Fatalf("JoinState after AwaitStarted = %s, want joined", got)
			}
			waitFor(t, 10*time.Second, "every record handled", func() bool { return rec.complete(topicSub, aggs, 10) })
			e.produce(aggs, 11, 20)
			waitFor(t, 10*time.Second, "records produced after the join", func() bool { return rec.complete(topicSub, aggs, 20) })
			held := n.ts.Held()
			if len(held) != 4 {
				t.Fatalf("held %v, want all 4 partitions", held)
			}
			st := n.ts.Status()
			if st.Source != source.Kafka || st.Name != "topic:"+topicName || len(st.Held) != 4 {
				t.Fatalf("status %+v: want 4 held kafka partitions of topic:%s", st, topicName)
			}
			for _, h := range st.Held {
				if h.Generation < 1 || h.Topic != topicName || h.Subscription != topicSub {
					t.Fatalf("held partition %+v lacks its generation, topic or subscription", h)
				}
			}

			e.stop(n)
			if got := n.ts.JoinState(); got != runtime.JoinLeft {
				t.Fatalf("JoinState after Stop = %s, want left", got)
			}
			if err := n.ts.Stop(context.Background()); err != nil {
				t.Fatalf("second Stop: %v", err)
			}
			for p, head := range e.heads() {
				if next, ok := e.checkpoint(topicSub, p); !ok || next != head {
					t.Errorf("partition %d: checkpoint (%d, %v) after Stop, want the head %d", p, next, ok, head)
				}
				lease := e.leaseGroup().LeaseKey(p)
				if kind == onRedis {
					if n, _ := e.raw.Exists(context.Background(), lease).Result(); n != 0 {
						t.Errorf("lease %s still held after Stop", lease)
					}
				} else if _, held, _ := e.mem.Faults().GetString(context.Background(), lease); held {
					t.Errorf("lease %s still held after Stop", lease)
				}
			}
			rec.checkOrder(t, topicSub, aggs, 20)
			if c := n.ts.Counters(); c[runtime.CounterProcessed] != 400 || c[topic.CounterCheckpoints] == 0 {
				t.Errorf("counters %v: want 400 processed and some checkpoints", c)
			}
			noTopicGoroutines(t)
		})
	}
}

// TestTopicJoinWaitsForTopic: without the topic the node stays joining,
// counts failures and says why; it joins once the topic exists.
func TestTopicJoinWaitsForTopic(t *testing.T) {
	e := newTopicEnv(t, onMemory, 0)
	rec := newTopicRecorder(t)
	n := e.start("n1", e.config(tsub(topicSub, rec.handler("n1"))), nil)
	defer e.stopAll()
	waitFor(t, 10*time.Second, "two failed joins", func() bool { return n.ts.JoinFailures() >= 2 })
	if got := n.ts.JoinState(); got != runtime.JoinJoining {
		t.Fatalf("JoinState without the topic = %s, want joining", got)
	}
	if err := n.ts.LastJoinError(); !errors.Is(err, kafkasource.ErrTopicNotFound) {
		t.Fatalf("LastJoinError = %v, want ErrTopicNotFound", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := n.ts.AwaitStarted(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("AwaitStarted before the topic exists = %v, want the context's deadline", err)
	}

	e.createTopic(3)
	ctx2, cancel2 := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel2()
	if err := n.ts.AwaitStarted(ctx2); err != nil {
		t.Fatalf("AwaitStarted after the topic was created: %v", err)
	}
	aggs := aggNames(6)
	e.produce(aggs, 1, 5)
	waitFor(t, 10*time.Second, "records handled", func() bool { return rec.complete(topicSub, aggs, 5) })
}

// TestTopicJoinLeaseStoreDown: while the lease store refuses every call
// the node stays joining, counts failures and reports the store's error;
// nothing is held. It joins once the store is back.
func TestTopicJoinLeaseStoreDown(t *testing.T) {
	e := newTopicEnv(t, onMemory, 3)
	flaky := &flakyLeases{LeaseManager: e.leases}
	flaky.down.Store(true)
	cfg := e.config(tsub(topicSub, newTopicRecorder(t).handler("n1")))
	cfg.Leases = flaky
	n := e.start("n1", cfg, nil)
	defer e.stopAll()
	waitFor(t, 10*time.Second, "three failed joins", func() bool { return n.ts.JoinFailures() >= 3 })
	if got := n.ts.JoinState(); got != runtime.JoinJoining {
		t.Fatalf("JoinState = %s, want joining", got)
	}
	if err := n.ts.LastJoinError(); !errors.Is(err, errLeaseStoreDown) {
		t.Fatalf("LastJoinError = %v, want the lease store's error", err)
	}
	if h := n.ts.Held(); len(h) != 0 {
		t.Fatalf("held %v while joining", h)
	}
	flaky.down.Store(false)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := n.ts.AwaitStarted(ctx); err != nil {
		t.Fatalf("AwaitStarted once the store is back: %v", err)
	}
	waitFor(t, 5*time.Second, "all partitions held", func() bool { return len(n.ts.Held()) == 3 })
}

// TestTopicJoinUndone: a join that fails after taking some leases gives
// them back before it retries.
func TestTopicJoinUndone(t *testing.T) {
	e := newTopicEnv(t, onMemory, 4)
	flaky := &flakyLeases{LeaseManager: e.leases}
	flaky.upFor.Store(3) // two acquires succeed, the third fails
	var acquired, released atomic.Int32
	obs := &runtime.Observer{OnLease: func(ev runtime.LeaseEvent) {
		switch ev.Kind {
		case runtime.LeaseAcquired:
			acquired.Add(1)
		case runtime.LeaseReleased:
			released.Add(1)
		}
	}}
	cfg := e.config(tsub(topicSub, newTopicRecorder(t).handler("n1")))
	cfg.Leases = flaky
	cfg.JoinBackoff, cfg.JoinMaxBackoff = time.Hour, time.Hour // one attempt only
	n := e.start("n1", cfg, obs)
	defer e.stopAll()
	waitFor(t, 10*time.Second, "a failed join", func() bool { return n.ts.JoinFailures() == 1 })
	if !errors.Is(n.ts.LastJoinError(), errLeaseStoreDown) {
		t.Fatalf("LastJoinError = %v", n.ts.LastJoinError())
	}
	if a, r := acquired.Load(), released.Load(); a != 2 || r != 2 {
		t.Fatalf("acquired %d and released %d leases, want the 2 taken given back", a, r)
	}
	for p := int32(0); p < 4; p++ {
		if _, held, _ := e.mem.Faults().GetString(context.Background(), e.leaseGroup().LeaseKey(p)); held {
			t.Errorf("lease of partition %d still held after the join was undone", p)
		}
	}
	if h := n.ts.Held(); len(h) != 0 {
		t.Fatalf("held %v after a failed join", h)
	}
}

// TestTopicJoinRedisUnreachable runs a real Node (membership in memory)
// whose lease store, checkpoints and ledger are on a redis-server that
// first listens on no port (connection refused), then is paused (every
// call hangs). The node stays joining, JoinFailures counts up and
// LastJoinError says why; once the server is reachable it joins.
func TestTopicJoinRedisUnreachable(t *testing.T) {
	e := newTopicEnv(t, onMemory, 3)
	srv := testenv.StartRedis(t)
	var target atomic.Value
	target.Store(closedPort(t))
	c := redis.NewClient(&redis.Options{
		Addr:        srv.Addr,
		DialTimeout: 200 * time.Millisecond, ReadTimeout: 200 * time.Millisecond, WriteTimeout: 200 * time.Millisecond,
		MaxRetries: -1, DialerRetries: 1,
		Dialer: func(ctx context.Context, network, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, network, target.Load().(string))
		},
	})
	t.Cleanup(func() { _ = c.Close() })
	store := redisstore.New(c)
	rec := newTopicRecorder(t)
	cfg := e.config(tsub(topicSub, rec.handler("n1")))
	cfg.Leases, cfg.Checkpoints, cfg.Ledger = redisbroker.New(c), store, store
	cfg.OpTimeout = 300 * time.Millisecond
	ts, err := topic.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	node, err := runtime.NewNode(runtime.NodeConfig{Service: topicService, NodeID: "n1", Membership: e.store,
		HeartbeatEvery: 200 * time.Millisecond, Logger: testLogger()}, ts)
	if err != nil {
		t.Fatal(err)
	}
	if err := node.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	paused := false
	defer func() {
		if paused {
			_ = srv.Resume()
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := node.Stop(ctx); err != nil {
			t.Errorf("node stop: %v", err)
		}
		noTopicGoroutines(t)
	}()

	waitFor(t, 10*time.Second, "two failed joins on a closed port", func() bool { return ts.JoinFailures() >= 2 })
	if got := ts.JoinState(); got != runtime.JoinJoining {
		t.Fatalf("JoinState = %s, want joining", got)
	}
	err = ts.LastJoinError()
	if !errors.Is(err, broker.ErrUnavailable) || !strings.Contains(err.Error(), "connection refused") {
		t.Fatalf("LastJoinError on a closed port = %v, want broker.ErrUnavailable saying the connection was refused", err)
	}
	if len(ts.Held()) != 0 {
		t.Fatalf("held %v while joining", ts.Held())
	}

	// The server is reachable but paused: calls hang until their timeouts.
	if err := srv.Pause(); err != nil {
		t.Fatal(err)
	}
	paused = true
	target.Store(srv.Addr)
	before := ts.JoinFailures()
	waitFor(t, 15*time.Second, "more failed joins while the server is paused", func() bool { return ts.JoinFailures() >= before+2 })
	if got := ts.JoinState(); got != runtime.JoinJoining {
		t.Fatalf("JoinState while paused = %s, want joining", got)
	}
	if err := ts.LastJoinError(); !errors.Is(err, broker.ErrUnavailable) || !strings.Contains(err.Error(), "timeout") {
		t.Fatalf("LastJoinError while paused = %v, want broker.ErrUnavailable with a timeout", err)
	}

	if err := srv.Resume(); err != nil {
		t.Fatal(err)
	}
	paused = false
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	if err := ts.AwaitStarted(ctx); err != nil {
		t.Fatalf("AwaitStarted once the server is back: %v (last join error %v)", err, ts.LastJoinError())
	}
	aggs := aggNames(6)
	e.produce(aggs, 1, 5)
	waitFor(t, 10*time.Second, "records handled", func() bool { return rec.complete(topicSub, aggs, 5) })
	waitFor(t, 5*time.Second, "the node's status record to list the held partitions", func() bool {
		st := node.Status()
		return len(st.Held) == 3 && st.JoinState == runtime.JoinJoined
	})
}

// closedPort is a loopback address nothing listens on.
func closedPort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	_ = l.Close()
	return addr
}
