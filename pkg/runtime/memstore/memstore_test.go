package memstore_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/protctl/protctl/pkg/broker"
	"github.com/protctl/protctl/pkg/broker/memorybroker"
	"github.com/protctl/protctl/pkg/runtime"
	"github.com/protctl/protctl/pkg/runtime/clock"
	"github.com/protctl/protctl/pkg/runtime/ledger"
	"github.com/protctl/protctl/pkg/runtime/memstore"
	"github.com/protctl/protctl/pkg/runtime/source"
	"github.com/protctl/protctl/pkg/runtime/storetest"
)

var start = time.Date(2025, 3, 4, 5, 6, 7, 0, time.UTC)

// leases is a lease table the tests set by hand.
type leases struct {
	mu sync.Mutex
	m  map[string]string
}

func (l *leases) GetString(ctx context.Context, key string) (string, bool, error) {
	if err := ctx.Err(); err != nil {
		return "", false, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	v, ok := l.m[key]
	return v, ok, nil
}

func (l *leases) set(key, value string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.m[key] = value
}

func (l *leases) drop(key string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.m, key)
}

func TestSuite(t *testing.T) {
	storetest.Run(t, func(t *testing.T) storetest.Target {
		l := &leases{m: make(map[string]string)}
		c := clock.NewFake(start)
		st := memstore.New(l, memstore.WithClock(c))
		const g = "shop|topic:orders"
		return storetest.Target{
			Store:     st,
			SetLease:  func(t *testing.T, key, value string) { l.set(key, value) },
			DropLease: func(t *testing.T, key string) { l.drop(key) },
			Advance:   c.Advance,
			RequestSeek: func(t *testing.T, sub string, p int32, req runtime.SeekRequest) string {
				t.Helper()
				now, err := st.RequestSeek(context.Background(), g, sub, p, req, time.Minute)
				if err != nil {
					t.Fatalf("request seek: %v", err)
				}
				return now
			},
			WithdrawSeek: func(t *testing.T, sub string, p int32, id string) bool {
				t.Helper()
				ok, err := st.WithdrawSeek(context.Background(), g, sub, p, id)
				if err != nil {
					t.Fatalf("withdraw seek: %v", err)
				}
				return ok
			},
		}
	})
}

// TestFencesFollowTheMemoryBrokersLeases runs the store on the in-memory
// broker's leases, as the embedded demo does: a lease acquired through
// the broker fences the store, and once its TTL runs out on the shared
// clock the owner's writes are refused.
func TestFencesFollowTheMemoryBrokersLeases(t *testing.T) {
	ctx := context.Background()
	c := clock.NewFake(start)
	b := memorybroker.New(memorybroker.WithClock(c))
	s := memstore.New(b.Faults(), memstore.WithClock(c))
	const lk, gk, group = "protctl:{shop|topic:orders}:lease:0", "protctl:{shop|topic:orders}:generation:0", "shop|topic:orders"

	l, ok, err := b.AcquirePartitionLease(ctx, lk, gk, "node-a", 10*time.Second)
	if err != nil || !ok {
		t.Fatalf("acquire: %v %v", ok, err)
	}
	if err := s.Save(ctx, l.Fence, group, "sync", 0, 5); err != nil {
		t.Fatalf("save under the lease: %v", err)
	}
	p := ledger.Parked{Subscription: "sync", Aggregate: "order-1", Source: source.Kafka}
	if err := s.Park(ctx, l.Fence, p); err != nil {
		t.Fatalf("park under the lease: %v", err)
	}
	c.Advance(10 * time.Second)
	if err := s.Save(ctx, l.Fence, group, "sync", 0, 9); !errors.Is(err, broker.ErrLeaseLost) {
		t.Fatalf("save after the lease expired: %v, want ErrLeaseLost", err)
	}
	l2, ok, err := b.AcquirePartitionLease(ctx, lk, gk, "node-b", 10*time.Second)
	if err != nil || !ok {
		t.Fatalf("acquire by node-b: %v %v", ok, err)
	}
	if err := s.Resolve(ctx, l.Fence, "sync", "order-1"); !errors.Is(err, broker.ErrLeaseLost) {
		t.Fatalf("resolve by the old owner: %v, want ErrLeaseLost", err)
	}
	if err := s.Resolve(ctx, l2.Fence, "sync", "order-1"); err != nil {
		t.Fatalf("resolve by the new owner: %v", err)
	}
	if next, _, _ := s.Load(ctx, group, "sync", 0); next != 5 {
		t.Fatalf("checkpoint %d, want 5", next)
	}
}

