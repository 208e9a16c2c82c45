package topic_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/protctl/protctl/pkg/broker"
	"github.com/protctl/protctl/pkg/runtime"
	"github.com/protctl/protctl/pkg/runtime/internal/enginetest"
	"github.com/protctl/protctl/pkg/runtime/ledger"
	"github.com/protctl/protctl/pkg/runtime/source"
	"github.com/protctl/protctl/pkg/runtime/storetest"
	"github.com/protctl/protctl/pkg/runtime/topic"
)

func failSeq(agg string, seq int) func(m runtime.Message) error {
	s := strconv.Itoa(seq)
	return func(m runtime.Message) error {
		if m.Aggregate == agg && m.Headers.Get("seq") == s {
			return errors.New("cannot handle " + agg + " #" + s)
		}
		return nil
	}
}

// parkState explains a wait on agg's park: what was handled, the
// ledger's entry and the node's counters.
func parkState(e *topicEnv, rec *topicRecorder, n *topicNode, agg string) func() string {
	return func() string {
		p, err := e.store.GetParked(context.Background(), topicSub, "", agg)
		return fmt.Sprintf("%q handled %v, ledger %+v (%v), counters %v", agg, rec.handled(topicSub, agg), p, err, n.ts.Counters())
	}
}

// failSeqUntilFixed is failSeq until the returned flag is set.
func failSeqUntilFixed(agg string, seq int) (func(m runtime.Message) error, *atomic.Bool) {
	fixed := new(atomic.Bool)
	fail := failSeq(agg, seq)
	return func(m runtime.Message) error {
		if fixed.Load() {
			return nil
		}
		return fail(m)
	}, fixed
}

func offsetOf(recs []*kgo.Record, agg string, seq int) int64 {
	for _, r := range recs {
		if string(r.Key) == agg && string(r.Headers[1].Value) == strconv.Itoa(seq) {
			return r.Offset
		}
	}
	return -1
}

// TestTopicParking: an aggregate whose record fails is parked with that
// record's offset while the other aggregates flow; its later records are
// skipped. After the fix, Retry handles the parked record and every later
// one in order and resolves the entry; new records then flow as usual.
func TestTopicParking(t *testing.T) {
	for _, kind := range []storeKind{onMemory, onRedis} {
		t.Run(string(kind), func(t *testing.T) {
			e := newTopicEnv(t, kind, 2)
			rec := newTopicRecorder(t)
			rec.setFail(failSeq("a0000", 3))
			n := e.start("n1", e.config(tsub(topicSub, rec.handler("n1"))), nil)
			defer e.stopAll()
			awaitStarted(t, n.ts)
			aggs := aggNames(6) // a0000, a0002, a0004 on partition 0
			recs := e.produce(aggs, 1, 5)
			others := aggs[1:]
			waitFor(t, 10*time.Second, "the other aggregates to flow", func() bool { return rec.complete(topicSub, others, 5) })
			ctx := context.Background()
			var entry ledger.Parked
			waitFor(t, 10*time.Second, "a0000 parked", func() bool {
				var err error
				entry, err = e.store.GetParked(ctx, topicSub, "", "a0000")
				return err == nil
			})
			want := offsetOf(recs, "a0000", 3)
			if entry.Position != strconv.FormatInt(want, 10) || entry.Partition != "0" || entry.Topic != topicName ||
				entry.Source != source.Kafka || entry.Status != ledger.StatusParked || entry.Attempts != 1 ||
				entry.Owner != "n1" || entry.Generation < 1 || entry.Error == "" {
				t.Fatalf("parked entry %+v, want a0000 parked at offset %d of partition 0 by n1", entry, want)
			}
			if got := rec.handled(topicSub, "a0000"); !slices.Equal(got, []int{1, 2}) {
				t.Fatalf("a0000 handled %v before parking, want [1 2]", got)
			}
			e.produce(aggs, 6, 8)
			waitFor(t, 10*time.Second, "the others to flow past the parked aggregate", func() bool { return rec.complete(topicSub, others, 8) })
			if got := rec.handled(topicSub, "a0000"); !slices.Equal(got, []int{1, 2}) {
				t.Fatalf("a0000 handled %v while parked, want its later records skipped", got)
			}
			// a0000's lane may still be skipping its queued records.
			waitFor(t, 5*time.Second, "1 parked and 5 skipped", func() bool {
				c := n.ts.Counters()
				return c[runtime.CounterParked] == 1 && c[topic.CounterSkipped] == 5
			}, func() string { return fmt.Sprint(n.ts.Counters()) })
			if st := n.ts.Status(); st.Parked != 1 {
				t.Fatalf("status parked = %d, want 1", st.Parked)
			}

			rec.setFail(nil)
			if err := n.ts.Retry(ctx, topicSub, "a0000"); err != nil {
				t.Fatalf("Retry: %v", err)
			}
			waitFor(t, 10*time.Second, "the retry to handle a0000's records", func() bool { return rec.complete(topicSub, []string{"a0000"}, 8) })
			if got := rec.handled(topicSub, "a0000"); !slices.Equal(got, enginetest.SeqRange(1, 8)) {
				t.Fatalf("a0000 handled %v, want 1..8 in order", got)
			}
			waitFor(t, 5*time.Second, "the entry resolved", func() bool {
				_, err := e.store.GetParked(ctx, topicSub, "", "a0000")
				return errors.Is(err, ledger.ErrNotParked)
			})
			e.produce(aggs, 9, 9)
			waitFor(t, 10*time.Second, "new records after the retry", func() bool { return rec.complete(topicSub, aggs, 9) })
			rec.checkOrder(t, topicSub, aggs, 9)
			if c := n.ts.Counters(); c[runtime.CounterResolved] != 1 {
				t.Fatalf("counters %v: want 1 resolved", c)
			}
			heads := e.heads()
			waitFor(t, 5*time.Second, "checkpoints at the heads", func() bool {
				for p, h := range heads {
					if next, _ := e.checkpoint(topicSub, p); next != h {
						return false
					}
				}
				return true
			})
		})
	}
}

