package bench

import (
	"context"
	"io"
	"net/http/httptest"
	"os"
	"runtime/debug"
	"slices"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/protctl/protctl/internal/exporter"
	"github.com/protctl/protctl/internal/inspect"
	"github.com/protctl/protctl/internal/testenv"
	"github.com/protctl/protctl/pkg/broker"
)

// cmdCounter counts the Redis commands a client sends (a pipeline counts
// each of its commands).
type cmdCounter struct{ n atomic.Int64 }

func (c *cmdCounter) DialHook(next redis.DialHook) redis.DialHook { return next }
func (c *cmdCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error { c.n.Add(1); return next(ctx, cmd) }
}
func (c *cmdCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		c.n.Add(int64(len(cmds)))
		return next(ctx, cmds)
	}
}

// BenchmarkExporterCollect100k: one exporter collection of 100,000
// partitions (every one with a pending entry and an undelivered one, so
// every group pays the health round trip: the worst case), against
// `partitions ls`'s listing (inspect.Partitions without health) of the
// same data in the same run: wall time, round trips, Redis commands and
// the collection's peak RSS; then the p99 latency of scrapes served
// while collections run back to back.
//
//	go test -run '^$' -bench ExporterCollect100k -benchtime 1x ./bench/
//
// INSPECT_BENCH_PARTITIONS overrides the partition count.
func BenchmarkExporterCollect100k(b *testing.B) {
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
	var cmds cmdCounter
	c.AddHook(&rts)
	c.AddHook(&cmds)
	in := inspect.New(c, broker.ProteanLayout)
	col, err := exporter.New(exporter.Source{Inspector: in}, exporter.Config{Categories: []string{category}, Interval: time.Hour})
	if err != nil {
		b.Fatal(err)
	}
	for i := 0; i < b.N; i++ {
		rts.n.Store(0)
		cmds.n.Store(0)
		start := time.Now()
		parts, err := in.Partitions(ctx, category, inspect.PartitionOptions{})
		if err != nil || len(parts) != n {
			b.Fatalf("ls: %d partitions, %v", len(parts), err)
		}
		ls, lsRTs, lsCmds := time.Since(start), rts.n.Load(), cmds.n.Load()
		parts = nil

		debug.FreeOSMemory()
		resetHWM()
		rts.n.Store(0)
		cmds.n.Store(0)
		start = time.Now()
		if err := col.Collect(ctx); err != nil {
			b.Fatal(err)
		}
		collect, colRTs, colCmds := time.Since(start), rts.n.Load(), cmds.n.Load()
		hwm := readHWM()
		s := col.Snapshot()
		// Every partition was read and given a status (which one depends
		// on how long populating took: its entries age meanwhile).
		got := 0
		for _, v := range s.Groups[0].Statuses {
			got += v
		}
		if got != n || s.Groups[0].Consumers != int64(n) {
			b.Fatalf("collection saw %d partitions, %d consumers, of %d: %+v", got, s.Groups[0].Consumers, n, s.Groups[0].Statuses)
		}

		// Scrapes while collections run back to back.
		h := col.Handler()
		stop := make(chan struct{})
		done := make(chan struct{})
		go func() {
			defer close(done)
			for {
				select {
				case <-stop:
					return
				default:
				}
				_ = col.Collect(ctx)
			}
		}()
		var lat []time.Duration
		for range 200 {
			t0 := time.Now()
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
			_, _ = io.Copy(io.Discard, rec.Body)
			lat = append(lat, time.Since(t0))
			time.Sleep(5 * time.Millisecond) // a scrape pace, not a wait for state
		}
		close(stop)
		<-done
		slices.Sort(lat)
		p99 := lat[len(lat)*99/100-1]

		b.ReportMetric(collect.Seconds(), "collect-s")
		b.ReportMetric(ls.Seconds(), "ls-s")
		b.ReportMetric(float64(colRTs), "collect-roundtrips")
		b.ReportMetric(float64(lsRTs), "ls-roundtrips")
		b.ReportMetric(float64(colCmds), "collect-commands")
		b.ReportMetric(float64(lsCmds), "ls-commands")
		b.ReportMetric(float64(hwm)/(1<<20), "collect-peak-rss-MB")
		b.ReportMetric(float64(p99.Microseconds())/1000, "scrape-p99-ms")
		b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "scrape-p50-ms")
	}
}
