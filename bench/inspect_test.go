package bench

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"runtime/debug"
	"runtime/metrics"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/protctl/protctl/internal/inspect"
	"github.com/protctl/protctl/internal/testenv"
	"github.com/protctl/protctl/pkg/broker"
)

// BenchmarkInspectPartitions100k lists 100,000 partitions with
// inspect.Partitions (SSCAN pages, pipelined chunks) and, in the same
// run, with a baseline that reads exactly the same data one command per
// round trip. It reports both wall times, the ratio, the round trips of
// each, the time to encode the list as the CLI's JSON document, and the
// peak memory of the pipelined listing (process RSS high-water mark,
// reset before the listing, and peak Go heap).
//
// Run it once (populating takes a few seconds, the baseline tens):
//
//	go test -run '^$' -bench InspectPartitions100k -benchtime 1x ./bench/
//
// INSPECT_BENCH_PARTITIONS overrides the partition count.
func BenchmarkInspectPartitions100k(b *testing.B) {
	n := 100_000
	if v := os.Getenv("INSPECT_BENCH_PARTITIONS"); v != "" {
		n, _ = strconv.Atoi(v)
	}
	ctx := context.Background()
	srv := testenv.StartRedis(b)
	c := srv.Client(b)
	const category = "bench::inspect"
	populateInspect(ctx, b, c, category, n)

	var rts rtCounter
	c.AddHook(&rts)
	in := inspect.New(c, broker.ProteanLayout)

	for i := 0; i < b.N; i++ {
		// Pipelined, with the peak memory of the listing and its JSON
		// encoding alone (populate's garbage returned to the OS first).
		debug.FreeOSMemory()
		resetHWM()
		stopHeap := sampleHeap()
		load0 := loadAvg()
		cpu0, srv0 := processCPU(), serverCPU(ctx, b, c)
		rts.n.Store(0)
		start := time.Now()
		parts, err := in.Partitions(ctx, category, inspect.PartitionOptions{})
		if err != nil {
			b.Fatal(err)
		}
		listed := time.Since(start)
		pipeRTs := rts.n.Load()
		pipeCPU, pipeSrv := processCPU()-cpu0, serverCPU(ctx, b, c)-srv0
		jsonStart := time.Now()
		if err := encodeList(io.Discard, parts); err != nil {
			b.Fatal(err)
		}
		encoded := time.Since(jsonStart)
		peakHeap := stopHeap()
		hwm := readHWM()
		if len(parts) != n {
			b.Fatalf("listed %d partitions, want %d", len(parts), n)
		}
		checkInspectSample(b, parts)
		parts = nil

		// Baseline: the same reads, one round trip per command.
		cpu0, srv0 = processCPU(), serverCPU(ctx, b, c)
		rts.n.Store(0)
		start = time.Now()
		base, err := listOneByOne(ctx, c, broker.ProteanLayout, category)
		if err != nil {
			b.Fatal(err)
		}
		baseline := time.Since(start)
		baseRTs := rts.n.Load()
		baseCPU, baseSrv := processCPU()-cpu0, serverCPU(ctx, b, c)-srv0
		if len(base) != n {
			b.Fatalf("baseline listed %d partitions, want %d", len(base), n)
		}

		b.ReportMetric(listed.Seconds(), "pipelined-s")
		b.ReportMetric((listed + encoded).Seconds(), "pipelined+json-s")
		b.ReportMetric(baseline.Seconds(), "baseline-s")
		b.ReportMetric(baseline.Seconds()/listed.Seconds(), "x-faster")
		b.ReportMetric(float64(pipeRTs), "pipelined-roundtrips")
		b.ReportMetric(float64(baseRTs), "baseline-roundtrips")
		b.ReportMetric(pipeCPU+pipeSrv, "pipelined-cpu-s")
		b.ReportMetric(baseCPU+baseSrv, "baseline-cpu-s")
		b.ReportMetric(float64(hwm)/(1<<20), "peak-rss-MB")
		b.ReportMetric(float64(peakHeap)/(1<<20), "peak-heap-MB")
		b.Logf("%d partitions: pipelined %s (+%s JSON) in %d round trips, baseline %s in %d round trips: %.1fx; peak RSS %.0f MB, peak heap %.0f MB",
			n, listed.Round(time.Millisecond), encoded.Round(time.Millisecond), pipeRTs, baseline.Round(time.Millisecond), baseRTs,
			baseline.Seconds()/listed.Seconds(), float64(hwm)/(1<<20), float64(peakHeap)/(1<<20))
		b.Logf("CPU seconds (client + redis-server): pipelined %.2f + %.2f, baseline %.2f + %.2f; load average %s before, %s after",
			pipeCPU, pipeSrv, baseCPU, baseSrv, load0, loadAvg())
	}
}

