package runtime_test

import (
	"context"
	"testing"
	"time"

	"github.com/protctl/protctl/pkg/broker/memorybroker"
	"github.com/protctl/protctl/pkg/runtime"
	"github.com/protctl/protctl/pkg/runtime/clock"
	"github.com/protctl/protctl/pkg/runtime/memstore"
)

// The trust window, on an injected clock: with renewals stalled, the node
// stops handling the partition once the window (TTL - renewal period)
// has passed, before the lease can expire on the broker, and hands the
// lease back. Time moves only when the test advances it.
func TestFakeClockTrustWindow(t *testing.T) {
	ctx := context.Background()
	fake := clock.NewFake(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	b := memorybroker.New(memorybroker.WithClock(fake))
	store := memstore.New(b.Faults(), memstore.WithClock(fake))
	pub, err := runtime.NewPublisher(b)
	if err != nil {
		t.Fatal(err)
	}
	publishAll(t, pub, []string{"k"}, 1, 2)

	rec := newRecorder(t)
	entered := make(chan struct{})
	release := make(chan struct{})
	rec.setHold(func(ctx context.Context, m runtime.Message) {
		if seqOf(t, m.Data) == 1 {
			close(entered)
			<-release
		}
	})
	const (
		ttl   = 2 * time.Second
		renew = 400 * time.Millisecond
	)
	sub, err := runtime.NewPartitioned(runtime.PartitionedConfig{
		Name: group, Categories: []string{cat}, Handler: rec.handler("node-1"), Broker: b, Ledger: store,
		LeaseTTL: ttl, RenewEvery: renew,
	})
	if err != nil {
		t.Fatal(err)
	}
	stall := make(chan struct{})
	runtime.SetRenewGate(sub, func(ctx context.Context) {
		select {
		case <-stall:
			<-ctx.Done()
		default:
		}
	})
	n, err := runtime.NewNode(runtime.NodeConfig{Service: service, NodeID: "node-1", Membership: store, Clock: fake, HeartbeatEvery: time.Second}, sub)
	if err != nil {
		t.Fatal(err)
	}
	if err := n.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer func() {
		sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		_ = n.Stop(sctx)
	}()
	select {
	case <-entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the handler was never called")
	}
	leaseKey := group + ":k:__lease__"
	if _, ok, _ := b.Faults().GetString(ctx, leaseKey); !ok {
		t.Fatal("not leased while handling")
	}

	// Renewals stall; time passes the trust window but not the TTL.
	close(stall)
	fake.Advance(sub.Config().TrustWindow + 10*time.Millisecond)
	if _, ok, _ := b.Faults().GetString(ctx, leaseKey); !ok {
		t.Fatal("the lease expired on the broker already: the test must stay inside the TTL")
	}
	close(release)
	eventually(t, 10*time.Second, time.Millisecond, "the partition dropped", func() bool {
		return subOf(n).Status().Counters[runtime.CounterUntrusted] == 1
	})
	if got := rec.handled("k"); len(got) != 1 {
		t.Errorf("handled %v: entry 2 must not start after the trust window", got)
	}
	// It gave the lease back before the TTL ran out, so the next owner
	// need not wait for it.
	eventually(t, 10*time.Second, time.Millisecond, "the lease released", func() bool {
		_, ok, _ := b.Faults().GetString(ctx, leaseKey)
		return !ok
	})
	if len(subOf(n).Status().Held) != 0 {
		t.Error("the dropped partition is still reported held")
	}
}
