package bench

import (
	"context"
	"fmt"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/protctl/protctl/internal/testenv"
	"github.com/protctl/protctl/pkg/broker/redisbroker"
	"github.com/protctl/protctl/pkg/runtime"
	"github.com/protctl/protctl/pkg/runtime/kafkasource"
	"github.com/protctl/protctl/pkg/runtime/redisstore"
	"github.com/protctl/protctl/pkg/runtime/topic"
)

const (
	hTopic   = "bench.handoff"
	hRecords = 2000
	hAggs    = 100
	hLanes   = 16
	hHandler = 100 * time.Millisecond
)

// BenchmarkTopicHandoff: how long a node takes to hand a partition back
// (Node.Stop, whose partitions hand off as on a rebalance) while its
// handlers are slow: one partition of 2,000 records on 100 aggregates,
// 16 lanes, every handler call 100ms (a sleep), the default
// HandoffTimeout (10s). The stop begins once all 16 lanes are inside a
// handler, with the rest of the fetched records queued in the lanes.
// The baseline, measured in the same run, is one handler call (the
// least a handoff that lets running calls finish must wait). Metrics:
// handler_ms (the baseline), handoff_ms, ratio (handoff over handler),
// calls per handoff (handler calls started from the node's start to the
// end of its stop) and after_stop (calls started after Stop was called).
// Leases and checkpoints on a real redis-server, kfake for Kafka.
func BenchmarkTopicHandoff(b *testing.B) {
	k := testenv.StartKafka(b, 1, hTopic)
	cl := k.Client(b)
	recs := make([]*kgo.Record, 0, hRecords)
	for i := 0; i < hRecords; i++ {
		agg := "agg-" + strconv.Itoa(i%hAggs)
		recs = append(recs, &kgo.Record{Topic: hTopic, Partition: 0, Key: []byte(agg), Value: []byte(`{"n":` + strconv.Itoa(i) + `}`),
			Headers: []kgo.RecordHeader{{Key: "id", Value: []byte(agg + "-" + strconv.Itoa(i))}}})
	}
	k.Produce(b, cl, recs...)
	r := testenv.StartRedis(b)
	c := r.Client(b)
	src, err := kafkasource.New(k.Brokers)
	if err != nil {
		b.Fatal(err)
	}
	defer src.Close()
	store := redisstore.New(c)
	leases := redisbroker.New(c)
	var handlerTotal, handoffTotal time.Duration
	var calls, afterStop int64
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		s := time.Now()
		time.Sleep(hHandler)
		handlerTotal += time.Since(s)

		var inside, started atomic.Int64
		var stopAt atomic.Int64 // UnixNano when Stop was called; 0 before
		var after atomic.Int64
		ts, err := topic.New(topic.Config{
			Topic: hTopic,
			Subscriptions: []topic.Subscription{{Name: "bench.h" + strconv.Itoa(i),
				Handler: runtime.HandlerFunc(func(ctx context.Context, m runtime.Message) error {
					started.Add(1)
					if stopAt.Load() != 0 {
						after.Add(1)
					}
					inside.Add(1)
					defer inside.Add(-1)
					select {
					case <-time.After(hHandler):
					case <-ctx.Done():
					}
					return nil
				})}},
			Source:      topic.Kafka(src),
			Leases:      leases,
			Checkpoints: store,
			Ledger:      store,
			StartFrom:   kafkasource.FromEarliest,
			Lanes:       hLanes,
		})
		if err != nil {
			b.Fatal(err)
		}
		node, err := runtime.NewNode(runtime.NodeConfig{Service: "bench", NodeID: "n1", Membership: store}, ts)
		if err != nil {
			b.Fatal(err)
		}
		if err := node.Start(context.Background()); err != nil {
			b.Fatal(err)
		}
		testenv.EventuallyEvery(b, time.Minute, time.Millisecond, "every lane inside a handler", func() (bool, string) {
			n := inside.Load()
			return n >= hLanes, fmt.Sprintf("%d of %d lanes inside a handler", n, hLanes)
		})
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		s = time.Now()
		stopAt.Store(s.UnixNano())
		if err := node.Stop(ctx); err != nil {
			b.Fatal(err)
		}
		handoffTotal += time.Since(s)
		cancel()
		calls += started.Load()
		afterStop += after.Load()
	}
	b.StopTimer()
	n := float64(b.N)
	b.ReportMetric(float64(handlerTotal.Milliseconds())/n, "handler_ms")
	b.ReportMetric(float64(handoffTotal.Milliseconds())/n, "handoff_ms")
	b.ReportMetric(handoffTotal.Seconds()/handlerTotal.Seconds(), "ratio")
	b.ReportMetric(float64(calls)/n, "calls")
	b.ReportMetric(float64(afterStop)/n, "after_stop")
	b.ReportMetric(0, "ns/op")
}
