package bench

import (
	"bufio"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/protctl/protctl/internal/testenv"
	"github.com/protctl/protctl/pkg/broker"
)

// BenchmarkCLIPartitionsList100k runs the whole command
//
//	protctl partitions ls bench::cli -o json
//
// as a built binary (go build, the way operators run it) against a
// redis-server holding 100,000 partitions (populateCLIBench: three
// envelopes each, one pending, lag 2, a lease on every other one, a
// backfill lane on every tenth), with stdout to a file. It reports the
// wall time of the process, its peak RSS (VmHWM, sampled; see
// watchHWM), its CPU seconds and redis-server's (INFO cpu), the size of
// the document, and wall and memory of the variant without a category (a
// paced SCAN of the keyspace for categories first). After
// the clock it checks the document: one PartitionList of n items.
//
// Targets (issue 10): under 2 s wall with JSON output, under 200 MB peak.
//
//	go test -run '^$' -bench CLIPartitionsList100k -benchtime 3x ./bench/
//
// CLI_BENCH_PARTITIONS overrides the partition count.
func BenchmarkCLIPartitionsList100k(b *testing.B) {
	n := 100_000
	if v := os.Getenv("CLI_BENCH_PARTITIONS"); v != "" {
		n, _ = strconv.Atoi(v)
	}
	dir, home := b.TempDir(), b.TempDir()
	bin := filepath.Join(dir, "protctl")
	build := exec.Command("go", "build", "-o", bin, "github.com/protctl/protctl/cmd/protctl")
	build.Stderr = os.Stderr
	if err := build.Run(); err != nil {
		b.Fatalf("go build: %v", err)
	}
	ctx := context.Background()
	srv := testenv.StartRedis(b)
	c := srv.Client(b)
	const category = "bench::cli"
	populateCLIBench(ctx, b, c, category, n)

	// serverCPU is redis-server's CPU seconds so far (INFO cpu).
	serverCPU := func() float64 {
		info, err := c.Info(ctx, "cpu").Result()
		if err != nil {
			b.Fatal(err)
		}
		var total float64
		for _, line := range strings.Split(info, "\r\n") {
			for _, k := range []string{"used_cpu_sys:", "used_cpu_user:"} {
				if v, ok := strings.CutPrefix(line, k); ok {
					f, _ := strconv.ParseFloat(v, 64)
					total += f
				}
			}
		}
		return total
	}
	type figures struct {
		wall                 time.Duration
		rssMB, outMB         float64
		clientCPU, serverCPU float64
	}
	run := func(args ...string) figures {
		b.Helper()
		out := filepath.Join(dir, "out.json")
		f, err := os.Create(out)
		if err != nil {
			b.Fatal(err)
		}
		cmd := exec.Command(bin, append(args, "--redis", srv.URL(), "-o", "json")...)
		cmd.Env = []string{"HOME=" + home, "XDG_CONFIG_HOME=" + home, "PATH=" + os.Getenv("PATH")}
		cmd.Stdout = f
		cmd.Stderr = os.Stderr
		cpu0 := serverCPU()
		start := time.Now()
		if err := cmd.Start(); err != nil {
			b.Fatal(err)
		}
		hwm := watchHWM(cmd.Process.Pid)
		err = cmd.Wait()
		fig := figures{wall: time.Since(start), serverCPU: serverCPU() - cpu0}
		fig.rssMB = float64(hwm()) / (1 << 20)
		f.Close()
		if err != nil {
			b.Fatalf("%v: %v", args, err)
		}
		fig.clientCPU = (cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()).Seconds()
		st, err := os.Stat(out)
		if err != nil {
			b.Fatal(err)
		}
		fig.outMB = float64(st.Size()) / (1 << 20)
		checkCLIList(b, out, n)
		return fig
	}

	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		load0 := loadAverage()
		one := run("partitions", "ls", category)
		scan := run("partitions", "ls")
		b.ReportMetric(one.wall.Seconds(), "wall-s")
		b.ReportMetric(one.rssMB, "peak-rss-MB")
		b.ReportMetric(one.clientCPU, "client-cpu-s")
		b.ReportMetric(one.serverCPU, "server-cpu-s")
		b.ReportMetric(one.outMB, "json-MB")
		b.ReportMetric(scan.wall.Seconds(), "scan-wall-s")
		b.ReportMetric(scan.rssMB, "scan-peak-rss-MB")
		b.Logf("%d partitions: %s wall, peak RSS %.0f MB, CPU client %.2f s + server %.2f s, %.0f MB of JSON; "+
			"without a category (SCAN first): %s, %.0f MB, CPU %.2f + %.2f s; load average %s -> %s",
			n, one.wall.Round(time.Millisecond), one.rssMB, one.clientCPU, one.serverCPU, one.outMB,
			scan.wall.Round(time.Millisecond), scan.rssMB, scan.clientCPU, scan.serverCPU, load0, loadAverage())
	}
}

// loadAverage is the 1-minute load average (Linux), for the log: wall
// times on a busy machine say little without it.
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return "?"
	}
	return f[0]
}

