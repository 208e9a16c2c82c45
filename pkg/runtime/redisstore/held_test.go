package redisstore_test

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/protctl/protctl/pkg/runtime"
	"github.com/protctl/protctl/pkg/runtime/redisstore"
	"github.com/protctl/protctl/pkg/runtime/source"
)

// argBytes is a go-redis hook that counts the bytes of the arguments the
// client sends, the way they go on the wire.
type argBytes struct{ n atomic.Int64 }

func (a *argBytes) DialHook(next redis.DialHook) redis.DialHook { return next }

func (a *argBytes) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		for _, arg := range cmd.Args() {
			a.n.Add(int64(len(fmt.Sprint(arg))))
		}
		return next(ctx, cmd)
	}
}

func (a *argBytes) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func manyHeld(n, gen int) []runtime.HeldPartition {
	out := make([]runtime.HeldPartition, n)
	for i := range out {
		out[i] = runtime.HeldPartition{Subscription: "sync", Source: source.Redis, Category: "order",
			Partition: fmt.Sprintf("order-%06d", i), Generation: int64(gen)}
	}
	return out
}

// A node's status record, which every node reads each heartbeat, does
// not grow with the partitions it holds; the list is its own record,
// sent again only when it changed, and sent again at once when it was
// lost while unchanged (decision 0051).
func TestHeldPartitionsAreARecordOfTheirOwn(t *testing.T) {
	server.FlushAll(t)
	ctx := context.Background()
	var sent argBytes
	c := server.Client(t)
	c.AddHook(&sent)
	s := redisstore.New(c)
	raw := server.Client(t)

	st := runtime.NodeStatus{Service: svc, Node: "node-a", JoinState: runtime.JoinJoined, Held: manyHeld(10_000, 1)}
	beat := func(what string) int64 {
		t.Helper()
		before := sent.n.Load()
		if err := s.Heartbeat(ctx, st, time.Minute); err != nil {
			t.Fatalf("heartbeat %s: %v", what, err)
		}
		return sent.n.Load() - before
	}
	first := beat("first")
	if n := raw.StrLen(ctx, redisstore.NodeKey(svc, "node-a")).Val(); n > 1024 {
		t.Fatalf("the status record of a node holding 10,000 partitions is %d bytes, want it small", n)
	}
	if n := raw.StrLen(ctx, redisstore.HeldKey(svc, "node-a")).Val(); n < 10_000*50 {
		t.Fatalf("the held record is %d bytes, want the 10,000 partitions", n)
	}
	if first < 10_000*50 {
		t.Fatalf("the first heartbeat sent %d bytes, want the list", first)
	}
	if same := beat("unchanged"); same > 2048 {
		t.Fatalf("a heartbeat with the same partitions sent %d bytes (the first %d), want only the status", same, first)
	}
	live, err := s.Live(ctx, svc)
	if err != nil || len(live) != 1 || live[0].Held != nil {
		t.Fatalf("live: %+v, %v: want node-a without its partitions", live, err)
	}
	if ttl := raw.PTTL(ctx, redisstore.HeldKey(svc, "node-a")).Val(); ttl <= 0 || ttl > time.Minute {
		t.Fatalf("held record ttl %v, want the heartbeat's", ttl)
	}

	// Lost while unchanged (a failover to a replica that missed it): the
	// same heartbeat stores it again.
	raw.Del(ctx, redisstore.HeldKey(svc, "node-a"))
	if again := beat("after the record was lost"); again < 10_000*50 {
		t.Fatalf("the heartbeat after the loss sent %d bytes, want the list again", again)
	}
	wantHeld(t, s, st.Held)

	// One generation changed: the list is sent again.
	st.Held = manyHeld(10_000, 1)
	st.Held[5000].Generation = 2
	if changed := beat("changed"); changed < 10_000*50 {
		t.Fatalf("a heartbeat with a changed list sent %d bytes, want the list", changed)
	}
	wantHeld(t, s, st.Held)

	// A heartbeat that failed (unknown whether it ran) sends the list
	// next time even if unchanged.
	cut, cancel := context.WithCancel(ctx)
	cancel()
	if err := s.Heartbeat(cut, st, time.Minute); err == nil {
		t.Fatal("a heartbeat with a cancelled context succeeded")
	}
	if after := beat("after a failed heartbeat"); after < 10_000*50 {
		t.Fatalf("the heartbeat after a failed one sent %d bytes, want the list", after)
	}
	wantHeld(t, s, st.Held)
}

