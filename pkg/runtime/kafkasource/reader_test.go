package kafkasource_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/protctl/protctl/internal/testenv"
	"github.com/protctl/protctl/pkg/runtime/kafkasource"
)

func newReader(t *testing.T, s *kafkasource.Source, topic string) *kafkasource.Reader {
	t.Helper()
	r, err := s.NewReader(topic)
	if err != nil {
		t.Fatalf("NewReader: %v", err)
	}
	t.Cleanup(r.Close)
	return r
}

// collector polls a Reader and keeps what it returned, per partition.
type collector struct {
	t       *testing.T
	r       *kafkasource.Reader
	offsets map[int32][]int64
	errs    map[int32][]error
}

func newCollector(t *testing.T, r *kafkasource.Reader) *collector {
	return &collector{t: t, r: r, offsets: map[int32][]int64{}, errs: map[int32][]error{}}
}

func (c *collector) poll(ctx context.Context) error {
	bs, err := c.r.Poll(ctx)
	for _, b := range bs {
		if b.Err != nil {
			c.errs[b.Partition] = append(c.errs[b.Partition], b.Err)
		}
		for _, rec := range b.Records {
			if rec.Partition != b.Partition || rec.Topic != c.r.Topic() {
				c.t.Fatalf("batch of partition %d holds a record of %s/%d", b.Partition, rec.Topic, rec.Partition)
			}
			c.offsets[b.Partition] = append(c.offsets[b.Partition], rec.Offset)
		}
	}
	return err
}

// until polls until cond holds, failing the test after 10s.
func (c *collector) until(what string, cond func() bool) {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for !cond() {
		if err := c.poll(ctx); err != nil {
			c.t.Fatalf("waiting for %s: %v (have %v, errors %v)", what, err, c.offsets, c.errs)
		}
	}
}

// quiet polls for d and fails if a record of any of partitions arrives.
func (c *collector) quiet(d time.Duration, partitions ...int32) {
	c.t.Helper()
	before := map[int32]int{}
	for _, p := range partitions {
		before[p] = len(c.offsets[p])
	}
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	for ctx.Err() == nil {
		if err := c.poll(ctx); err != nil && !errors.Is(err, context.DeadlineExceeded) {
			c.t.Fatal(err)
		}
	}
	for _, p := range partitions {
		if got := c.offsets[p][before[p]:]; len(got) > 0 {
			c.t.Fatalf("partition %d delivered %v while it should be quiet", p, got)
		}
	}
}

func TestReaderReadsAssignedPartitionsInOrder(t *testing.T) {
	k := testenv.StartKafka(t, 3, "orders")
	cl := k.Client(t)
	for p := int32(0); p < 3; p++ {
		produce(t, k, cl, "orders", p, 10)
	}
	s := newSource(t, k.Brokers)
	r := newReader(t, s, "orders")
	c := newCollector(t, r)

	r.Assign(map[int32]int64{0: 0, 1: 5, 2: kafkasource.FromEarliest})
	c.until("the backlog", func() bool {
		return len(c.offsets[0]) == 10 && len(c.offsets[1]) == 5 && len(c.offsets[2]) == 10
	})
	want := map[int32][]int64{0: span(0, 10), 1: span(5, 10), 2: span(0, 10)}
	for p, w := range want {
		if !slices.Equal(c.offsets[p], w) {
			t.Errorf("partition %d: offsets %v, want %v", p, c.offsets[p], w)
		}
	}
	if got := r.Assigned(); !mapsEqual(got, map[int32]int64{0: 10, 1: 10, 2: 10}) {
		t.Errorf("Assigned = %v, want every partition at 10", got)
	}

	// It tails: records produced later arrive, in order.
	produce(t, k, cl, "orders", 1, 7)
	c.until("the tail", func() bool { return len(c.offsets[1]) == 12 })
	if !slices.Equal(c.offsets[1], span(5, 17)) {
		t.Errorf("partition 1 after the tail: %v, want 5..16", c.offsets[1])
	}
}

