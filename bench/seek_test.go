package bench

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/protctl/protctl/internal/audit"
	"github.com/protctl/protctl/internal/repair"
	"github.com/protctl/protctl/internal/testenv"
	"github.com/protctl/protctl/pkg/broker"
	"github.com/protctl/protctl/pkg/broker/redisbroker"
	"github.com/protctl/protctl/pkg/runtime/redisstore"
)

// seekBenchIDs are the entries every partition of BenchmarkSeek10k holds
// (milliseconds 1000, 2000, 3000 of 1970: the --to time is then exact).
var seekBenchIDs = []string{"1000-0", "2000-0", "3000-0"}

// BenchmarkSeek10k: `partitions seek C --group G --to TIME` over 10,000
// unowned Protean-layout partitions (no lease, three entries each, the
// group at the end), planned and applied with the Repairer exactly as
// the CLI builds it (failure ledger and audit recorder included), against
// the raw baseline in the same run: one round trip per partition, XGROUP
// SETID to the same position, sequentially. The --to time (1970-01-01
// 00:00:02Z) rewinds every group by two entries. Each iteration puts the
// groups back at the end (pipelined, off the clock) before each side.
//
// It reports the wall time of the plan, the apply and the baseline, the
// Redis commands each made (INFO commandstats: those run inside scripts
// included), redis-server's CPU seconds (INFO cpu), the client's round
// trips, and the ratios to the baseline.
// After the clock it checks that both sides left every group at the same
// position.
//
//	go test -run '^$' -bench Seek10k -benchtime 1x -count 3 ./bench/
//
// SEEK_BENCH_PARTITIONS overrides the partition count.
func BenchmarkSeek10k(b *testing.B) {
	n := 10_000
	if v := os.Getenv("SEEK_BENCH_PARTITIONS"); v != "" {
		n, _ = strconv.Atoi(v)
	}
	ctx := context.Background()
	srv := testenv.StartRedis(b)
	c := srv.Client(b)
	const category, group = "bench::seek", "app.Projector"
	l := broker.ProteanLayout
	populateSeek(ctx, b, c, category, group, n)
	var rts rtCounter
	c.AddHook(&rts)
	rep := repair.New(c, redisbroker.New(c, redisbroker.WithLayout(l)),
		repair.WithLedger(redisstore.New(c)),
		repair.WithRecorder(audit.NewRecorder(c, audit.Origin{User: "bench", Host: "bench", CommandLine: "protctl partitions seek " + category + " --group " + group + " --to 1970-01-01T00:00:02Z --yes"})),
	)
	to, err := repair.ParseSeekTo("1970-01-01T00:00:02Z", time.Now())
	if err != nil {
		b.Fatal(err)
	}
	target := broker.StreamID{Ms: 1999, Seq: ^uint64(0)}.String()
	streams := make([]string, n)
	for i := range streams {
		streams[i] = l.Stream(category, "k"+strconv.Itoa(i))
	}
	b.Logf("loadavg before: %s", loadAvg())
	for i := 0; i < b.N; i++ {
		resetSeek(ctx, b, c, streams, group)
		before, rt0, cpu0 := rtCommandStats(ctx, b, c), rts.n.Load(), serverCPU(ctx, b, c)
		start := time.Now()
		plan, err := rep.PlanSeek(ctx, repair.SeekRequest{Category: category, Group: group, Target: to, By: "bench"})
		if err != nil {
			b.Fatal(err)
		}
		planT := time.Since(start)
		mid, rt1, cpu1 := rtCommandStats(ctx, b, c), rts.n.Load(), serverCPU(ctx, b, c)
		start = time.Now()
		out, err := rep.Apply(ctx, plan, repair.ApplyOptions{})
		if err != nil || out != repair.OutcomeApplied {
			b.Fatalf("apply: %s, %v", out, err)
		}
		applyT := time.Since(start)
		after, rt2, cpu2 := rtCommandStats(ctx, b, c), rts.n.Load(), serverCPU(ctx, b, c)
		checkSeek(ctx, b, c, streams, group, target)
		_, planCmds, planTop := rtDiff(before, mid)
		_, applyCmds, applyTop := rtDiff(mid, after)

		resetSeek(ctx, b, c, streams, group)
		before, rt3, cpu3 := rtCommandStats(ctx, b, c), rts.n.Load(), serverCPU(ctx, b, c)
		start = time.Now()
		for _, s := range streams {
			if err := c.XGroupSetID(ctx, s, group, target).Err(); err != nil {
				b.Fatal(err)
			}
		}
		rawT := time.Since(start)
		after, rt4, cpu4 := rtCommandStats(ctx, b, c), rts.n.Load(), serverCPU(ctx, b, c)
		checkSeek(ctx, b, c, streams, group, target)
		_, rawCmds, _ := rtDiff(before, after)
		// A window counts two INFOs (the commandstats that opened it, in
		// its own count, and the cpu one): take them out, commands and
		// round trips.
		planCmds, applyCmds, rawCmds = planCmds-2, applyCmds-2, rawCmds-2

		b.Logf("plan %s: %d commands (%s); apply %s: %d commands (%s); raw %s: %d commands; loadavg %s",
			planT, planCmds, planTop, applyT, applyCmds, applyTop, rawT, rawCmds, loadAvg())
		b.ReportMetric(planT.Seconds(), "plan-s")
		b.ReportMetric(applyT.Seconds(), "apply-s")
		b.ReportMetric(rawT.Seconds(), "raw-s")
		b.ReportMetric(float64(planCmds), "plan-cmds")
		b.ReportMetric(float64(applyCmds), "apply-cmds")
		b.ReportMetric(float64(rawCmds), "raw-cmds")
		b.ReportMetric(float64(rt1-rt0-2), "plan-roundtrips")
		b.ReportMetric(float64(rt2-rt1-2), "apply-roundtrips")
		b.ReportMetric(float64(rt4-rt3-2), "raw-roundtrips")
		b.ReportMetric(cpu1-cpu0, "plan-redis-cpu-s")
		b.ReportMetric(cpu2-cpu1, "apply-redis-cpu-s")
		b.ReportMetric(cpu4-cpu3, "raw-redis-cpu-s")
		b.ReportMetric(applyT.Seconds()/rawT.Seconds(), "apply/raw")
		b.ReportMetric((planT+applyT).Seconds()/rawT.Seconds(), "seek/raw")
		b.ReportMetric(0, "ns/op")
	}
}

