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
	"github.com/protctl/protctl/pkg/broker"
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

// TestTopicSeekUnansweredIsWithdrawn: the partition's lease is held but
// no owner answers (it stopped, or a handler is stuck). The apply waits,
// withdraws the request and reports a conflict: nothing changed, no
// request left behind for the owner to carry out later. A resumed apply
// of the plan requests again and withdraws again.
func TestTopicSeekUnansweredIsWithdrawn(t *testing.T) {
	ctx := context.Background()
	k := testenv.StartKafka(t, 1, "orders")
	kc := k.Client(t)
	c := testenv.StartRedis(t).Client(t)
	src, err := kafkasource.New(k.Brokers, kafkasource.WithFetchMaxWait(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(src.Close)
	var recs []*kgo.Record
	for i := range 10 {
		recs = append(recs, &kgo.Record{Topic: "orders", Partition: 0, Key: []byte("a"), Value: []byte(strconv.Itoa(i))})
	}
	k.Produce(t, kc, recs...)
	g := redisstore.TopicLeaseGroup("shop", "orders")
	if err := c.Set(ctx, g.LeaseKey(0), "gone:4", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	if err := c.HSet(ctx, g.CheckpointsKey("ledger"), "0", 8).Err(); err != nil {
		t.Fatal(err)
	}
	r := repair.New(c, redisbroker.New(c))
	to, _ := repair.ParseTopicSeekTo("--to", "earliest", time.Now())
	p, err := r.PlanTopicSeek(ctx, repair.TopicSeekRequest{Service: "shop", Topic: "orders", Subscription: "ledger", To: to, Kafka: src, By: "test"})
	if err != nil {
		t.Fatal(err)
	}
	store := redisstore.New(c)
	for run := range 2 {
		out, err := r.Apply(ctx, p, repair.ApplyOptions{SeekWait: 300 * time.Millisecond})
		if err != nil || out != repair.OutcomeConflict {
			t.Fatalf("run %d: apply %v, %v, want a conflict: %+v", run, out, err, p.Items[0])
		}
		if it := p.Items[0]; it.Result != repair.ResultConflict || !strings.Contains(it.Detail, "withdrawn, nothing changed") {
			t.Fatalf("run %d: item %s %q", run, it.Result, it.Detail)
		}
		if pend, err := store.PendingSeeks(ctx, g.String(), "ledger"); err != nil || len(pend) != 0 {
			t.Fatalf("run %d: request left behind: %v %v", run, pend, err)
		}
		if v := c.HGet(ctx, g.CheckpointsKey("ledger"), "0").Val(); v != "8" {
			t.Fatalf("run %d: checkpoint %s, want 8", run, v)
		}
	}
	// The request stands while the apply waits, and expires if the
	// requester goes away: its hash has a TTL.
	id := p.ID + "-ledger-0"
	seen := int64(8)
	if now, err := store.RequestSeek(ctx, g, "ledger", 0, runtime.SeekRequest{ID: id, Next: 0, From: &seen, Lease: "gone:4"}, time.Minute); err != nil || now != "" {
		t.Fatalf("request: %q %v", now, err)
	}
	if ttl := c.PTTL(ctx, g.SeeksKey("ledger")).Val(); ttl <= 0 {
		t.Fatalf("requests hash TTL %v, want one", ttl)
	}
}

// TestTopicSeekResumedApplyIsDone: a plan applied once and applied again
// (apply -f resumed after an interruption) reports its items done by the
// earlier run and seeks nothing a second time: on a held partition the
// owner's answer with the item's id is found and no request is recorded;
// on a free partition the checkpoint already at the target is done, not
// a conflict.
func TestTopicSeekResumedApplyIsDone(t *testing.T) {
	ctx := context.Background()
	k := testenv.StartKafka(t, 2, "orders")
	kc := k.Client(t)
	c := testenv.StartRedis(t).Client(t)
	src, err := kafkasource.New(k.Brokers, kafkasource.WithFetchMaxWait(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(src.Close)
	var recs []*kgo.Record
	for p := range int32(2) {
		for i := range 10 {
			recs = append(recs, &kgo.Record{Topic: "orders", Partition: p, Key: []byte("a"), Value: []byte(strconv.Itoa(i))})
		}
	}
	k.Produce(t, kc, recs...)
	g := redisstore.TopicLeaseGroup("shop", "orders")
	const token = "n1:4"
	if err := c.Set(ctx, g.LeaseKey(0), token, time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"0", "1"} {
		if err := c.HSet(ctx, g.CheckpointsKey("ledger"), p, 8).Err(); err != nil {
			t.Fatal(err)
		}
	}
	r := repair.New(c, redisbroker.New(c))
	to, _ := repair.ParseTopicSeekTo("--to", "2", time.Now())
	p, err := r.PlanTopicSeek(ctx, repair.TopicSeekRequest{Service: "shop", Topic: "orders", Subscription: "ledger", To: to, Kafka: src, By: "test"})
	if err != nil {
		t.Fatal(err)
	}
	store := redisstore.New(c)
	f := broker.Fence{LeaseKey: g.LeaseKey(0), Token: token}
	// The owner of partition 0: answers the first request it finds.
	answered := make(chan runtime.SeekRequest, 1)
	octx, stop := context.WithCancel(ctx)
	defer stop()
	go func() {
		for octx.Err() == nil {
			reqs, err := store.PendingSeeks(octx, g.String(), "ledger")
			if req, ok := reqs[0]; err == nil && ok {
				ok, err := store.CompleteSeek(octx, f, g.String(), "ledger", 0, runtime.SeekResult{ID: req.ID, Status: runtime.SeekDone, From: 8, Next: req.Next, Lease: token, AtMs: time.Now().UnixMilli()})
				if err == nil && ok {
					answered <- req
					return
				}
			}
			time.Sleep(10 * time.Millisecond)
		}
	}()
	out, err := r.Apply(ctx, p, repair.ApplyOptions{SeekWait: 20 * time.Second})
	if err != nil || out != repair.OutcomeApplied {
		t.Fatalf("apply: %v, %v: %+v", out, err, p.Items)
	}
	req := <-answered
	if req.From == nil || *req.From != 8 || req.Forward() {
		t.Fatalf("request %+v: want From 8, a rewind", req)
	}
	for _, it := range p.Items {
		if it.Result != repair.ResultApplied {
			t.Fatalf("first run: %s %s %q", it.Target.Partition, it.Result, it.Detail)
		}
	}
	stop()

	out, err = r.Apply(ctx, p, repair.ApplyOptions{SeekWait: 300 * time.Millisecond})
	if err != nil || out != repair.OutcomeApplied {
		t.Fatalf("resumed apply: %v, %v: %+v", out, err, p.Items)
	}
	for _, it := range p.Items {
		if it.Result != repair.ResultDone {
			t.Errorf("resumed run: partition %s %s %q, want done", it.Target.Partition, it.Result, it.Detail)
		}
	}
	if pend, err := store.PendingSeeks(ctx, g.String(), "ledger"); err != nil || len(pend) != 0 {
		t.Fatalf("the resumed run requested again: %v %v", pend, err)
	}
}