// TestTopicParkedUnrecoverable: once DeleteRecords moved the partition's
// start past a parked offset, Retry finds the records gone: the entry
// becomes unrecoverable (an operator's retry request is refused too) and
// only Skip resolves it, after which the aggregate's new records flow.
func TestTopicParkedUnrecoverable(t *testing.T) {
	e := newTopicEnv(t, onRedis, 1)
	rec := newTopicRecorder(t)
	rec.setFail(failSeq("a0000", 2))
	n := e.start("n1", e.config(tsub(topicSub, rec.handler("n1"))), nil)
	defer e.stopAll()
	awaitStarted(t, n.ts)
	aggs := aggNames(3)
	e.produce(aggs, 1, 4)
	ctx := context.Background()
	waitFor(t, 10*time.Second, "a0000 parked and the others done", func() bool {
		_, err := e.store.GetParked(ctx, topicSub, "", "a0000")
		return err == nil && rec.complete(topicSub, aggs[1:], 4)
	})
	head := e.heads()[0]
	e.k.DeleteRecords(t, e.prod, topicName, 0, head)
	rec.setFail(nil)

	err := n.ts.Retry(ctx, topicSub, "a0000")
	if !errors.Is(err, ledger.ErrUnrecoverable) {
		t.Fatalf("Retry after DeleteRecords = %v, want ErrUnrecoverable", err)
	}
	entry, err := e.store.GetParked(ctx, topicSub, "", "a0000")
	if err != nil || entry.Status != ledger.StatusUnrecoverable {
		t.Fatalf("entry %+v (%v), want status unrecoverable", entry, err)
	}
	if err := e.store.RequestRetry(ctx, topicSub, "", "a0000", "op"); !errors.Is(err, ledger.ErrUnrecoverable) {
		t.Fatalf("RequestRetry of an unrecoverable entry = %v, want ErrUnrecoverable", err)
	}
	e.produce([]string{"a0000"}, 5, 5)
	e.produce(aggs[1:], 5, 5)
	waitFor(t, 10*time.Second, "the others' new records", func() bool { return rec.complete(topicSub, aggs[1:], 5) })
	if got := rec.handled(topicSub, "a0000"); !slices.Equal(got, []int{1}) {
		t.Fatalf("a0000 handled %v while unrecoverable, want only [1]", got)
	}

	if err := n.ts.Skip(ctx, topicSub, "a0000"); err != nil {
		t.Fatalf("Skip: %v", err)
	}
	if _, err := e.store.GetParked(ctx, topicSub, "", "a0000"); !errors.Is(err, ledger.ErrNotParked) {
		t.Fatalf("GetParked after Skip = %v, want ErrNotParked", err)
	}
	e.produce([]string{"a0000"}, 6, 6)
	waitFor(t, 10*time.Second, "a0000's records after the skip", func() bool {
		return slices.Equal(rec.handled(topicSub, "a0000"), []int{1, 6})
	})
	if err := n.ts.Skip(ctx, topicSub, "a0000"); !errors.Is(err, ledger.ErrNotParked) {
		t.Fatalf("second Skip = %v, want ErrNotParked", err)
	}
}

