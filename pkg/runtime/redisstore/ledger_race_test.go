package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/protctl/protctl/pkg/broker"
	"github.com/protctl/protctl/pkg/runtime/redisstore"
)

// dropGate holds the first pipeline that drops a ledger index entry (the
// second step of Resolve) until release is closed: it only delays the
// real commands.
type dropGate struct {
	once    sync.Once
	entered chan struct{}
	release chan struct{}
}

func (g *dropGate) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (g *dropGate) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (g *dropGate) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, c := range cmds {
			if a := c.Args(); len(a) > 4 && fmt.Sprint(a[4]) == "drop" {
				hold := false
				g.once.Do(func() { hold = true })
				if hold {
					close(g.entered)
					select {
					case <-g.release:
					case <-time.After(20 * time.Second):
					}
				}
				break
			}
		}
		return next(ctx, cmds)
	}
}

// TestALateResolveKeepsANewerParkListed forces the interleaving decision
// 0003 left open: the owner's fenced delete of an entry succeeds, then it
// stalls past its lease; a new owner parks the same (partition,
// aggregate) again; only then does the old owner's index update run. The
// new entry must stay listed. The index of the earlier layout loses it
// (its conditional HDEL sees the same record key), which the test shows
// too: readers find it through ParkedEntriesKey's park id.
func TestALateResolveKeepsANewerParkListed(t *testing.T) {
	s, c := newStore(t)
	g := &dropGate{entered: make(chan struct{}), release: make(chan struct{})}
	c.AddHook(g)
	ctx := context.Background()
	lease := lg.LeaseKey(0)
	fa := broker.Fence{LeaseKey: lease, Token: "node-a:1"}
	fb := broker.Fence{LeaseKey: lease, Token: "node-b:2"}
	if err := c.Set(ctx, lease, fa.Token, 0).Err(); err != nil {
		t.Fatal(err)
	}
	if err := s.Park(ctx, fa, entry()); err != nil {
		t.Fatal(err)
	}
	resolved := make(chan error, 1)
	go func() { resolved <- s.Resolve(ctx, fa, sub, agg) }()
	select {
	case <-g.entered:
	case <-time.After(20 * time.Second):
		t.Fatal("the resolve never reached its index update")
	}
	// node-a's lease expired; node-b took it and parked the aggregate
	// again (its replay failed at a later record).
	if err := c.Set(ctx, lease, fb.Token, 0).Err(); err != nil {
		t.Fatal(err)
	}
	again := entry()
	again.Position, again.Owner = "9", "node-b"
	if err := s.Park(ctx, fb, again); err != nil {
		t.Fatal(err)
	}
	close(g.release)
	if err := <-resolved; err != nil {
		t.Fatalf("resolve: %v", err)
	}

	got, err := s.GetParked(ctx, sub, "", agg)
	if err != nil || got.Position != "9" {
		t.Fatalf("get after the late resolve: %+v %v, want node-b's entry at 9", got, err)
	}
	ps, err := s.ListParked(ctx, sub)
	if err != nil || len(ps) != 1 || ps[0].Position != "9" {
		t.Fatalf("list after the late resolve: %+v %v, want node-b's entry", ps, err)
	}
	if err := s.RequestRetry(ctx, sub, "0", agg, "ops"); err != nil {
		t.Fatalf("retry request of node-b's entry: %v", err)
	}
	if _, err := c.HGet(ctx, redisstore.ParkedIndexKey(sub), agg).Result(); !errors.Is(err, redis.Nil) {
		t.Fatalf("the earlier layout's index: %v, want the entry dropped there (why ParkedEntriesKey carries park ids)", err)
	}
}
