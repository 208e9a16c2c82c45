package topic_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/protctl/protctl/pkg/broker"
	"github.com/protctl/protctl/pkg/runtime"
	"github.com/protctl/protctl/pkg/runtime/internal/enginetest"
	"github.com/protctl/protctl/pkg/runtime/topic"
)

// flakyCheckpoints fails Load while failing is set: a partition whose
// checkpoint cannot be read is given back right after its lease was
// acquired (releaseUnstarted).
type flakyCheckpoints struct {
	runtime.Checkpoints
	failing atomic.Bool
	failed  atomic.Int64
}

var errFlakyLoad = errors.New("test: checkpoint load refused")

func (f *flakyCheckpoints) Load(ctx context.Context, leaseGroup, subscription string, partition int32) (int64, bool, error) {
	if f.failing.Load() {
		f.failed.Add(1)
		return 0, false, errFlakyLoad
	}
	return f.Checkpoints.Load(ctx, leaseGroup, subscription, partition)
}

// TestTopicLeaseEventsBalance: every lease a Kafka topic node acquires is
// reported ended exactly once, whatever ends it: a handoff, a join undone
// because a checkpoint could not be read, a lease taken away in the store
// (lost), a stop; so that the counters balance, acquired - released - lost
// - untrusted = held, as an operator adding up the metrics expects. Before,
// an undone join reported a release of a lease it never reported acquired,
// a lease lost during a handoff reported nothing, and a lease refused by
// several fenced calls was counted lost once per call.
func TestTopicLeaseEventsBalance(t *testing.T) {
	const parts = 12
	e := newTopicEnv(t, onMemory, parts)
	defer e.stopAll()
	h := newTopicRecorder(t)
	log := enginetest.NewLeaseLog()
	flaky := map[string]*flakyCheckpoints{}
	start := func(id string) *topicNode {
		cfg := e.config(tsub(topicSub, h.handler(id)))
		f := &flakyCheckpoints{Checkpoints: cfg.Checkpoints}
		cfg.Checkpoints = f
		flaky[id] = f
		return e.start(id, cfg, log.Observer(id))
	}
	balanced := func(n *topicNode) {
		t.Helper()
		c := n.ts.Counters()
		got := c[runtime.CounterAcquired] - c[runtime.CounterReleased] - c[runtime.CounterLeaseLost] - c[runtime.CounterUntrusted]
		if got != c[topic.CounterHeld] || c[topic.CounterHeld] != int64(len(n.ts.Held())) {
			t.Errorf("%s: acquired %d - released %d - lost %d - untrusted %d = %d, held %d (%d partitions)", n.id,
				c[runtime.CounterAcquired], c[runtime.CounterReleased], c[runtime.CounterLeaseLost], c[runtime.CounterUntrusted],
				got, c[topic.CounterHeld], len(n.ts.Held()))
		}
	}

	n1 := start("n1")
	start("n2")
	settled(t, e, "two nodes to settle")

	// A third node joins while it cannot read checkpoints: every lease it
	// takes is given back (undone) until the store answers again.
	n3 := start("n3")
	flaky["n3"].failing.Store(true)
	waitFor(t, time.Minute, "n3's checkpoint loads to fail", func() bool { return flaky["n3"].failed.Load() >= 2 })
	flaky["n3"].failing.Store(false)
	settled(t, e, "three nodes to settle")
	for _, n := range e.live() {
		balanced(n)
	}

	// Take one of n1's leases away in the store (as an operator's forced
	// release does): its next renewal is refused, and it takes the
	// partition again under a higher generation.
	var stolen int32 = -1
	var gen int64
	for p, g := range n1.ts.Held() {
		stolen, gen = p, g
		break
	}
	if stolen < 0 {
		t.Fatal("n1 holds nothing")
	}
	fence := broker.Fence{LeaseKey: e.leaseGroup().LeaseKey(stolen), Token: broker.FenceToken("n1", gen)}
	if ok, err := e.mem.ReleasePartitionLease(context.Background(), fence); err != nil || !ok {
		t.Fatalf("releasing n1's lease of partition %d: %v %v", stolen, ok, err)
	}
	waitFor(t, time.Minute, "n1 to lose the released lease", func() bool {
		return n1.ts.Counters()[runtime.CounterLeaseLost] > 0
	})
	settled(t, e, "three nodes to settle after the theft")
	for _, n := range e.live() {
		balanced(n)
	}

	e.stop(n3)
	settled(t, e, "two nodes to settle after n3 left")
	for _, n := range e.live() {
		balanced(n)
	}
	e.stopAll()
	log.Check(t)
	if flaky["n3"].failed.Load() == 0 {
		t.Error("no checkpoint load failed: the undone join was not exercised")
	}
}