// checkCLIList fails unless path holds one PartitionList document of n
// items whose k0 looks like what populateCLIBench wrote, so the command
// cannot be fast by printing less. It decodes one item at a time, so the
// benchmark's own memory stays small.
func checkCLIList(tb testing.TB, path string, n int) {
	tb.Helper()
	f, err := os.Open(path)
	if err != nil {
		tb.Fatal(err)
	}
	defer f.Close()
	dec := json.NewDecoder(bufio.NewReaderSize(f, 1<<20))
	expect := func(want json.Delim) {
		tok, err := dec.Token()
		if err != nil || tok != want {
			tb.Fatalf("the output is not a PartitionList document: got %v (%v), want %v", tok, err, want)
		}
	}
	expect('{')
	var kind string
	items, k0 := 0, false
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			tb.Fatal(err)
		}
		switch tok {
		case "kind":
			if err := dec.Decode(&kind); err != nil {
				tb.Fatal(err)
			}
		case "items":
			expect('[')
			for dec.More() {
				var it struct {
					Key    string `json:"key"`
					Length int64  `json:"length"`
					Groups []struct {
						Pending int64  `json:"pending"`
						Lag     *int64 `json:"lag"`
					} `json:"groups"`
				}
				if err := dec.Decode(&it); err != nil {
					tb.Fatal(err)
				}
				items++
				if it.Key == "k0" {
					k0 = true
					if it.Length != 4 || len(it.Groups) != 1 || it.Groups[0].Pending != 1 || it.Groups[0].Lag == nil || *it.Groups[0].Lag != 2 {
						tb.Fatalf("k0 printed as %+v", it)
					}
				}
			}
			expect(']')
		default:
			var skip json.RawMessage
			if err := dec.Decode(&skip); err != nil {
				tb.Fatal(err)
			}
		}
	}
	expect('}')
	if kind != "PartitionList" || items != n || !k0 {
		tb.Fatalf("kind %q with %d items (k0 printed: %v), want PartitionList with %d", kind, items, k0, n)
	}
}

// watchHWM samples the peak resident set (VmHWM) of process pid every
// 5ms until the returned func is called (after the process was waited
// for), which returns the last value read, in bytes. VmHWM belongs to the
// process's own address space, created at exec, so unlike the rusage of
// a child started by a large parent it does not include the parent's
// memory. Linux only; 0 elsewhere.
func watchHWM(pid int) func() int64 {
	var last atomic.Int64
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		path := "/proc/" + strconv.Itoa(pid) + "/status"
		t := time.NewTicker(5 * time.Millisecond)
		defer t.Stop()
		for {
			if b, err := os.ReadFile(path); err == nil {
				for _, line := range strings.Split(string(b), "\n") {
					if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
						kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
						if kb<<10 > last.Load() {
							last.Store(kb << 10)
						}
					}
				}
			}
			select {
			case <-done:
				return
			case <-t.C:
			}
		}
	}()
	return func() int64 {
		close(done)
		wg.Wait()
		return last.Load()
	}
}

// populateCLIBench lays down n partitions of category in Protean's layout,
// pipelined: three envelopes each, a group that has read two and acked
// one (one pending, lag one on the main lane), a generation on every
// partition and a lease on every other one, and a backfill lane with one
// entry on every tenth (lag 2 there).
func populateCLIBench(ctx context.Context, tb testing.TB, c *redis.Client, category string, n int) {
	tb.Helper()
	l := broker.ProteanLayout
	const group = "app.Projector"
	body := `{"data":{"orderId":"o","amount":12.5},"metadata":{"headers":{"id":"7c3e","type":"shop.OrderPlaced.v1","time":"2024-05-01T10:00:00Z","stream":"shop::order-o"},"domain":{"kind":"EVENT"}}}`
	exec := func(p redis.Pipeliner) []redis.Cmder {
		cmds, err := p.Exec(ctx)
		if err != nil {
			tb.Fatal(err)
		}
		return cmds
	}
	const chunk = 500
	for lo := 0; lo < n; lo += chunk {
		hi := min(lo+chunk, n)
		p := c.Pipeline()
		for i := lo; i < hi; i++ {
			key := "k" + strconv.Itoa(i)
			s := l.Stream(category, key)
			p.SAdd(ctx, l.IndexKey(category), key)
			for e := 0; e < 3; e++ {
				p.XAdd(ctx, &redis.XAddArgs{Stream: s, Values: []string{broker.DataField, body}})
			}
			p.XGroupCreate(ctx, s, group, "0")
			p.Set(ctx, l.GenerationKey(group, key), 1, 0)
			if i%2 == 0 {
				p.Set(ctx, l.LeaseKey(group, key), "node-1:1", time.Hour)
			}
			if i%10 == 0 {
				p.XAdd(ctx, &redis.XAddArgs{Stream: l.LaneStream(category, key, broker.DefaultBackfillSuffix), Values: []string{broker.DataField, body}})
			}
		}
		exec(p)
		// Deliver two entries of each main lane and ack the first.
		p = c.Pipeline()
		reads := make([]*redis.XStreamSliceCmd, 0, hi-lo)
		for i := lo; i < hi; i++ {
			s := l.Stream(category, "k"+strconv.Itoa(i))
			reads = append(reads, p.XReadGroup(ctx, &redis.XReadGroupArgs{Group: group, Consumer: "node-1:1", Streams: []string{s, ">"}, Count: 2, Block: -1}))
		}
		exec(p)
		p = c.Pipeline()
		for _, r := range reads {
			st := r.Val()[0]
			p.XAck(ctx, st.Stream, group, st.Messages[0].ID)
		}
		exec(p)
	}
}
