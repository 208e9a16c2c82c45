package kafkasource_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/protctl/protctl/internal/testenv"
	"github.com/protctl/protctl/pkg/runtime/kafkasource"
)

// partitionedSource is what the runtime needs from a source of
// partitioned records; the runtime declares its own copy where it uses
// it. This one only proves Source keeps satisfying it.
type partitionedSource interface {
	Partitions(ctx context.Context, topic string) ([]int32, error)
	Watermarks(ctx context.Context, topic string, partitions ...int32) (map[int32]kafkasource.Watermarks, error)
	Scan(ctx context.Context, topic string, partition int32, from, to int64, fn func(*kgo.Record) error) (int64, error)
	Rescan(ctx context.Context, topic string, partition int32, from int64, aggregate string) ([]*kgo.Record, error)
	NewReader(topic string) (*kafkasource.Reader, error)
	Close()
}

var _ partitionedSource = (*kafkasource.Source)(nil)

func newSource(t *testing.T, brokers []string, opts ...kafkasource.Option) *kafkasource.Source {
	t.Helper()
	s, err := kafkasource.New(brokers, opts...)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(s.Close)
	return s
}

func testCtx(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// produce writes n records to topic/partition with keys from keys (round
// robin) and values "v<i>"; it returns them with offsets set.
func produce(t *testing.T, k *testenv.Kafka, cl *kgo.Client, topic string, partition int32, n int, keys ...string) []*kgo.Record {
	t.Helper()
	if len(keys) == 0 {
		keys = []string{"k"}
	}
	rs := make([]*kgo.Record, n)
	for i := range rs {
		rs[i] = &kgo.Record{Topic: topic, Partition: partition, Key: []byte(keys[i%len(keys)]), Value: []byte(fmt.Sprintf("v%d", i))}
	}
	return k.Produce(t, cl, rs...)
}

func offsets(rs []*kgo.Record) []int64 {
	out := make([]int64, len(rs))
	for i, r := range rs {
		out[i] = r.Offset
	}
	return out
}

func span(from, to int64) []int64 {
	var out []int64
	for o := from; o < to; o++ {
		out = append(out, o)
	}
	return out
}

func TestPartitions(t *testing.T) {
	k := testenv.StartKafka(t, 3, "orders")
	s := newSource(t, k.Brokers)
	ctx := testCtx(t)

	if err := s.Ping(ctx); err != nil {
		t.Fatalf("Ping = %v, want nil from a broker that answers", err)
	}

	got, err := s.Partitions(ctx, "orders")
	if err != nil || !slices.Equal(got, []int32{0, 1, 2}) {
		t.Fatalf("Partitions(orders) = %v, %v; want [0 1 2]", got, err)
	}
	if _, err := s.Partitions(ctx, "missing"); !errors.Is(err, kafkasource.ErrTopicNotFound) {
		t.Fatalf("Partitions(missing) = %v, want ErrTopicNotFound", err)
	}
	if _, err := s.Partitions(ctx, "missing"); !errors.Is(err, kafkasource.ErrTopicNotFound) {
		t.Fatalf("asking again must not have created the topic: %v", err)
	}

	// A topic that gains partitions shows them (the runtime's refresh).
	if err := k.Cluster.CreateTopic("payments", 2, nil); err != nil {
		t.Fatal(err)
	}
	got, err = s.Partitions(ctx, "payments")
	if err != nil || !slices.Equal(got, []int32{0, 1}) {
		t.Fatalf("Partitions(payments) = %v, %v; want [0 1]", got, err)
	}
}

func TestWatermarks(t *testing.T) {
	k := testenv.StartKafka(t, 3, "orders")
	cl := k.Client(t)
	s := newSource(t, k.Brokers)
	ctx := testCtx(t)

	produce(t, k, cl, "orders", 0, 5)
	produce(t, k, cl, "orders", 1, 2)

	got, err := s.Watermarks(ctx, "orders")
	want := map[int32]kafkasource.Watermarks{0: {0, 5}, 1: {0, 2}, 2: {0, 0}}
	if err != nil || !mapsEqual(got, want) {
		t.Fatalf("Watermarks(orders) = %v, %v; want %v", got, err, want)
	}
	one, err := s.PartitionWatermarks(ctx, "orders", 1)
	if err != nil || one != (kafkasource.Watermarks{Earliest: 0, Head: 2}) {
		t.Fatalf("PartitionWatermarks(orders, 1) = %v, %v", one, err)
	}

	k.DeleteRecords(t, cl, "orders", 0, 3)
	one, err = s.PartitionWatermarks(ctx, "orders", 0)
	if err != nil || one != (kafkasource.Watermarks{Earliest: 3, Head: 5}) {
		t.Fatalf("after DeleteRecords below 3: %v, %v; want {3 5}", one, err)
	}

	if _, err := s.Watermarks(ctx, "orders", 7); !errors.Is(err, kafkasource.ErrPartitionNotFound) {
		t.Fatalf("Watermarks(orders, 7) = %v, want ErrPartitionNotFound", err)
	}
	if _, err := s.Watermarks(ctx, "missing"); !errors.Is(err, kafkasource.ErrTopicNotFound) {
		t.Fatalf("Watermarks(missing) = %v, want ErrTopicNotFound", err)
	}
	if _, err := s.Watermarks(ctx, "orders", -1); !errors.Is(err, kafkasource.ErrInvalidArgument) {
		t.Fatalf("Watermarks(orders, -1) = %v, want ErrInvalidArgument", err)
	}
}

func TestScan(t *testing.T) {
	k := testenv.StartKafka(t, 2, "orders")
	cl := k.Client(t)
	ctx := testCtx(t)
	produce(t, k, cl, "orders", 1, 20)

	collect := func(s *kafkasource.Source, from, to int64) ([]*kgo.Record, int64, error) {
		var got []*kgo.Record
		next, err := s.Scan(ctx, "orders", 1, from, to, func(r *kgo.Record) error {
			got = append(got, r)
			return nil
		})
		return got, next, err
	}

	tests := []struct {
		name     string
		opts     []kafkasource.Option
		from, to int64
		want     []int64
		wantNext int64
	}{
		{"to_head", nil, 5, kafkasource.Head, span(5, 20), 20},
		{"from_start", nil, 0, kafkasource.Head, span(0, 20), 20},
		{"bounded", nil, 5, 8, span(5, 8), 8},
		{"to_past_head_is_head", nil, 18, 100, span(18, 20), 20},
		{"at_head_is_empty", nil, 20, kafkasource.Head, nil, 20},
		{"tiny_fetches", []kafkasource.Option{kafkasource.WithScanBytes(64)}, 2, kafkasource.Head, span(2, 20), 20},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newSource(t, k.Brokers, tt.opts...)
			got, next, err := collect(s, tt.from, tt.to)
			if err != nil {
				t.Fatalf("Scan: %v", err)
			}
			if !slices.Equal(offsets(got), tt.want) || next != tt.wantNext {
				t.Fatalf("Scan(%d, %d) = offsets %v next %d; want %v next %d", tt.from, tt.to, offsets(got), next, tt.want, tt.wantNext)
			}
			for _, r := range got {
				if want := fmt.Sprintf("v%d", r.Offset); string(r.Value) != want || r.Topic != "orders" || r.Partition != 1 {
					t.Fatalf("record at %d = %s/%d %q, want orders/1 %q", r.Offset, r.Topic, r.Partition, r.Value, want)
				}
			}
		})
	}

	t.Run("fn_error_stops", func(t *testing.T) {
		s := newSource(t, k.Brokers)
		stop := errors.New("stop here")
		next, err := s.Scan(ctx, "orders", 1, 0, kafkasource.Head, func(r *kgo.Record) error {
			if r.Offset == 7 {
				return stop
			}
			return nil
		})
		if !errors.Is(err, stop) || next != 7 {
			t.Fatalf("Scan = %d, %v; want 7, the callback's error", next, err)
		}
	})
	t.Run("bad_input", func(t *testing.T) {
		s := newSource(t, k.Brokers)
		noop := func(*kgo.Record) error { return nil }
		if _, err := s.Scan(ctx, "orders", 9, 0, kafkasource.Head, noop); !errors.Is(err, kafkasource.ErrPartitionNotFound) {
			t.Errorf("partition 9: %v, want ErrPartitionNotFound", err)
		}
		if _, err := s.Scan(ctx, "nope", 0, 0, kafkasource.Head, noop); !errors.Is(err, kafkasource.ErrTopicNotFound) {
			t.Errorf("topic nope: %v, want ErrTopicNotFound", err)
		}
		if _, err := s.Scan(ctx, "orders", 0, -3, kafkasource.Head, noop); !errors.Is(err, kafkasource.ErrInvalidArgument) {
			t.Errorf("from -3: %v, want ErrInvalidArgument", err)
		}
	})
}

