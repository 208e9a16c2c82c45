package partitioned_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/protctl/protctl/pkg/broker"
	"github.com/protctl/protctl/pkg/broker/redisbroker"
	"github.com/protctl/protctl/pkg/runtime"
	"github.com/protctl/protctl/pkg/runtime/partitioned"
)

// laneReads counts the fenced reads of one stream: XREADGROUP naming it
// (a fenced transaction) and the ack-and-read script naming it (numkeys
// 2), alone or pipelined.
type laneReads struct {
	stream string
	n      atomic.Int64
}

func (h *laneReads) count(c redis.Cmder) {
	args := c.Args()
	names := func() bool {
		return slices.ContainsFunc(args, func(a any) bool { s, _ := a.(string); return s == h.stream })
	}
	switch c.Name() {
	case "xreadgroup":
		if names() {
			h.n.Add(1)
		}
	case "evalsha", "eval":
		if n, _ := args[2].(int); n == 2 && names() && !redis.HasErrorPrefix(c.Err(), "NOSCRIPT") {
			h.n.Add(1)
		}
	}
}

func (h *laneReads) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *laneReads) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, c redis.Cmder) error {
		err := next(ctx, c)
		h.count(c)
		return err
	}
}
func (h *laneReads) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		for _, c := range cmds {
			h.count(c)
		}
		return err
	}
}

// noAppends is the Redis broker whose appends are never announced (its
// append watch cannot be had): the node waits on the streams instead.
type noAppends struct{ *redisbroker.Broker }

func (noAppends) WatchAppends(context.Context, string) (<-chan string, error) {
	return nil, errors.New("test: no append watch")
}

// A wake-up for a partition's main lane does not make its worker read an
// empty backfill lane: each entry of a flow on the main lane of a held
// partition costs the read that gets it and the one that acks it, not a
// third of the backfill lane (before, every wake-up cleared every lane's
// empty mark: a third of the live path's reads in
// BenchmarkSustainableRateRedis). An entry on the backfill lane wakes the
// worker for that lane all the same. Both with appends announced and with
// blocking waits on the streams.
func TestRedisMainLaneWakesLeaveAnEmptyBackfillLaneUnread(t *testing.T) {
	for _, announced := range []bool{true, false} {
		name := "announced"
		if !announced {
			name = "waited"
		}
		t.Run(name, func(t *testing.T) {
			e := newRedisEnv(t)
			rec := newRecorder(t)
			key := "order-1"
			bf := broker.ProteanLayout.LaneStream(cat, key, broker.DefaultBackfillSuffix)
			reads := &laneReads{stream: bf}
			c := e.client()
			c.AddHook(reads)
			var b broker.PartitionedBroker = redisbroker.New(c)
			if !announced {
				b = noAppends{redisbroker.New(c)}
			}
			e.start("node-1", rec.handler("node-1"), func(cfg *partitioned.Config) {
				cfg.Broker = b
				// One generation holds the key through the flow.
				cfg.LeaseTTL, cfg.RenewEvery, cfg.IdleAfter = time.Minute, 10*time.Second, time.Minute
			}, nil)
			sub := e.subs[0]
			if err := e.c.SAdd(context.Background(), broker.ProteanLayout.IndexKey(cat), key).Err(); err != nil {
				t.Fatal(err)
			}
			want := map[string]int{}
			for seq := 1; seq <= 10; seq++ {
				appendPlain(t, e.c, key, seq)
				want[key] = seq
				eventually(t, 30*time.Second, time.Millisecond, "the entry handled", func() bool { return rec.complete(want) })
				if seq == 1 && announced {
					eventually(t, 30*time.Second, 5*time.Millisecond, "appends announced", func() bool { return partitioned.Announced(sub) })
				}
			}
			if got := sub.Status().Counters["acquired"]; got != 1 {
				t.Fatalf("%d leases acquired, want 1: the flow did not stay in one generation", got)
			}
			if n := reads.n.Load(); n != 0 {
				t.Errorf("the empty backfill lane was read %d times during a flow on the main lane, want 0", n)
			}
			// An entry on the backfill lane is read and handled.
			want[key] = 11
			if err := e.c.XAdd(context.Background(), &redis.XAddArgs{Stream: bf, Values: []any{broker.DataField, envelope(key, 11)}}).Err(); err != nil {
				t.Fatal(err)
			}
			eventually(t, 30*time.Second, time.Millisecond, "the backfill entry handled", func() bool { return rec.complete(want) })
			rec.checkOrder(t, want)
			if reads.n.Load() == 0 {
				t.Error("the backfill entry was handled without a read of its lane counted: the count is wrong")
			}
		})
	}
}

