package topic_test

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/protctl/protctl/pkg/runtime"
	"github.com/protctl/protctl/pkg/runtime/clock"
	"github.com/protctl/protctl/pkg/runtime/internal/enginetest"
	"github.com/protctl/protctl/pkg/runtime/memstore"
	"github.com/protctl/protctl/pkg/runtime/redisstore"
	"github.com/protctl/protctl/pkg/runtime/topic"
)

// TestTopicSeekOnline: a seek of a held partition while the owner runs
// under continuous producing. Every record at or past the target is
// handled once more (none dropped by dedup, which is on), per aggregate
// in order with exactly one step back; no two handler calls of an
// aggregate overlap; the other partition is not replayed; the owner
// keeps running and answers the request with the checkpoint it set.
func TestTopicSeekOnline(t *testing.T) {
	e := newTopicEnv(t, onRedis, 2)
	rec := newTopicRecorder(t)
	n := e.start("n1", e.config(tsub(topicSub, rec.handler("n1"))), nil)
	defer e.stopAll()
	if err := n.ts.AwaitStarted(context.Background()); err != nil {
		t.Fatal(err)
	}
	aggs := aggNames(8)
	const first, rounds = 40, 240

	var mu sync.Mutex
	seqAt := map[string]map[int]int64{} // agg -> seq -> offset
	note := func(rs []*kgo.Record) {
		mu.Lock()
		defer mu.Unlock()
		for _, r := range rs {
			a := string(r.Key)
			if seqAt[a] == nil {
				seqAt[a] = map[int]int64{}
			}
			s, _ := strconv.Atoi(string(r.Headers[1].Value))
			seqAt[a][s] = r.Offset
		}
	}
	note(e.produce(aggs, 1, first))
	waitFor(t, 20*time.Second, "the first rounds handled", func() bool { return rec.complete(topicSub, aggs, first) })

	// Producing goes on while the seek is carried out.
	stop := make(chan struct{})
	prodDone := make(chan error, 1)
	go func() {
		for seq := first + 1; seq <= rounds; seq += 4 {
			var batch []*kgo.Record
			for s := seq; s < seq+4 && s <= rounds; s++ {
				for _, a := range aggs {
					batch = append(batch, e.record(a, s))
				}
			}
			res := e.prod.ProduceSync(context.Background(), batch...)
			if err := res.FirstErr(); err != nil {
				prodDone <- err
				return
			}
			rs := make([]*kgo.Record, 0, len(res))
			for _, r := range res {
				rs = append(rs, r.Record)
			}
			note(rs)
			select {
			case <-stop:
			case <-time.After(5 * time.Millisecond):
			}
		}
		prodDone <- nil
	}()
	defer close(stop)

	// Rewind partition 0 to seq 11 of its first aggregate, once the
	// owner is past the first rounds.
	var p0 []string
	for _, a := range aggs {
		if e.aggPartition(a) == 0 {
			p0 = append(p0, a)
		}
	}
	mu.Lock()
	target := seqAt[p0[0]][11]
	mu.Unlock()
	store := e.store.(*redisstore.Store)
	lg := e.leaseGroup()
	token, err := e.raw.Get(context.Background(), lg.LeaseKey(0)).Result()
	if err != nil {
		t.Fatalf("partition 0's lease: %v", err)
	}
	req := runtime.SeekRequest{ID: "seek-1", Next: target, Lease: token, By: "test", RequestedAtMs: time.Now().UnixMilli()}
	if now, err := store.RequestSeek(context.Background(), lg, topicSub, 0, req, time.Minute); err != nil || now != "" {
		t.Fatalf("request seek: lease now %q, err %v", now, err)
	}
	var res *runtime.SeekResult
	waitFor(t, 20*time.Second, "the owner's answer", func() bool {
		res, err = store.SeekResult(context.Background(), lg, topicSub, 0)
		return err == nil && res != nil && res.ID == req.ID
	})
	if res.Status != runtime.SeekDone || res.Next != target || res.Lease != token || res.From <= target {
		t.Fatalf("result %+v, want done at %d by %s from above it", res, target, token)
	}
	if err := <-prodDone; err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "every record handled", func() bool { return rec.complete(topicSub, aggs, rounds) })
	// Settle: nothing more is handled once complete (no late replays).
	calls := rec.calls.Load()
	waitFor(t, 5*time.Second, "a checkpoint at the head", func() bool {
		next, ok := e.checkpoint(topicSub, 0)
		return ok && next == e.heads()[0]
	})
	if got := rec.calls.Load(); got != calls {
		t.Fatalf("%d handler calls after every record was handled", got-calls)
	}

	mu.Lock()
	defer mu.Unlock()
	for _, a := range aggs {
		seqs := rec.handled(topicSub, a)
		if e.aggPartition(a) != 0 {
			if err := seqOrderErr(seqs, rounds); err != nil || len(seqs) != rounds {
				t.Errorf("aggregate %s of partition 1: %v (%d handled)", a, err, len(seqs))
			}
			continue
		}
		// The first seq at or past the target.
		from := 0
		for s := 1; s <= rounds; s++ {
			if seqAt[a][s] >= target {
				from = s
				break
			}
		}
		if err := replayedOnce(seqs, from, rounds); err != nil {
			t.Errorf("aggregate %s: %v (handled %v)", a, err, seqs)
		}
	}
	if n := rec.overlap.Load(); n > 0 {
		t.Errorf("%d overlapping handler calls", n)
	}
	if c := n.ts.Subscription(topicSub).Counters(); c["duplicates"] != 0 {
		t.Errorf("%d records dropped as duplicates", c["duplicates"])
	}
}

