package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	goruntime "runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/protctl/protctl/internal/testenv"
	"github.com/protctl/protctl/pkg/broker"
	"github.com/protctl/protctl/pkg/runtime"
	"github.com/protctl/protctl/pkg/runtime/ledger"
	"github.com/protctl/protctl/pkg/runtime/redisstore"
	"github.com/protctl/protctl/pkg/runtime/source"
	"github.com/protctl/protctl/pkg/runtime/storetest"
)

func TestSuite(t *testing.T) {
	storetest.Run(t, func(t *testing.T) storetest.Target {
		s, c := newStore(t)
		return storetest.Target{
			Store: s,
			SetLease: func(t *testing.T, key, value string) {
				t.Helper()
				if err := c.Set(context.Background(), key, value, 0).Err(); err != nil {
					t.Fatalf("set lease: %v", err)
				}
			},
			DropLease: func(t *testing.T, key string) {
				t.Helper()
				if err := c.Del(context.Background(), key).Err(); err != nil {
					t.Fatalf("drop lease: %v", err)
				}
			},
			// TTLs run on the server's clock, which only real time moves.
			Advance: time.Sleep,
			RequestSeek: func(t *testing.T, sub string, p int32, req runtime.SeekRequest) string {
				t.Helper()
				now, err := s.RequestSeek(context.Background(), redisstore.TopicLeaseGroup("shop", "orders"), sub, p, req, time.Minute)
				if err != nil {
					t.Fatalf("request seek: %v", err)
				}
				return now
			},
			WithdrawSeek: func(t *testing.T, sub string, p int32, id string) bool {
				t.Helper()
				ok, err := s.WithdrawSeek(context.Background(), redisstore.TopicLeaseGroup("shop", "orders"), sub, p, id)
				if err != nil {
					t.Fatalf("withdraw seek: %v", err)
				}
				return ok
			},
		}
	})
}

const (
	svc   = "shop"
	sub   = "ledger-sync"
	agg   = "order-1"
	token = "node-a:1"
)

var lg = redisstore.TopicLeaseGroup(svc, "orders")

func entry() ledger.Parked {
	return ledger.Parked{Subscription: sub, Aggregate: agg, Source: source.Kafka, Topic: "orders", Partition: "0", Position: "7", Error: "boom", Attempts: 3}
}

// snapshot is every key of the server with its DUMP, to prove that a
// refused call changed nothing.
func snapshot(t *testing.T, c *redis.Client) map[string]string {
	t.Helper()
	ctx := context.Background()
	keys, err := c.Keys(ctx, "*").Result()
	if err != nil {
		t.Fatal(err)
	}
	out := make(map[string]string, len(keys))
	for _, k := range keys {
		d, err := c.Dump(ctx, k).Result()
		if err != nil {
			t.Fatal(err)
		}
		out[k] = d
	}
	return out
}

func diff(before, after map[string]string, ignore ...string) []string {
	var changed []string
	for k, v := range after {
		if w, ok := before[k]; (!ok || w != v) && !slices.Contains(ignore, k) {
			changed = append(changed, k)
		}
	}
	for k := range before {
		if _, ok := after[k]; !ok && !slices.Contains(ignore, k) {
			changed = append(changed, k)
		}
	}
	return changed
}

