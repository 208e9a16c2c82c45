package topic_test

import (
	"context"
	"errors"
	"maps"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/protctl/protctl/pkg/runtime"
	"github.com/protctl/protctl/pkg/runtime/clock"
	"github.com/protctl/protctl/pkg/runtime/hrw"
	"github.com/protctl/protctl/pkg/runtime/internal/enginetest"
	"github.com/protctl/protctl/pkg/runtime/topic"
)

// A handoff starts no record: with every lane's worker inside a slow
// handler when the handoff begins (a stop, or a rebalance that gives the
// partition to a new member), the partition waits for those calls only;
// no handler call starts after the handoff signal, and the checkpoint it
// saves is exactly the low watermark of what finished: every offset below
// it finished, the one at it did not. Records queued in the lanes are left
// to the next owner.
func TestTopicHandoffStartsNoRecord(t *testing.T) {
	for _, kind := range []storeKind{onMemory, onRedis} {
		for _, trigger := range []string{"stop", "rebalance"} {
			t.Run(string(kind)+"/"+trigger, func(t *testing.T) {
				// The runtime orders records per aggregate only, not which
				// aggregates' lanes start first: under load (the whole
				// suite under -race) the calls running when the handoff
				// began have left offset 0 out, and such a run checks only
				// a checkpoint of 0. It is run again; its checks held.
				for attempt := 1; ; attempt++ {
					low, finished := handoffStartsNoRecord(t, kind, trigger)
					if low > 0 {
						break
					}
					if attempt == 5 {
						t.Fatalf("no record at offset 0 finished in %d attempts: the test did not exercise a handoff with work done (finished %v)", attempt, finished)
					}
					t.Logf("attempt %d: offset 0 was not among the calls running when the handoff began (finished %v): trying again", attempt, finished)
				}
			})
		}
	}
}

// handoffStartsNoRecord runs TestTopicHandoffStartsNoRecord's scenario
// once and returns the low watermark of the calls that finished (which
// the checkpoint was checked to be) and their offsets.
func handoffStartsNoRecord(t *testing.T, kind storeKind, trigger string) (int64, []int64) {
	t.Helper()
	const lanes = 4
	e := newTopicEnv(t, kind, 1)
	aggs := aggNames(8)
	e.produce(aggs, 1, 5) // 40 records, offsets 0..39

	var (
		started  atomic.Int32
		mu       sync.Mutex
		finished = map[int64]bool{}
		release  = make(chan struct{})
		began    = make(chan struct{})
		once     sync.Once
		afterBeg atomic.Int32 // calls started after the handoff signal
	)
	h := runtime.HandlerFunc(func(ctx context.Context, m runtime.Message) error {
		select {
		case <-began:
			afterBeg.Add(1)
		default:
		}
		started.Add(1)
		<-release
		off, err := strconv.ParseInt(m.Position, 10, 64)
		if err != nil {
			t.Errorf("position %q: %v", m.Position, err)
		}
		mu.Lock()
		finished[off] = true
		mu.Unlock()
		return nil
	})
	cfg := e.config(tsub(topicSub, h))
	cfg.Lanes = lanes
	cfg.HandoffTimeout = time.Minute // bounded by the running calls, not by this
	ts, err := topic.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	topic.SetHandoffHook(ts, func(int32) { once.Do(func() { close(began) }) })
	host := &testHost{cluster: e.cluster, id: "n1", log: testLogger().With("node", "n1"), clk: clock.System()}
	e.cluster.add("n1")
	if err := ts.Start(context.Background(), host); err != nil {
		t.Fatal(err)
	}
	stopped := make(chan struct{})
	defer func() {
		select {
		case <-release:
		default:
			close(release)
		}
		<-stopped
	}()
	awaitStarted(t, ts)
	// Every worker is inside a handler: none is between its
	// check and its call.
	waitFor(t, 10*time.Second, "every lane inside a handler", func() bool { return started.Load() == lanes })

	switch trigger {
	case "stop":
		go func() {
			defer close(stopped)
			e.cluster.remove("n1")
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			if err := ts.Stop(ctx); err != nil {
				t.Errorf("stop: %v", err)
			}
		}()
	case "rebalance":
		// A member HRW gives partition 0 to joins; it never runs.
		other := ""
		for i := 2; other == ""; i++ {
			id := "n" + strconv.Itoa(i)
			if hrw.Owner(topicName+"/0", []string{"n1", id}) == id {
				other = id
			}
		}
		e.cluster.add(other)
		go func() {
			defer close(stopped)
			waitFor(t, time.Minute, "the partition handed back", func() bool { return len(ts.Held()) == 0 })
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			if err := ts.Stop(ctx); err != nil {
				t.Errorf("stop: %v", err)
			}
		}()
	}
	enginetest.WaitClosed(t, began, "the handoff to begin")
	close(release)
	enginetest.WaitClosed(t, stopped, "the handoff and stop to end")

	if n := afterBeg.Load(); n != 0 {
		t.Errorf("%d handler calls started after the handoff began", n)
	}
	if n := started.Load(); n != lanes {
		t.Errorf("%d handler calls in all, want the %d running when the handoff began", n, lanes)
	}
	mu.Lock()
	low := int64(0)
	for finished[low] {
		low++
	}
	done := len(finished)
	mu.Unlock()
	next, ok := e.checkpoint(topicSub, 0)
	if !ok || next != low {
		t.Fatalf("checkpoint (%d, %v), want %d: the low watermark of the %d calls that finished", next, ok, low, done)
	}
	return low, slices.Sorted(maps.Keys(finished))
}

// A record waiting between attempts when a handoff begins is not tried
// again by this node: the handoff does not wait out the retry's backoff
// (an hour here, as is the handoff timeout, so a handoff that waited
// would not end within the test's deadline), no attempt starts after it
// began, and the checkpoint stays at the record for the next owner.
func TestTopicHandoffAbortsRetryWait(t *testing.T) {
	e := newTopicEnv(t, onRedis, 1)
	e.produce([]string{"a0000"}, 1, 2) // offsets 0, 1
	var attempts atomic.Int32
	failed := make(chan struct{})
	var once sync.Once
	h := runtime.HandlerFunc(func(ctx context.Context, m runtime.Message) error {
		if m.Position == "0" {
			attempts.Add(1)
			once.Do(func() { close(failed) })
			return errors.New("transient (test)")
		}
		return nil
	})
	cfg := e.config(topic.Subscription{Name: topicSub, Handler: h,
		Retry: runtime.RetryPolicy{Attempts: 5, Backoff: time.Hour, MaxBackoff: time.Hour}})
	cfg.HandoffTimeout = time.Hour
	n := e.start("n1", cfg, nil)
	awaitStarted(t, n.ts)
	enginetest.WaitClosed(t, failed, "the first attempt to fail")
	e.stop(n) // fails the test if Stop does not return within 20s
	if a := attempts.Load(); a != 1 {
		t.Errorf("%d attempts, want 1: a retry started during the handoff", a)
	}
	if next, ok := e.checkpoint(topicSub, 0); ok && next != 0 {
		t.Errorf("checkpoint %d passed the record whose retry was abandoned", next)
	}
}