func TestReaderUnassignAndReassign(t *testing.T) {
	k := testenv.StartKafka(t, 2, "orders")
	cl := k.Client(t)
	produce(t, k, cl, "orders", 0, 10)
	produce(t, k, cl, "orders", 1, 10)
	s := newSource(t, k.Brokers, kafkasource.WithFetchMaxWait(50*time.Millisecond))
	r := newReader(t, s, "orders")
	c := newCollector(t, r)

	r.Assign(map[int32]int64{0: 0, 1: 0})
	c.until("both partitions", func() bool { return len(c.offsets[0]) == 10 && len(c.offsets[1]) == 10 })

	r.Unassign(0)
	r.Unassign(0, 5) // again, and an unknown partition: no-ops
	if got := r.Assigned(); !mapsEqual(got, map[int32]int64{1: 10}) {
		t.Fatalf("Assigned after Unassign(0) = %v, want only partition 1", got)
	}
	produce(t, k, cl, "orders", 0, 5)
	produce(t, k, cl, "orders", 1, 1)
	c.until("partition 1's new record", func() bool { return len(c.offsets[1]) == 11 })
	c.quiet(300*time.Millisecond, 0)

	// Reassigned at an earlier offset: it starts exactly there.
	c.offsets[0] = nil
	r.Assign(map[int32]int64{0: 3})
	c.until("partition 0 again", func() bool { return len(c.offsets[0]) == 12 })
	if !slices.Equal(c.offsets[0], span(3, 15)) {
		t.Fatalf("partition 0 reassigned at 3: %v, want 3..14", c.offsets[0])
	}

	// Assigning an assigned partition moves it.
	c.offsets[1] = nil
	r.Assign(map[int32]int64{1: 8})
	c.until("partition 1 moved", func() bool { return len(c.offsets[1]) == 3 })
	if !slices.Equal(c.offsets[1], span(8, 11)) {
		t.Fatalf("partition 1 moved to 8: %v, want 8..10", c.offsets[1])
	}
}

func TestReaderFromHeadSkipsTheBacklog(t *testing.T) {
	k := testenv.StartKafka(t, 1, "orders")
	cl := k.Client(t)
	produce(t, k, cl, "orders", 0, 10)
	s := newSource(t, k.Brokers, kafkasource.WithFetchMaxWait(50*time.Millisecond))
	r := newReader(t, s, "orders")
	c := newCollector(t, r)

	r.Assign(map[int32]int64{0: kafkasource.FromHead})
	// When the head is resolved is up to the client, so keep producing
	// until something arrives; none of it may be the backlog.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for len(c.offsets[0]) == 0 {
		produce(t, k, cl, "orders", 0, 1)
		pctx, pcancel := context.WithTimeout(ctx, 200*time.Millisecond)
		if err := c.poll(pctx); err != nil && !errors.Is(err, context.DeadlineExceeded) {
			t.Fatal(err)
		}
		pcancel()
		if ctx.Err() != nil {
			t.Fatal("nothing arrived from the head")
		}
	}
	if first := c.offsets[0][0]; first < 10 {
		t.Fatalf("FromHead delivered offset %d of the backlog", first)
	}
}

func TestReaderPauseAndResume(t *testing.T) {
	k := testenv.StartKafka(t, 2, "orders")
	cl := k.Client(t)
	s := newSource(t, k.Brokers, kafkasource.WithFetchMaxWait(50*time.Millisecond))
	r := newReader(t, s, "orders")
	c := newCollector(t, r)

	r.Assign(map[int32]int64{0: 0, 1: 0})
	r.Pause(0)
	if got := r.Paused(); !slices.Equal(got, []int32{0}) {
		t.Fatalf("Paused = %v, want [0]", got)
	}
	produce(t, k, cl, "orders", 0, 5)
	produce(t, k, cl, "orders", 1, 5)
	c.until("partition 1", func() bool { return len(c.offsets[1]) == 5 })
	c.quiet(300*time.Millisecond, 0)

	r.Resume(0)
	if got := r.Paused(); len(got) != 0 {
		t.Fatalf("Paused after Resume = %v, want none", got)
	}
	c.until("partition 0 after resume", func() bool { return len(c.offsets[0]) == 5 })
	if !slices.Equal(c.offsets[0], span(0, 5)) {
		t.Fatalf("partition 0 after resume: %v, want 0..4 (nothing lost to the pause)", c.offsets[0])
	}
}

