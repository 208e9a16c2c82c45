package bench

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/protctl/protctl/internal/handlers"
	"github.com/protctl/protctl/internal/testenv"
	"github.com/protctl/protctl/pkg/runtime"
	"github.com/protctl/protctl/pkg/runtime/partitioned"
)

// The handler benchmarks (handlers_test.go) run `run node`'s handlers
// (internal/handlers) behind a real runtime.Node on the Redis partitioned
// runtime: partitions partitions of entries entries each, as many workers
// as partitions, so that every partition has a message in flight at once.

// hbResult is one handler's measure over the runs of a benchmark.
type hbResult struct {
	dur      time.Duration
	msgs     int64
	failures int64
	calls    []time.Duration // every handler call's duration (wait included)
}

func (r *hbResult) rate() float64 { return float64(r.msgs) / r.dur.Seconds() }

// quantile returns the q-quantile of the calls' durations, in ms.
func (r *hbResult) quantile(q float64) float64 {
	if len(r.calls) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), r.calls...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return float64(s[int(q*float64(len(s)-1))]) / 1e6
}

// hbRun flushes Redis, writes partitions x entries entries, runs a node
// whose subscription calls h until every entry was handled, and adds the
// time from the node's start to the last handler call to r.
func hbRun(ctx context.Context, b *testing.B, srv *testenv.Redis, admin *redis.Client, h runtime.Handler, partitions, entries int, r *hbResult) {
	b.Helper()
	b.StopTimer()
	if err := admin.FlushAll(ctx).Err(); err != nil {
		b.Fatal(err)
	}
	rtPopulate(ctx, b, admin, rtCategory, partitions, entries)
	total := int64(partitions * entries)
	var handled, failed atomic.Int64
	var mu sync.Mutex
	done := make(chan struct{})
	counted := runtime.HandlerFunc(func(ctx context.Context, m runtime.Message) error {
		start := time.Now()
		err := h.Handle(ctx, m)
		d := time.Since(start)
		mu.Lock()
		r.calls = append(r.calls, d)
		mu.Unlock()
		if err != nil {
			failed.Add(1)
			return err
		}
		if handled.Add(1) == total {
			close(done)
		}
		return nil
	})
	b.StartTimer()
	start := time.Now()
	n, _, _, c := rtNode(b, srv.Addr, "node-1", rtCategory, counted, func(cfg *partitioned.Config) {
		cfg.BatchSize = entries
		cfg.Workers = partitions
		cfg.Retry = runtime.RetryPolicy{Attempts: 1000, Backoff: 10 * time.Millisecond, MaxBackoff: 100 * time.Millisecond}
	}, nil)
	select {
	case <-done:
	case <-time.After(10 * time.Minute):
		b.Fatalf("handled %d of %d", handled.Load(), total)
	}
	r.dur += time.Since(start)
	b.StopTimer()
	r.msgs += handled.Load()
	r.failures += failed.Load()
	sctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := n.Stop(sctx); err != nil {
		b.Error(err)
	}
	_ = c.Close()
	b.StartTimer()
}

func hbScript(b *testing.B, body string) string {
	b.Helper()
	p := filepath.Join(b.TempDir(), "h.sh")
	if err := os.WriteFile(p, []byte("#!/bin/sh\n"+body), 0o755); err != nil {
		b.Fatal(err)
	}
	return p
}