// encodeList writes the `partitions ls -o json` document item by item,
// as a printer that streams does, so the document never sits in memory.
func encodeList(w io.Writer, parts []inspect.Partition) error {
	bw := bufio.NewWriterSize(w, 64<<10)
	if _, err := bw.WriteString(`{"apiVersion":"protctl.dev/v1","kind":"PartitionList","items":[`); err != nil {
		return err
	}
	enc := json.NewEncoder(bw)
	enc.SetEscapeHTML(false)
	for i := range parts {
		if i > 0 {
			bw.WriteByte(',')
		}
		if err := enc.Encode(&parts[i]); err != nil {
			return err
		}
	}
	if _, err := bw.WriteString("]}\n"); err != nil {
		return err
	}
	return bw.Flush()
}

// populateInspect lays down n partitions in Protean's layout, pipelined:
// three envelopes each, a group that has read two and acked one (one
// pending, lag one), a generation on every partition and a lease on every
// other one, and a backfill lane with one entry on every tenth.
func populateInspect(ctx context.Context, tb testing.TB, c *redis.Client, category string, n int) {
	tb.Helper()
	l := broker.ProteanLayout
	const group = "app.Projector"
	body := `{"data":{"orderId":"o","amount":12.5},"metadata":{"headers":{"id":"7c3e","type":"shop.OrderPlaced.v1","time":"2024-05-01T10:00:00Z","stream":"shop::order-o"},"domain":{"kind":"EVENT"}}}`
	flush := func(p redis.Pipeliner) {
		if _, err := p.Exec(ctx); err != nil {
			tb.Fatal(err)
		}
	}
	p := c.Pipeline()
	for i := 0; i < n; i++ {
		key := "k" + strconv.Itoa(i)
		s := l.Stream(category, key)
		p.SAdd(ctx, l.IndexKey(category), key)
		for e := 0; e < 3; e++ {
			p.XAdd(ctx, &redis.XAddArgs{Stream: s, Values: []string{broker.DataField, body}})
		}
		p.XGroupCreate(ctx, s, group, "0")
		p.XReadGroup(ctx, &redis.XReadGroupArgs{Group: group, Consumer: "node-1:1", Streams: []string{s, ">"}, Count: 2, Block: -1})
		p.Set(ctx, l.GenerationKey(group, key), 1, 0)
		if i%2 == 0 {
			p.Set(ctx, l.LeaseKey(group, key), "node-1:1", time.Hour)
		}
		if i%10 == 0 {
			p.XAdd(ctx, &redis.XAddArgs{Stream: l.LaneStream(category, key, broker.DefaultBackfillSuffix), Values: []string{broker.DataField, body}})
		}
		if i%500 == 499 {
			flush(p)
		}
	}
	flush(p)
	// Ack the first entry of each partition (so one stays pending).
	p = c.Pipeline()
	for i := 0; i < n; i++ {
		s := l.Stream(category, "k"+strconv.Itoa(i))
		p.XRangeN(ctx, s, "-", "+", 1)
		if i%1000 == 999 || i == n-1 {
			cmds, err := p.Exec(ctx)
			if err != nil {
				tb.Fatal(err)
			}
			ack := c.Pipeline()
			for _, cmd := range cmds {
				m := cmd.(*redis.XMessageSliceCmd)
				ack.XAck(ctx, m.Args()[1].(string), group, m.Val()[0].ID)
			}
			flush(ack)
		}
	}
}

// checkInspectSample fails unless a listed partition looks like what
// populateInspect wrote, so the benchmark cannot be fast by reading less.
func checkInspectSample(tb testing.TB, parts []inspect.Partition) {
	tb.Helper()
	for _, p := range parts {
		if p.Key != "k0" {
			continue
		}
		g, ok := p.Group("app.Projector")
		if !ok || p.Length != 4 || len(p.Lanes) != 2 || g.Pending != 1 || g.Lag == nil || *g.Lag != 2 || g.Lease == nil || g.Lease.Owner != "node-1" {
			tb.Fatalf("k0 listed as %+v", p)
		}
		return
	}
	tb.Fatal("k0 not listed")
}