func TestReaderStartOutOfRange(t *testing.T) {
	k := testenv.StartKafka(t, 2, "orders")
	cl := k.Client(t)
	produce(t, k, cl, "orders", 0, 10)
	produce(t, k, cl, "orders", 1, 10)
	k.DeleteRecords(t, cl, "orders", 0, 4)
	s := newSource(t, k.Brokers)

	tests := []struct {
		name       string
		partition  int32
		offset     int64
		want       error
		wantBounds kafkasource.Watermarks
	}{
		{"below_earliest", 0, 2, kafkasource.ErrOffsetNotRetained, kafkasource.Watermarks{Earliest: 4, Head: 10}},
		{"beyond_head", 1, 50, kafkasource.ErrOffsetBeyondHead, kafkasource.Watermarks{Earliest: 0, Head: 10}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newReader(t, s, "orders")
			c := newCollector(t, r)
			r.Assign(map[int32]int64{tt.partition: tt.offset})
			c.until("the partition's error", func() bool { return len(c.errs[tt.partition]) > 0 })
			err := c.errs[tt.partition][0]
			var oerr *kafkasource.OffsetError
			if !errors.Is(err, tt.want) || !errors.As(err, &oerr) || oerr.Offset != tt.offset ||
				oerr.Earliest != tt.wantBounds.Earliest || oerr.Head != tt.wantBounds.Head {
				t.Fatalf("Batch.Err = %v, want %v for offset %d with bounds %v", err, tt.want, tt.offset, tt.wantBounds)
			}
			if _, still := r.Assigned()[tt.partition]; still {
				t.Fatal("the partition is still assigned after its offset error")
			}
			// The caller decides where to go on: the earliest, here.
			r.Assign(map[int32]int64{tt.partition: oerr.Earliest})
			c.until("records after reassigning", func() bool { return len(c.offsets[tt.partition]) > 0 })
			if got := c.offsets[tt.partition][0]; got != oerr.Earliest {
				t.Fatalf("first record after reassigning at %d has offset %d", oerr.Earliest, got)
			}
		})
	}
}

func TestReaderRetentionOvertakingItIsReported(t *testing.T) {
	k := testenv.StartKafka(t, 2, "orders")
	cl := k.Client(t)
	produce(t, k, cl, "orders", 0, 10)
	s := newSource(t, k.Brokers, kafkasource.WithFetchMaxWait(50*time.Millisecond))
	r := newReader(t, s, "orders")
	c := newCollector(t, r)

	r.Assign(map[int32]int64{0: 0, 1: 0})
	c.until("the backlog", func() bool { return len(c.offsets[0]) == 10 })
	// Hold partition 0 at offset 10. A record on partition 1 arriving
	// proves a fetch went out after the pause, so no earlier fetch can
	// still carry partition 0's next records.
	r.Pause(0)
	produce(t, k, cl, "orders", 1, 1)
	c.until("partition 1", func() bool { return len(c.offsets[1]) == 1 })

	produce(t, k, cl, "orders", 0, 10)
	k.DeleteRecords(t, cl, "orders", 0, 15) // 10..14 are deleted unread
	r.Resume(0)
	c.until("the loss", func() bool { return len(c.errs[0]) > 0 })
	var oerr *kafkasource.OffsetError
	if err := c.errs[0][0]; !errors.Is(err, kafkasource.ErrOffsetNotRetained) || !errors.As(err, &oerr) || oerr.Offset != 10 || oerr.Earliest != 15 {
		t.Fatalf("Batch.Err = %v, want ErrOffsetNotRetained at 10 with earliest 15", err)
	}
	if !slices.Equal(c.offsets[0], span(0, 10)) {
		t.Fatalf("partition 0 delivered %v; records past the loss must not arrive unannounced", c.offsets[0])
	}
}

