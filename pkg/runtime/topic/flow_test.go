package topic_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/protctl/protctl/pkg/runtime"
	"github.com/protctl/protctl/pkg/runtime/kafkasource"
	"github.com/protctl/protctl/pkg/runtime/topic"
)

// TestTopicBackingOffAppearsAndClears: a systemic failure backs its
// partition off (BackingOff, the status record and OnBackOff say so, and
// nothing says paused: that word is an operator's) and is retried
// with backoff, parking nothing; once the dependency is back the
// partition resumes and everything is handled.
func TestTopicBackingOffAppearsAndClears(t *testing.T) {
	e := newTopicEnv(t, onMemory, 2)
	rec := newTopicRecorder(t)
	var down atomic.Bool
	down.Store(true)
	rec.setFail(func(m runtime.Message) error {
		if m.Partition == 0 && down.Load() {
			return runtime.Systemic(errors.New("database down"))
		}
		return nil
	})
	var pauses, resumes atomic.Int32
	obs := &runtime.Observer{OnBackOff: func(ev runtime.BackOffEvent) {
		if ev.BackingOff {
			pauses.Add(1)
		} else {
			resumes.Add(1)
		}
	}}
	n := e.start("n1", e.config(tsub(topicSub, rec.handler("n1"))), obs)
	defer e.stopAll()
	awaitStarted(t, n.ts)
	aggs := aggNames(4) // a0000, a0002 on partition 0
	e.produce(aggs, 1, 3)
	waitFor(t, 10*time.Second, "partition 0 backing off", func() bool { return slices.Equal(n.ts.BackingOff(), []string{topicSub + "/0"}) })
	if st := n.ts.Status(); !slices.Equal(st.BackingOff, []string{topicSub + "/0"}) || len(st.Paused) != 0 {
		t.Fatalf("status backingOff %v paused %v, want [%s/0] and none", st.BackingOff, st.Paused, topicSub)
	}
	waitFor(t, 10*time.Second, "partition 1 to flow meanwhile", func() bool { return rec.complete(topicSub, []string{"a0001", "a0003"}, 3) })
	waitFor(t, 5*time.Second, "several retries", func() bool { return pauses.Load() >= 3 })
	if c := n.ts.Counters(); c[runtime.CounterParked] != 0 {
		t.Fatalf("a systemic failure parked: %v", c)
	}
	down.Store(false)
	waitFor(t, 10*time.Second, "everything handled", func() bool { return rec.complete(topicSub, aggs, 3) })
	waitFor(t, 5*time.Second, "the back-off to clear", func() bool { return len(n.ts.BackingOff()) == 0 })
	if resumes.Load() == 0 {
		t.Fatal("OnBackOff never reported the end of the back-off")
	}
	rec.checkOrder(t, topicSub, aggs, 3)
}

// TestTopicThrottledAppearsAndClears: when one aggregate's handler is
// stuck, the partition's in-flight window fills (the low watermark cannot
// pass the stuck record) and the partition stops fetching (Throttled);
// once the handler returns it fetches again and everything is handled.
func TestTopicThrottledAppearsAndClears(t *testing.T) {
	e := newTopicEnv(t, onMemory, 2)
	rec := newTopicRecorder(t)
	stuck := make(chan struct{})
	rec.setHold(func(ctx context.Context, m runtime.Message) {
		if m.Aggregate == "a0000" && m.Headers.Get("seq") == "1" {
			select {
			case <-stuck:
			case <-ctx.Done():
			}
		}
	})
	cfg := e.config(tsub(topicSub, rec.handler("n1")))
	cfg.MaxInFlight = 20
	n := e.start("n1", cfg, nil)
	defer e.stopAll()
	awaitStarted(t, n.ts)
	aggs := aggNames(10)
	// 100 records per partition: a fetched batch is delivered whole, so
	// the window overflows by what was fetched, then fetching stops.
	e.produce(aggs, 1, 20)
	waitFor(t, 10*time.Second, "partition 0 throttled", func() bool { return slices.Equal(n.ts.Throttled(), []int32{0}) })
	if st := n.ts.Status(); !slices.Equal(st.Throttled, []string{"0"}) {
		t.Fatalf("status throttled %v, want [0]", st.Throttled)
	}
	e.produce(aggs, 21, 40)
	waitFor(t, 10*time.Second, "partition 1 to flow", func() bool { return rec.complete(topicSub, []string{"a0001", "a0003"}, 40) })
	if got := len(rec.handled(topicSub, "a0002")); got > 20 {
		t.Fatalf("a0002 handled %d records: the throttled partition kept fetching", got)
	}
	close(stuck)
	waitFor(t, 10*time.Second, "everything handled", func() bool { return rec.complete(topicSub, aggs, 40) })
	waitFor(t, 5*time.Second, "the throttle to clear", func() bool { return len(n.ts.Throttled()) == 0 })
	rec.checkOrder(t, topicSub, aggs, 40)
}