// populateSeek lays down n unowned partitions in Protean's layout,
// pipelined: the index, three entries (seekBenchIDs) and group at the end.
func populateSeek(ctx context.Context, tb testing.TB, c *redis.Client, category, group string, n int) {
	tb.Helper()
	l := broker.ProteanLayout
	body := `{"data":{"orderId":"o"},"metadata":{"headers":{"type":"shop.OrderPlaced.v1"},"domain":{"kind":"EVENT"}}}`
	p := c.Pipeline()
	for i := 0; i < n; i++ {
		key := "k" + strconv.Itoa(i)
		s := l.Stream(category, key)
		p.SAdd(ctx, l.IndexKey(category), key)
		for _, id := range seekBenchIDs {
			p.XAdd(ctx, &redis.XAddArgs{Stream: s, ID: id, Values: []string{broker.DataField, body}})
		}
		p.XGroupCreate(ctx, s, group, "$")
		if i%1000 == 999 || i == n-1 {
			if _, err := p.Exec(ctx); err != nil {
				tb.Fatal(err)
			}
		}
	}
}

// resetSeek puts the group back at every stream's end, pipelined.
func resetSeek(ctx context.Context, tb testing.TB, c *redis.Client, streams []string, group string) {
	tb.Helper()
	p := c.Pipeline()
	for i, s := range streams {
		p.XGroupSetID(ctx, s, group, "$")
		if i%1000 == 999 || i == len(streams)-1 {
			if _, err := p.Exec(ctx); err != nil {
				tb.Fatal(err)
			}
		}
	}
}

// checkSeek fails unless every stream's group is at want.
func checkSeek(ctx context.Context, tb testing.TB, c *redis.Client, streams []string, group, want string) {
	tb.Helper()
	p := c.Pipeline()
	cmds := make([]*redis.XInfoGroupsCmd, len(streams))
	for i, s := range streams {
		cmds[i] = p.XInfoGroups(ctx, s)
	}
	if _, err := p.Exec(ctx); err != nil {
		tb.Fatal(err)
	}
	for i, cmd := range cmds {
		g := cmd.Val()
		if len(g) != 1 || g[0].Name != group || g[0].LastDeliveredID != want {
			tb.Fatal(fmt.Sprintf("%s: groups %+v, want %s at %s", streams[i], g, group, want))
		}
	}
}
