package redisbroker_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/protctl/protctl/internal/testenv"
	"github.com/protctl/protctl/pkg/broker"
	"github.com/protctl/protctl/pkg/broker/redisbroker"
)

// waitLog records the hook's WAITs.
type waitLog struct {
	mu    sync.Mutex
	waits []redisbroker.ReplicaWait
}

func (l *waitLog) hook(w redisbroker.ReplicaWait) {
	l.mu.Lock()
	l.waits = append(l.waits, w)
	l.mu.Unlock()
}

func (l *waitLog) ops() map[string][2]int {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := map[string][2]int{}
	for _, w := range l.waits {
		c := out[w.Op]
		c[0]++
		if w.Acked >= w.Want && w.Err == nil {
			c[1]++
		}
		out[w.Op] = c
	}
	return out
}

// Every lease and publish write returns only once the replica holds it:
// read from the replica right after each call, it is there.
func TestReplicasAcknowledgedWritesAreOnTheReplica(t *testing.T) {
	primary := testenv.StartRedis(t)
	replica := testenv.StartReplica(t, primary)
	rc := replica.Client(t)
	var log waitLog
	r := redisbroker.Replicas{N: 1, Timeout: 10 * time.Second}
	b := redisbroker.New(primary.Client(t), redisbroker.WithLeaseReplicas(r), redisbroker.WithPublishReplicas(r), redisbroker.WithReplicaHook(log.hook))
	ctx := t.Context()

	onReplica := func(what, k, want string) {
		t.Helper()
		got, err := rc.Get(ctx, k).Result()
		if err != nil || got != want {
			t.Fatalf("%s: replica holds %q (%v) at %s right after the call, want %q", what, got, err, k, want)
		}
	}
	l, ok, err := b.AcquirePartitionLease(ctx, layout.LeaseKey(group, "k1"), layout.GenerationKey(group, "k1"), owner, 30*time.Second)
	if err != nil || !ok {
		t.Fatalf("acquire: %v %v", ok, err)
	}
	onReplica("acquire", l.LeaseKey, l.Token)

	g := b.AcquirePartitionLeases(ctx, []broker.LeaseRequest{{LeaseKey: layout.LeaseKey(group, "k2"), GenerationKey: layout.GenerationKey(group, "k2"), Owner: owner, TTL: 30 * time.Second}})[0]
	if g.Err != nil || !g.Acquired {
		t.Fatalf("batch acquire: %+v", g)
	}
	onReplica("batch acquire", g.Lease.LeaseKey, g.Lease.Token)

	pr, closeReader := b.PinnedReader()
	defer closeReader(context.Background())
	pl, ok, err := pr.(interface {
		AcquirePartitionLease(context.Context, string, string, string, time.Duration) (broker.Lease, bool, error)
	}).AcquirePartitionLease(ctx, layout.LeaseKey(group, "k3"), layout.GenerationKey(group, "k3"), owner, 30*time.Second)
	if err != nil || !ok {
		t.Fatalf("pinned acquire: %v %v", ok, err)
	}
	onReplica("pinned acquire", pl.LeaseKey, pl.Token)

	// A renewal to a longer TTL: the replica's TTL is the new one.
	if ok, err := b.RenewPartitionLease(ctx, l.Fence, time.Hour); err != nil || !ok {
		t.Fatalf("renew: %v %v", ok, err)
	}
	if oks, err := b.RenewPartitionLeases(ctx, []broker.Fence{g.Lease.Fence, pl.Fence}, time.Hour); err != nil || len(oks) != 2 || !oks[0] || !oks[1] {
		t.Fatalf("batch renew: %v %v", oks, err)
	}
	for _, k := range []string{l.LeaseKey, g.Lease.LeaseKey, pl.LeaseKey} {
		if ttl, err := rc.PTTL(ctx, k).Result(); err != nil || ttl < 30*time.Minute {
			t.Fatalf("replica's TTL of %s right after the renewal = %v (%v), want the renewed hour", k, ttl, err)
		}
	}

	id, err := b.PublishPartitioned(ctx, cat, key, "", []byte(`{"data":{}}`))
	if err != nil {
		t.Fatal(err)
	}
	if got, err := rc.XRange(ctx, layout.Stream(cat, key), id, id).Result(); err != nil || len(got) != 1 {
		t.Fatalf("publish: replica holds %v (%v) right after it, want entry %s", got, err, id)
	}
	aid, err := b.Append(ctx, "plain", []byte("x"))
	if err != nil {
		t.Fatal(err)
	}
	if got, err := rc.XRange(ctx, "plain", aid, aid).Result(); err != nil || len(got) != 1 {
		t.Fatalf("append: replica holds %v (%v) right after it, want entry %s", got, err, aid)
	}
	want := map[string][2]int{"acquire lease": {3, 3}, "renew lease": {2, 2}, "publish": {1, 1}, "append": {1, 1}}
	if got := log.ops(); len(got) != len(want) || got["acquire lease"] != want["acquire lease"] || got["renew lease"] != want["renew lease"] || got["publish"] != want["publish"] || got["append"] != want["append"] {
		t.Fatalf("hook saw (waits, acknowledged) per op %v, want %v", got, want)
	}
}

