package partitioned_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/protctl/protctl/pkg/broker/memorybroker"
	"github.com/protctl/protctl/pkg/runtime"
	"github.com/protctl/protctl/pkg/runtime/clock"
	"github.com/protctl/protctl/pkg/runtime/internal/enginetest"
	"github.com/protctl/protctl/pkg/runtime/memstore"
	"github.com/protctl/protctl/pkg/runtime/partitioned"
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
	pub, err := partitioned.NewPublisher(b)
	if err != nil {
		t.Fatal(err)
	}
	publishAll(t, pub, []string{"k"}, 1, 2)

	rec := newRecorder(t)
	entered := make(chan struct{})
	release := make(chan struct{})
	// What the handler's LeaseTrusted says on entry and once the window
	// passed while it ran (a handler that waits inside checks it).
	var trustedIn, trustedAfter atomic.Bool
	rec.setHold(func(ctx context.Context, m runtime.Message) {
		if seqOf(t, m.Data) == 1 {
			trustedIn.Store(runtime.LeaseTrusted(ctx))
			close(entered)
			<-release
			trustedAfter.Store(runtime.LeaseTrusted(ctx))
		}
	})
	const (
		ttl   = 2 * time.Second
		renew = 400 * time.Millisecond
	)
	sub, err := partitioned.New(partitioned.Config{
		Name: group, Categories: []string{cat}, Handler: rec.handler("node-1"), Broker: b, Ledger: store,
		LeaseTTL: ttl, RenewEvery: renew,
	})
	if err != nil {
		t.Fatal(err)
	}
	stall := make(chan struct{})
	partitioned.SetRenewGate(sub, func(ctx context.Context) {
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
	if !trustedIn.Load() || trustedAfter.Load() {
		t.Errorf("LeaseTrusted in the handler: %v on entry, %v past the window; want true, false", trustedIn.Load(), trustedAfter.Load())
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

// The trust window runs on elapsed time, not on the wall clock: the wall
// clock set back by the TTL (more than TTL minus the trust window, so a
// wall-clock deadline would outlive the lease on the broker) or forward
// by it changes nothing. Entry 2 starts inside the window, entry 3 would
// start just past it and must not, and nothing stops early.
func TestFakeClockTrustWindowIgnoresWallSteps(t *testing.T) {
	const (
		ttl   = 2 * time.Second
		renew = 400 * time.Millisecond
	)
	for _, tc := range []struct {
		name string
		step time.Duration
	}{
		{"wall steady", 0},
		{"wall set back by the TTL", -ttl},
		{"wall set forward by the TTL", ttl},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			fake := clock.NewFake(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
			b := memorybroker.New(memorybroker.WithClock(fake))
			store := memstore.New(b.Faults(), memstore.WithClock(fake))
			pub, err := partitioned.NewPublisher(b)
			if err != nil {
				t.Fatal(err)
			}
			publishAll(t, pub, []string{"k"}, 1, 3)

			rec := newRecorder(t)
			entered := [3]chan struct{}{make(chan struct{}), make(chan struct{}), make(chan struct{})}
			release := [3]chan struct{}{make(chan struct{}), make(chan struct{}), make(chan struct{})}
			close(release[2])
			rec.setHold(func(ctx context.Context, m runtime.Message) {
				i := seqOf(t, m.Data) - 1
				close(entered[i])
				<-release[i]
			})
			sub, err := partitioned.New(partitioned.Config{
				Name: group, Categories: []string{cat}, Handler: rec.handler("node-1"), Broker: b, Ledger: store,
				LeaseTTL: ttl, RenewEvery: renew,
			})
			if err != nil {
				t.Fatal(err)
			}
			stall := make(chan struct{})
			partitioned.SetRenewGate(sub, func(ctx context.Context) {
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
			enginetest.WaitClosed(t, entered[0], "entry 1 to start")
			window := sub.Config().TrustWindow

			// Renewals stall from here: the lease's last renewal (or its
			// acquire) started at or before now, so its trust ends at most
			// a window from now, on elapsed time.
			close(stall)
			fake.StepWall(tc.step)
			fake.Advance(window - 100*time.Millisecond)
			close(release[0])
			enginetest.WaitClosed(t, entered[1], "entry 2 to start inside the trust window")
			if c := subOf(n).Status().Counters[runtime.CounterUntrusted]; c != 0 {
				t.Fatalf("untrusted = %d inside the window", c)
			}
			fake.Advance(110 * time.Millisecond)
			close(release[1])
			eventually(t, 10*time.Second, time.Millisecond, "the partition dropped", func() bool {
				return subOf(n).Status().Counters[runtime.CounterUntrusted] == 1
			})
			select {
			case <-entered[2]:
				t.Fatal("entry 3 started past the trust window (measured on elapsed time)")
			default:
			}
			if got := rec.handled("k"); len(got) != 2 {
				t.Errorf("handled %v, want entries 1 and 2 only", got)
			}
		})
	}
}

// The handler's context ends at the trust deadline even while the
// renewer is stuck in a renewal that has not returned (a blackholed
// connection returns only at the client's read timeout): a handler that
// runs until its context ends is stopped before the lease can expire on
// the broker, and no later entry starts. The renewer here never returns
// from its gate, so only the trust watch can end the call.
func TestFakeClockTrustDeadlineEndsTheHandlersContext(t *testing.T) {
	ctx := context.Background()
	fake := clock.NewFake(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	b := memorybroker.New(memorybroker.WithClock(fake))
	store := memstore.New(b.Faults(), memstore.WithClock(fake))
	pub, err := partitioned.NewPublisher(b)
	if err != nil {
		t.Fatal(err)
	}
	publishAll(t, pub, []string{"k"}, 1, 2)

	rec := newRecorder(t)
	entered := make(chan struct{})
	ended := make(chan time.Time, 1)
	rec.setHold(func(ctx context.Context, m runtime.Message) {
		if seqOf(t, m.Data) == 1 {
			close(entered)
			<-ctx.Done()
			ended <- fake.Now()
		}
	})
	const (
		ttl   = 2 * time.Second
		renew = 400 * time.Millisecond
	)
	sub, err := partitioned.New(partitioned.Config{
		Name: group, Categories: []string{cat}, Handler: rec.handler("node-1"), Broker: b, Ledger: store,
		LeaseTTL: ttl, RenewEvery: renew,
	})
	if err != nil {
		t.Fatal(err)
	}
	stall := make(chan struct{})
	partitioned.SetRenewGate(sub, func(ctx context.Context) {
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
	enginetest.WaitClosed(t, entered, "entry 1 to start")
	close(stall)
	start := fake.Now()
	window := sub.Config().TrustWindow
	// Inside the window the call goes on.
	fake.Advance(window - 100*time.Millisecond)
	select {
	case at := <-ended:
		t.Fatalf("the handler's context ended %s after the stall, inside the trust window %s", at.Sub(start), window)
	case <-time.After(50 * time.Millisecond):
	}
	// Past the deadline (still inside the TTL) it ends, with no renewal
	// ever returning.
	fake.Advance(110 * time.Millisecond)
	var at time.Time
	select {
	case at = <-ended:
	case <-time.After(10 * time.Second):
		t.Fatal("the handler's context did not end past the trust deadline")
	}
	if d := at.Sub(start); d >= ttl {
		t.Fatalf("the handler's context ended %s after the stall, not before the TTL %s", d, ttl)
	}
	eventually(t, 10*time.Second, time.Millisecond, "the partition dropped as untrusted", func() bool {
		return subOf(n).Status().Counters[runtime.CounterUntrusted] == 1
	})
	if got := rec.handled("k"); len(got) > 1 {
		t.Errorf("handled %v: entry 2 must not start past the trust deadline", got)
	}
}

// shortWatches is the memory broker with an append watch that ends as
// soon as it is asked for, counted.
type shortWatches struct {
	*memorybroker.Broker
	watches atomic.Int64
}

func (b *shortWatches) WatchAppends(context.Context, string) (<-chan string, error) {
	b.watches.Add(1)
	ch := make(chan string)
	close(ch)
	return ch, nil
}

func (b *shortWatches) PartitionKeysIndexed(_ context.Context, _ string, keys []string) ([]bool, error) {
	return make([]bool, len(keys)), nil
}

// An append watch that ends at once is asked for again after a back-off
// on the node's clock, not at once: with the clock stopped the node asks
// once more at most. It asked in a loop before (a review found a Cluster
// naming no master would), each time flipping every wait loop out of
// announced mode and back.
func TestFakeClockAWatchThatEndsAtOnceIsRetriedAfterABackoff(t *testing.T) {
	ctx := context.Background()
	fake := clock.NewFake(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	b := &shortWatches{Broker: memorybroker.New(memorybroker.WithClock(fake))}
	store := memstore.New(b.Faults(), memstore.WithClock(fake))
	rec := newRecorder(t)
	sub, err := partitioned.New(partitioned.Config{
		Name: group, Categories: []string{cat}, Handler: rec.handler("node-1"), Broker: b, Ledger: store,
	})
	if err != nil {
		t.Fatal(err)
	}
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
	eventually(t, 10*time.Second, time.Millisecond, "the append watch asked for", func() bool { return b.watches.Load() >= 1 })
	// Real time passes; the node's clock does not.
	time.Sleep(200 * time.Millisecond)
	if got := b.watches.Load(); got > 1 {
		t.Fatalf("the watch was asked for %d times with the clock stopped: it must wait out a back-off", got)
	}
	// Once the back-off has passed on the node's clock, it asks again.
	eventually(t, 10*time.Second, time.Millisecond, "the watch asked for again", func() bool {
		fake.Advance(time.Second)
		return b.watches.Load() >= 2
	})
}