func TestWrongTypeKeysAreRefusedAndChangeNothing(t *testing.T) {
	ctx := context.Background()
	lease := lg.LeaseKey(0)
	fence := broker.Fence{LeaseKey: lease, Token: token}
	rec := redisstore.RecordKey(lease, sub, agg)
	idx := redisstore.ParkedIndexKey(sub)
	members, node := redisstore.MembersKey(svc), redisstore.NodeKey(svc, "node-a")
	cps := lg.CheckpointsKey(sub)
	status := runtime.NodeStatus{Service: svc, Node: "node-a"}

	type op struct {
		name string
		call func(s *redisstore.Store) error
	}
	heartbeat := op{"heartbeat", func(s *redisstore.Store) error { return s.Heartbeat(ctx, status, time.Minute) }}
	membersOp := op{"members", func(s *redisstore.Store) error { _, err := s.Members(ctx, svc); return err }}
	leave := op{"leave", func(s *redisstore.Store) error { return s.Leave(ctx, svc, "node-a") }}
	save := op{"save", func(s *redisstore.Store) error { return s.Save(ctx, fence, lg.String(), sub, 0, 9) }}
	load := op{"load", func(s *redisstore.Store) error { _, _, err := s.Load(ctx, lg.String(), sub, 0); return err }}
	loadAll := op{"load all", func(s *redisstore.Store) error { _, err := s.LoadAll(ctx, lg.String(), sub); return err }}
	park := op{"park", func(s *redisstore.Store) error { return s.Park(ctx, fence, entry()) }}
	setStatus := op{"set status", func(s *redisstore.Store) error {
		return s.SetStatus(ctx, fence, sub, agg, ledger.StatusRetrying)
	}}
	resolve := op{"resolve", func(s *redisstore.Store) error { return s.Resolve(ctx, fence, sub, agg) }}
	list := op{"list", func(s *redisstore.Store) error { _, err := s.ListParked(ctx, sub); return err }}
	listAll := op{"list all", func(s *redisstore.Store) error { _, err := s.ListParked(ctx, ""); return err }}
	get := op{"get", func(s *redisstore.Store) error { _, err := s.GetParked(ctx, sub, "", agg); return err }}
	retry := op{"retry", func(s *redisstore.Store) error { return s.RequestRetry(ctx, sub, "", agg, "alice") }}

	for _, c := range []struct {
		name string
		// setup writes the wrong-typed key (and whatever else the case needs).
		setup func(c *redis.Client)
		key   string // the wrong-typed key the errors must name
		ops   []op
		// mayChange lists keys a refused call may touch without a reader
		// seeing it (see Park's doc).
		mayChange []string
		// after checks what readers see.
		after func(t *testing.T, s *redisstore.Store)
	}{
		{
			name:  "members is a string",
			setup: func(c *redis.Client) { c.Set(ctx, members, "x", 0) },
			key:   members,
			ops:   []op{heartbeat, membersOp, leave},
		},
		{
			name:  "node status is a hash",
			setup: func(c *redis.Client) { c.HSet(ctx, node, "f", "v") },
			key:   node,
			ops:   []op{heartbeat, leave},
		},
		{
			name:  "held partitions is a hash",
			setup: func(c *redis.Client) { c.HSet(ctx, redisstore.HeldKey(svc, "node-a"), "f", "v") },
			key:   redisstore.HeldKey(svc, "node-a"),
			ops:   []op{heartbeat, leave},
		},
		{
			name:  "checkpoints is a string",
			setup: func(c *redis.Client) { c.Set(ctx, lease, token, 0); c.Set(ctx, cps, "x", 0) },
			key:   cps,
			ops:   []op{save, load, loadAll},
		},
		{
			name:  "a checkpoint is not an integer",
			setup: func(c *redis.Client) { c.Set(ctx, lease, token, 0); c.HSet(ctx, cps, "0", "abc") },
			key:   cps,
			ops:   []op{save},
		},
		{
			name:  "the lease is a hash",
			setup: func(c *redis.Client) { c.HSet(ctx, lease, "f", token) },
			key:   lease,
			ops:   []op{save, park, setStatus, resolve},
			// Park's index entry is taken back; its subscription stays listed.
			mayChange: []string{redisstore.ParkedSubscriptionsKey},
			after: func(t *testing.T, s *redisstore.Store) {
				if _, err := s.GetParked(ctx, sub, "", agg); !errors.Is(err, ledger.ErrNotParked) {
					t.Fatalf("get after a refused park: %v, want ErrNotParked", err)
				}
			},
		},
		{
			name:      "the record is a hash",
			setup:     func(c *redis.Client) { c.Set(ctx, lease, token, 0); c.HSet(ctx, rec, "f", "v") },
			key:       rec,
			ops:       []op{park, setStatus, resolve},
			mayChange: []string{redisstore.ParkedSubscriptionsKey},
			after: func(t *testing.T, s *redisstore.Store) {
				if _, err := s.GetParked(ctx, sub, "", agg); !errors.Is(err, ledger.ErrNotParked) {
					t.Fatalf("get after a refused park: %v, want ErrNotParked", err)
				}
				if ps, err := s.ListParked(ctx, ""); err != nil || len(ps) != 0 {
					t.Fatalf("list after a refused park: %v %v, want nothing", ps, err)
				}
			},
		},
		{
			name:  "the index is a string",
			setup: func(c *redis.Client) { c.Set(ctx, lease, token, 0); c.Set(ctx, idx, "x", 0) },
			key:   idx,
			ops:   []op{park, list, get, retry},
			// The subscription is added in the same pipeline.
			mayChange: []string{redisstore.ParkedSubscriptionsKey},
		},
		{
			name: "the ledger index is a string",
			setup: func(c *redis.Client) {
				c.Set(ctx, lease, token, 0)
				c.Set(ctx, redisstore.ParkedEntriesKey(sub), "x", 0)
			},
			key: redisstore.ParkedEntriesKey(sub),
			ops: []op{park, list, get, retry},
		},
		{
			name: "the subscriptions set is a string",
			setup: func(c *redis.Client) {
				c.Set(ctx, lease, token, 0)
				c.Set(ctx, redisstore.ParkedSubscriptionsKey, "x", 0)
			},
			key: redisstore.ParkedSubscriptionsKey,
			ops: []op{park, listAll},
			after: func(t *testing.T, s *redisstore.Store) {
				if _, err := s.GetParked(ctx, sub, "", agg); !errors.Is(err, ledger.ErrNotParked) {
					t.Fatalf("get after a refused park: %v, want ErrNotParked", err)
				}
			},
		},
	} {
		t.Run(c.name, func(t *testing.T) {
			s, rc := newStore(t)
			c.setup(rc)
			before := snapshot(t, rc)
			for _, o := range c.ops {
				err := o.call(s)
				if !errors.Is(err, broker.ErrWrongType) {
					t.Fatalf("%s: got %v, want ErrWrongType", o.name, err)
				}
				var wte *broker.WrongTypeError
				if errors.As(err, &wte) && wte.Key != c.key {
					t.Fatalf("%s: wrong-type error names %q, want %q", o.name, wte.Key, c.key)
				}
			}
			if changed := diff(before, snapshot(t, rc), c.mayChange...); len(changed) > 0 {
				t.Fatalf("refused calls changed %v", changed)
			}
			if c.after != nil {
				c.after(t, s)
			}
		})
	}
}