func TestScanCompressedBatches(t *testing.T) {
	k := testenv.StartKafka(t, 1, "orders")
	for _, codec := range []kgo.CompressionCodec{kgo.SnappyCompression(), kgo.ZstdCompression(), kgo.Lz4Compression(), kgo.GzipCompression()} {
		cl := k.Client(t, kgo.ProducerBatchCompression(codec))
		produce(t, k, cl, "orders", 0, 50)
	}
	s := newSource(t, k.Brokers, kafkasource.WithScanBytes(512))
	var got []*kgo.Record
	next, err := s.Scan(testCtx(t), "orders", 0, 0, kafkasource.Head, func(r *kgo.Record) error {
		got = append(got, r)
		return nil
	})
	if err != nil || next != 200 || !slices.Equal(offsets(got), span(0, 200)) {
		t.Fatalf("Scan over compressed batches = %d records (next %d), %v; want offsets 0..199", len(got), next, err)
	}
}

func TestRescanReturnsOnlyTheAggregateInOrder(t *testing.T) {
	k := testenv.StartKafka(t, 2, "orders")
	cl := k.Client(t)
	ctx := testCtx(t)

	// 30 records on partition 0, aggregates a, b, c interleaved; the same
	// aggregate is also carried in a header and in the JSON value, so each
	// way of finding it can be checked against the same answer.
	var rs []*kgo.Record
	for i := 0; i < 30; i++ {
		agg := []string{"a", "b", "c"}[i%3]
		rs = append(rs, &kgo.Record{
			Topic: "orders", Partition: 0, Key: []byte(agg),
			Headers: []kgo.RecordHeader{{Key: "aggregate", Value: []byte("h-" + agg)}},
			Value:   []byte(fmt.Sprintf(`{"data":{"i":%d},"metadata":{"headers":{"id":"e%d","aggregate":"j-%s"}}}`, i, i, agg)),
		})
	}
	k.Produce(t, cl, rs...)
	produce(t, k, cl, "orders", 1, 5, "b") // another partition: never included

	tests := []struct {
		name      string
		from      kafkasource.AggregateFrom
		aggregate string
	}{
		{"key", kafkasource.AggregateFrom{}, "b"},
		{"header", kafkasource.AggregateFrom{Header: "aggregate"}, "h-b"},
		{"json_path", kafkasource.AggregateFrom{JSONPath: "metadata.headers.aggregate"}, "j-b"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newSource(t, k.Brokers, kafkasource.WithAggregate(tt.from))
			got, err := s.Rescan(ctx, "orders", 0, 10, tt.aggregate)
			if err != nil {
				t.Fatalf("Rescan: %v", err)
			}
			// b is at offsets 1, 4, 7, ...; from 10 that is 10, 13, ..., 28.
			want := []int64{10, 13, 16, 19, 22, 25, 28}
			if !slices.Equal(offsets(got), want) {
				t.Fatalf("Rescan(from 10, %q) = offsets %v, want %v", tt.aggregate, offsets(got), want)
			}
			if none, err := s.Rescan(ctx, "orders", 0, 0, "zzz"); err != nil || len(none) != 0 {
				t.Fatalf("Rescan of an absent aggregate = %d records, %v; want none", len(none), err)
			}
		})
	}
}