// TestTopicRetryForwarded: Retry and Skip on a node that does not hold
// the aggregate's partition record the request in the ledger; the owner
// acts on it.
func TestTopicRetryForwarded(t *testing.T) {
	e := newTopicEnv(t, onRedis, 2)
	rec := newTopicRecorder(t)
	rec.setFail(func(m runtime.Message) error {
		if (m.Aggregate == "a0000" || m.Aggregate == "a0001") && m.Headers.Get("seq") == "2" {
			return errors.New("bad")
		}
		return nil
	})
	n1 := e.start("n1", e.config(tsub(topicSub, rec.handler("n1"))), nil)
	n2 := e.start("n2", e.config(tsub(topicSub, rec.handler("n2"))), nil)
	defer e.stopAll()
	settled(t, e, "two nodes to settle")
	aggs := aggNames(2) // a0000 on partition 0, a0001 on partition 1
	e.produce(aggs, 1, 3)
	ctx := context.Background()
	waitFor(t, 10*time.Second, "both parked", func() bool {
		_, err0 := e.store.GetParked(ctx, topicSub, "", "a0000")
		_, err1 := e.store.GetParked(ctx, topicSub, "", "a0001")
		return err0 == nil && err1 == nil
	})
	owner, _ := holders(t, e.live())
	other := map[string]*topicNode{"n1": n2, "n2": n1}
	rec.setFail(nil)
	// Ask the node that does not hold each partition.
	if err := other[owner[0]].ts.Retry(ctx, topicSub, "a0000"); err != nil {
		t.Fatalf("forwarded Retry: %v", err)
	}
	if err := other[owner[1]].ts.Skip(ctx, topicSub, "a0001"); err != nil {
		t.Fatalf("forwarded Skip: %v", err)
	}
	waitFor(t, 10*time.Second, "the owner to retry a0000", func() bool { return slices.Equal(rec.handled(topicSub, "a0000"), []int{1, 2, 3}) })
	waitFor(t, 10*time.Second, "both entries resolved", func() bool {
		_, err0 := e.store.GetParked(ctx, topicSub, "", "a0000")
		_, err1 := e.store.GetParked(ctx, topicSub, "", "a0001")
		return errors.Is(err0, ledger.ErrNotParked) && errors.Is(err1, ledger.ErrNotParked)
	})
	if got := rec.handled(topicSub, "a0001"); !slices.Equal(got, []int{1}) {
		t.Fatalf("a0001 handled %v, want [1]: a skip does not handle the parked records", got)
	}
	e.produce(aggs, 4, 4)
	waitFor(t, 10*time.Second, "new records of both", func() bool {
		return slices.Equal(rec.handled(topicSub, "a0001"), []int{1, 4}) && rec.complete(topicSub, []string{"a0000"}, 4)
	}, func() string {
		return fmt.Sprintf("a0000 handled %v, a0001 handled %v", rec.handled(topicSub, "a0000"), rec.handled(topicSub, "a0001"))
	})
}

// TestTopicParkedSurvivesHandover: a parked aggregate stays parked when
// its partition moves (the new owner reads the ledger and skips it), and
// the new owner carries out a retry requested while nobody held it.
func TestTopicParkedSurvivesHandover(t *testing.T) {
	e := newTopicEnv(t, onMemory, 1)
	rec := newTopicRecorder(t)
	rec.setFail(failSeq("a0000", 2))
	n1 := e.start("n1", e.config(tsub(topicSub, rec.handler("n1"))), nil)
	awaitStarted(t, n1.ts)
	aggs := aggNames(2)
	e.produce(aggs, 1, 3)
	ctx := context.Background()
	waitFor(t, 10*time.Second, "a0000 parked", func() bool {
		_, err := e.store.GetParked(ctx, topicSub, "", "a0000")
		return err == nil && rec.complete(topicSub, aggs[1:], 3)
	})
	e.stop(n1)
	rec.setFail(nil)
	if err := e.store.RequestRetry(ctx, topicSub, "", "a0000", "op"); err != nil {
		t.Fatal(err)
	}
	e.produce(aggs, 4, 4)
	n2 := e.start("n2", e.config(tsub(topicSub, rec.handler("n2"))), nil)
	defer e.stopAll()
	awaitStarted(t, n2.ts)
	waitFor(t, 10*time.Second, "the new owner to retry", func() bool { return rec.complete(topicSub, aggs, 4) })
	if got := rec.handled(topicSub, "a0000"); !slices.Equal(got, []int{1, 2, 3, 4}) {
		t.Fatalf("a0000 handled %v, want 1..4 in order", got)
	}
}

// slowResolve is a ledger whose Resolve waits for the test.
type slowResolve struct {
	ledger.Ledger
	entered chan struct{}
	proceed chan struct{}
}

func (s *slowResolve) Resolve(ctx context.Context, f broker.Fence, subscription, aggregate string) error {
	close(s.entered)
	<-s.proceed
	return s.Ledger.Resolve(ctx, f, subscription, aggregate)
}