// listOneByOne is the baseline: the reads inspect.Partitions makes, each
// in its own round trip: SSCAN pages of the index, then per partition
// XLEN, XREVRANGE COUNT 1 and XINFO GROUPS on each lane, and GET lease,
// PTTL lease and GET generation per group.
func listOneByOne(ctx context.Context, c *redis.Client, l broker.Layout, category string) ([]inspect.Partition, error) {
	var out []inspect.Partition
	seen := map[string]bool{}
	var cursor uint64
	for {
		keys, next, err := c.SScan(ctx, l.IndexKey(category), cursor, "", 1000).Result()
		if err != nil {
			return nil, err
		}
		for _, k := range keys {
			if seen[k] {
				continue
			}
			seen[k] = true
			p := inspect.Partition{Category: category, Key: k, Stream: l.Stream(category, k)}
			groups := map[string]bool{}
			var names []string
			for _, s := range []string{p.Stream, l.LaneStream(category, k, broker.DefaultBackfillSuffix)} {
				n, err := c.XLen(ctx, s).Result()
				if err != nil {
					return nil, err
				}
				last, err := c.XRevRangeN(ctx, s, "+", "-", 1).Result()
				if err != nil {
					return nil, err
				}
				gs, err := c.XInfoGroups(ctx, s).Result()
				if err != nil && !strings.HasPrefix(err.Error(), "ERR no such key") {
					return nil, err
				}
				lane := inspect.Lane{Stream: s, Exists: err == nil, Length: n}
				if len(last) > 0 {
					lane.LastEntryID = &last[0].ID
				}
				p.Length += n
				p.Lanes = append(p.Lanes, lane)
				for _, g := range gs {
					if !groups[g.Name] {
						groups[g.Name] = true
						names = append(names, g.Name)
					}
				}
			}
			for _, g := range names {
				grp := inspect.Group{Name: g}
				v, err := c.Get(ctx, l.LeaseKey(g, k)).Result()
				if err != nil && err != redis.Nil {
					return nil, err
				}
				ttl, err := c.PTTL(ctx, l.LeaseKey(g, k)).Result()
				if err != nil {
					return nil, err
				}
				if v != "" {
					ms := ttl.Milliseconds()
					grp.Lease = &inspect.LeaseInfo{Token: v, TTLMs: &ms}
				}
				gen, err := c.Get(ctx, l.GenerationKey(g, k)).Int64()
				if err != nil && err != redis.Nil {
					return nil, err
				}
				grp.Generation = &gen
				p.Groups = append(p.Groups, grp)
			}
			out = append(out, p)
		}
		cursor = next
		if cursor == 0 {
			return out, nil
		}
	}
}

// rtCounter counts round trips: a command or a whole pipeline is one.
type rtCounter struct{ n atomic.Int64 }

func (c *rtCounter) DialHook(next redis.DialHook) redis.DialHook { return next }

func (c *rtCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		c.n.Add(1)
		return next(ctx, cmd)
	}
}

func (c *rtCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		c.n.Add(1)
		return next(ctx, cmds)
	}
}

// processCPU is this process's user+system CPU time in seconds.
func processCPU() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e9
}

// serverCPU is redis-server's used_cpu_user + used_cpu_sys in seconds.
func serverCPU(ctx context.Context, tb testing.TB, c *redis.Client) float64 {
	info, err := c.Info(ctx, "cpu").Result()
	if err != nil {
		tb.Fatal(err)
	}
	var total float64
	for _, line := range strings.Split(info, "\n") {
		name, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if ok && (name == "used_cpu_user" || name == "used_cpu_sys") {
			f, _ := strconv.ParseFloat(v, 64)
			total += f
		}
	}
	return total
}

// loadAvg is the 1-minute load average, to tell a busy machine's run.
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	return strings.Fields(string(b))[0]
}

// resetHWM resets the process's peak RSS (VmHWM) to its current RSS
// (Linux: writing 5 to /proc/self/clear_refs). Elsewhere it does nothing
// and readHWM reports 0.
func resetHWM() { _ = os.WriteFile("/proc/self/clear_refs", []byte("5"), 0) }

// readHWM returns VmHWM from /proc/self/status in bytes (0 if unknown).
func readHWM() int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			var kb int64
			fmt.Sscan(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), &kb)
			return kb << 10
		}
	}
	return 0
}

// sampleHeap polls the live heap every 5ms until the returned func is
// called, which returns the highest value seen.
func sampleHeap() func() uint64 {
	const name = "/memory/classes/heap/objects:bytes"
	var (
		peak uint64
		wg   sync.WaitGroup
	)
	done := make(chan struct{})
	s := []metrics.Sample{{Name: name}}
	read := func() {
		metrics.Read(s)
		if v := s[0].Value.Uint64(); v > peak {
			peak = v
		}
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(5 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-done:
				read()
				return
			case <-t.C:
				read()
			}
		}
	}()
	return func() uint64 {
		close(done)
		wg.Wait()
		return peak
	}
}