func TestRescanBelowEarliestIsNotRetained(t *testing.T) {
	k := testenv.StartKafka(t, 1, "orders")
	cl := k.Client(t)
	s := newSource(t, k.Brokers)
	ctx := testCtx(t)
	produce(t, k, cl, "orders", 0, 10, "a", "b")

	if got, err := s.Rescan(ctx, "orders", 0, 3, "b"); err != nil || !slices.Equal(offsets(got), []int64{3, 5, 7, 9}) {
		t.Fatalf("before deletion: Rescan = %v, %v", offsets(got), err)
	}

	k.DeleteRecords(t, cl, "orders", 0, 6)
	wm, err := s.PartitionWatermarks(ctx, "orders", 0)
	if err != nil || wm.Earliest != 6 {
		t.Fatalf("earliest after DeleteRecords = %v, %v; want 6", wm, err)
	}

	_, err = s.Rescan(ctx, "orders", 0, 3, "b")
	if !errors.Is(err, kafkasource.ErrOffsetNotRetained) {
		t.Fatalf("Rescan below earliest = %v, want ErrOffsetNotRetained", err)
	}
	var oerr *kafkasource.OffsetError
	if !errors.As(err, &oerr) || oerr.Offset != 3 || oerr.Earliest != 6 || oerr.Head != 10 {
		t.Fatalf("error = %#v, want an OffsetError for offset 3 with partition [6, 10)", err)
	}
	if got, err := s.Rescan(ctx, "orders", 0, 6, "b"); err != nil || !slices.Equal(offsets(got), []int64{7, 9}) {
		t.Fatalf("Rescan from the earliest = %v, %v; want [7 9]", offsets(got), err)
	}
	if _, err := s.Rescan(ctx, "orders", 0, 11, "b"); !errors.Is(err, kafkasource.ErrOffsetBeyondHead) {
		t.Fatalf("Rescan past the head = %v, want ErrOffsetBeyondHead", err)
	}
}