func TestUnreachableServerIsUnavailable(t *testing.T) {
	port, err := testenv.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	c := redis.NewClient(&redis.Options{
		Addr: fmt.Sprintf("127.0.0.1:%d", port), MaxRetries: -1, DialTimeout: 200 * time.Millisecond,
		DialerRetries: 1, DialerRetryTimeout: time.Millisecond,
	})
	t.Cleanup(func() { _ = c.Close() })
	s := redisstore.New(c)
	ctx := context.Background()
	f := broker.Fence{LeaseKey: lg.LeaseKey(0), Token: token}
	calls := map[string]func() error{
		"heartbeat":  func() error { return s.Heartbeat(ctx, runtime.NodeStatus{Service: svc, Node: "n"}, time.Second) },
		"members":    func() error { _, err := s.Members(ctx, svc); return err },
		"leave":      func() error { return s.Leave(ctx, svc, "n") },
		"save":       func() error { return s.Save(ctx, f, lg.String(), sub, 0, 1) },
		"load":       func() error { _, _, err := s.Load(ctx, lg.String(), sub, 0); return err },
		"load all":   func() error { _, err := s.LoadAll(ctx, lg.String(), sub); return err },
		"park":       func() error { return s.Park(ctx, f, entry()) },
		"set status": func() error { return s.SetStatus(ctx, f, sub, agg, ledger.StatusParked) },
		"resolve":    func() error { return s.Resolve(ctx, f, sub, agg) },
		"list":       func() error { _, err := s.ListParked(ctx, sub); return err },
		"list all":   func() error { _, err := s.ListParked(ctx, ""); return err },
		"get":        func() error { _, err := s.GetParked(ctx, sub, "", agg); return err },
		"retry":      func() error { return s.RequestRetry(ctx, sub, "", agg, "alice") },
		"skip":       func() error { return s.RequestSkip(ctx, sub, "", agg, "r", "alice") },
		"watch":      func() error { _, err := s.WatchRequests(ctx, sub); return err },
	}
	for name, call := range calls {
		if err := call(); !errors.Is(err, broker.ErrUnavailable) {
			t.Errorf("%s: got %v, want ErrUnavailable", name, err)
		}
	}
	// Bad input is refused before any I/O, even with no server.
	if err := s.Heartbeat(ctx, runtime.NodeStatus{Service: svc}, time.Second); !errors.Is(err, broker.ErrInvalidArgument) {
		t.Errorf("heartbeat with no node: got %v, want ErrInvalidArgument", err)
	}
	if err := s.Save(ctx, f, lg.String(), sub, 0, -1); !errors.Is(err, broker.ErrInvalidArgument) {
		t.Errorf("save of a negative offset: got %v, want ErrInvalidArgument", err)
	}
}

