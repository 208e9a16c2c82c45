package partitioned_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/protctl/protctl/pkg/broker"
	"github.com/protctl/protctl/pkg/broker/memorybroker"
	"github.com/protctl/protctl/pkg/runtime"
	"github.com/protctl/protctl/pkg/runtime/internal/enginetest"
	"github.com/protctl/protctl/pkg/runtime/partitioned"
)

// releaseFailing makes the real release calls fail while failing is set,
// by calling them with a context already cancelled (the broker answers
// as it does to a call cut short). It embeds the memory broker itself,
// so that every optional capability stays visible to the runtime.
type releaseFailing struct {
	*memorybroker.Broker
	failing atomic.Bool
	failed  atomic.Int64
}

func (b *releaseFailing) ctx(ctx context.Context) context.Context {
	if !b.failing.Load() {
		return ctx
	}
	b.failed.Add(1)
	c, cancel := context.WithCancel(ctx)
	cancel()
	return c
}

func (b *releaseFailing) ReleasePartitionLease(ctx context.Context, f broker.Fence) (bool, error) {
	return b.Broker.ReleasePartitionLease(b.ctx(ctx), f)
}

func (b *releaseFailing) ReleasePartitionLeaseConsumer(ctx context.Context, f broker.Fence, group string, streams ...string) (bool, error) {
	return b.Broker.ReleasePartitionLeaseConsumer(b.ctx(ctx), f, group, streams...)
}

func (b *releaseFailing) ReleasePartitionLeasesConsumers(ctx context.Context, rels []broker.LeaseRelease) []broker.ReleaseResult {
	return b.Broker.ReleasePartitionLeasesConsumers(b.ctx(ctx), rels)
}

// TestMemLeaseEventsBalance: a partitioned lease whose release fails (it
// is left to expire) is reported ended all the same, released with the
// reason "expires": each acquired lease ends exactly once and the
// counters balance (acquired - released - lost - untrusted = held). It
// was reported nothing, so the sum kept one lease too many per failed
// release.
func TestMemLeaseEventsBalance(t *testing.T) {
	e := newMemEnv(t)
	defer e.stopAll()
	rec := newRecorder(t)
	log := enginetest.NewLeaseLog()
	wrapped := &releaseFailing{Broker: e.b}
	wrapped.failing.Store(true)
	n := e.start("node-1", rec.handler("node-1"), func(c *partitioned.Config) {
		c.Broker = wrapped
		c.IdleAfter = 50 * time.Millisecond
	}, log.Observer("node-1"))
	publishAll(t, e.pub, []string{"k"}, 1, 3)
	eventually(t, 30*time.Second, 10*time.Millisecond, "the first events and an idle release that fails", func() bool {
		return rec.complete(map[string]int{"k": 3}) && wrapped.failed.Load() > 0
	})
	wrapped.failing.Store(false)
	// The lease left behind expires (memTTL); new entries are taken up
	// under a new generation.
	publishAll(t, e.pub, []string{"k"}, 4, 6)
	eventually(t, 30*time.Second, 10*time.Millisecond, "the later events", func() bool {
		return rec.complete(map[string]int{"k": 6})
	})
	e.stopAll()
	log.Check(t)
	c := subOf(n).Status().Counters
	if got := c[runtime.CounterAcquired] - c[runtime.CounterReleased] - c[runtime.CounterLeaseLost] - c[runtime.CounterUntrusted]; got != 0 {
		t.Errorf("after stop: acquired %d - released %d - lost %d - untrusted %d = %d, want 0", c[runtime.CounterAcquired],
			c[runtime.CounterReleased], c[runtime.CounterLeaseLost], c[runtime.CounterUntrusted], got)
	}
	rec.checkOrder(t, map[string]int{"k": 6})
}