// TestTopicSkipHoldsNewRecords: records of a parked aggregate that arrive
// while a skip is resolving its entry are not skipped (nothing would
// cover them once the entry is gone): they are handled after the skip.
func TestTopicSkipHoldsNewRecords(t *testing.T) {
	e := newTopicEnv(t, onMemory, 1)
	rec := newTopicRecorder(t)
	rec.setFail(failSeq("a0000", 1))
	slow := &slowResolve{Ledger: e.store, entered: make(chan struct{}), proceed: make(chan struct{})}
	cfg := e.config(tsub(topicSub, rec.handler("n1")))
	cfg.Ledger = slow
	n := e.start("n1", cfg, nil)
	defer e.stopAll()
	awaitStarted(t, n.ts)
	e.produce([]string{"a0000"}, 1, 1)
	ctx := context.Background()
	waitFor(t, 10*time.Second, "a0000 parked", func() bool {
		_, err := e.store.GetParked(ctx, topicSub, "", "a0000")
		return err == nil
	})
	rec.setFail(nil)
	skipped := make(chan error, 1)
	go func() { skipped <- n.ts.Skip(ctx, topicSub, "a0000") }()
	<-slow.entered
	// a0000 #2 is delivered while the entry is being resolved: a0001 #2,
	// after it on the same partition, being handled proves it.
	e.produce([]string{"a0000", "a0001"}, 2, 2)
	waitFor(t, 10*time.Second, "a0001 #2 handled", func() bool { return slices.Equal(rec.handled(topicSub, "a0001"), []int{2}) })
	close(slow.proceed)
	if err := <-skipped; err != nil {
		t.Fatalf("Skip: %v", err)
	}
	waitFor(t, 10*time.Second, "a0000 #2 handled after the skip", func() bool {
		return slices.Equal(rec.handled(topicSub, "a0000"), []int{2})
	}, func() string {
		return fmt.Sprintf("a0000 handled %v, counters %v", rec.handled(topicSub, "a0000"), n.ts.Counters())
	})
}

// TestTopicRetryKeepsCountingAttempts: a parked aggregate that fails
// again after Retry is parked again with its attempts added, and
// Message.Attempt goes on counting across the retry (issue 18 item 9).
func TestTopicRetryKeepsCountingAttempts(t *testing.T) {
	e := newTopicEnv(t, onRedis, 1)
	rec := newTopicRecorder(t)
	var mu sync.Mutex
	var seen []int
	var fixed atomic.Bool
	rec.setFail(func(m runtime.Message) error {
		if m.Aggregate != "a0000" || m.Headers.Get("seq") != "1" {
			return nil
		}
		mu.Lock()
		seen = append(seen, m.Attempt)
		mu.Unlock()
		if fixed.Load() {
			return nil
		}
		return errors.New("poison")
	})
	n := e.start("n1", e.config(tsub(topicSub, rec.handler("n1"))), nil)
	defer e.stopAll()
	awaitStarted(t, n.ts)
	e.produce([]string{"a0000"}, 1, 2)
	ctx := context.Background()
	parkedWith := func(want int) func() bool {
		return func() bool {
			p, err := e.store.GetParked(ctx, topicSub, "", "a0000")
			return err == nil && p.Attempts == want && p.Status == ledger.StatusParked
		}
	}
	first := func() int {
		p, _ := e.store.GetParked(ctx, topicSub, "", "a0000")
		return p.Attempts
	}
	waitFor(t, 10*time.Second, "a0000 parked", func() bool { return first() > 0 })
	n1 := first()
	if err := n.ts.Retry(ctx, topicSub, "a0000"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "a0000 parked again with its attempts added", parkedWith(2*n1), func() string {
		p, err := e.store.GetParked(ctx, topicSub, "", "a0000")
		mu.Lock()
		defer mu.Unlock()
		return fmt.Sprintf("n1=%d parked %+v err %v seen %v counters %v", n1, p, err, seen, n.ts.Counters())
	})
	fixed.Store(true)
	if err := n.ts.Retry(ctx, topicSub, "a0000"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "a0000 done", func() bool { return rec.complete(topicSub, []string{"a0000"}, 2) })
	mu.Lock()
	defer mu.Unlock()
	want := make([]int, 2*n1+1)
	for i := range want {
		want[i] = i + 1
	}
	if !slices.Equal(seen, want) {
		t.Errorf("attempts seen %v, want %v", seen, want)
	}
}