// TestTopicRefresh: partitions added to the topic are picked up and read
// from their beginning (even with StartFrom at the head), and the owners
// of the old partitions stay the same, with the same lease generations
// (unless an owner gave its lease up on its own: see givenUp.stayed).
func TestTopicRefresh(t *testing.T) {
	e := newTopicEnv(t, onMemory, 2)
	rec := newTopicRecorder(t)
	gave := newGivenUp()
	for _, id := range []string{"n1", "n2"} {
		cfg := e.config(tsub(topicSub, rec.handler(id)))
		cfg.StartFrom = kafkasource.FromHead
		cfg.RefreshEvery = time.Second
		e.start(id, cfg, gave.observer(id))
	}
	defer e.stopAll()
	before, genBefore := settled(t, e, "two nodes to settle")
	e.createPartitions(6)
	// Produced before anyone noticed the new partitions.
	aggs := aggNames(12)
	e.produce(aggs, 1, 3)
	after, genAfter := settled(t, e, "the new partitions to be held")
	for p, o := range before {
		if after[p] != o {
			t.Errorf("partition %d: %s gen %d before, %s gen %d after the refresh", p, o, genBefore[p], after[p], genAfter[p])
			continue
		}
		gave.stayed(t, p, o, genBefore[p], genAfter[p])
	}
	waitFor(t, time.Minute, "every record, new partitions included", func() bool { return rec.complete(topicSub, aggs, 3) })
	rec.checkOrder(t, topicSub, aggs, 3)
}

// TestTopicDedup: a record whose identity was already handled is dropped.
func TestTopicDedup(t *testing.T) {
	e := newTopicEnv(t, onMemory, 1)
	rec := newTopicRecorder(t)
	n := e.start("n1", e.config(tsub(topicSub, rec.handler("n1"))), nil)
	defer e.stopAll()
	awaitStarted(t, n.ts)
	r1, r2 := e.record("a0000", 1), e.record("a0000", 2)
	dup := e.record("a0000", 1) // the producer sent #1 again
	e.k.Produce(t, e.prod, r1, r2, dup)
	e.produce([]string{"a0000"}, 3, 3)
	waitFor(t, 10*time.Second, "records handled", func() bool { return rec.complete(topicSub, []string{"a0000"}, 3) })
	waitFor(t, 5*time.Second, "the duplicate counted", func() bool { return n.ts.Counters()[topic.CounterDuplicates] == 1 })
	if got := rec.handled(topicSub, "a0000"); !slices.Equal(got, []int{1, 2, 3}) {
		t.Fatalf("handled %v, want [1 2 3] (the duplicate of #1 dropped)", got)
	}
}

// TestTopicParkBurst: when aggregate after aggregate fails on one
// partition, the burst rule stops parking and pauses the partition
// instead (the dependency is probably down, not the records).
func TestTopicParkBurst(t *testing.T) {
	e := newTopicEnv(t, onMemory, 1)
	rec := newTopicRecorder(t)
	var broken atomic.Bool
	broken.Store(true)
	rec.setFail(func(m runtime.Message) error {
		if broken.Load() {
			return errors.New("unmarked error")
		}
		return nil
	})
	cfg := e.config(tsub(topicSub, rec.handler("n1")))
	cfg.ParkBurst = 3
	n := e.start("n1", cfg, nil)
	defer e.stopAll()
	awaitStarted(t, n.ts)
	aggs := aggNames(10)
	e.produce(aggs, 1, 1)
	waitFor(t, 10*time.Second, "a back-off after 3 parks", func() bool { return len(n.ts.BackingOff()) == 1 })
	if c := n.ts.Counters(); c[runtime.CounterParked] != 3 {
		t.Fatalf("counters %v: want exactly 3 parked before the burst back-off", c)
	}
	broken.Store(false)
	waitFor(t, 10*time.Second, "the back-off to clear", func() bool { return len(n.ts.BackingOff()) == 0 })
	waitFor(t, 10*time.Second, "the unparked aggregates handled", func() bool {
		return n.ts.Counters()[runtime.CounterProcessed] == int64(len(aggs)-3)
	})
}