// closedPort returns a loopback address nothing listens on.
func closedPort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

func TestUnreachableBrokerFailsWithinDeadline(t *testing.T) {
	addr := closedPort(t)
	s := newSource(t, []string{addr})

	calls := []struct {
		name string
		call func(ctx context.Context) error
	}{
		{"partitions", func(ctx context.Context) error { _, err := s.Partitions(ctx, "orders"); return err }},
		{"watermarks", func(ctx context.Context) error { _, err := s.Watermarks(ctx, "orders", 0); return err }},
		{"scan", func(ctx context.Context) error {
			_, err := s.Scan(ctx, "orders", 0, 0, kafkasource.Head, func(*kgo.Record) error { return nil })
			return err
		}},
		{"rescan", func(ctx context.Context) error { _, err := s.Rescan(ctx, "orders", 0, 0, "a"); return err }},
		{"ping", func(ctx context.Context) error { return s.Ping(ctx) }},
	}
	for _, c := range calls {
		t.Run(c.name, func(t *testing.T) {
			const deadline = 2 * time.Second
			ctx, cancel := context.WithTimeout(context.Background(), deadline)
			defer cancel()
			start := time.Now()
			err := c.call(ctx)
			took := time.Since(start)
			if took > deadline+time.Second {
				t.Errorf("took %v, past the %v deadline", took, deadline)
			}
			if !errors.Is(err, kafkasource.ErrUnreachable) {
				t.Fatalf("err = %v, want ErrUnreachable", err)
			}
			if msg := err.Error(); !strings.Contains(msg, addr) || !strings.Contains(msg, "refused") {
				t.Fatalf("error %q should name the address %s and say the connection was refused", msg, addr)
			}
			t.Logf("after %v: %v", took.Round(time.Millisecond), err)
		})
	}

	t.Run("no_deadline_still_ends", func(t *testing.T) {
		s := newSource(t, []string{addr}, kafkasource.WithRetry(3, time.Second))
		start := time.Now()
		_, err := s.Partitions(context.Background(), "orders")
		if took := time.Since(start); took > 10*time.Second {
			t.Fatalf("took %v with a 1s retry budget", took)
		}
		if !errors.Is(err, kafkasource.ErrUnreachable) {
			t.Fatalf("err = %v, want ErrUnreachable", err)
		}
	})
}

func TestSilentBrokerFailsWithinDeadline(t *testing.T) {
	// A listener that accepts and never answers: the worst case for a
	// client, since the TCP connect succeeds.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			t.Cleanup(func() { c.Close() })
		}
	}()
	s := newSource(t, []string{l.Addr().String()})
	ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err = s.Partitions(ctx, "orders")
	if took := time.Since(start); took > 3*time.Second {
		t.Fatalf("took %v, past the 1.5s deadline", took)
	}
	if !errors.Is(err, kafkasource.ErrUnreachable) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v, want ErrUnreachable wrapping the deadline", err)
	}
	t.Logf("error: %v", err)
}