// BenchmarkExecBound: 40 aggregates in flight through an exec handler,
// with the node's bound (handlers.DefaultExecConcurrency: 4 per CPU) and
// without one (a fork per message at once, as before issue 16 item 7), in
// alternating order in the same run. Reported: events/s of each, the
// ratio, the handler calls' p50/p99/max in ms (bounded: the wait for a
// slot included), the mean wait for a slot and the mean run (what
// exec.timeout bounds: the call less its wait).
//
//	go test -run '^$' -bench BenchmarkExecBound -benchtime 2x -count 3 ./bench/
func BenchmarkExecBound(b *testing.B) {
	const partitions, entries = 40, 10
	scripts := []struct{ name, body string }{
		{"sleep20ms", "cat >/dev/null\nsleep 0.02\n"}, // the handler
		{"cat", "cat >/dev/null\n"},                   // fork, exec, read stdin
	}
	for _, sc := range scripts {
		b.Run(sc.name, func(b *testing.B) {
			ctx := context.Background()
			srv := testenv.StartRedis(b)
			admin := redis.NewClient(&redis.Options{Addr: srv.Addr})
			defer admin.Close()
			sh := hbScript(b, sc.body)
			var waitSum atomic.Int64
			var waits atomic.Int64
			slots := handlers.NewSlots(handlers.DefaultExecConcurrency(), func(d time.Duration) { waitSum.Add(int64(d)); waits.Add(1) })
			bounded, err := handlers.NewExec(handlers.ExecConfig{Command: []string{sh}, Timeout: 5 * time.Minute, Slots: slots})
			if err != nil {
				b.Fatal(err)
			}
			unbounded, err := handlers.NewExec(handlers.ExecConfig{Command: []string{sh}, Timeout: 5 * time.Minute})
			if err != nil {
				b.Fatal(err)
			}
			var withBound, without hbResult
			for i := 0; i < b.N; i++ {
				runs := []func(){
					func() { hbRun(ctx, b, srv, admin, bounded, partitions, entries, &withBound) },
					func() { hbRun(ctx, b, srv, admin, unbounded, partitions, entries, &without) },
				}
				for k := range runs {
					runs[(i+k)%len(runs)]()
				}
			}
			b.StopTimer()
			if withBound.failures+without.failures > 0 {
				b.Fatalf("failures: bounded %d, unbounded %d", withBound.failures, without.failures)
			}
			b.ReportMetric(float64(handlers.DefaultExecConcurrency()), "bound")
			b.ReportMetric(withBound.rate(), "bounded-events/s")
			b.ReportMetric(without.rate(), "unbounded-events/s")
			b.ReportMetric(withBound.rate()/without.rate(), "ratio-bounded/unbounded")
			b.ReportMetric(withBound.quantile(0.5), "bounded-p50-ms")
			b.ReportMetric(withBound.quantile(0.99), "bounded-p99-ms")
			b.ReportMetric(withBound.quantile(1), "bounded-max-ms")
			b.ReportMetric(without.quantile(0.5), "unbounded-p50-ms")
			b.ReportMetric(without.quantile(0.99), "unbounded-p99-ms")
			b.ReportMetric(without.quantile(1), "unbounded-max-ms")
			if n := waits.Load(); n > 0 {
				var sum time.Duration
				for _, d := range withBound.calls {
					sum += d
				}
				b.ReportMetric(float64(waitSum.Load())/float64(n)/1e6, "bounded-wait-mean-ms")
				b.ReportMetric(float64(sum-time.Duration(waitSum.Load()))/float64(len(withBound.calls))/1e6, "bounded-run-mean-ms")
				var usum time.Duration
				for _, d := range without.calls {
					usum += d
				}
				b.ReportMetric(float64(usum)/float64(len(without.calls))/1e6, "unbounded-run-mean-ms")
			}
		})
	}
}

// BenchmarkHandlerKinds: the exec, http and process handlers behind the
// same node in the same run, 40 partitions in flight at once: exec (a
// fork per event, the node's default bound), http (a POST per event to
// an in-process server answering 204) and process (one long-lived child,
// examples/processhandler, over newline-delimited JSON). Reported: the
// events/s of each and the ratios of process to exec and to http.
//
//	go test -run '^$' -bench BenchmarkHandlerKinds -benchtime 2x -count 3 ./bench/
func BenchmarkHandlerKinds(b *testing.B) {
	const partitions = 40
	ctx := context.Background()
	srv := testenv.StartRedis(b)
	admin := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer admin.Close()

	execH, err := handlers.NewExec(handlers.ExecConfig{
		Command: []string{hbScript(b, "cat >/dev/null\n")}, Timeout: 5 * time.Minute,
		Slots: handlers.NewSlots(handlers.DefaultExecConcurrency(), nil),
	})
	if err != nil {
		b.Fatal(err)
	}
	web := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.WriteHeader(http.StatusNoContent)
	}))
	defer web.Close()
	httpH, err := handlers.NewHTTP(handlers.HTTPConfig{URL: web.URL})
	if err != nil {
		b.Fatal(err)
	}
	bin := filepath.Join(b.TempDir(), "processhandler")
	if out, err := exec.Command("go", "build", "-o", bin, "../examples/processhandler").CombinedOutput(); err != nil {
		b.Fatalf("go build examples/processhandler: %v\n%s", err, out)
	}
	procH, err := handlers.NewProcess(handlers.ProcessConfig{Command: []string{bin}, MaxInFlight: 64})
	if err != nil {
		b.Fatal(err)
	}
	defer procH.Close(ctx)

	var ex, ht, pr hbResult
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		runs := []func(){
			func() { hbRun(ctx, b, srv, admin, execH, partitions, 10, &ex) },
			func() { hbRun(ctx, b, srv, admin, httpH, partitions, 250, &ht) },
			func() { hbRun(ctx, b, srv, admin, procH, partitions, 250, &pr) },
		}
		for k := range runs {
			runs[(i+k)%len(runs)]()
		}
	}
	b.StopTimer()
	if ex.failures+ht.failures+pr.failures > 0 {
		b.Fatalf("failures: exec %d, http %d, process %d", ex.failures, ht.failures, pr.failures)
	}
	b.ReportMetric(ex.rate(), "exec-events/s")
	b.ReportMetric(ht.rate(), "http-events/s")
	b.ReportMetric(pr.rate(), "process-events/s")
	b.ReportMetric(pr.rate()/ex.rate(), "ratio-process/exec")
	b.ReportMetric(pr.rate()/ht.rate(), "ratio-process/http")
	b.ReportMetric(pr.quantile(0.99), "process-p99-ms")
	b.ReportMetric(ht.quantile(0.99), "http-p99-ms")
}