// replayedOnce checks that seqs is 1..m then from..n: one step back to
// from, m at least from-1, nothing missing, nothing else repeated.
func replayedOnce(seqs []int, from, n int) error {
	back := -1
	for i := 1; i < len(seqs); i++ {
		if seqs[i] <= seqs[i-1] {
			if back >= 0 {
				return fmt.Errorf("a second step back at %d", i)
			}
			back = i
		}
	}
	if back < 0 {
		return fmt.Errorf("no replay, want one back to %d", from)
	}
	before, after := seqs[:back], seqs[back:]
	if err := seqOrderErr(before, before[len(before)-1]); err != nil {
		return fmt.Errorf("before the seek: %v", err)
	}
	if after[0] != from {
		return fmt.Errorf("replay starts at %d, want %d", after[0], from)
	}
	want := make([]int, 0, n-from+1)
	for s := from; s <= n; s++ {
		want = append(want, s)
	}
	if !slices.Equal(after, want) {
		return fmt.Errorf("after the seek %v, want %d..%d once each", after, from, n)
	}
	return nil
}

// TestTopicSeekUnowned: checkpoints set while nobody holds the
// partitions (redisstore.SetUnownedCheckpoint, the path of topics seek on
// a free partition): the next owner rewinds partition 0 (its records
// from the target handled exactly once more, in order) and skips
// partition 1's records below its target, exactly those.
func TestTopicSeekUnowned(t *testing.T) {
	e := newTopicEnv(t, onRedis, 2)
	rec := newTopicRecorder(t)
	aggs := aggNames(6)
	offsets := map[string]map[int]int64{}
	note := func(rs []*kgo.Record) {
		for _, r := range rs {
			a := string(r.Key)
			if offsets[a] == nil {
				offsets[a] = map[int]int64{}
			}
			s, _ := strconv.Atoi(string(r.Headers[1].Value))
			offsets[a][s] = r.Offset
		}
	}
	note(e.produce(aggs, 1, 20))
	n := e.start("n1", e.config(tsub(topicSub, rec.handler("n1"))), nil)
	waitFor(t, 20*time.Second, "1..20 handled", func() bool { return rec.complete(topicSub, aggs, 20) })
	e.stop(n)
	note(e.produce(aggs, 21, 40))

	store := e.store.(*redisstore.Store)
	lg := e.leaseGroup()
	var p0, p1 []string
	for _, a := range aggs {
		if e.aggPartition(a) == 0 {
			p0 = append(p0, a)
		} else {
			p1 = append(p1, a)
		}
	}
	back, fwd := offsets[p0[0]][11], offsets[p1[0]][31]
	for p, to := range map[int32]int64{0: back, 1: fwd} {
		cur, ok := e.checkpoint(topicSub, p)
		if !ok {
			t.Fatalf("no checkpoint of partition %d", p)
		}
		stale := cur + 1
		if out, err := store.SetUnownedCheckpoint(context.Background(), lg, topicSub, p, &stale, to); err != nil || out.Set || !out.Moved {
			t.Fatalf("partition %d set against a checkpoint not seen: %+v, %v", p, out, err)
		}
		out, err := store.SetUnownedCheckpoint(context.Background(), lg, topicSub, p, &cur, to)
		if err != nil || !out.Set {
			t.Fatalf("partition %d: %+v, %v", p, out, err)
		}
		if got, _ := e.checkpoint(topicSub, p); got != to {
			t.Fatalf("partition %d checkpoint %d, want %d", p, got, to)
		}
	}

	n = e.start("n1", e.config(tsub(topicSub, rec.handler("n1"))), nil)
	defer e.stopAll()
	waitFor(t, 20*time.Second, "1..40 handled", func() bool { return rec.complete(topicSub, aggs, 40) })
	waitFor(t, 5*time.Second, "checkpoints at the heads", func() bool {
		h := e.heads()
		c0, _ := e.checkpoint(topicSub, 0)
		c1, _ := e.checkpoint(topicSub, 1)
		return c0 == h[0] && c1 == h[1]
	})
	for _, a := range p0 {
		from := 0
		for s := 1; s <= 40; s++ {
			if offsets[a][s] >= back {
				from = s
				break
			}
		}
		if err := replayedOnce(rec.handled(topicSub, a), from, 40); err != nil {
			t.Errorf("aggregate %s of partition 0: %v (handled %v)", a, err, rec.handled(topicSub, a))
		}
	}
	for _, a := range p1 {
		var want []int
		for s := 1; s <= 40; s++ {
			if s <= 20 || offsets[a][s] >= fwd {
				want = append(want, s)
			}
		}
		if got := rec.handled(topicSub, a); !slices.Equal(got, want) {
			t.Errorf("aggregate %s of partition 1 handled %v, want %v", a, got, want)
		}
	}
	// A held partition is refused.
	cur, _ := e.checkpoint(topicSub, 0)
	out, err := store.SetUnownedCheckpoint(context.Background(), lg, topicSub, 0, &cur, 0)
	if err != nil || out.Set || out.Lease == "" {
		t.Fatalf("set on a held partition: %+v, %v", out, err)
	}
}