func TestReaderPollEnds(t *testing.T) {
	k := testenv.StartKafka(t, 1, "orders")
	s := newSource(t, k.Brokers)

	t.Run("context", func(t *testing.T) {
		r := newReader(t, s, "orders")
		r.Assign(map[int32]int64{0: 0})
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		defer cancel()
		var err error
		for err == nil {
			_, err = r.Poll(ctx)
		}
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Poll = %v, want the context's deadline", err)
		}
	})
	t.Run("assign_interrupts_a_blocked_poll", func(t *testing.T) {
		r := newReader(t, s, "orders")
		r.Assign(map[int32]int64{0: 0})
		returned := make(chan error, 1)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		go func() {
			bs, err := r.Poll(ctx)
			if err == nil && len(bs) > 0 {
				err = errors.New("got records from an empty topic")
			}
			returned <- err
		}()
		// Either order is correct; waiting for the Poll makes the
		// Assign interrupt it, the case this is about.
		testenv.Eventually(t, 5*time.Second, "the Poll to start", func() (bool, string) {
			return kafkasource.Polling(r), "not polling"
		})
		start := time.Now()
		r.Assign(map[int32]int64{0: 0})
		select {
		case err := <-returned:
			if err != nil {
				t.Fatalf("interrupted Poll = %v, want (nil, nil)", err)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("Poll still blocked 5s after Assign")
		}
		if took := time.Since(start); took > 2*time.Second {
			t.Fatalf("Assign waited %v for a blocked Poll", took)
		}
	})
	t.Run("close_unblocks", func(t *testing.T) {
		r, err := s.NewReader("orders")
		if err != nil {
			t.Fatal(err)
		}
		r.Assign(map[int32]int64{0: 0})
		returned := make(chan error, 1)
		go func() {
			_, err := r.Poll(context.Background())
			returned <- err
		}()
		testenv.Eventually(t, 5*time.Second, "the Poll to start", func() (bool, string) {
			return kafkasource.Polling(r), "not polling"
		})
		r.Close()
		r.Close() // twice is a no-op
		select {
		case err := <-returned:
			if !errors.Is(err, kafkasource.ErrClosed) {
				t.Fatalf("Poll after Close = %v, want ErrClosed", err)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("Poll still blocked 5s after Close")
		}
		if _, err := r.Poll(context.Background()); !errors.Is(err, kafkasource.ErrClosed) {
			t.Fatalf("Poll on a closed Reader = %v, want ErrClosed", err)
		}
		r.Assign(map[int32]int64{0: 0}) // no-ops, no panic
		r.Pause(0)
	})
}

// TestReaderKeepsOrderUnderChurn reassigns partitions at random offsets
// between polls while another goroutine pauses, resumes and inspects the
// Reader: every batch must continue exactly where the test's own model
// says, so a record from before a reassignment can never slip through.
func TestReaderKeepsOrderUnderChurn(t *testing.T) {
	const parts, perPart = 4, 20
	k := testenv.StartKafka(t, parts, "orders")
	cl := k.Client(t)
	for p := int32(0); p < parts; p++ {
		produce(t, k, cl, "orders", p, perPart)
	}
	s := newSource(t, k.Brokers, kafkasource.WithFetchMaxWait(20*time.Millisecond))
	r := newReader(t, s, "orders")

	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		rng := rand.New(rand.NewPCG(7, 7))
		for {
			select {
			case <-stop:
				return
			default:
			}
			p := rng.Int32N(parts)
			r.Pause(p)
			_ = r.Assigned()
			_ = r.Paused()
			time.Sleep(time.Millisecond)
			r.Resume(p)
		}
	}()
	defer func() { close(stop); wg.Wait() }()

	rng := rand.New(rand.NewPCG(1, 2))
	expect := map[int32]int64{}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for round := 0; round < 40; round++ {
		p, off := rng.Int32N(parts), rng.Int64N(perPart)
		r.Assign(map[int32]int64{p: off})
		expect[p] = off
		for expect[p] < perPart {
			bs, err := r.Poll(ctx)
			if err != nil {
				t.Fatalf("round %d: Poll: %v", round, err)
			}
			for _, b := range bs {
				if b.Err != nil {
					t.Fatalf("round %d: partition %d: %v", round, b.Partition, b.Err)
				}
				want, ok := expect[b.Partition]
				if !ok {
					t.Fatalf("round %d: records of never-assigned partition %d", round, b.Partition)
				}
				for _, rec := range b.Records {
					if rec.Offset != want {
						t.Fatalf("round %d: partition %d delivered offset %d, want %d", round, b.Partition, rec.Offset, want)
					}
					want++
				}
				expect[b.Partition] = want
			}
		}
	}
}