// TestTopicRequestBeforeTheWatchIsConfirmedIsCarriedOut: an operator's
// retry made before the node's request watch was confirmed sent a signal
// nobody heard. The node reads the ledger once the watch is confirmed,
// so the retry is carried out now, not at the next periodic read (an
// hour away here). On baf293e it waited for that read.
func TestTopicRequestBeforeTheWatchIsConfirmedIsCarriedOut(t *testing.T) {
	e := newTopicEnv(t, onRedis, 1)
	rec := newTopicRecorder(t)
	rec.setFail(failSeq("a0000", 1))
	release := make(chan struct{})
	cfg := e.config(tsub(topicSub, rec.handler("n1")))
	cfg.Ledger = storetest.HeldWatch{Ledger: cfg.Ledger, Release: release}
	cfg.LedgerPollEvery = time.Hour
	n := e.start("n1", cfg, nil)
	defer e.stopAll()
	awaitStarted(t, n.ts)
	e.produce([]string{"a0000"}, 1, 2)
	ctx := context.Background()
	waitFor(t, 10*time.Second, "a0000 parked", func() bool {
		p, err := e.store.GetParked(ctx, topicSub, "", "a0000")
		return err == nil && p.Status == ledger.StatusParked
	})
	rec.setFail(nil)
	if err := e.store.RequestRetry(ctx, topicSub, "", "a0000", "op"); err != nil {
		t.Fatal(err)
	}
	close(release)
	waitFor(t, 10*time.Second, "a0000 retried", func() bool { return rec.complete(topicSub, []string{"a0000"}, 2) }, func() string {
		return fmt.Sprintf("a0000 handled %v", rec.handled(topicSub, "a0000"))
	})
}

// heldPark is a ledger whose first Park, once its write landed, waits
// for the test: an operator's action then finds the entry in the ledger
// while the node is still finishing the park.
type heldPark struct {
	ledger.Ledger
	once    sync.Once
	written chan struct{}
	release chan struct{}
}

func newHeldPark(l ledger.Ledger) *heldPark {
	return &heldPark{Ledger: l, written: make(chan struct{}), release: make(chan struct{})}
}

func (h *heldPark) Park(ctx context.Context, f broker.Fence, p ledger.Parked) error {
	err := h.Ledger.Park(ctx, f, p)
	held := false
	h.once.Do(func() { held = true })
	if held {
		close(h.written)
		<-h.release
	}
	return err
}

// operateDuringPark runs op while the first park's write has landed and
// the node has not finished it, then lets the park finish. op's result
// is returned once it is in: op may wait for the park (it does since the
// fix) or not (it did not before, which is what the tests catch).
func operateDuringPark(t *testing.T, held *heldPark, op func() error) error {
	t.Helper()
	select {
	case <-held.written:
	case <-time.After(10 * time.Second):
		t.Fatal("timed out waiting for the park's write")
	}
	done := make(chan error, 1)
	go func() { done <- op() }()
	select {
	case err := <-done:
		close(held.release)
		return err
	case <-time.After(500 * time.Millisecond):
		// op waits for the park (or is slow): either way the park now
		// finishes with op under way.
	}
	close(held.release)
	select {
	case err := <-done:
		return err
	case <-time.After(10 * time.Second):
		t.Fatal("timed out waiting for the operation")
		return nil
	}
}

// TestTopicRetryDuringAParkIsCarriedOut: an operator's retry that reads
// the entry the moment the park's write lands, before the node recorded
// the park itself, is carried out. Before the fix the node's park then
// replaced the retry's state: the retried record was dropped, the entry
// stayed "retrying" and nothing retried it (CI failure of
// TestTopicRetryKeepsCountingAttempts on 9b3f399).
func TestTopicRetryDuringAParkIsCarriedOut(t *testing.T) {
	e := newTopicEnv(t, onRedis, 1)
	rec := newTopicRecorder(t)
	fail, fixed := failSeqUntilFixed("a0000", 1)
	rec.setFail(fail)
	held := newHeldPark(e.store)
	cfg := e.config(tsub(topicSub, rec.handler("n1")))
	cfg.Ledger = held
	cfg.LedgerPollEvery = time.Hour // no poll repairs what the race left
	n := e.start("n1", cfg, nil)
	defer e.stopAll()
	awaitStarted(t, n.ts)
	e.produce([]string{"a0000"}, 1, 1)
	ctx := context.Background()
	retry := func() error {
		fixed.Store(true)
		return n.ts.Retry(ctx, topicSub, "a0000")
	}
	if err := operateDuringPark(t, held, retry); err != nil {
		t.Fatalf("Retry: %v", err)
	}
	waitFor(t, 10*time.Second, "a0000 #1 handled by the retry", func() bool {
		return slices.Equal(rec.handled(topicSub, "a0000"), []int{1})
	}, parkState(e, rec, n, "a0000"))
	waitFor(t, 10*time.Second, "the entry resolved", func() bool {
		_, err := e.store.GetParked(ctx, topicSub, "", "a0000")
		return errors.Is(err, ledger.ErrNotParked)
	})
	e.produce([]string{"a0000"}, 2, 2)
	waitFor(t, 10*time.Second, "a0000 #2 handled", func() bool {
		return slices.Equal(rec.handled(topicSub, "a0000"), []int{1, 2})
	})
}

