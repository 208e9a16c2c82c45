package bench

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/protctl/protctl/internal/testenv"
	"github.com/protctl/protctl/pkg/broker"
	"github.com/protctl/protctl/pkg/runtime"
)

// BenchmarkRuntimeIdle measures what a node holding 10,000 idle partitions
// (PROTCTL_BENCH_IDLE_PARTITIONS) costs Redis: the commands per second the
// server runs, from INFO commandstats over a measured window
// (PROTCTL_BENCH_IDLE_WINDOW, default 30s), which counts every command,
// those run inside scripts included. Target: at most 50 per second in
// total. Protean's pattern (a polling loop per partition) costs about 8
// per partition per second, 80,000 per second here.
//
// The node runs with the production defaults (lease TTL 15s, renewal and
// heartbeat every 3s, discovery every 30s). Each partition gets one entry;
// the node handles them all, lets the partitions go idle (their leases
// released after IdleAfter) and only then is the window measured. After
// the window one idle partition gets an entry written with a plain XADD
// (no wake-up signal, as Protean writes), and the time until it is
// handled is reported too: idle partitions cost nothing and still answer.
func BenchmarkRuntimeIdle(b *testing.B) {
	ctx := context.Background()
	srv := testenv.StartRedis(b)
	partitions := rtEnvInt(b, "PROTCTL_BENCH_IDLE_PARTITIONS", 10000)
	window := rtEnvDuration(b, "PROTCTL_BENCH_IDLE_WINDOW", 30*time.Second)
	admin := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer admin.Close()
	streams := rtPopulate(ctx, b, admin, rtCategory, partitions, 1)

	var handled atomic.Int64
	woken := make(chan time.Time, 1)
	h := runtime.HandlerFunc(func(ctx context.Context, m runtime.Message) error {
		if handled.Add(1) > int64(partitions) {
			select {
			case woken <- time.Now():
			default:
			}
		}
		return nil
	})
	n, sub, calls, c := rtNode(b, srv.Addr, "node-1", rtCategory, h, nil, nil)
	defer c.Close()
	defer func() {
		sctx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		if err := n.Stop(sctx); err != nil {
			b.Error(err)
		}
	}()
	testenv.EventuallyEvery(b, 5*time.Minute, 100*time.Millisecond, "every partition handled", func() (bool, string) {
		n := handled.Load()
		return n >= int64(partitions), fmt.Sprintf("%d of %d handled", n, partitions)
	})
	testenv.EventuallyEvery(b, 5*time.Minute, 100*time.Millisecond, "every partition idle without a lease", func() (bool, string) {
		st := sub.Status()
		return len(st.Held) == 0 && st.Counters[runtime.CounterWatched] == int64(partitions),
			fmt.Sprintf("%d held, %d watched", len(st.Held), st.Counters[runtime.CounterWatched])
	})
	// Let the last restart of the wait and a heartbeat pass.
	time.Sleep(sub.Config().WaitTimeout + sub.Config().RenewEvery)

	b.ResetTimer()
	var perSec, clientPerSec float64
	for i := 0; i < b.N; i++ {
		before := rtCommandStats(ctx, b, admin)
		sent := calls.n.Load()
		start := time.Now()
		time.Sleep(window)
		after := rtCommandStats(ctx, b, admin)
		elapsed := time.Since(start)
		sent = calls.n.Load() - sent
		diff, total, detail := rtDiff(before, after)
		// The measuring INFO is not the node's.
		total -= diff["info"]
		perSec = float64(total) / elapsed.Seconds()
		clientPerSec = float64(sent) / elapsed.Seconds()
		b.Logf("%d idle partitions, %s: %d commands (%.1f/s) run by the server, %d calls (%.2f/s) sent by the node; by command: %s",
			partitions, elapsed.Round(time.Millisecond), total, perSec, sent, clientPerSec, detail)
		if st := sub.Status(); len(st.Held) != 0 {
			b.Errorf("leases held during the window: %d", len(st.Held))
		}
	}
	b.StopTimer()
	b.ReportMetric(perSec, "redis-cmds/s")
	b.ReportMetric(clientPerSec, "client-calls/s")
	b.ReportMetric(float64(partitions), "idle-partitions")

	// An idle partition still answers a plain XADD.
	start := time.Now()
	if err := admin.XAdd(ctx, &redis.XAddArgs{Stream: streams[partitions/2], Values: []string{broker.DataField, `{"data":{}}`}}).Err(); err != nil {
		b.Fatal(err)
	}
	select {
	case at := <-woken:
		b.ReportMetric(at.Sub(start).Seconds()*1000, "wake-ms")
	case <-time.After(time.Minute):
		b.Fatal("an entry appended to an idle partition was not handled")
	}
}
