package bench

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/redis/go-redis/v9"

	"github.com/protctl/protctl/internal/exporter"
	"github.com/protctl/protctl/internal/inspect"
	"github.com/protctl/protctl/internal/testenv"
	"github.com/protctl/protctl/pkg/broker"
)

// serverCommands is the total of calls= over redis-server's INFO
// commandstats: the commands the server executed, whatever client sent
// them. The INFO that reads it is counted by the next reading.
func serverCommands(ctx context.Context, tb testing.TB, c *redis.Client) int64 {
	tb.Helper()
	info, err := c.Info(ctx, "commandstats").Result()
	if err != nil {
		tb.Fatal(err)
	}
	var n int64
	for _, line := range strings.Split(info, "\n") {
		_, rest, ok := strings.Cut(line, ":calls=")
		if !ok {
			continue
		}
		v, _, _ := strings.Cut(rest, ",")
		k, _ := strconv.ParseInt(v, 10, 64)
		n += k
	}
	return n
}

// BenchmarkExporterCollect100k: one exporter collection of 100,000
// partitions (every one with a pending entry and an undelivered one, so
// every group pays the health round trip: the worst case for the reads),
// against `partitions ls`'s listing (inspect.Partitions without health)
// of the same data in the same run: wall time, round trips, Redis
// commands (INFO commandstats delta, the INFO itself subtracted) and
// peak RSS (VmHWM of this process, reset through /proc/self/clear_refs
// after debug.FreeOSMemory before each); then scrapes while collections
// run back to back: the exporter's handler (pre-encoded bytes) and
// promhttp over Collector.Gatherer (the families gathered and encoded
// per scrape), taking turns, 200 each (p99: the 2nd slowest).
//
// The thresholds are set so that every partition stays OK or IDLE (a
// healthy deployment: the per-key series are the top N); with the
// defaults, populating takes long enough that every partition turns
// LAGGING and each gets per-key series (4 x 100,000), which is what
// EXPORTER_BENCH_UNHEALTHY=1 measures.
//
//	go test -run '^$' -bench ExporterCollect100k -benchtime 1x -timeout 30m ./bench/
//
// EXPORTER_BENCH_PARTITIONS overrides the partition count (100,000),
// EXPORTER_BENCH_SCRAPES the scrapes per handler and phase (200).
func BenchmarkExporterCollect100k(b *testing.B) {
	n := 100_000
	if v := os.Getenv("EXPORTER_BENCH_PARTITIONS"); v != "" {
		n, _ = strconv.Atoi(v)
	}
	nScrapes := 200
	if v := os.Getenv("EXPORTER_BENCH_SCRAPES"); v != "" {
		nScrapes, _ = strconv.Atoi(v)
	}
	th := inspect.Thresholds{LaggingAfter: 24 * time.Hour, StallAfter: 24 * time.Hour, OrphanAfter: 24 * time.Hour}
	if os.Getenv("EXPORTER_BENCH_UNHEALTHY") == "1" {
		th = inspect.Thresholds{LaggingAfter: time.Millisecond, StallAfter: 24 * time.Hour, OrphanAfter: 24 * time.Hour}
	}
	ctx := context.Background()
	srv := testenv.StartRedis(b)
	c := srv.Client(b)
	const category = "bench::inspect"
	t0 := time.Now()
	populateInspect(ctx, b, c, category, n)
	b.ReportMetric(time.Since(t0).Seconds(), "setup-s")
	var rts rtCounter
	c.AddHook(&rts)
	in := inspect.New(c, broker.ProteanLayout)
	col, err := exporter.New(exporter.Source{Inspector: in}, exporter.Config{Categories: []string{category}, Interval: time.Hour, Thresholds: th})
	if err != nil {
		b.Fatal(err)
	}
	// measure runs f with the round trips, server commands, wall time and
	// peak RSS counted around it.
	measure := func(f func()) (d time.Duration, trips, cmds, hwm int64) {
		debug.FreeOSMemory()
		resetHWM()
		before := serverCommands(ctx, b, c)
		rts.n.Store(0)
		start := time.Now()
		f()
		d, trips = time.Since(start), rts.n.Load()
		hwm = readHWM()
		cmds = serverCommands(ctx, b, c) - before - 1
		return
	}
	for i := 0; i < b.N; i++ {
		ls, lsRTs, lsCmds, lsHWM := measure(func() {
			parts, err := in.Partitions(ctx, category, inspect.PartitionOptions{})
			if err != nil || len(parts) != n {
				b.Fatalf("ls: %d partitions, %v", len(parts), err)
			}
		})
		collect, colRTs, colCmds, colHWM := measure(func() {
			if err := col.Collect(ctx); err != nil {
				b.Fatal(err)
			}
		})
		s := col.Snapshot()
		// Every partition was read and given a status.
		got := 0
		for _, v := range s.Groups[0].Statuses {
			got += v
		}
		if got != n || s.Groups[0].Consumers != int64(n) {
			b.Fatalf("collection saw %d partitions, %d consumers, of %d: %+v", got, s.Groups[0].Consumers, n, s.Groups[0].Statuses)
		}

		// Scrapes with no collection running (the machine's own latency,
		// the same run's baseline), then while collections run back to
		// back.
		// Real servers on loopback: a scrape is a GET read to its end (the
		// transport asks for gzip, as Prometheus does, and inflates it).
		var urls []string
		for _, hd := range []http.Handler{col.Handler(), promhttp.HandlerFor(col.Gatherer(), promhttp.HandlerOpts{})} {
			srv := httptest.NewServer(hd)
			defer srv.Close()
			urls = append(urls, srv.URL+"/metrics")
		}
		size := make([]int64, len(urls))
		scrapes := func() [][]time.Duration {
			lat := make([][]time.Duration, len(urls))
			for range nScrapes {
				for h, url := range urls {
					t0 := time.Now()
					resp, err := http.Get(url)
					if err != nil {
						b.Fatal(err)
					}
					size[h], _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					lat[h] = append(lat[h], time.Since(t0))
				}
				time.Sleep(5 * time.Millisecond) // a scrape pace, not a wait for state
			}
			return lat
		}
		idle := scrapes()
		var collections atomic.Int64
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
				collections.Add(1)
			}
		}()
		lat := scrapes()
		during := collections.Load()
		close(stop)
		<-done
		b.Logf("%d collections ended while scraping", during)

		b.ReportMetric(collect.Seconds(), "collect-s")
		b.ReportMetric(ls.Seconds(), "ls-s")
		b.ReportMetric(float64(colRTs), "collect-roundtrips")
		b.ReportMetric(float64(lsRTs), "ls-roundtrips")
		b.ReportMetric(float64(colCmds), "collect-commands")
		b.ReportMetric(float64(lsCmds), "ls-commands")
		b.ReportMetric(float64(colHWM)/(1<<20), "collect-peak-rss-MB")
		b.ReportMetric(float64(lsHWM)/(1<<20), "ls-peak-rss-MB")
		b.ReportMetric(float64(len(s.Keys)), "per-key-series-sets")
		b.ReportMetric(float64(nScrapes), "scrapes")
		for h, name := range []string{"scrape", "promhttp-scrape"} { // size: as read, inflated
			for _, run := range []struct {
				suffix string
				l      []time.Duration
			}{{"", lat[h]}, {"-idle", idle[h]}} {
				slices.Sort(run.l)
				b.ReportMetric(float64(run.l[len(run.l)/2].Microseconds())/1000, name+run.suffix+"-p50-ms")
				b.ReportMetric(float64(run.l[len(run.l)*99/100-1].Microseconds())/1000, name+run.suffix+"-p99-ms")
			}
			b.ReportMetric(float64(size[h])/1024, name+"-KB")
		}
	}
}