// seekStore is the operator's side of a seek, as redisstore and memstore
// both have it (lease group as its string).
type seekStore interface {
	RequestSeek(ctx context.Context, leaseGroup, subscription string, partition int32, req runtime.SeekRequest, ttl time.Duration) (string, error)
	SeekResult(ctx context.Context, leaseGroup, subscription string, partition int32) (*runtime.SeekResult, error)
}

// redisSeeks adapts redisstore's seek calls (they take its LeaseGroup;
// the env's is the only one).
type redisSeeks struct {
	s *redisstore.Store
	g redisstore.LeaseGroup
}

func (r redisSeeks) RequestSeek(ctx context.Context, _, sub string, p int32, req runtime.SeekRequest, ttl time.Duration) (string, error) {
	return r.s.RequestSeek(ctx, r.g, sub, p, req, ttl)
}

func (r redisSeeks) SeekResult(ctx context.Context, _, sub string, p int32) (*runtime.SeekResult, error) {
	return r.s.SeekResult(ctx, r.g, sub, p)
}

// seeks returns the env's store's seek calls.
func (e *topicEnv) seeks() seekStore {
	if s, ok := e.store.(*redisstore.Store); ok {
		return redisSeeks{s, e.leaseGroup()}
	}
	return e.store.(*memstore.Store)
}

// leaseToken is partition p's lease token now.
func (e *topicEnv) leaseToken(p int32) string {
	e.t.Helper()
	key := e.leaseGroup().LeaseKey(p)
	if e.raw != nil {
		v, err := e.raw.Get(context.Background(), key).Result()
		if err != nil {
			e.t.Fatalf("partition %d's lease: %v", p, err)
		}
		return v
	}
	v, ok, err := e.mem.Faults().GetString(context.Background(), key)
	if err != nil || !ok {
		e.t.Fatalf("partition %d's lease: %v %v", p, ok, err)
	}
	return v
}