func TestRequestsAreStampedWithTheServersTime(t *testing.T) {
	s, c := newStore(t)
	ctx := context.Background()
	f := broker.Fence{LeaseKey: lg.LeaseKey(0), Token: token}
	c.Set(ctx, f.LeaseKey, token, 0)
	if err := s.Park(ctx, f, entry()); err != nil {
		t.Fatal(err)
	}
	before := time.Now()
	if err := s.RequestSkip(ctx, sub, "", agg, "r", "alice"); err != nil {
		t.Fatal(err)
	}
	after := time.Now()
	p, err := s.GetParked(ctx, sub, "", agg)
	if err != nil {
		t.Fatal(err)
	}
	// The server runs on this machine, so its clock is ours.
	at := p.Request.RequestedAt
	if at.Before(before.Truncate(time.Microsecond)) || at.After(after) || at.Location() != time.UTC {
		t.Fatalf("RequestedAt %v, want a UTC time in [%v, %v]", at, before, after)
	}
}

func TestDanglingIndexEntriesAreSkipped(t *testing.T) {
	s, c := newStore(t)
	ctx := context.Background()
	f := broker.Fence{LeaseKey: lg.LeaseKey(0), Token: token}
	c.Set(ctx, f.LeaseKey, token, 0)
	if err := s.Park(ctx, f, entry()); err != nil {
		t.Fatal(err)
	}
	// What a park refused for a lost lease, or a resolve cut short,
	// leaves behind: an index entry without a record.
	c.HSet(ctx, redisstore.ParkedIndexKey(sub), "order-2", redisstore.RecordKey(f.LeaseKey, sub, "order-2"))
	ps, err := s.ListParked(ctx, "")
	if err != nil || len(ps) != 1 || ps[0].Aggregate != agg {
		t.Fatalf("list: %+v %v, want only %s", ps, err, agg)
	}
	if _, err := s.GetParked(ctx, sub, "", "order-2"); !errors.Is(err, ledger.ErrNotParked) {
		t.Fatalf("get of a dangling entry: %v, want ErrNotParked", err)
	}
	if err := s.RequestRetry(ctx, sub, "", "order-2", "alice"); !errors.Is(err, ledger.ErrNotParked) {
		t.Fatalf("retry of a dangling entry: %v, want ErrNotParked", err)
	}
	if n := c.Exists(ctx, redisstore.RecordKey(f.LeaseKey, sub, "order-2")).Val(); n != 0 {
		t.Fatal("a refused request created the record")
	}
}

