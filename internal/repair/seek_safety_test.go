package repair_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/protctl/protctl/internal/clierr"
	"github.com/protctl/protctl/internal/repair"
	"github.com/protctl/protctl/internal/testenv"
	"github.com/protctl/protctl/pkg/broker"
	"github.com/protctl/protctl/pkg/broker/redisbroker"
	"github.com/protctl/protctl/pkg/runtime"
	"github.com/protctl/protctl/pkg/runtime/ledger"
	"github.com/protctl/protctl/pkg/runtime/partitioned"
	"github.com/protctl/protctl/pkg/runtime/redisstore"
	"github.com/protctl/protctl/pkg/runtime/source"
)

// A partition parked in the failure ledger is refused by the plan (exit
// 6, nothing changed) unless --force; one parked after the plan is a
// conflict (exit 5) at apply.
func TestSeekParkedPartitionRefusedWithoutForce(t *testing.T) {
	ctx, c, _ := seekEnv(t, 10, 10)
	l := broker.ProteanLayout
	store := redisstore.New(c)
	r := repair.New(c, redisbroker.New(c), repair.WithLedger(store))
	park := func() {
		t.Helper()
		c.Set(ctx, l.LeaseKey(seekGroup, "k1"), "node-1:1", 0)
		f := broker.Fence{LeaseKey: l.LeaseKey(seekGroup, "k1"), Token: "node-1:1"}
		if err := store.Park(ctx, f, ledger.Parked{Subscription: seekGroup, Source: source.Redis, Aggregate: "k1",
			Category: seekCat, Partition: "k1", Position: "4-0", Error: "boom", Attempts: 3}); err != nil {
			t.Fatal(err)
		}
		c.Del(ctx, l.LeaseKey(seekGroup, "k1"))
	}
	req := repair.SeekRequest{Category: seekCat, Group: seekGroup, Target: repair.SeekTarget{Kind: repair.SeekToEarliest}}

	// Parked after the plan: conflict.
	p, err := r.PlanSeek(ctx, req)
	if it := one(t, p, err); !it.Allowed {
		t.Fatalf("not allowed before parking: %+v", it)
	}
	park()
	if o, err := r.Apply(ctx, p, repair.ApplyOptions{}); err != nil || o != repair.OutcomeConflict || o.ExitCode() != clierr.ExitConflict {
		t.Fatalf("apply after a park: %v %v, want conflict (exit 5): %+v", o, err, p.Items)
	}
	if got := deliveries(t, ctx, c); len(got) != 0 {
		t.Fatalf("the group moved: handed %v", got)
	}

	p, err = r.PlanSeek(ctx, req)
	it := one(t, p, err)
	if it.Allowed || !strings.Contains(it.Reason, "parked") || !strings.Contains(it.Reason, "retry or skip it first") {
		t.Fatalf("a parked partition was not refused clearly: %+v", it)
	}
	if o, _ := r.Apply(ctx, p, repair.ApplyOptions{}); o != repair.OutcomeRefused || o.ExitCode() != clierr.ExitRefused {
		t.Fatalf("apply: %v, want refused (exit 6)", o)
	}
	if got := deliveries(t, ctx, c); len(got) != 0 {
		t.Fatalf("a refused seek moved the group: handed %v", got)
	}
	req.Force = true
	p, err = r.PlanSeek(ctx, req)
	if it := one(t, p, err); !it.Allowed {
		t.Fatalf("--force not allowed: %+v", it)
	}
	if o, err := r.Apply(ctx, p, repair.ApplyOptions{}); err != nil || o != repair.OutcomeApplied {
		t.Fatalf("forced apply: %v %v %+v", o, err, p.Items)
	}
}

// protctlOwned makes node-1 a known protctl node holding k1's lease that
// never carries a seek out (no node runs).
func protctlOwned(t *testing.T, ctx context.Context, c *redis.Client) {
	t.Helper()
	l := broker.ProteanLayout
	c.Set(ctx, l.LeaseKey(seekGroup, "k1"), "node-1:1", time.Minute)
	c.Set(ctx, "protctl:{shop}:node:node-1", "{}", time.Minute)
}

// Ctrl-C during --wait (ctx cancelled) withdraws the request: nothing is
// left for the owner to carry out later, unreported, and nothing for the
// nodes to be signalled about.
func TestSeekInterruptedWaitWithdrawsTheRequest(t *testing.T) {
	ctx, c, r := seekEnv(t, 10, 10)
	protctlOwned(t, ctx, c)
	l := broker.ProteanLayout
	p, err := r.PlanSeek(ctx, repair.SeekRequest{Category: seekCat, Group: seekGroup, Target: repair.SeekTarget{Kind: repair.SeekToEarliest}})
	if it := one(t, p, err); !it.Allowed || it.Precondition.Seek.Owner != repair.SeekOwnerProtctl {
		t.Fatalf("not planned as node-1's: %+v", it)
	}
	reqKey := redisbroker.SeekRequestKey(l, seekGroup, "k1")
	actx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		// The operator presses Ctrl-C once the request is recorded.
		for c.Exists(ctx, reqKey).Val() == 0 && actx.Err() == nil {
			time.Sleep(5 * time.Millisecond)
		}
		cancel()
	}()
	_, err = r.Apply(actx, p, repair.ApplyOptions{SeekWait: time.Hour})
	wg.Wait()
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("apply: %v, want context.Canceled", err)
	}
	if n := c.Exists(ctx, reqKey).Val(); n != 0 {
		t.Fatalf("the request is still there after Ctrl-C: %v", c.HGetAll(ctx, reqKey).Val())
	}
	if m := c.SMembers(ctx, redisbroker.SeekRequestsKey(seekGroup)).Val(); len(m) != 0 {
		t.Fatalf("the seeks set still lists %v", m)
	}
	if got := deliveries(t, ctx, c); len(got) != 0 {
		t.Fatalf("the group moved: handed %v", got)
	}
}