// TestTopicParkBurstSlides: while the failures go on, the burst pause
// lets one more aggregate be parked each time the burst window slides,
// and each such park ends the pause it caused, so the partition moves on
// past every bad aggregate.
func TestTopicParkBurstSlides(t *testing.T) {
	e := newTopicEnv(t, onMemory, 1)
	rec := newTopicRecorder(t)
	bad := map[string]bool{"a0000": true, "a0001": true, "a0002": true, "a0003": true}
	rec.setFail(func(m runtime.Message) error {
		if bad[m.Aggregate] {
			return errors.New("bad aggregate")
		}
		return nil
	})
	cfg := e.config(tsub(topicSub, rec.handler("n1")))
	cfg.ParkBurst, cfg.ParkBurstWindow = 2, 300*time.Millisecond
	n := e.start("n1", cfg, nil)
	defer e.stopAll()
	awaitStarted(t, n.ts)
	aggs := aggNames(6)
	e.produce(aggs, 1, 1)
	waitFor(t, 10*time.Second, "all four bad aggregates parked and the others handled", func() bool {
		return n.ts.Counters()[runtime.CounterParked] == 4 && rec.complete(topicSub, aggs[4:], 1)
	}, func() string { return fmt.Sprint(n.ts.Counters(), n.ts.BackingOff()) })
	waitFor(t, 5*time.Second, "no back-off left", func() bool { return len(n.ts.BackingOff()) == 0 })
}

// TestTopicFatal: a fatal failure stops its subscription and is reported
// to the node; the topic's other subscription goes on.
func TestTopicFatal(t *testing.T) {
	e := newTopicEnv(t, onMemory, 2)
	good, bad := newTopicRecorder(t), newTopicRecorder(t)
	bad.setFail(func(m runtime.Message) error {
		if m.Aggregate == "a0001" {
			return runtime.Fatal(errors.New("schema mismatch"))
		}
		return nil
	})
	n := e.start("n1", e.config(tsub("good", good.handler("n1")), tsub("bad", bad.handler("n1"))), nil)
	defer e.stopAll()
	awaitStarted(t, n.ts)
	aggs := aggNames(4)
	e.produce(aggs, 1, 5)
	waitFor(t, 10*time.Second, "the fatal failure reported", func() bool { return len(n.host.failures()) == 1 })
	waitFor(t, 10*time.Second, "the good subscription to handle everything", func() bool { return good.complete("good", aggs, 5) })
	if err := n.ts.Subscription("bad").Err(); err == nil {
		t.Fatal("the bad subscription has no error")
	}
	if err := n.ts.Subscription("good").Err(); err != nil {
		t.Fatalf("the good subscription failed: %v", err)
	}
	if st := n.ts.Status(); st.Err == nil {
		t.Fatal("status carries no error")
	}
	if got := n.ts.JoinState(); got != runtime.JoinJoined {
		t.Fatalf("JoinState = %s with one subscription still running, want joined", got)
	}
	if got := bad.handled("bad", "a0001"); len(got) != 0 {
		t.Fatalf("bad handled %v of a0001", got)
	}
}

