package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/protctl/protctl/internal/testenv"
	"github.com/protctl/protctl/pkg/runtime"
	"github.com/protctl/protctl/pkg/runtime/redisstore"
	"github.com/protctl/protctl/pkg/runtime/source"
)

// BenchmarkHeartbeatCycle measures one membership period of a service of
// three nodes: each node heartbeats its status and reads the live
// members, as runtime.Node does every HeartbeatEvery. Each node holds
// the same number of partitions (0, 1,000, 15,000: the last is what a
// node holds at 5,000 new keys/s with the default IdleAfter), either
// the same ones as at its last heartbeat (steady) or a changed list at
// every heartbeat (churn: new keys all the time).
//
// "store" is redisstore as it is (decision 0051: the held partitions a
// record of their own, sent when they change, not read by Live);
// "record" is the layout before it, done with plain commands in the same
// run (the held partitions inside the status record, written at every
// heartbeat, every member's record read and decoded by every node).
//
// Reported per cycle (three heartbeats and three reads): the bytes the
// server took in and sent out (INFO stats), and this process's and the
// server's CPU time.
func BenchmarkHeartbeatCycle(b *testing.B) {
	srv := testenv.StartRedis(b)
	ctx := context.Background()
	admin := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer admin.Close()
	const nodes = 3
	const service = "bench"
	for _, held := range []int{0, 1000, 15000} {
		for _, churn := range []bool{false, true} {
			mode := "steady"
			if churn {
				mode = "churn"
			}
			for _, layout := range []string{"store", "record"} {
				b.Run(fmt.Sprintf("held=%d/%s/%s", held, mode, layout), func(b *testing.B) {
					if err := admin.FlushAll(ctx).Err(); err != nil {
						b.Fatal(err)
					}
					beat := make([]func(gen int), nodes)
					for i := range beat {
						c := redis.NewClient(&redis.Options{Addr: srv.Addr})
						defer c.Close()
						id := fmt.Sprintf("node-%d", i)
						st := runtime.NodeStatus{Service: service, Node: id, JoinState: runtime.JoinJoined,
							StartedAt: time.Now(), Counters: map[string]int64{"processed": 1}}
						if layout == "store" {
							beat[i] = storeBeat(ctx, b, redisstore.New(c), st, held)
						} else {
							beat[i] = recordBeat(ctx, b, c, st, held)
						}
					}
					cycle := func(n int) {
						gen := 1
						if churn {
							gen = n + 1
						}
						for _, f := range beat {
							f(gen)
						}
					}
					cycle(0) // the first heartbeat always sends the list
					in0, out0 := netBytes(ctx, b, admin)
					srv0, cpu0 := serverCPU(ctx, b, admin), processCPU()
					b.ResetTimer()
					for n := range b.N {
						cycle(n + 1)
					}
					b.StopTimer()
					in1, out1 := netBytes(ctx, b, admin)
					srv1, cpu1 := serverCPU(ctx, b, admin), processCPU()
					per := float64(b.N)
					b.ReportMetric(float64(in1-in0)/per, "server-in-B/cycle")
					b.ReportMetric(float64(out1-out0)/per, "server-out-B/cycle")
					b.ReportMetric((cpu1-cpu0)*1e3/per, "process-cpu-ms/cycle")
					b.ReportMetric((srv1-srv0)*1e3/per, "server-cpu-ms/cycle")
				})
			}
		}
	}
}

// heldOf is a node's held partitions: held of them, at generation gen.
func heldOf(node string, held, gen int) []runtime.HeldPartition {
	out := make([]runtime.HeldPartition, held)
	for i := range out {
		out[i] = runtime.HeldPartition{Subscription: "sync", Source: source.Redis, Category: "order",
			Partition: node + "-order-" + strconv.Itoa(i), Generation: int64(gen)}
	}
	return out
}

// storeBeat is one node's period through redisstore: Heartbeat, then
// Live, as runtime.Node does.
func storeBeat(ctx context.Context, b *testing.B, s *redisstore.Store, st runtime.NodeStatus, held int) func(gen int) {
	return func(gen int) {
		st.Held = heldOf(st.Node, held, gen)
		st.LastSeen = time.Now()
		if err := s.Heartbeat(ctx, st, time.Minute); err != nil {
			b.Fatal(err)
		}
		ms, err := s.Live(ctx, st.Service)
		if err != nil || len(ms) == 0 {
			b.Fatalf("live: %v, %v", ms, err)
		}
	}
}

// recordBeat is one node's period in the layout before decision 0051:
// the whole status record, held partitions included, SET at every
// heartbeat (with the members ZADD), then every live member's record
// read with MGET and decoded.
func recordBeat(ctx context.Context, b *testing.B, c *redis.Client, st runtime.NodeStatus, held int) func(gen int) {
	members := redisstore.MembersKey(st.Service)
	return func(gen int) {
		st.Held = heldOf(st.Node, held, gen)
		st.LastSeen = time.Now()
		data, err := json.Marshal(st)
		if err != nil {
			b.Fatal(err)
		}
		p := c.TxPipeline()
		p.ZAdd(ctx, members, redis.Z{Score: float64(time.Now().Add(time.Minute).UnixMilli()), Member: st.Node})
		p.Set(ctx, redisstore.NodeKey(st.Service, st.Node), data, time.Minute)
		if _, err := p.Exec(ctx); err != nil {
			b.Fatal(err)
		}
		ids, err := c.ZRangeByScore(ctx, members, &redis.ZRangeBy{Min: strconv.FormatInt(time.Now().UnixMilli(), 10), Max: "+inf"}).Result()
		if err != nil {
			b.Fatal(err)
		}
		keys := make([]string, len(ids))
		for i, id := range ids {
			keys[i] = redisstore.NodeKey(st.Service, id)
		}
		vals, err := c.MGet(ctx, keys...).Result()
		if err != nil {
			b.Fatal(err)
		}
		for _, v := range vals {
			var m runtime.NodeStatus
			if s, ok := v.(string); ok {
				if err := json.Unmarshal([]byte(s), &m); err != nil {
					b.Fatal(err)
				}
			}
		}
	}
}

// netBytes is the server's total_net_input_bytes and
// total_net_output_bytes.
func netBytes(ctx context.Context, tb testing.TB, c *redis.Client) (in, out int64) {
	info, err := c.Info(ctx, "stats").Result()
	if err != nil {
		tb.Fatal(err)
	}
	for _, line := range strings.Split(info, "\n") {
		name, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok {
			continue
		}
		switch name {
		case "total_net_input_bytes":
			in, _ = strconv.ParseInt(v, 10, 64)
		case "total_net_output_bytes":
			out, _ = strconv.ParseInt(v, 10, 64)
		}
	}
	return in, out
}