func TestCorruptRecordsAreReportedNotOverwritten(t *testing.T) {
	s, c := newStore(t)
	ctx := context.Background()
	f := broker.Fence{LeaseKey: lg.LeaseKey(0), Token: token}
	c.Set(ctx, f.LeaseKey, token, 0)
	if err := s.Park(ctx, f, entry()); err != nil {
		t.Fatal(err)
	}
	rec := redisstore.RecordKey(f.LeaseKey, sub, agg)
	c.Set(ctx, rec, "not json", 0)
	for name, err := range map[string]error{
		"set status": s.SetStatus(ctx, f, sub, agg, ledger.StatusParked),
		"retry":      s.RequestRetry(ctx, sub, "", agg, "alice"),
		"get":        func() error { _, err := s.GetParked(ctx, sub, "", agg); return err }(),
	} {
		if err == nil || !strings.Contains(err.Error(), rec) {
			t.Errorf("%s of a corrupt record: %v, want an error naming %s", name, err, rec)
		}
	}
	if v := c.Get(ctx, rec).Val(); v != "not json" {
		t.Fatalf("the corrupt record was overwritten with %q", v)
	}
}

// TestWatchLeavesNoGoroutine: a watcher's goroutine and its subscription
// end with its context.
func TestWatchLeavesNoGoroutine(t *testing.T) {
	s, _ := newStore(t)
	ctx := context.Background()
	watch := func() {
		wctx, cancel := context.WithCancel(ctx)
		ch, err := s.WatchRequests(wctx, sub)
		if err != nil {
			t.Fatal(err)
		}
		cancel()
		for range ch {
		}
	}
	watch() // warm the client's pool
	base := goruntime.NumGoroutine()
	for range 20 {
		watch()
	}
	testenv.Eventually(t, 5*time.Second, "the goroutines of 20 watches to end", testenv.GoroutinesAtMost(base))
}

func TestMembersExpireOnTheServersClock(t *testing.T) {
	s, c := newStore(t)
	ctx := context.Background()
	if err := s.Heartbeat(ctx, runtime.NodeStatus{Service: svc, Node: "node-a"}, time.Minute); err != nil {
		t.Fatal(err)
	}
	// The score is the server's time plus the ttl, whatever the node's clock.
	score := c.ZScore(ctx, redisstore.MembersKey(svc), "node-a").Val()
	now := float64(time.Now().UnixMilli())
	if d := score - now; d < 59_000 || d > 61_000 {
		t.Fatalf("expiry score %v is %vms from now, want about 60000", score, d)
	}
	if ttl := c.PTTL(ctx, redisstore.NodeKey(svc, "node-a")).Val(); ttl <= 0 || ttl > time.Minute {
		t.Fatalf("status record ttl %v, want at most a minute", ttl)
	}
	// A stale member (its status expired, its score past) is pruned by
	// the next heartbeat of any node.
	c.ZAdd(ctx, redisstore.MembersKey(svc), redis.Z{Score: now - 1000, Member: "node-dead"})
	if err := s.Heartbeat(ctx, runtime.NodeStatus{Service: svc, Node: "node-b"}, time.Minute); err != nil {
		t.Fatal(err)
	}
	if got := c.ZRange(ctx, redisstore.MembersKey(svc), 0, -1).Val(); !slices.Equal(got, []string{"node-a", "node-b"}) {
		t.Fatalf("members zset %v, want node-a and node-b", got)
	}
}
