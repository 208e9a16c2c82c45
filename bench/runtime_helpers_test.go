package bench

import (
	"context"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/protctl/protctl/pkg/broker"
	"github.com/protctl/protctl/pkg/broker/redisbroker"
	"github.com/protctl/protctl/pkg/runtime"
	"github.com/protctl/protctl/pkg/runtime/partitioned"
	"github.com/protctl/protctl/pkg/runtime/redisstore"
)

// The runtime benchmarks (runtime_*_test.go) measure the Redis partitioned
// subscription of pkg/runtime end to end: a Node with its heartbeats,
// discovery, leases, batched fenced reads and acks.

const (
	rtService  = "bench"
	rtGroup    = "bench.Projector"
	rtCategory = "bench::order"
)

// rtCalls is a go-redis hook counting the commands a client sends (n: a
// script call, EVALSHA, counts as one, a pipeline or a transaction as its
// length, MULTI and EXEC included) and its round trips (trips: a command,
// a pipeline or a transaction is one).
type rtCalls struct{ n, trips atomic.Int64 }

func (c *rtCalls) DialHook(next redis.DialHook) redis.DialHook { return next }

func (c *rtCalls) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		c.n.Add(1)
		c.trips.Add(1)
		return next(ctx, cmd)
	}
}

func (c *rtCalls) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		c.n.Add(int64(len(cmds)))
		c.trips.Add(1)
		return next(ctx, cmds)
	}
}

// rtKey names partition p.
func rtKey(p int) string { return fmt.Sprintf("k%05d", p) }

// rtPopulate writes entries entries to each of partitions partitions of
// category in Protean's layout (XADD data=<envelope>, SADD index),
// pipelined and not measured, and returns the streams.
func rtPopulate(ctx context.Context, tb testing.TB, c redis.Cmdable, category string, partitions, entries int) []string {
	tb.Helper()
	l := broker.ProteanLayout
	body := `{"data":{"n":1},"metadata":{"headers":{"id":"x","type":"Bench"}}}`
	streams := make([]string, partitions)
	pipe := c.Pipeline()
	queued := 0
	for p := 0; p < partitions; p++ {
		key := rtKey(p)
		streams[p] = l.Stream(category, key)
		pipe.SAdd(ctx, l.IndexKey(category), key)
		for e := 0; e < entries; e++ {
			pipe.XAdd(ctx, &redis.XAddArgs{Stream: streams[p], Values: []string{broker.DataField, body}})
		}
		if queued += entries + 1; queued >= 5000 {
			if _, err := pipe.Exec(ctx); err != nil {
				tb.Fatal(err)
			}
			queued = 0
		}
	}
	if _, err := pipe.Exec(ctx); err != nil {
		tb.Fatal(err)
	}
	return streams
}

// rtNode starts a node running one partitioned subscription of category
// on its own client; it returns the node, the subscription and the
// client's call counter. Stop the node when done.
func rtNode(tb testing.TB, addr, id, category string, h runtime.Handler, mutate func(*partitioned.Config), nodeCfg func(*runtime.NodeConfig)) (*runtime.Node, *partitioned.Subscription, *rtCalls, *redis.Client) {
	tb.Helper()
	calls := new(rtCalls)
	c := redis.NewClient(&redis.Options{Addr: addr, PoolSize: 64})
	c.AddHook(calls)
	b := redisbroker.New(c)
	store := redisstore.New(c)
	cfg := partitioned.Config{Name: rtGroup, Categories: []string{category}, Handler: h, Broker: b, Ledger: store}
	if mutate != nil {
		mutate(&cfg)
	}
	sub, err := partitioned.New(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	nc := runtime.NodeConfig{Service: rtService, NodeID: id, Membership: store}
	if nodeCfg != nil {
		nodeCfg(&nc)
	}
	n, err := runtime.NewNode(nc, sub)
	if err != nil {
		tb.Fatal(err)
	}
	if err := n.Start(context.Background()); err != nil {
		tb.Fatal(err)
	}
	return n, sub, calls, c
}

// rtStop stops a node rtNode started (within d) and closes its client.
func rtStop(tb testing.TB, n *runtime.Node, c *redis.Client, d time.Duration) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	if err := n.Stop(ctx); err != nil {
		tb.Error(err)
	}
	_ = c.Close()
}

// rtCommandStats sums INFO commandstats: every command the server ran,
// those inside scripts included, by command.
func rtCommandStats(ctx context.Context, tb testing.TB, c *redis.Client) map[string]int64 {
	tb.Helper()
	info, err := c.Info(ctx, "commandstats").Result()
	if err != nil {
		tb.Fatal(err)
	}
	out := map[string]int64{}
	for _, line := range strings.Split(info, "\r\n") {
		name, rest, ok := strings.Cut(line, ":")
		if !ok || !strings.HasPrefix(name, "cmdstat_") {
			continue
		}
		for _, f := range strings.Split(rest, ",") {
			if v, ok := strings.CutPrefix(f, "calls="); ok {
				n, _ := strconv.ParseInt(v, 10, 64)
				out[strings.TrimPrefix(name, "cmdstat_")] = n
			}
		}
	}
	return out
}

// rtDiff returns after-before per command, the total, and a short
// description of the largest contributors.
func rtDiff(before, after map[string]int64) (map[string]int64, int64, string) {
	d := map[string]int64{}
	var total int64
	for k, v := range after {
		if n := v - before[k]; n > 0 {
			d[k] = n
			total += n
		}
	}
	names := make([]string, 0, len(d))
	for k := range d {
		names = append(names, k)
	}
	sort.Slice(names, func(i, j int) bool { return d[names[i]] > d[names[j]] })
	var parts []string
	for _, k := range names {
		parts = append(parts, fmt.Sprintf("%s=%d", k, d[k]))
	}
	return d, total, strings.Join(parts, " ")
}

// rtRedisCPU is the server's CPU time so far (INFO cpu, user + sys).
func rtRedisCPU(ctx context.Context, tb testing.TB, c *redis.Client) time.Duration {
	tb.Helper()
	info, err := c.Info(ctx, "cpu").Result()
	if err != nil {
		tb.Fatal(err)
	}
	var total float64
	for _, line := range strings.Split(info, "\r\n") {
		for _, f := range []string{"used_cpu_user:", "used_cpu_sys:"} {
			if v, ok := strings.CutPrefix(line, f); ok {
				s, _ := strconv.ParseFloat(v, 64)
				total += s
			}
		}
	}
	return time.Duration(total * float64(time.Second))
}

// rtProcessCPU is this process's CPU time so far (user + system).
func rtProcessCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// rtEnvDuration reads a duration from the environment (benchmarks'
// knobs), or def.
func rtEnvDuration(tb testing.TB, name string, def time.Duration) time.Duration {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		tb.Fatalf("%s=%q: %v", name, v, err)
	}
	return d
}

// rtEnvInt reads an integer from the environment, or def.
func rtEnvInt(tb testing.TB, name string, def int) int {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		tb.Fatalf("%s=%q: %v", name, v, err)
	}
	return n
}
