package topic_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/protctl/protctl/pkg/broker"
	"github.com/protctl/protctl/pkg/broker/memorybroker"
	"github.com/protctl/protctl/pkg/runtime"
	"github.com/protctl/protctl/pkg/runtime/clock"
	"github.com/protctl/protctl/pkg/runtime/ledger"
	"github.com/protctl/protctl/pkg/runtime/memstore"
	"github.com/protctl/protctl/pkg/runtime/topic"
)

// fencingEnv is a one-partition topic whose node runs on a fake clock:
// its renewals never run and its trust window never passes, so it keeps
// believing it holds the partition after another owner took it over.
// takeOver makes the lease expire in the store (the broker's manual clock
// on memory, a DEL on Redis) and acquires it as "intruder".
func fencingEnv(t *testing.T, kind storeKind) (*topicEnv, func()) {
	e := newTopicEnv(t, kind, 1)
	e.clk = clock.NewFake(time.Now())
	var expire func()
	switch kind {
	case onMemory:
		mc := memorybroker.NewManualClock(time.Now())
		e.mem = memorybroker.New(memorybroker.WithClock(mc))
		e.leases = e.mem
		e.store = memstore.New(e.mem.Faults())
		expire = func() { mc.Advance(time.Minute) }
	case onRedis:
		expire = func() {
			if err := e.raw.Del(context.Background(), e.leaseGroup().LeaseKey(0)).Err(); err != nil {
				t.Fatal(err)
			}
		}
	}
	takeOver := func() {
		t.Helper()
		expire()
		lg := e.leaseGroup()
		if _, ok, err := e.leases.AcquirePartitionLease(context.Background(), lg.LeaseKey(0), lg.GenerationKey(0), "intruder", time.Minute); err != nil || !ok {
			t.Fatalf("intruder acquire: ok=%v err=%v", ok, err)
		}
	}
	return e, takeOver
}

// TestTopicFencingCheckpoint: after another owner took the lease over, a
// checkpoint save of the stale node is refused, changes nothing, and the
// node drops the partition.
func TestTopicFencingCheckpoint(t *testing.T) {
	for _, kind := range []storeKind{onMemory, onRedis} {
		t.Run(string(kind), func(t *testing.T) {
			e, takeOver := fencingEnv(t, kind)
			rec := newTopicRecorder(t)
			n := e.start("stale", e.config(tsub(topicSub, rec.handler("stale"))), nil)
			defer e.stopAll()
			awaitStarted(t, n.ts)
			aggs := aggNames(3)
			e.produce(aggs, 1, 4)
			waitFor(t, 10*time.Second, "first records handled", func() bool { return rec.complete(topicSub, aggs, 4) })
			ctx := context.Background()
			if err := topic.SaveCheckpoints(ctx, n.ts); err != nil {
				t.Fatalf("save while holding the lease: %v", err)
			}
			if next, ok := e.checkpoint(topicSub, 0); !ok || next != 12 {
				t.Fatalf("checkpoint (%d, %v), want 12", next, ok)
			}

			takeOver()
			e.produce(aggs, 5, 8)
			waitFor(t, 10*time.Second, "records handled by the stale node", func() bool { return rec.complete(topicSub, aggs, 8) })
			err := topic.SaveCheckpoints(ctx, n.ts)
			if !errors.Is(err, broker.ErrLeaseLost) {
				t.Fatalf("save after the takeover = %v, want broker.ErrLeaseLost", err)
			}
			if next, _ := e.checkpoint(topicSub, 0); next != 12 {
				t.Fatalf("checkpoint moved to %d by a stale owner", next)
			}
			waitFor(t, 5*time.Second, "the stale node to drop the partition", func() bool { return len(n.ts.Held()) == 0 })
			if c := n.ts.Counters(); c[runtime.CounterLeaseLost] == 0 {
				t.Errorf("counters %v: want a lost lease", c)
			}
		})
	}
}

// TestTopicFencingPark: a stale node whose handler fails after another
// owner took the lease over cannot park: the park is refused, nothing is
// recorded, and the node drops the partition without counting the record
// done.
func TestTopicFencingPark(t *testing.T) {
	for _, kind := range []storeKind{onMemory, onRedis} {
		t.Run(string(kind), func(t *testing.T) {
			e, takeOver := fencingEnv(t, kind)
			rec := newTopicRecorder(t)
			inside := make(chan struct{})
			release := make(chan struct{})
			rec.setHold(func(ctx context.Context, m runtime.Message) {
				if m.Aggregate == "a0000" && m.Headers.Get("seq") == "2" {
					close(inside)
					<-release
				}
			})
			rec.setFail(func(m runtime.Message) error {
				if m.Aggregate == "a0000" && m.Headers.Get("seq") == "2" {
					return errors.New("bad record")
				}
				return nil
			})
			var parked atomic.Int32
			obs := &runtime.Observer{OnParked: func(ledger.Parked) { parked.Add(1) }}
			n := e.start("stale", e.config(tsub(topicSub, rec.handler("stale"))), obs)
			defer e.stopAll()
			awaitStarted(t, n.ts)
			e.produce([]string{"a0000"}, 1, 3)
			<-inside
			takeOver()
			close(release)
			waitFor(t, 5*time.Second, "the stale node to drop the partition", func() bool { return len(n.ts.Held()) == 0 })
			if _, err := e.store.GetParked(context.Background(), topicSub, "", "a0000"); !errors.Is(err, ledger.ErrNotParked) {
				t.Fatalf("GetParked after a stale park = %v, want ErrNotParked", err)
			}
			if n := parked.Load(); n != 0 {
				t.Fatalf("OnParked reported %d parks for a refused park", n)
			}
			if got := rec.handled(topicSub, "a0000"); len(got) != 1 {
				t.Fatalf("stale node handled %v, want only seq 1 (it must stop after the refused park)", got)
			}
			if next, ok := e.checkpoint(topicSub, 0); ok && next > 1 {
				t.Fatalf("checkpoint %d passed the record whose park was refused", next)
			}
		})
	}
}

func awaitStarted(t *testing.T, ts *topic.Consumer) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := ts.AwaitStarted(ctx); err != nil {
		t.Fatalf("AwaitStarted: %v (last join error %v)", err, ts.LastJoinError())
	}
}