// TestTopicCatchUp: a subscription far behind the others catches up on
// its own reader (under the catch-up limit) while the shared reader
// serves the others; and a subscription whose handler is stuck detaches,
// so the other one is not held back.
func TestTopicCatchUp(t *testing.T) {
	e := newTopicEnv(t, onMemory, 1)
	fast, slow := newTopicRecorder(t), newTopicRecorder(t)
	aggs := aggNames(5)
	e.produce(aggs, 1, 40) // 200 records
	// "fast" already handled the first 190 (its checkpoint says so).
	lg := e.leaseGroup()
	ctx := context.Background()
	l, ok, err := e.leases.AcquirePartitionLease(ctx, lg.LeaseKey(0), lg.GenerationKey(0), "setup", time.Minute)
	if err != nil || !ok {
		t.Fatalf("setup lease: %v %v", ok, err)
	}
	if err := e.store.Save(ctx, l.Fence, lg.String(), "fast", 0, 190); err != nil {
		t.Fatal(err)
	}
	if _, err := e.leases.ReleasePartitionLease(ctx, l.Fence); err != nil {
		t.Fatal(err)
	}
	stuck := make(chan struct{})
	slow.setHold(func(ctx context.Context, m runtime.Message) {
		if m.Aggregate == "a0000" && m.Headers.Get("seq") == "45" {
			select {
			case <-stuck:
			case <-ctx.Done():
			}
		}
	})
	cfg := e.config(tsub("fast", fast.handler("n1")), tsub("slow", slow.handler("n1")))
	cfg.MaxInFlight, cfg.CatchUpLag = 10, 50
	limit := topic.NewCatchUpLimit(1)
	cfg.CatchUp = limit
	n := e.start("n1", cfg, nil)
	defer e.stopAll()
	awaitStarted(t, n.ts)
	waitFor(t, 10*time.Second, "slow to catch up", func() bool { return slow.complete("slow", aggs, 40) })
	if got := fast.handled("fast", "a0000"); !slices.Equal(got, []int{39, 40}) {
		t.Fatalf("fast handled %v of a0000, want [39 40] (from its checkpoint)", got)
	}
	if c := n.ts.Subscription("slow").Counters(); c[topic.CounterCatchUps] == 0 {
		t.Fatalf("slow counters %v: no catch-up", c)
	}
	// Now slow gets stuck on a0000 #45; fast must go on.
	e.produce(aggs, 41, 80)
	waitFor(t, 10*time.Second, "fast to handle everything while slow is stuck", func() bool { return fast.complete("fast", aggs, 80) })
	if slow.complete("slow", aggs, 80) {
		t.Fatal("slow completed while stuck")
	}
	// Fast may have caught up on its own reader at the end (detached, so
	// the partition was throttled until it attached again): the throttle
	// must clear while slow is still stuck.
	waitFor(t, 5*time.Second, "the partition not throttled while slow is stuck", func() bool { return len(n.ts.Throttled()) == 0 })
	close(stuck)
	waitFor(t, 10*time.Second, "slow to catch up again", func() bool { return slow.complete("slow", aggs, 80) })
	slow.checkOrder(t, "slow", aggs, 80)
	if limit.InUse() != 0 {
		t.Fatalf("catch-up limit still held: %d", limit.InUse())
	}
}

// TestTopicStuckPartitionDoesNotHoldTheReader: a partition whose lanes
// cannot take more (one aggregate stuck, its window at the limit) gets
// its fetches delivered only as far as the window allows (the rest waits
// in the feed) and stops fetching; the shared reader keeps serving the
// other partition through fetch after fetch of thousands of records.
func TestTopicStuckPartitionDoesNotHoldTheReader(t *testing.T) {
	e := newTopicEnv(t, onMemory, 2)
	rec := newTopicRecorder(t)
	stuck := make(chan struct{})
	rec.setHold(func(ctx context.Context, m runtime.Message) {
		if m.Aggregate == "a0000" && m.Headers.Get("seq") == "2" {
			select {
			case <-stuck:
			case <-ctx.Done():
			}
		}
	})
	n := e.start("n1", e.config(tsub(topicSub, rec.handler("n1"))), nil)
	defer e.stopAll()
	awaitStarted(t, n.ts)
	aggs := aggNames(10) // even ones on partition 0, odd ones on 1
	var odd []string
	for i, a := range aggs {
		if i%2 == 1 {
			odd = append(odd, a)
		}
	}
	for round := 1; round <= 3; round++ {
		to := round * 2000 // 10,000 records per partition and round
		e.produce(aggs, to-1999, to)
		waitFor(t, 30*time.Second, fmt.Sprintf("partition 1 to flow, round %d", round), func() bool { return rec.complete(topicSub, odd, to) })
	}
	if got := len(rec.handled(topicSub, "a0000")); got != 1 {
		t.Fatalf("a0000 handled %d records past its stuck one", got)
	}
	waitFor(t, 10*time.Second, "partition 0 throttled", func() bool { return slices.Contains(n.ts.Throttled(), 0) })
	close(stuck)
	waitFor(t, 30*time.Second, "everything handled", func() bool { return rec.complete(topicSub, aggs, 6000) })
	rec.checkOrder(t, topicSub, aggs, 6000)
}