// dropPublish is a go-redis hook that swallows PUBLISH: the signal is
// lost.
type dropPublish struct{}

func (dropPublish) DialHook(next redis.DialHook) redis.DialHook { return next }
func (dropPublish) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if cmd.Name() == "publish" {
			return nil
		}
		return next(ctx, cmd)
	}
}
func (dropPublish) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// A free rewind of a partition an idle node watches is handled again
// even when its Pub/Sub wake-up is lost: the node re-reads the seeks set
// every renewal period.
func TestSeekFreeRewindReachesAnIdleNodeWithoutItsSignal(t *testing.T) {
	ctx := context.Background()
	srv := testenv.StartRedis(t)
	c := srv.Client(t)
	b := redisbroker.New(c)
	store := redisstore.New(c)
	var mu sync.Mutex
	var handled []string
	sub, err := partitioned.New(partitioned.Config{
		Name: seekGroup, Categories: []string{seekCat}, Broker: b, Ledger: store,
		LeaseTTL: 2 * time.Second, RenewEvery: 200 * time.Millisecond, IdleAfter: 100 * time.Millisecond,
		Handler: runtime.HandlerFunc(func(ctx context.Context, m runtime.Message) error {
			mu.Lock()
			handled = append(handled, m.Position)
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
	var published []string
	for i := 0; i < 5; i++ {
		id, err := pub.Publish(ctx, seekCat, "k1", fmt.Appendf(nil, `{"data":{"n":%d}}`, i))
		if err != nil {
			t.Fatal(err)
		}
		published = append(published, id)
	}
	l := broker.ProteanLayout
	testenv.Eventually(t, 30*time.Second, "the 5 entries handled and the partition idle (lease released)", func() (bool, string) {
		mu.Lock()
		n := len(handled)
		mu.Unlock()
		return n == 5 && c.Exists(ctx, l.LeaseKey(seekGroup, "k1")).Val() == 0, fmt.Sprint(n)
	})

	// The operator's client loses every PUBLISH.
	oc := srv.Client(t)
	oc.AddHook(dropPublish{})
	r := repair.New(oc, redisbroker.New(oc))
	p, err := r.PlanSeek(ctx, repair.SeekRequest{Category: seekCat, Group: seekGroup, Target: repair.SeekTarget{Kind: repair.SeekToEarliest}})
	if it := one(t, p, err); !it.Allowed || it.Precondition.Seek.Owner != repair.SeekOwnerNone {
		t.Fatalf("not planned as a free seek: %+v", it)
	}
	if o, err := r.Apply(ctx, p, repair.ApplyOptions{}); err != nil || o != repair.OutcomeApplied {
		t.Fatalf("apply: %v %v %+v", o, err, p.Items)
	}
	want := append(slices.Clone(published), published...)
	testenv.Eventually(t, 30*time.Second, "the rewound entries handled again", func() (bool, string) {
		mu.Lock()
		defer mu.Unlock()
		return slices.Equal(handled, want), fmt.Sprint(handled)
	})
}

// lostSeekReply is the Redis broker whose seek requests are recorded but
// whose replies are lost, as when Ctrl-C cancels the call after the
// server ran it.
type lostSeekReply struct{ *redisbroker.Broker }

func (b lostSeekReply) RequestSeek(ctx context.Context, group, key string, req redisbroker.SeekRequest) (string, string, error) {
	if _, _, err := b.Broker.RequestSeek(context.WithoutCancel(ctx), group, key, req); err != nil {
		return "", "", err
	}
	return "", "", context.Canceled
}

// A request the server recorded but whose reply never came back (the
// operator's Ctrl-C landing during the call) is withdrawn like an
// interrupted wait: before, the failed call returned at once and left
// the request for the owner to carry out later, unreported
// (TestSeekInterruptedWaitWithdrawsTheRequest failed so, now and then).
func TestSeekRequestWithALostReplyIsWithdrawn(t *testing.T) {
	ctx, c, _ := seekEnv(t, 10, 10)
	r := repair.New(c, lostSeekReply{redisbroker.New(c)})
	protctlOwned(t, ctx, c)
	p, err := r.PlanSeek(ctx, repair.SeekRequest{Category: seekCat, Group: seekGroup, Target: repair.SeekTarget{Kind: repair.SeekToEarliest}})
	if it := one(t, p, err); !it.Allowed {
		t.Fatalf("not planned: %+v", it)
	}
	if _, err := r.Apply(ctx, p, repair.ApplyOptions{SeekWait: time.Hour}); !errors.Is(err, context.Canceled) {
		t.Fatalf("apply: %v, want context.Canceled", err)
	}
	if n := c.Exists(ctx, redisbroker.SeekRequestKey(broker.ProteanLayout, seekGroup, "k1")).Val(); n != 0 {
		t.Fatal("the request whose reply was lost is still there")
	}
	if m := c.SMembers(ctx, redisbroker.SeekRequestsKey(seekGroup)).Val(); len(m) != 0 {
		t.Fatalf("the seeks set still lists %v", m)
	}
}
