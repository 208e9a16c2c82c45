package bench

import (
	"context"
	"os"
	"runtime/pprof"
	"strconv"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/protctl/protctl/internal/testenv"
	"github.com/protctl/protctl/pkg/broker/memorybroker"
	"github.com/protctl/protctl/pkg/runtime"
	"github.com/protctl/protctl/pkg/runtime/kafkasource"
	"github.com/protctl/protctl/pkg/runtime/memstore"
	"github.com/protctl/protctl/pkg/runtime/topic"
)

// The Kafka benchmark measures topic subscriptions (pkg/runtime's
// topic.Consumer) end to end against a raw franz-go consumer reading
// the same topic of the same in-process kfake cluster in the same run.

const (
	kTopic      = "bench.orders"
	kPartitions = 12
	kAggregates = 1200 // 100 per partition
)

// kRecords is the topic's size: 1M small records (about 40 bytes of
// value, an id header, a key). PROTCTL_BENCH_KAFKA_RECORDS overrides it
// for a quick look.
func kRecords(tb testing.TB) int {
	if s := os.Getenv("PROTCTL_BENCH_KAFKA_RECORDS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil {
			tb.Fatal(err)
		}
		return n
	}
	return 1_000_000
}

// kPopulate produces n records over the topic's partitions, aggregate by
// aggregate in round robin, and waits for them (not measured).
func kPopulate(tb testing.TB, k *testenv.Kafka, n int) {
	tb.Helper()
	cl := k.Client(tb, kgo.ProducerLinger(5*time.Millisecond), kgo.ProducerBatchMaxBytes(1<<20), kgo.MaxBufferedRecords(100_000))
	ctx := context.Background()
	errs := make(chan error, 1)
	var pending atomic.Int64
	for i := 0; i < n; i++ {
		agg := i % kAggregates
		key := "agg-" + strconv.Itoa(agg)
		id := key + "-" + strconv.Itoa(i/kAggregates)
		r := &kgo.Record{
			Topic:     kTopic,
			Partition: int32(agg % kPartitions),
			Key:       []byte(key),
			Value:     []byte(`{"data":{"n":` + strconv.Itoa(i) + `},"type":"Bench"}`),
			Headers:   []kgo.RecordHeader{{Key: "id", Value: []byte(id)}},
		}
		pending.Add(1)
		cl.Produce(ctx, r, func(_ *kgo.Record, err error) {
			if err != nil {
				select {
				case errs <- err:
				default:
				}
			}
			pending.Add(-1)
		})
	}
	if err := cl.Flush(ctx); err != nil {
		tb.Fatal(err)
	}
	select {
	case err := <-errs:
		tb.Fatalf("produce: %v", err)
	default:
	}
}