// A replica that does not answer (paused) fails every write that waits
// for it with broker.ErrNotReplicated; the hook sees each short WAIT;
// once it answers again, the writes go through.
func TestReplicasPausedReplicaFailsWrites(t *testing.T) {
	primary := testenv.StartRedis(t)
	replica := testenv.StartReplica(t, primary)
	pc := primary.Client(t)
	var log waitLog
	r := redisbroker.Replicas{N: 1, Timeout: 200 * time.Millisecond}
	b := redisbroker.New(pc, redisbroker.WithLeaseReplicas(r), redisbroker.WithPublishReplicas(r), redisbroker.WithReplicaHook(log.hook))
	ctx := t.Context()
	lk, gk := layout.LeaseKey(group, key), layout.GenerationKey(group, key)

	if err := replica.Pause(); err != nil {
		t.Fatal(err)
	}
	resumed := false
	defer func() {
		if !resumed {
			_ = replica.Resume()
		}
	}()
	_, ok, err := b.AcquirePartitionLease(ctx, lk, gk, owner, 30*time.Second)
	var nre *broker.NotReplicatedError
	if ok || !errors.As(err, &nre) || nre.Want != 1 || nre.Acked != 0 || nre.Timeout != r.Timeout {
		t.Fatalf("acquire with the replica paused: ok=%v err=%v, want a NotReplicatedError 0 of 1", ok, err)
	}
	if n, err := pc.Exists(ctx, lk).Result(); err != nil || n != 0 {
		t.Fatalf("the lease is held after an unreplicated acquisition (%d, %v)", n, err)
	}
	if _, err := b.PublishPartitioned(ctx, cat, key, "", []byte(`{"data":{}}`)); !errors.Is(err, broker.ErrNotReplicated) {
		t.Fatalf("publish with the replica paused: %v, want ErrNotReplicated", err)
	}
	if got := log.ops(); got["acquire lease"] != [2]int{1, 0} || got["publish"] != [2]int{1, 0} {
		t.Fatalf("hook saw %v, want one short WAIT each for acquire and publish", got)
	}

	if err := replica.Resume(); err != nil {
		t.Fatal(err)
	}
	resumed = true
	// The replica catches up (its link may need a moment): poll.
	deadline := time.Now().Add(time.Minute)
	for {
		l, ok, err := b.AcquirePartitionLease(ctx, lk, gk, owner, 30*time.Second)
		if err == nil && ok {
			if l.Generation < 2 {
				t.Fatalf("generation after an unreplicated acquisition = %d, want 2 or more", l.Generation)
			}
			break
		}
		if !errors.Is(err, broker.ErrNotReplicated) || time.Now().After(deadline) {
			t.Fatalf("acquire after the replica resumed: ok=%v err=%v", ok, err)
		}
	}
}