// TestReaderEpochsUnderConcurrentReassignment moves partitions from
// another goroutine while the poller runs, as the runtime's lease manager
// does. The poller cannot know when a move lands relative to its Poll, but
// every batch must be consistent with the epoch it carries: a run that
// starts at the offset its Assign gave and never skips.
func TestReaderEpochsUnderConcurrentReassignment(t *testing.T) {
	const parts, perPart = 3, 40
	k := testenv.StartKafka(t, parts, "orders")
	cl := k.Client(t)
	for i := 0; i < perPart; i++ {
		for p := int32(0); p < parts; p++ {
			produce(t, k, cl, "orders", p, 1) // one batch per record
		}
	}
	// One small batch per fetch: many Polls, many chances to interleave.
	s := newSource(t, k.Brokers, kafkasource.WithFetchMaxWait(20*time.Millisecond),
		kafkasource.WithKgoOptions(kgo.FetchMaxPartitionBytes(1), kgo.FetchMaxBytes(1)))
	r := newReader(t, s, "orders")

	var mu sync.Mutex
	start := map[uint64]int64{} // epoch -> offset its run starts at
	next := map[uint64]int64{}  // epoch -> offset its next record must have
	latest := map[int32]uint64{}
	assign := func(p int32, off int64) {
		mu.Lock()
		defer mu.Unlock()
		e := r.Assign(map[int32]int64{p: off})
		start[e], next[e], latest[p] = off, off, e
	}
	for p := int32(0); p < parts; p++ {
		assign(p, 0)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	done := make(chan struct{})
	go func() {
		defer close(done)
		rng := rand.New(rand.NewPCG(3, 4))
		for i := 0; i < 200 && ctx.Err() == nil; i++ {
			assign(rng.Int32N(parts), rng.Int64N(perPart))
			time.Sleep(time.Duration(rng.IntN(3)) * time.Millisecond)
		}
	}()

	caughtUp := func() bool {
		mu.Lock()
		defer mu.Unlock()
		for p := int32(0); p < parts; p++ {
			if next[latest[p]] < perPart {
				return false
			}
		}
		return true
	}
	stale := 0
	for {
		select {
		case <-done:
			if caughtUp() {
				t.Logf("%d stale batches told apart by their epoch", stale)
				return
			}
		default:
		}
		bs, err := r.Poll(ctx)
		if err != nil {
			t.Fatalf("Poll: %v", err)
		}
		mu.Lock()
		for _, b := range bs {
			if b.Err != nil {
				mu.Unlock()
				t.Fatalf("partition %d: %v", b.Partition, b.Err)
			}
			want, ok := next[b.Epoch]
			if !ok {
				mu.Unlock()
				t.Fatalf("partition %d: batch of unknown epoch %d", b.Partition, b.Epoch)
			}
			if b.Epoch != latest[b.Partition] {
				stale++
			}
			for _, rec := range b.Records {
				if rec.Offset != want {
					mu.Unlock()
					t.Fatalf("partition %d epoch %d (started at %d): offset %d, want %d",
						b.Partition, b.Epoch, start[b.Epoch], rec.Offset, want)
				}
				want++
			}
			next[b.Epoch] = want
		}
		mu.Unlock()
	}
}

func TestReaderAndSourceLeaveNoGoroutines(t *testing.T) {
	k := testenv.StartKafka(t, 2, "orders")
	// The producing client is closed before counting: its background
	// loops open and reap connections on their own schedule, which moved
	// the count by one now and then.
	cl, err := kgo.NewClient(kgo.SeedBrokers(k.Brokers...), kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.ProducerLinger(0))
	if err != nil {
		t.Fatal(err)
	}
	produce(t, k, cl, "orders", 0, 5)
	cl.Close()
	before := steadyGoroutines(t)

	s, err := kafkasource.New(k.Brokers)
	if err != nil {
		t.Fatal(err)
	}
	r, err := s.NewReader("orders")
	if err != nil {
		t.Fatal(err)
	}
	r.Assign(map[int32]int64{0: 0, 1: 0})
	c := newCollector(t, r)
	c.until("records", func() bool { return len(c.offsets[0]) == 5 })
	if _, err := s.Rescan(testCtx(t), "orders", 0, 0, "k"); err != nil {
		t.Fatal(err)
	}
	r.Close()
	s.Close()

	testenv.Eventually(t, 10*time.Second, "the Reader's and the Source's goroutines to end", func() (bool, string) {
		n := runtime.NumGoroutine()
		if n <= before {
			return true, ""
		}
		buf := make([]byte, 1<<20)
		return false, fmt.Sprintf("%d goroutines after Close, %d before:\n%s", n, before, leaked(buf[:runtime.Stack(buf, true)]))
	})
}

// leaked keeps the stacks that mention this package or franz-go's client.
func leaked(stacks []byte) string {
	var out []string
	for _, g := range strings.Split(string(stacks), "\n\n") {
		if strings.Contains(g, "kafkasource") || strings.Contains(g, "franz-go/pkg/kgo") {
			out = append(out, g)
		}
	}
	return strings.Join(out, "\n\n")
}

// steadyGoroutines is the goroutine count once it has not changed for
// 200ms: goroutines of what was closed just before are gone.
func steadyGoroutines(t *testing.T) int {
	t.Helper()
	n, since := runtime.NumGoroutine(), time.Now()
	testenv.Eventually(t, 30*time.Second, "the goroutine count to hold for 200ms", func() (bool, string) {
		if m := runtime.NumGoroutine(); m != n {
			n, since = m, time.Now()
		}
		return time.Since(since) >= 200*time.Millisecond, fmt.Sprintf("%d goroutines for %s", n, time.Since(since))
	})
	return n
}

// newClientHook records the clients created with it (once per client, or
// once per time it was given).
type newClientHook struct {
	mu      sync.Mutex
	clients []*kgo.Client
}

func (h *newClientHook) OnNewClient(cl *kgo.Client) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.clients = append(h.clients, cl)
}