// Only the record this Store wrote last is kept as it is: one a
// failover reverted to an older write, one something else overwrote (a
// corrupt value, another Store heartbeating the same node id) is written
// again by the next heartbeat, unchanged list or not; and keeping extends
// the record's TTL.
func TestKeptHeldRecordIsTheOneLastWritten(t *testing.T) {
	s, raw := newStore(t)
	ctx := context.Background()
	key := redisstore.HeldKey(svc, "node-a")
	st := runtime.NodeStatus{Service: svc, Node: "node-a"}
	beat := func(s *redisstore.Store, held []runtime.HeldPartition, ttl time.Duration) {
		t.Helper()
		st.Held = held
		if err := s.Heartbeat(ctx, st, ttl); err != nil {
			t.Fatal(err)
		}
	}
	three, five := manyHeld(3, 1), manyHeld(5, 1)

	beat(s, three, 2*time.Second)
	beat(s, three, time.Minute)
	if ttl := raw.PTTL(ctx, key).Val(); ttl <= 2*time.Second {
		t.Fatalf("held record ttl %v after an unchanged heartbeat with a minute, want it extended", ttl)
	}

	older := raw.Get(ctx, key).Val()
	beat(s, five, time.Minute)
	raw.Set(ctx, key, older, time.Minute) // a failover to a replica that missed the last write
	beat(s, five, time.Minute)
	wantHeld(t, s, five)

	raw.Set(ctx, key, "not json", time.Minute)
	beat(s, five, time.Minute)
	wantHeld(t, s, five)

	other := redisstore.New(server.Client(t))
	beat(other, three, time.Minute)
	beat(s, five, time.Minute)
	wantHeld(t, s, five)
}

func wantHeld(t *testing.T, s *redisstore.Store, want []runtime.HeldPartition) {
	t.Helper()
	ms, err := s.Members(context.Background(), svc)
	if err != nil || len(ms) != 1 {
		t.Fatalf("members: %+v, %v", ms, err)
	}
	if len(ms[0].Held) != len(want) {
		t.Fatalf("members hold %d partitions, want %d", len(ms[0].Held), len(want))
	}
	for i := range want {
		if ms[0].Held[i] != want[i] {
			t.Fatalf("held[%d] = %+v, want %+v", i, ms[0].Held[i], want[i])
		}
	}
}

// A status record heartbeated by a release that kept the held partitions
// in it (no held record) is read with them, during a rolling upgrade.
func TestHeldPartitionsOfAnEarlierReleaseAreRead(t *testing.T) {
	s, c := newStore(t)
	ctx := context.Background()
	old := `{"service":"` + svc + `","node":"node-old","joinState":"joined","startedAt":"2026-01-01T00:00:00Z","lastSeen":"2026-01-01T00:00:00Z",` +
		`"held":[{"subscription":"sync","source":"redis","category":"order","partition":"o-1","generation":3}],"backingOff":[],"paused":[],"throttled":[],"parked":0}`
	c.ZAdd(ctx, redisstore.MembersKey(svc), redis.Z{Score: float64(time.Now().Add(time.Minute).UnixMilli()), Member: "node-old"})
	c.Set(ctx, redisstore.NodeKey(svc, "node-old"), old, time.Minute)
	want := runtime.HeldPartition{Subscription: "sync", Source: source.Redis, Category: "order", Partition: "o-1", Generation: 3}
	ms, err := s.Members(ctx, svc)
	if err != nil || len(ms) != 1 || len(ms[0].Held) != 1 || ms[0].Held[0] != want {
		t.Fatalf("members: %+v, %v: want node-old holding o-1", ms, err)
	}
	held, err := s.Held(ctx, svc, []string{"node-old"})
	if err != nil || len(held["node-old"]) != 1 || held["node-old"][0] != want {
		t.Fatalf("held: %+v, %v: want node-old holding o-1", held, err)
	}
	live, err := s.Live(ctx, svc)
	if err != nil || len(live) != 1 || live[0].Held != nil {
		t.Fatalf("live: %+v, %v: want node-old without its partitions", live, err)
	}
}

// A held record that is not JSON is reported, naming its key.
func TestCorruptHeldRecordIsReported(t *testing.T) {
	s, c := newStore(t)
	ctx := context.Background()
	if err := s.Heartbeat(ctx, runtime.NodeStatus{Service: svc, Node: "node-a", Held: manyHeld(2, 1)}, time.Minute); err != nil {
		t.Fatal(err)
	}
	key := redisstore.HeldKey(svc, "node-a")
	c.Set(ctx, key, "not json", time.Minute)
	if _, err := s.Members(ctx, svc); err == nil || !strings.Contains(err.Error(), key) {
		t.Fatalf("members with a corrupt held record: %v, want an error naming %s", err, key)
	}
	if _, err := s.Live(ctx, svc); err != nil {
		t.Fatalf("live reads no held record, but: %v", err)
	}
}