// TestTopicSkipDuringAParkLeavesNothingParked: an operator's skip that
// reads the entry the moment the park's write lands resolves the park
// for good. Before the fix the node's park, finishing after the skip
// resolved the entry, parked the aggregate again here with no entry
// covering it: its later records were skipped, lost.
func TestTopicSkipDuringAParkLeavesNothingParked(t *testing.T) {
	e := newTopicEnv(t, onRedis, 1)
	rec := newTopicRecorder(t)
	rec.setFail(failSeq("a0000", 1))
	held := newHeldPark(e.store)
	cfg := e.config(tsub(topicSub, rec.handler("n1")))
	cfg.Ledger = held
	cfg.LedgerPollEvery = time.Hour // no poll repairs what the race left
	n := e.start("n1", cfg, nil)
	defer e.stopAll()
	awaitStarted(t, n.ts)
	e.produce([]string{"a0000"}, 1, 1)
	ctx := context.Background()
	if err := operateDuringPark(t, held, func() error { return n.ts.Skip(ctx, topicSub, "a0000") }); err != nil {
		t.Fatalf("Skip: %v", err)
	}
	e.produce([]string{"a0000"}, 2, 3)
	waitFor(t, 10*time.Second, "a0000 #2 and #3 handled after the skip", func() bool {
		return slices.Equal(rec.handled(topicSub, "a0000"), []int{2, 3})
	}, parkState(e, rec, n, "a0000"))
	if _, err := e.store.GetParked(ctx, topicSub, "", "a0000"); !errors.Is(err, ledger.ErrNotParked) {
		t.Fatalf("a0000 still has an entry after the skip: %v", err)
	}
}

// TestTopicRetryRightAfterAParkKeepsTheBatchInOrder: a retry that lands
// after the park's write returned, while the worker that parked still
// holds the rest of its batch (here: held in the OnParked hook), handles
// the aggregate's records once each, in order. Before the fix the retry
// queued its records with the batch's rest still out of the lane; the
// worker then put #2 and #3 back ahead of them, they ran first, and the
// retried #1 was dropped as a duplicate: lost, with no entry left.
func TestTopicRetryRightAfterAParkKeepsTheBatchInOrder(t *testing.T) {
	e := newTopicEnv(t, onRedis, 1)
	rec := newTopicRecorder(t)
	fail, fixed := failSeqUntilFixed("a0000", 1)
	rec.setFail(fail)
	var once sync.Once
	inHook, release := make(chan struct{}), make(chan struct{})
	obs := &runtime.Observer{OnParked: func(ledger.Parked) {
		once.Do(func() {
			close(inHook)
			<-release
		})
	}}
	cfg := e.config(tsub(topicSub, rec.handler("n1")))
	cfg.LedgerPollEvery = time.Hour
	n := e.start("n1", cfg, obs)
	defer e.stopAll()
	awaitStarted(t, n.ts)
	// One produce, so that the worker takes #1..#3 in one batch.
	e.produce([]string{"a0000"}, 1, 3)
	select {
	case <-inHook:
	case <-time.After(10 * time.Second):
		t.Fatal("timed out waiting for the park")
	}
	ctx := context.Background()
	done := make(chan error, 1)
	go func() {
		fixed.Store(true)
		done <- n.ts.Retry(ctx, topicSub, "a0000")
	}()
	select {
	case err := <-done: // the retry did not wait for the worker
		done <- err
	case <-time.After(500 * time.Millisecond):
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatalf("Retry: %v", err)
	}
	waitFor(t, 10*time.Second, "a0000 #1..#3 handled in order", func() bool {
		return slices.Equal(rec.handled(topicSub, "a0000"), []int{1, 2, 3})
	}, parkState(e, rec, n, "a0000"))
	waitFor(t, 10*time.Second, "the entry resolved", func() bool {
		_, err := e.store.GetParked(ctx, topicSub, "", "a0000")
		return errors.Is(err, ledger.ErrNotParked)
	})
	e.produce([]string{"a0000"}, 4, 4)
	waitFor(t, 10*time.Second, "a0000 #4 handled", func() bool { return len(rec.handled(topicSub, "a0000")) >= 4 })
	if got := rec.handled(topicSub, "a0000"); !slices.Equal(got, []int{1, 2, 3, 4}) {
		t.Fatalf("a0000 handled %v, want 1..4 once each, in order", got)
	}
}

