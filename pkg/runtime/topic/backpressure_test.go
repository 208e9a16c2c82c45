package topic

import (
	"context"
	"io"
	"log/slog"
	"testing"

	"github.com/protctl/protctl/pkg/broker"
	"github.com/protctl/protctl/pkg/broker/memorybroker"
	"github.com/protctl/protctl/pkg/runtime"
	"github.com/protctl/protctl/pkg/runtime/clock"
)

// TestTopicBackpressureThresholds: a partition throttles when its window
// reaches MaxInFlight and fetches again at half of it; when fetches are
// larger than the window it fetches again once half of the last fetch is
// left (double buffering), and throttles again when the next one lands.
func TestTopicBackpressureThresholds(t *testing.T) {
	for _, c := range []struct {
		name      string
		lastFetch int
		// inflight after the fetch; throttled then; inflight when done
		// down to resumeAt+1 and resumeAt: still throttled, then not.
		inflight, resumeAt int
	}{
		{"fetches smaller than the window", 100, 1000, 500},
		{"fetches larger than the window", 50_000, 50_000, 25_000},
	} {
		t.Run(c.name, func(t *testing.T) {
			ts, err := New(Config{
				Topic:         "t",
				Subscriptions: []Subscription{{Name: "s", Handler: runtime.HandlerFunc(func(context.Context, runtime.Message) error { return nil })}},
				Source:        Kafka(nil),
				Leases:        memorybroker.New(),
				Checkpoints:   noCheckpoints{},
				Ledger:        nil2Ledger(),
				MaxInFlight:   1000,
			})
			if err != nil {
				t.Fatal(err)
			}
			ts.clk = clock.System()
			ts.log = slog.New(slog.NewTextHandler(io.Discard, nil))
			ts.runCtx, ts.runCancel = context.WithCancelCause(context.Background())
			defer ts.runCancel(nil)
			tp := newTopicPart(ts, &topicLease{p: 0, fence: broker.Fence{LeaseKey: "l", Token: "n:1"}, gen: 1})
			tp.addSub(ts.subs[0], 0, -1)
			sp := tp.subs[0]
			sp.attached = true

			tp.lastFetch = c.lastFetch
			for i := range c.inflight {
				sp.win.push(int64(i))
			}
			tp.balanceLocked()
			if !tp.fetchPaused {
				t.Fatalf("not throttled with %d in flight", c.inflight)
			}
			if got := tp.resumeAtLocked(); got != c.resumeAt {
				t.Fatalf("resumes at %d, want %d", got, c.resumeAt)
			}
			seq := int64(0)
			for sp.win.inflight() > c.resumeAt+1 {
				sp.win.markDone(seq)
				seq++
			}
			tp.balanceLocked()
			if !tp.fetchPaused {
				t.Fatalf("fetching again with %d in flight, want at %d", sp.win.inflight(), c.resumeAt)
			}
			sp.win.markDone(seq)
			tp.balanceLocked()
			if tp.fetchPaused {
				t.Fatalf("still throttled with %d in flight", sp.win.inflight())
			}
			// Done records lower the window; nothing throttles it again
			// until fetches bring it back up.
			for i := sp.win.inflight(); i < c.inflight; i++ {
				sp.win.push(int64(c.inflight + i))
			}
			tp.balanceLocked()
			if !tp.fetchPaused {
				t.Fatalf("not throttled again with %d in flight after the next fetch", sp.win.inflight())
			}
		})
	}
}