// Appends to the backfill lanes race a flow on the main lanes: a
// main-lane wake-up that leaves the backfill lanes unread must never
// leave a backfill entry behind, nor a backfill wake-up a main entry.
// Every entry of both lanes is handled, each lane in order. With an
// IdleAfter of 20ms, around the gaps (idle releases race the wake-ups of
// held and of idle partitions), and of a minute (one generation holds
// each key through the flow: no idle release rescues an entry a wake-up
// missed); both with appends announced and with blocking waits on the
// streams. It checks the whole, not takeNews alone: a wake-up from the
// waiter that finds nothing makes the worker read every lane again
// (learnTails), which would also rescue a backfill entry whose wake-up
// named the wrong lanes.
func TestRedisBackfillAppendsRaceMainLaneWakes(t *testing.T) {
	for _, tc := range []struct {
		announced bool
		idle      time.Duration
	}{{true, 20 * time.Millisecond}, {false, 20 * time.Millisecond}, {true, time.Minute}, {false, time.Minute}} {
		name := "announced"
		if !tc.announced {
			name = "waited"
		}
		announced := tc.announced
		t.Run(fmt.Sprintf("%s, IdleAfter %s", name, tc.idle), func(t *testing.T) {
			e := newRedisEnv(t)
			rec := newRecorder(t)
			l := broker.ProteanLayout
			bfOf := func(key string) string { return l.LaneStream(cat, key, broker.DefaultBackfillSuffix) }
			// Each lane's entries are recorded as a key of their own
			// ("K/bf" for K's backfill lane): each lane is in order.
			h := rec.handler("node-1")
			lanes := runtime.HandlerFunc(func(ctx context.Context, m runtime.Message) error {
				if m.Stream == bfOf(m.Key) {
					m.Key += "/bf"
				}
				return h.Handle(ctx, m)
			})
			c := e.client()
			var b broker.PartitionedBroker = redisbroker.New(c)
			if !announced {
				b = noAppends{redisbroker.New(c)}
			}
			e.start("node-1", lanes, func(cfg *partitioned.Config) {
				cfg.Broker = b
				cfg.IdleAfter = tc.idle
				if tc.idle > redisTTL {
					cfg.LeaseTTL, cfg.RenewEvery = time.Minute, 10*time.Second
				}
			}, nil)
			keys := keyNames(8)
			ctx := context.Background()
			for _, k := range keys {
				if err := e.c.SAdd(ctx, l.IndexKey(cat), k).Err(); err != nil {
					t.Fatal(err)
				}
			}
			var (
				mu   sync.Mutex
				want = map[string]int{}
				wg   sync.WaitGroup
			)
			for lane, stream := range map[string]func(string) string{"": func(k string) string { return l.Stream(cat, k) }, "/bf": bfOf} {
				rng := rand.New(rand.NewPCG(uint64(len(lane)), 7))
				wg.Add(1)
				go func() {
					defer wg.Done()
					for range 150 {
						k := keys[rng.IntN(len(keys))]
						mu.Lock()
						want[k+lane]++
						seq := want[k+lane]
						mu.Unlock()
						if err := e.c.XAdd(ctx, &redis.XAddArgs{Stream: stream(k), Values: []any{broker.DataField, envelope(k+lane, seq)}}).Err(); err != nil {
							t.Error(err)
							return
						}
						time.Sleep(time.Duration(rng.IntN(40)) * time.Millisecond)
					}
				}()
			}
			wg.Wait()
			// Under a minute: with IdleAfter a minute, no idle release
			// comes to rescue an entry a wake-up missed.
			eventually(t, 45*time.Second, 10*time.Millisecond, "every entry of both lanes handled", func() bool { return rec.complete(want) })
			rec.checkOrder(t, want)
		})
	}
}