// TestTopicRetryDuringALongParkFailsInsteadOfHanging: a park whose write
// does not return (here: held) holds an operator's retry back for
// OpTimeout at most; the retry then fails, naming why, and a later one,
// after the park, is carried out.
func TestTopicRetryDuringALongParkFailsInsteadOfHanging(t *testing.T) {
	e := newTopicEnv(t, onRedis, 1)
	rec := newTopicRecorder(t)
	fail, fixed := failSeqUntilFixed("a0000", 1)
	rec.setFail(fail)
	held := newHeldPark(e.store)
	cfg := e.config(tsub(topicSub, rec.handler("n1")))
	cfg.Ledger = held
	n := e.start("n1", cfg, nil)
	defer e.stopAll()
	awaitStarted(t, n.ts)
	e.produce([]string{"a0000"}, 1, 1)
	select {
	case <-held.written:
	case <-time.After(10 * time.Second):
		t.Fatal("timed out waiting for the park's write")
	}
	ctx := context.Background()
	done := make(chan error, 1)
	go func() { done <- n.ts.Retry(ctx, topicSub, "a0000") }()
	select {
	case err := <-done:
		if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "being parked") {
			t.Errorf("Retry during the park: %v, want it to fail as being parked", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Retry still waiting for the park 10s after it was called (OpTimeout is 1s)")
	}
	close(held.release)
	fixed.Store(true)
	waitFor(t, 10*time.Second, "a retry after the park carried out", func() bool {
		_ = n.ts.Retry(ctx, topicSub, "a0000")
		return slices.Equal(rec.handled(topicSub, "a0000"), []int{1})
	})
}

// heldGet is a ledger whose GetParked, once armed, returns what it read
// only when the test releases it: the caller then acts on a copy that
// may be stale by then.
type heldGet struct {
	ledger.Ledger
	armed   atomic.Bool
	read    chan struct{}
	release chan struct{}
}

func (h *heldGet) GetParked(ctx context.Context, sub, partition, aggregate string) (ledger.Parked, error) {
	p, err := h.Ledger.GetParked(ctx, sub, partition, aggregate)
	if h.armed.CompareAndSwap(true, false) {
		close(h.read)
		<-h.release
	}
	return p, err
}

// TestTopicSkipOfAStaleEntryLeavesALaterParkAlone: a skip that read the
// aggregate's entry, which was then retried and resolved, and the
// aggregate parked again on a later record, is refused: it does not
// resolve the later park (whose record the operator never saw), and
// nothing is lost. Before the fix it resolved it: the later record was
// never handled.
func TestTopicSkipOfAStaleEntryLeavesALaterParkAlone(t *testing.T) {
	e := newTopicEnv(t, onRedis, 1)
	rec := newTopicRecorder(t)
	var fixed1, fixed2 atomic.Bool
	rec.setFail(func(m runtime.Message) error {
		switch {
		case m.Aggregate != "a0000":
		case m.Headers.Get("seq") == "1" && !fixed1.Load(), m.Headers.Get("seq") == "2" && !fixed2.Load():
			return errors.New("poison")
		}
		return nil
	})
	held := &heldGet{Ledger: e.store, read: make(chan struct{}), release: make(chan struct{})}
	cfg := e.config(tsub(topicSub, rec.handler("n1")))
	cfg.Ledger = held
	cfg.LedgerPollEvery = time.Hour
	n := e.start("n1", cfg, nil)
	defer e.stopAll()
	awaitStarted(t, n.ts)
	ctx := context.Background()
	parkedAt := func() string {
		p, err := e.store.GetParked(ctx, topicSub, "", "a0000")
		if err != nil {
			return ""
		}
		return p.Position
	}
	e.produce([]string{"a0000"}, 1, 1)
	waitFor(t, 10*time.Second, "a0000 #1 parked", func() bool { return parkedAt() != "" })
	first := parkedAt()

	held.armed.Store(true)
	skipped := make(chan error, 1)
	go func() { skipped <- n.ts.Skip(ctx, topicSub, "a0000") }()
	select {
	case <-held.read:
	case <-time.After(10 * time.Second):
		t.Fatal("timed out waiting for the skip's read")
	}
	// While the skip holds its copy: #1 is retried and handled, and #2
	// parks the aggregate again.
	fixed1.Store(true)
	if err := n.ts.Retry(ctx, topicSub, "a0000"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "a0000 #1 handled", func() bool { return slices.Equal(rec.handled(topicSub, "a0000"), []int{1}) })
	e.produce([]string{"a0000"}, 2, 2)
	waitFor(t, 10*time.Second, "a0000 parked again at #2", func() bool { p := parkedAt(); return p != "" && p != first })
	second := parkedAt()
	close(held.release)
	if err := <-skipped; !errors.Is(err, ledger.ErrNotParked) {
		t.Fatalf("the stale skip: %v, want ErrNotParked", err)
	}
	if got := parkedAt(); got != second {
		t.Fatalf("a0000 parked at %q after the stale skip, want still %q", got, second)
	}
	e.produce([]string{"a0000"}, 3, 3)
	fixed2.Store(true)
	if err := n.ts.Retry(ctx, topicSub, "a0000"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "a0000 #2 and #3 handled after the retry", func() bool {
		return slices.Equal(rec.handled(topicSub, "a0000"), []int{1, 2, 3})
	}, func() string {
		return fmt.Sprintf("a0000 handled %v, parked at %q, counters %v", rec.handled(topicSub, "a0000"), parkedAt(), n.ts.Counters())
	})
}

// lateResolve is a ledger whose Resolve deletes the entry and then
// fails on its deadline: a reply lost after the write landed.
type lateResolve struct{ ledger.Ledger }

func (l lateResolve) Resolve(ctx context.Context, f broker.Fence, subscription, aggregate string) error {
	if err := l.Ledger.Resolve(ctx, f, subscription, aggregate); err != nil {
		return err
	}
	<-ctx.Done()
	return ctx.Err()
}

// TestTopicSkipWhoseResolveFailedAfterTheDeleteUnparks: a skip whose
// resolve deleted the entry but failed (its reply lost on the deadline)
// does not leave the aggregate parked on the node with nothing covering
// it: its later records are handled. Before the fix they were skipped,
// lost, until the next ledger poll.
func TestTopicSkipWhoseResolveFailedAfterTheDeleteUnparks(t *testing.T) {
	e := newTopicEnv(t, onRedis, 1)
	rec := newTopicRecorder(t)
	rec.setFail(failSeq("a0000", 1))
	cfg := e.config(tsub(topicSub, rec.handler("n1")))
	cfg.Ledger = lateResolve{e.store}
	cfg.LedgerPollEvery = time.Hour
	n := e.start("n1", cfg, nil)
	defer e.stopAll()
	awaitStarted(t, n.ts)
	ctx := context.Background()
	e.produce([]string{"a0000"}, 1, 1)
	waitFor(t, 10*time.Second, "a0000 parked", func() bool {
		_, err := e.store.GetParked(ctx, topicSub, "", "a0000")
		return err == nil
	})
	if err := n.ts.Skip(ctx, topicSub, "a0000"); err != nil {
		t.Fatalf("Skip: %v", err)
	}
	e.produce([]string{"a0000"}, 2, 2)
	waitFor(t, 10*time.Second, "a0000 #2 handled", func() bool {
		return slices.Equal(rec.handled(topicSub, "a0000"), []int{2})
	}, func() string {
		return fmt.Sprintf("a0000 handled %v, counters %v", rec.handled(topicSub, "a0000"), n.ts.Counters())
	})
}

// countedLists is a ledger that counts its ListParked calls (the polls').
type countedLists struct {
	ledger.Ledger
	n atomic.Int64
}

func (c *countedLists) ListParked(ctx context.Context, sub string) ([]ledger.Parked, error) {
	defer c.n.Add(1)
	return c.Ledger.ListParked(ctx, sub)
}

// TestTopicBinaryAggregateStaysParkedAndRetries: an aggregate whose key
// is not UTF-8 stays parked across the ledger's polls (its later records
// are held back behind the parked head) and an operator's retry of it
// is carried out. Before the stores kept the aggregate's bytes, the
// entry read back named U+FFFD in their place: the first poll dropped
// the park, #2 ran past the parked #1, and Retry said not parked.
func TestTopicBinaryAggregateStaysParkedAndRetries(t *testing.T) {
	e := newTopicEnv(t, onRedis, 1)
	rec := newTopicRecorder(t)
	const agg = "\x00\xc8k\xff"
	fail, fixed := failSeqUntilFixed(agg, 1)
	rec.setFail(fail)
	lists := &countedLists{Ledger: e.store}
	cfg := e.config(tsub(topicSub, rec.handler("n1")))
	cfg.Ledger = lists
	cfg.LedgerPollEvery = 20 * time.Millisecond
	n := e.start("n1", cfg, nil)
	defer e.stopAll()
	awaitStarted(t, n.ts)
	ctx := context.Background()
	e.produce([]string{agg}, 1, 1)
	waitFor(t, 10*time.Second, "the aggregate parked", func() bool {
		_, err := e.store.GetParked(ctx, topicSub, "", agg)
		return err == nil
	})
	polled := lists.n.Load()
	waitFor(t, 10*time.Second, "three polls of the ledger after the park", func() bool { return lists.n.Load() >= polled+3 })
	e.produce([]string{agg}, 2, 2)
	waitFor(t, 10*time.Second, "#2 skipped behind the park, or handled", func() bool {
		return n.ts.Counters()[topic.CounterSkipped] >= 1 || len(rec.handled(topicSub, agg)) > 0
	})
	if got := rec.handled(topicSub, agg); len(got) != 0 {
		t.Fatalf("handled %v while #1 is parked", got)
	}
	fixed.Store(true)
	if err := n.ts.Retry(ctx, topicSub, agg); err != nil {
		t.Fatalf("Retry: %v", err)
	}
	waitFor(t, 10*time.Second, "#1 and #2 handled after the retry", func() bool {
		return slices.Equal(rec.handled(topicSub, agg), []int{1, 2})
	}, func() string {
		return fmt.Sprintf("handled %v, counters %v", rec.handled(topicSub, agg), n.ts.Counters())
	})
}