// kRaw consumes the whole topic with a plain franz-go client (direct
// partition consumption from the start, no group, no commits) and returns
// how long it took to see every record.
func kRaw(tb testing.TB, k *testenv.Kafka, n int) time.Duration {
	tb.Helper()
	start := time.Now()
	cl, err := kgo.NewClient(kgo.SeedBrokers(k.Brokers...), kgo.ConsumeTopics(kTopic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		tb.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	seen := 0
	for seen < n {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			tb.Fatalf("raw consumer: %d of %d records: %v", seen, n, err)
		}
		fs.EachError(func(t string, p int32, err error) { tb.Fatalf("raw consumer: %s/%d: %v", t, p, err) })
		seen += fs.NumRecords()
	}
	return time.Since(start)
}

// kRuntime consumes the whole topic with a Node running topic.Consumer
// (stores in memory, a no-op handler) and returns how long it took from
// Start until every record was handled, and until the first was. The
// node joins, takes all 12 leases, reads through the shared reader into
// the lanes and saves checkpoints as it goes, as in production.
func kRuntime(tb testing.TB, k *testenv.Kafka, n int) (took, first time.Duration) {
	tb.Helper()
	var opts []kafkasource.Option
	if v := os.Getenv("PROTCTL_BENCH_KAFKA_FETCH_BYTES"); v != "" {
		// The reader's fetch size per partition, to compare settings
		// (docs/benchmarks.md); the default is the package's.
		n, err := strconv.ParseInt(v, 10, 32)
		if err != nil {
			tb.Fatalf("PROTCTL_BENCH_KAFKA_FETCH_BYTES: %v", err)
		}
		opts = append(opts, kafkasource.WithFetchMaxPartitionBytes(int32(n)))
	}
	src, err := kafkasource.New(k.Brokers, opts...)
	if err != nil {
		tb.Fatal(err)
	}
	defer src.Close()
	b := memorybroker.New()
	store := memstore.New(b.Faults())
	var handled, firstAt atomic.Int64
	done := make(chan struct{})
	target := int64(n)
	ts, err := topic.New(topic.Config{
		Topic: kTopic,
		Subscriptions: []topic.Subscription{{Name: "bench.sync", Handler: runtime.HandlerFunc(
			func(context.Context, runtime.Message) error {
				switch handled.Add(1) {
				case 1:
					firstAt.Store(time.Now().UnixNano())
				case target:
					close(done)
				}
				return nil
			})}},
		Source:      topic.Kafka(src),
		Leases:      b,
		Checkpoints: store,
		Ledger:      store,
	})
	if err != nil {
		tb.Fatal(err)
	}
	node, err := runtime.NewNode(runtime.NodeConfig{Service: "bench", NodeID: "n1", Membership: store}, ts)
	if err != nil {
		tb.Fatal(err)
	}
	start := time.Now()
	if err := node.Start(context.Background()); err != nil {
		tb.Fatal(err)
	}
	select {
	case <-done:
	case <-time.After(10 * time.Minute):
		tb.Fatalf("runtime: %d of %d records handled", handled.Load(), n)
	}
	took = time.Since(start)
	first = time.Duration(firstAt.Load() - start.UnixNano())
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := node.Stop(ctx); err != nil {
		tb.Fatal(err)
	}
	if c := ts.Counters(); c[runtime.CounterProcessed] != int64(n) || c[topic.CounterDuplicates] != 0 {
		tb.Fatalf("runtime counters %v: want %d processed, no duplicates", c, n)
	}
	return took, first
}

// BenchmarkKafkaTopic: records per second through topic subscriptions
// (12 partitions, 1M small records, no-op handler) against a raw franz-go
// consumer reading the same topic on the same kfake, in one run; the two
// alternate which goes first each iteration. Metrics: raw_rec/s,
// runtime_rec/s and ratio (runtime over raw; the target is >= 0.7), the
// process's CPU per record in each phase (kfake's serving included),
// which moves less than the rates on a shared machine, and
// runtime_first_ms, the time from Node.Start to the first record handled
// (the join), which the runtime's time includes.
//
// The handler gets Message.Headers as the runtime always passes them (a
// view over the record, nothing built per record).
func BenchmarkKafkaTopic(b *testing.B) {
	n := kRecords(b)
	k := testenv.StartKafka(b, kPartitions, kTopic)
	kPopulate(b, k, n)
	var rawTotal, rtTotal, rawCPU, rtCPU, rtFirst time.Duration
	// The phases carry pprof labels (inherited by the goroutines they
	// start), so a -cpuprofile tells them apart: -tagfocus phase=runtime.
	raw := func() {
		c := cpuTime()
		pprof.Do(context.Background(), pprof.Labels("phase", "raw"), func(context.Context) { rawTotal += kRaw(b, k, n) })
		rawCPU += cpuTime() - c
	}
	rt := func() {
		c := cpuTime()
		pprof.Do(context.Background(), pprof.Labels("phase", "runtime"), func(context.Context) {
			took, first := kRuntime(b, k, n)
			rtTotal += took
			rtFirst += first
		})
		rtCPU += cpuTime() - c
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if i%2 == 0 {
			raw()
			rt()
		} else {
			rt()
			raw()
		}
	}
	b.StopTimer()
	total := float64(n * b.N)
	b.ReportMetric(total/rawTotal.Seconds(), "raw_rec/s")
	b.ReportMetric(total/rtTotal.Seconds(), "runtime_rec/s")
	b.ReportMetric(rawTotal.Seconds()/rtTotal.Seconds(), "ratio")
	b.ReportMetric(float64(rawCPU.Nanoseconds())/total, "raw_cpu_ns/rec")
	b.ReportMetric(float64(rtCPU.Nanoseconds())/total, "runtime_cpu_ns/rec")
	b.ReportMetric(float64(rtFirst.Milliseconds())/float64(b.N), "runtime_first_ms")
	b.ReportMetric(0, "ns/op")
}

// cpuTime is the process's CPU time so far (user + system), kfake's
// included: with the machine shared, CPU per record says what a run costs
// when wall-clock rates swing with the neighbours' load.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
