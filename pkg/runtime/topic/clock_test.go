package topic_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/protctl/protctl/pkg/runtime"
	"github.com/protctl/protctl/pkg/runtime/clock"
	"github.com/protctl/protctl/pkg/runtime/internal/enginetest"
	"github.com/protctl/protctl/pkg/runtime/topic"
)

// The Kafka runtime's trust window runs on elapsed time, not on the wall
// clock: with renewals stalled from the start, the wall clock set back
// by the TTL (more than TTL minus the trust window: a wall-clock deadline
// would outlive the lease in the store) or forward by it changes nothing.
// A record starts inside the window; the next, due just past it, does
// not start; nothing stops early. The node runs on a fake clock; the
// store's lease TTL runs on real time and is long enough not to expire
// during the test.
func TestTopicTrustWindowIgnoresWallSteps(t *testing.T) {
	const (
		ttl   = 30 * time.Second
		renew = 5 * time.Second
	)
	for _, kind := range []storeKind{onMemory, onRedis} {
		for _, tc := range []struct {
			name string
			step time.Duration
		}{
			{"wall steady", 0},
			{"wall set back by the TTL", -ttl},
			{"wall set forward by the TTL", ttl},
		} {
			t.Run(string(kind)+"/"+tc.name, func(t *testing.T) {
				e := newTopicEnv(t, kind, 1)
				fake := clock.NewFake(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
				e.clk = fake
				rec := newTopicRecorder(t)
				entered := [3]chan struct{}{make(chan struct{}), make(chan struct{}), make(chan struct{})}
				release := [3]chan struct{}{make(chan struct{}), make(chan struct{}), make(chan struct{})}
				close(release[2])
				rec.setHold(func(ctx context.Context, m runtime.Message) {
					seq, _ := strconv.Atoi(m.Headers.Get("seq"))
					close(entered[seq-1])
					<-release[seq-1]
				})
				cfg := e.config(tsub(topicSub, rec.handler("n1")))
				cfg.LeaseTTL, cfg.RenewEvery = ttl, renew
				ts, err := topic.New(cfg)
				if err != nil {
					t.Fatal(err)
				}
				// Renewals never succeed: the trust ends a window after
				// the acquire, on elapsed time.
				topic.SetRenewGate(ts, func(ctx context.Context) { <-ctx.Done() })
				h := &testHost{cluster: e.cluster, id: "n1", log: testLogger().With("node", "n1"), clk: fake}
				e.cluster.add("n1")
				if err := ts.Start(context.Background(), h); err != nil {
					t.Fatal(err)
				}
				defer func() {
					for _, c := range release {
						select {
						case <-c:
						default:
							close(c)
						}
					}
					ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
					defer cancel()
					_ = ts.Stop(ctx)
				}()
				awaitStarted(t, ts)
				e.produce([]string{"a0000"}, 1, 3)
				enginetest.WaitClosed(t, entered[0], "record 1 to start")
				window := ts.Config().TrustWindow

				fake.StepWall(tc.step)
				fake.Advance(window - 100*time.Millisecond)
				close(release[0])
				enginetest.WaitClosed(t, entered[1], "record 2 to start inside the trust window")
				if c := ts.Counters()[runtime.CounterUntrusted]; c != 0 {
					t.Fatalf("untrusted = %d inside the window", c)
				}
				fake.Advance(110 * time.Millisecond)
				waitFor(t, 10*time.Second, "the partition dropped", func() bool {
					return ts.Counters()[runtime.CounterUntrusted] == 1
				})
				close(release[1])
				waitFor(t, 10*time.Second, "the partition to end", func() bool { return len(ts.Held()) == 0 })
				select {
				case <-entered[2]:
					t.Fatal("record 3 started past the trust window (measured on elapsed time)")
				default:
				}
				if got := rec.handled(topicSub, "a0000"); len(got) > 2 {
					t.Errorf("handled %v, want records 1 and 2 at most", got)
				}
			})
		}
	}
}