// seekAndWait requests req of partition p and waits for the owner's answer.
func (e *topicEnv) seekAndWait(p int32, req runtime.SeekRequest) *runtime.SeekResult {
	e.t.Helper()
	ss := e.seeks()
	if now, err := ss.RequestSeek(context.Background(), e.leaseGroup().String(), topicSub, p, req, time.Minute); err != nil || now != "" {
		e.t.Fatalf("request seek: lease now %q, err %v", now, err)
	}
	var res *runtime.SeekResult
	var err error
	waitFor(e.t, 20*time.Second, "the owner's answer", func() bool {
		res, err = ss.SeekResult(context.Background(), e.leaseGroup().String(), topicSub, p)
		return err == nil && res != nil && res.ID == req.ID
	})
	return res
}

// TestTopicSeekPlannedForwardNeverRewinds: a seek planned as a move
// forward reaches an owner that has handled past its target since the
// plan. The owner keeps its position (it answers with it) and handles
// nothing again: asking to skip records must not replay others. A
// rewind then replays partition 0 from its start, once. On both stores:
// the in-memory one answers seeks as the Redis one does.
func TestTopicSeekPlannedForwardNeverRewinds(t *testing.T) {
	for _, kind := range []storeKind{onRedis, onMemory} {
		t.Run(string(kind), func(t *testing.T) { testSeekForwardThenBack(t, kind) })
	}
}

func testSeekForwardThenBack(t *testing.T, kind storeKind) {
	e := newTopicEnv(t, kind, 2)
	rec := newTopicRecorder(t)
	n := e.start("n1", e.config(tsub(topicSub, rec.handler("n1"))), nil)
	defer e.stopAll()
	if err := n.ts.AwaitStarted(context.Background()); err != nil {
		t.Fatal(err)
	}
	aggs := aggNames(6)
	const rounds = 30
	e.produce(aggs, 1, rounds)
	waitFor(t, 20*time.Second, "every record handled", func() bool { return rec.complete(topicSub, aggs, rounds) })
	head := e.heads()[0]
	if head <= 10 {
		t.Fatalf("partition 0's head %d, want past 10", head)
	}
	waitFor(t, 10*time.Second, "partition 0 checkpointed at its head", func() bool {
		next, ok := e.checkpoint(topicSub, 0)
		return ok && next == head
	})

	// The plan saw the checkpoint at 2 and chose 10: a skip of 8 records.
	// The owner is at the head now.
	token := e.leaseToken(0)
	seen := int64(2)
	res := e.seekAndWait(0, runtime.SeekRequest{ID: "fwd-1", Next: 10, From: &seen, Lease: token, By: "test", RequestedAtMs: time.Now().UnixMilli()})
	if res.Status != runtime.SeekDone || res.Next != head || res.From != head {
		t.Fatalf("result %+v, want done, kept at the head %d", res, head)
	}
	if next, _ := e.checkpoint(topicSub, 0); next != head {
		t.Fatalf("checkpoint %d, want the head %d", next, head)
	}
	// One more record per aggregate: a replay of 10..head would come
	// before it in each aggregate's order.
	e.produce(aggs, rounds+1, rounds+1)
	waitFor(t, 20*time.Second, "the new records handled", func() bool { return rec.complete(topicSub, aggs, rounds+1) })
	want := make([]int, 0, rounds+1)
	for s := 1; s <= rounds+1; s++ {
		want = append(want, s)
	}
	for _, a := range aggs {
		if got := rec.handled(topicSub, a); !slices.Equal(got, want) {
			t.Fatalf("aggregate %s handled %v, want 1..%d once each", a, got, rounds+1)
		}
	}

	// A rewind to the start: partition 0 is handled once more, all of it.
	head = e.heads()[0]
	waitFor(t, 10*time.Second, "partition 0 checkpointed at its new head", func() bool {
		next, ok := e.checkpoint(topicSub, 0)
		return ok && next == head
	})
	res = e.seekAndWait(0, runtime.SeekRequest{ID: "back-1", Next: 0, From: &head, Lease: token, By: "test"})
	if res.Status != runtime.SeekDone || res.Next != 0 || res.From != head {
		t.Fatalf("result %+v, want done from %d to 0", res, head)
	}
	waitFor(t, 20*time.Second, "partition 0 handled again", func() bool {
		for _, a := range aggs {
			if e.aggPartition(a) == 0 && len(rec.handled(topicSub, a)) < 2*(rounds+1) {
				return false
			}
		}
		return true
	})
	for _, a := range aggs {
		got := rec.handled(topicSub, a)
		if e.aggPartition(a) != 0 {
			if !slices.Equal(got, want) {
				t.Errorf("aggregate %s of partition 1 handled %v, want 1..%d once each", a, got, rounds+1)
			}
			continue
		}
		if err := replayedOnce(got, 1, rounds+1); err != nil {
			t.Errorf("aggregate %s: %v (handled %v)", a, err, got)
		}
	}
}

