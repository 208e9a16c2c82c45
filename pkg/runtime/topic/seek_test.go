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
	"github.com/protctl/protctl/pkg/runtime/redisstore"
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
	if now, err := store.RequestSeek(context.Background(), lg, topicSub, 0, req); err != nil || now != "" {
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
