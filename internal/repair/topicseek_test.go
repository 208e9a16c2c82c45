package repair_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/protctl/protctl/internal/repair"
	"github.com/protctl/protctl/internal/testenv"
	"github.com/protctl/protctl/pkg/broker/redisbroker"
	"github.com/protctl/protctl/pkg/runtime"
	"github.com/protctl/protctl/pkg/runtime/clock"
	"github.com/protctl/protctl/pkg/runtime/kafkasource"
	"github.com/protctl/protctl/pkg/runtime/redisstore"
	"github.com/protctl/protctl/pkg/runtime/topic"
)

// seekHost is a one-node Host.
type seekHost struct{ changed chan struct{} }

func (h seekHost) Service() string                      { return "shop" }
func (h seekHost) NodeID() string                       { return "n1" }
func (h seekHost) Clock() clock.Clock                   { return clock.System() }
func (h seekHost) Logger() *slog.Logger                 { return slog.New(slog.NewTextHandler(io.Discard, nil)) }
func (h seekHost) Observer() *runtime.Observer          { return nil }
func (h seekHost) Members() ([]string, <-chan struct{}) { return []string{"n1"}, h.changed }
func (h seekHost) Fail(string, error)                   {}

// TestTopicSeekPlanAppliedByTheRunningOwner: a plan for a partition a
// running node holds is carried out by that node online (the apply waits
// for its answer): the partition's records from the target are handled
// once more, in order, none dropped by dedup, no two calls of an
// aggregate at once, the other partitions untouched, the node running on.
func TestTopicSeekPlanAppliedByTheRunningOwner(t *testing.T) {
	ctx := context.Background()
	k := testenv.StartKafka(t, 3, "orders")
	kc := k.Client(t)
	srv := testenv.StartRedis(t)
	c := srv.Client(t)
	store := redisstore.New(c)
	src, err := kafkasource.New(k.Brokers, kafkasource.WithFetchMaxWait(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(src.Close)

	var mu sync.Mutex
	handled := map[string][]int{}
	var overlap atomic.Int32
	inside := map[string]*atomic.Int32{}
	h := runtime.HandlerFunc(func(ctx context.Context, m runtime.Message) error {
		mu.Lock()
		in := inside[m.Aggregate]
		if in == nil {
			in = new(atomic.Int32)
			inside[m.Aggregate] = in
		}
		mu.Unlock()
		if in.Add(1) > 1 {
			overlap.Add(1)
		}
		defer in.Add(-1)
		seq, _ := strconv.Atoi(m.Headers.Get("seq"))
		mu.Lock()
		handled[m.Aggregate] = append(handled[m.Aggregate], seq)
		mu.Unlock()
		return nil
	})
	g := redisstore.TopicLeaseGroup("shop", "orders")
	ts, err := topic.New(topic.Config{
		Topic: "orders", Subscriptions: []topic.Subscription{{Name: "ledger", Handler: h}},
		Source: topic.Kafka(src), Leases: redisbroker.New(c), Checkpoints: store, Ledger: store,
		LeaseTTL: 2 * time.Second, RenewEvery: 300 * time.Millisecond, CheckpointEvery: 100 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := ts.Start(ctx, seekHost{changed: make(chan struct{})}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		sctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		_ = ts.Stop(sctx)
	})

	const n = 30
	aggs := []string{"a0", "a1", "a2", "a3", "a4", "a5"}
	part := func(a string) int32 { i, _ := strconv.Atoi(a[1:]); return int32(i % 3) }
	var recs []*kgo.Record
	for s := 1; s <= n; s++ {
		for _, a := range aggs {
			recs = append(recs, &kgo.Record{Topic: "orders", Partition: part(a), Key: []byte(a), Value: []byte("{}"),
				Headers: []kgo.RecordHeader{{Key: "id", Value: []byte(fmt.Sprintf("%s-%d", a, s))}, {Key: "seq", Value: []byte(strconv.Itoa(s))}}})
		}
	}
	k.Produce(t, kc, recs...)
	count := func(want func(a string) int) (bool, string) {
		mu.Lock()
		defer mu.Unlock()
		for _, a := range aggs {
			if len(handled[a]) < want(a) {
				return false, fmt.Sprintf("%s handled %d of %d", a, len(handled[a]), want(a))
			}
		}
		return true, ""
	}
	testenv.Eventually(t, 20*time.Second, "every record handled", func() (bool, string) { return count(func(string) int { return n }) })
	testenv.Eventually(t, 10*time.Second, "partition 0 checkpointed at its head", func() (bool, string) {
		v, _ := c.HGet(ctx, g.CheckpointsKey("ledger"), "0").Result()
		return v == strconv.Itoa(2*n), "checkpoint " + v
	})

	r := repair.New(c, redisbroker.New(c))
	to, err := repair.ParseTopicSeekTo("--to", "earliest", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	p, err := r.PlanTopicSeek(ctx, repair.TopicSeekRequest{Service: "shop", Topic: "orders", Subscription: "ledger",
		Partitions: []int32{0}, To: to, Kafka: src, By: "test"})
	if err != nil {
		t.Fatal(err)
	}
	it := p.Items[0]
	if !it.Allowed || it.Precondition.Lease == nil || !strings.HasPrefix(*it.Precondition.Lease, "n1:") || it.Precondition.TopicSeek.HandledAgain != 2*n {
		t.Fatalf("item %+v", it)
	}
	out, err := r.Apply(ctx, p, repair.ApplyOptions{SeekWait: 20 * time.Second})
	if err != nil || out != repair.OutcomeApplied {
		t.Fatalf("apply: %v, %v: %+v", out, err, p.Items[0])
	}
	if d := p.Items[0].Detail; !strings.Contains(d, "online") || !strings.Contains(d, "-> 0") {
		t.Fatalf("detail %q", d)
	}
	twice := func(a string) int {
		if part(a) == 0 {
			return 2 * n
		}
		return n
	}
	testenv.Eventually(t, 20*time.Second, "partition 0 handled again", func() (bool, string) { return count(twice) })
	testenv.Eventually(t, 10*time.Second, "partition 0 checkpointed at its head again", func() (bool, string) {
		v, _ := c.HGet(ctx, g.CheckpointsKey("ledger"), "0").Result()
		return v == strconv.Itoa(2*n), "checkpoint " + v
	})
	mu.Lock()
	defer mu.Unlock()
	once := make([]int, 0, n)
	for s := 1; s <= n; s++ {
		once = append(once, s)
	}
	for _, a := range aggs {
		want := once
		if part(a) == 0 {
			want = append(slices.Clone(once), once...)
		}
		if !slices.Equal(handled[a], want) {
			t.Errorf("%s handled %v, want %v", a, handled[a], want)
		}
	}
	if overlap.Load() > 0 {
		t.Errorf("%d overlapping calls of one aggregate", overlap.Load())
	}
	if d := ts.Subscription("ledger").Counters()["duplicates"]; d != 0 {
		t.Errorf("%d records dropped as duplicates", d)
	}
}