// TestTopicSeekWaitsForTheRecordNotTheBatch: an online seek waits for
// the record each worker has in hand, not for the rest of the lane batch
// the worker took (up to 64 handler calls). With a handler that takes a
// second per record, a seek behind a whole batch would wait a minute,
// past the CLI's --timeout (10s by default) after which the request is
// withdrawn: under load the operator could not seek a busy partition.
// TestSeekProcessKafka found it (seeks of busy partitions took up to
// 17s). Here the 30 records of one aggregate are one batch; the seek
// begins while the first is in the handler, and is done right after it:
// the checkpoint it moves back from is 1, and the rest of the batch is
// handled only once, after the rewind.
func TestTopicSeekWaitsForTheRecordNotTheBatch(t *testing.T) {
	ctx := context.Background()
	e := newTopicEnv(t, onRedis, 1)
	const agg, n = "a0000", 30
	e.produce([]string{agg}, 1, n) // offsets 0..29
	rec := newTopicRecorder(t)
	var (
		inFirst, release, seeking = make(chan struct{}), make(chan struct{}), make(chan struct{})
		firstOnce, seekOnce       sync.Once
	)
	rec.setHold(func(ctx context.Context, m runtime.Message) {
		if m.Headers.Get("seq") != "1" {
			return
		}
		firstOnce.Do(func() {
			close(inFirst)
			select {
			case <-release:
			case <-ctx.Done():
			}
		})
	})
	ts, err := topic.New(e.config(tsub(topicSub, rec.handler("n1"))))
	if err != nil {
		t.Fatal(err)
	}
	topic.SetSeekHook(ts, func(int32) { seekOnce.Do(func() { close(seeking) }) })
	e.cluster.add("n1")
	if err := ts.Start(ctx, &testHost{cluster: e.cluster, id: "n1", log: testLogger().With("node", "n1"), clk: clock.System()}); err != nil {
		t.Fatal(err)
	}
	released := false
	defer func() {
		if !released {
			close(release)
		}
		e.cluster.remove("n1")
		sctx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		if err := ts.Stop(sctx); err != nil {
			t.Errorf("stop: %v", err)
		}
	}()
	awaitStarted(t, ts)
	enginetest.WaitClosed(t, inFirst, "seq 1 in the handler")

	store := e.store.(*redisstore.Store)
	lg := e.leaseGroup()
	token, err := e.raw.Get(ctx, lg.LeaseKey(0)).Result()
	if err != nil {
		t.Fatalf("the partition's lease: %v", err)
	}
	req := runtime.SeekRequest{ID: "seek-1", Next: 0, Lease: token, By: "test", RequestedAtMs: time.Now().UnixMilli()}
	if now, err := store.RequestSeek(ctx, lg, topicSub, 0, req, time.Minute); err != nil || now != "" {
		t.Fatalf("request seek: lease now %q, err %v", now, err)
	}
	enginetest.WaitClosed(t, seeking, "the owner to begin the seek")
	close(release)
	released = true
	var res *runtime.SeekResult
	waitFor(t, 20*time.Second, "the owner's answer", func() bool {
		res, err = store.SeekResult(ctx, lg, topicSub, 0)
		return err == nil && res != nil && res.ID == req.ID
	})
	if res.Status != runtime.SeekDone || res.From != 1 || res.Next != 0 {
		t.Fatalf("result %+v, want done from 1 (seq 1 handled, the rest of its batch not started) to 0", res)
	}
	want := []int{1}
	for s := 1; s <= n; s++ {
		want = append(want, s)
	}
	waitFor(t, 20*time.Second, "every record handled after the rewind", func() bool { return len(rec.handled(topicSub, agg)) >= len(want) })
	if got := rec.handled(topicSub, agg); !slices.Equal(got, want) {
		t.Fatalf("handled %v, want %v", got, want)
	}
}