func (h *newClientHook) took() []*kgo.Client {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.clients)
}

// A Reader asks for WithFetchMaxPartitionBytes per partition (128 KiB by
// default), and a fetch then holds about that much: the runtime handles a
// partition's records while the next fetch is decoded instead of waiting
// for one response of a megabyte per partition. WithKgoOptions are given
// to its client once (kgo adds up hooks given twice).
func TestReaderFetchMaxPartitionBytes(t *testing.T) {
	k := testenv.StartKafka(t, 1, "orders")
	cl := k.Client(t)
	rng := rand.New(rand.NewPCG(1, 2))
	for range 20 {
		// One produce call per 10 records: 20 record batches of about
		// 10 KiB each (a fetch returns whole batches), random bytes so
		// that compression keeps them that size.
		rs := make([]*kgo.Record, 10)
		for i := range rs {
			v := make([]byte, 1024)
			for j := range v {
				v[j] = byte(rng.Uint32())
			}
			rs[i] = &kgo.Record{Topic: "orders", Value: v}
		}
		k.Produce(t, cl, rs...)
	}
	for _, tt := range []struct {
		name      string
		opts      []kafkasource.Option
		wantBytes int32
		maxFirst  int // records in the first Poll at most
	}{
		{"default", nil, 128 << 10, 200},
		{"16KiB", []kafkasource.Option{kafkasource.WithFetchMaxPartitionBytes(16 << 10)}, 16 << 10, 20},
	} {
		t.Run(tt.name, func(t *testing.T) {
			h := &newClientHook{}
			s := newSource(t, k.Brokers, append(tt.opts, kafkasource.WithKgoOptions(kgo.WithHooks(h)))...)
			before := len(h.took())
			r := newReader(t, s, "orders")
			clients := h.took()[before:]
			if len(clients) != 1 {
				t.Fatalf("the Reader's client was announced %d times to a hook given once, want 1", len(clients))
			}
			if got := clients[0].OptValue(kgo.FetchMaxPartitionBytes); got != tt.wantBytes {
				t.Errorf("the Reader's FetchMaxPartitionBytes = %v, want %d", got, tt.wantBytes)
			}
			r.Assign(map[int32]int64{0: 0})
			ctx := testCtx(t)
			var first, total int
			for total < 200 {
				bs, err := r.Poll(ctx)
				if err != nil {
					t.Fatalf("Poll: %v", err)
				}
				for _, b := range bs {
					if b.Err != nil {
						t.Fatalf("partition %d: %v", b.Partition, b.Err)
					}
					total += len(b.Records)
				}
				if first == 0 {
					first = total
				}
			}
			if first > tt.maxFirst {
				t.Errorf("the first Poll returned %d records of about 1 KiB, want at most %d", first, tt.maxFirst)
			}
			if total != 200 {
				t.Errorf("read %d records, want 200", total)
			}
		})
	}
}
