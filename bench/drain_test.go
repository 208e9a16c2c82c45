package bench

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/protctl/protctl/internal/testenv"
	"github.com/protctl/protctl/pkg/broker/redisbroker"
	"github.com/protctl/protctl/pkg/runtime"
	"github.com/protctl/protctl/pkg/runtime/kafkasource"
	"github.com/protctl/protctl/pkg/runtime/placement"
	"github.com/protctl/protctl/pkg/runtime/redisstore"
	"github.com/protctl/protctl/pkg/runtime/topic"
)

// BenchmarkDrain1000 compares, in the same run, the two ways to take
// 1,000 Kafka topic partitions (kfake; leases and checkpoints on a real
// redis-server) off a node: SIGTERM's graceful stop (Node.Stop: hand off,
// release, leave the membership) and `nodes drain` (the node's stored
// mode; it hands off and keeps running). Each is timed from the operator's
// action to the moment the peer holds all 1,000 partitions and the node
// none. The peer is cordoned while the node takes the partitions, so that
// the node holds them all, and uncordoned in the same instant the node is
// stopped or drained. Heartbeat 1s, lease TTL 5s, renewal 1s.
// Metrics: stop_ms and drain_ms per op, ratio (drain over stop).
func BenchmarkDrain1000(b *testing.B) {
	const (
		topicName  = "bench.drain"
		partitions = 1000
		service    = "bench"
	)
	k := testenv.StartKafka(b, partitions, topicName)
	r := testenv.StartRedis(b)
	c := r.Client(b)
	store := redisstore.New(c)
	ctx := context.Background()
	start := func(id string) (*runtime.Node, *topic.Consumer) {
		src, err := kafkasource.New(k.Brokers)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(src.Close)
		ts, err := topic.New(topic.Config{
			Topic: topicName,
			Subscriptions: []topic.Subscription{{Name: "bench.sync",
				Handler: runtime.HandlerFunc(func(context.Context, runtime.Message) error { return nil })}},
			Source: topic.Kafka(src), Leases: redisbroker.New(c),
			Checkpoints: store, Ledger: store, LeaseTTL: 5 * time.Second, RenewEvery: time.Second,
		})
		if err != nil {
			b.Fatal(err)
		}
		n, err := runtime.NewNode(runtime.NodeConfig{Service: service, NodeID: id, Membership: store,
			HeartbeatEvery: time.Second, MemberTTL: 4 * time.Second}, ts)
		if err != nil {
			b.Fatal(err)
		}
		if err := n.Start(ctx); err != nil {
			b.Fatal(err)
		}
		return n, ts
	}
	setMode := func(node string, mode placement.Mode) {
		modes, _, err := store.RawPlacement(ctx, service)
		if err != nil {
			b.Fatal(err)
		}
		var seen *string
		if raw, ok := modes[node]; ok {
			seen = &raw
		}
		var rec *placement.ModeRecord
		if mode != placement.Active {
			rec = &placement.ModeRecord{Mode: mode, At: time.Now()}
		}
		if err := store.CASNodeMode(ctx, service, node, seen, rec); err != nil {
			b.Fatal(err)
		}
	}
	waitHeld := func(what string, ts *topic.Consumer, n int) {
		testenv.Eventually(b, 5*time.Minute, what, func() (bool, string) {
			got := len(ts.Held())
			return got == n, what + ": held " + strconv.Itoa(got)
		})
	}
	var stopTotal, drainTotal time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		if err := c.FlushAll(ctx).Err(); err != nil {
			b.Fatal(err)
		}
		// The node takes everything while its peer is cordoned.
		setMode("peer", placement.Cordoned)
		node, nodeTS := start("node")
		peer, peerTS := start("peer")
		waitHeld("node joined", nodeTS, partitions)
		b.StartTimer()

		// SIGTERM: the node stops; the peer is uncordoned.
		t0 := time.Now()
		setMode("peer", placement.Active)
		sctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		if err := node.Stop(sctx); err != nil {
			b.Fatal(err)
		}
		cancel()
		waitHeld("peer took over after the stop", peerTS, partitions)
		stopTotal += time.Since(t0)

		// Drain: a fresh node cordoned, then drain the peer and
		// uncordon the new node at once.
		b.StopTimer()
		setMode("node2", placement.Cordoned)
		node2, node2TS := start("node2")
		testenv.Eventually(b, time.Minute, "node2 joined", func() (bool, string) {
			m, _ := store.Members(ctx, service)
			return len(m) == 2, "members " + strconv.Itoa(len(m))
		})
		b.StartTimer()
		t0 = time.Now()
		setMode("peer", placement.Draining)
		setMode("node2", placement.Active)
		waitHeld("node2 took over after the drain", node2TS, partitions)
		waitHeld("peer drained", peerTS, 0)
		drainTotal += time.Since(t0)
		b.StopTimer()
		for _, n := range []*runtime.Node{peer, node2} {
			sctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
			if err := n.Stop(sctx); err != nil {
				b.Fatal(err)
			}
			cancel()
		}
		b.StartTimer()
	}
	b.StopTimer()
	n := float64(b.N)
	b.ReportMetric(float64(stopTotal.Milliseconds())/n, "stop_ms")
	b.ReportMetric(float64(drainTotal.Milliseconds())/n, "drain_ms")
	b.ReportMetric(drainTotal.Seconds()/stopTotal.Seconds(), "ratio")
	b.ReportMetric(0, "ns/op")
}