func TestNewRejectsBadConfig(t *testing.T) {
	tests := []struct {
		name    string
		brokers []string
		opts    []kafkasource.Option
	}{
		{"no_brokers", nil, nil},
		{"broker_without_port", []string{"localhost"}, nil},
		{"unknown_sasl", []string{"127.0.0.1:9092"}, []kafkasource.Option{kafkasource.WithSASL("GSSAPI", "u", "p")}},
		{"sasl_without_user", []string{"127.0.0.1:9092"}, []kafkasource.Option{kafkasource.WithSASL("PLAIN", "", "p")}},
		{"zero_dial_timeout", []string{"127.0.0.1:9092"}, []kafkasource.Option{kafkasource.WithDialTimeout(0)}},
		{"zero_retries", []string{"127.0.0.1:9092"}, []kafkasource.Option{kafkasource.WithRetry(0, time.Second)}},
		{"bad_aggregate", []string{"127.0.0.1:9092"}, []kafkasource.Option{kafkasource.WithAggregate(kafkasource.AggregateFrom{JSONPath: "a..b"})}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if s, err := kafkasource.New(tt.brokers, tt.opts...); !errors.Is(err, kafkasource.ErrInvalidArgument) {
				if s != nil {
					s.Close()
				}
				t.Fatalf("New = %v, want ErrInvalidArgument", err)
			}
		})
	}
}

func TestClosedSource(t *testing.T) {
	k := testenv.StartKafka(t, 1, "orders")
	s, err := kafkasource.New(k.Brokers)
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	s.Close() // twice is a no-op
	if _, err := s.Partitions(testCtx(t), "orders"); !errors.Is(err, kafkasource.ErrClosed) {
		t.Fatalf("Partitions after Close = %v, want ErrClosed", err)
	}
	if _, err := s.NewReader("orders"); !errors.Is(err, kafkasource.ErrClosed) {
		t.Fatalf("NewReader after Close = %v, want ErrClosed", err)
	}
}

func mapsEqual[K comparable, V comparable](a, b map[K]V) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

func TestNewRefusesNonPositiveFetchMaxPartitionBytes(t *testing.T) {
	for _, n := range []int32{0, -1} {
		_, err := kafkasource.New([]string{"127.0.0.1:1"}, kafkasource.WithFetchMaxPartitionBytes(n))
		if !errors.Is(err, kafkasource.ErrInvalidArgument) || !strings.Contains(err.Error(), "fetch max partition bytes") {
			t.Errorf("WithFetchMaxPartitionBytes(%d): New = %v, want ErrInvalidArgument naming the option", n, err)
		}
	}
}

// TestReachableFollowsTheBrokers: Reachable says nothing is wrong before
// any traffic and while a Reader fetches; once every connection to the
// broker is closed and new ones fail, the Reader's own traffic turns it
// into an error wrapping ErrUnreachable that names the broker, and the
// first answer once the broker is back turns it back, with no call made
// by the test meanwhile.
func TestReachableFollowsTheBrokers(t *testing.T) {
	gate := testenv.NewGate()
	k := testenv.StartKafkaWith(t, []kfake.Opt{kfake.ListenFn(gate.Listen)}, 1, "orders")
	s := newSource(t, k.Brokers)
	if err := s.Reachable(); err != nil {
		t.Fatalf("before any traffic: %v", err)
	}
	r := newReader(t, s, "orders")
	r.Assign(map[int32]int64{0: kafkasource.FromEarliest})
	ctx := testCtx(t)
	go func() {
		for ctx.Err() == nil {
			if _, err := r.Poll(ctx); errors.Is(err, kafkasource.ErrClosed) {
				return
			}
		}
	}()
	waitUntil := func(what string, cond func(error) bool) error {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for {
			err := s.Reachable()
			if cond(err) {
				return err
			}
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %s; Reachable = %v", what, err)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	if _, err := s.Partitions(ctx, "orders"); err != nil {
		t.Fatal(err)
	}
	waitUntil("reachable while fetching", func(err error) bool { return err == nil })

	gate.Cut()
	err := waitUntil("unreachable", func(err error) bool { return err != nil })
	if !errors.Is(err, kafkasource.ErrUnreachable) || !strings.Contains(err.Error(), k.Brokers[0]) {
		t.Fatalf("Reachable = %v, want ErrUnreachable naming %s", err, k.Brokers[0])
	}

	gate.Restore()
	waitUntil("reachable again", func(err error) bool { return err == nil })
}