func TestTimesComeFromTheClock(t *testing.T) {
	ctx := context.Background()
	c := clock.NewFake(start.Add(123456789 * time.Nanosecond))
	l := &leases{m: map[string]string{"lease": "a:1"}}
	s := memstore.New(l, memstore.WithClock(c))
	f := broker.Fence{LeaseKey: "lease", Token: "a:1"}

	if err := s.Heartbeat(ctx, runtime.NodeStatus{Service: "shop", Node: "n"}, time.Second); err != nil {
		t.Fatal(err)
	}
	ms, err := s.Members(ctx, "shop")
	if err != nil || len(ms) != 1 || !ms[0].LastSeen.Equal(c.Now()) {
		t.Fatalf("members %+v %v: want LastSeen %v", ms, err, c.Now())
	}
	// Live until exactly now+ttl: at the deadline the node is gone.
	c.Advance(time.Second - time.Nanosecond)
	if ms, _ := s.Members(ctx, "shop"); len(ms) != 1 {
		t.Fatal("node expired before its ttl")
	}
	c.Advance(time.Nanosecond)
	if ms, _ := s.Members(ctx, "shop"); len(ms) != 0 {
		t.Fatal("node live at its expiry")
	}

	if err := s.Park(ctx, f, ledger.Parked{Subscription: "sync", Aggregate: "o"}); err != nil {
		t.Fatal(err)
	}
	c.Advance(time.Minute)
	if err := s.RequestRetry(ctx, "sync", "", "o", "alice"); err != nil {
		t.Fatal(err)
	}
	p, err := s.GetParked(ctx, "sync", "", "o")
	if err != nil {
		t.Fatal(err)
	}
	if !p.ParkedAt.Equal(c.Now().Add(-time.Minute)) {
		t.Fatalf("ParkedAt %v, want the clock's time at park", p.ParkedAt)
	}
	// Stamped as Redis stamps: UTC, microseconds.
	if want := c.Now().Truncate(time.Microsecond); !p.Request.RequestedAt.Equal(want) {
		t.Fatalf("RequestedAt %v, want %v", p.Request.RequestedAt, want)
	}
}

// TestCancelledWatchersAreForgotten: a watcher costs a channel, not a
// goroutine, and cancelling it leaves nothing behind.
func TestCancelledWatchersAreForgotten(t *testing.T) {
	l := &leases{m: map[string]string{"lease": "a:1"}}
	s := memstore.New(l)
	ctx := context.Background()
	for range 100 {
		wctx, cancel := context.WithCancel(ctx)
		ch, err := s.WatchRequests(wctx, "sync")
		if err != nil {
			t.Fatal(err)
		}
		cancel()
		for range ch {
		}
	}
	// Requests after every watcher left reach no closed channel (a send
	// on one would panic).
	f := broker.Fence{LeaseKey: "lease", Token: "a:1"}
	if err := s.Park(ctx, f, ledger.Parked{Subscription: "sync", Aggregate: "o"}); err != nil {
		t.Fatal(err)
	}
	if err := s.RequestSkip(ctx, "sync", "", "o", "r", "alice"); err != nil {
		t.Fatal(err)
	}
}

func TestCancelledContextIsRefused(t *testing.T) {
	s := memstore.New(&leases{m: map[string]string{}})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := s.Members(ctx, "shop"); !errors.Is(err, context.Canceled) {
		t.Fatalf("members with a cancelled context: %v", err)
	}
}
