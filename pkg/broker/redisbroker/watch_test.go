package redisbroker_test

import (
	"context"
	"testing"
	"time"

	"github.com/protctl/protctl/internal/testenv"
	"github.com/protctl/protctl/pkg/broker/redisbroker"
)

// watchGoroutine returns the stack of a running watch goroutine (the
// forwarder, redisadapter.Forward, or go-redis's Pub/Sub reader), "" when
// there is none.
func watchGoroutine() string {
	return testenv.Goroutine("redisadapter.Follow", "redisbroker.forwardNames", "go-redis/v9.(*channel)")
}

// wantNoWatchGoroutines waits until no watch goroutine is left running.
func wantNoWatchGoroutines(t *testing.T) {
	t.Helper()
	testenv.Eventually(t, 5*time.Second, "the watch goroutines to end", func() (bool, string) {
		leaked := watchGoroutine()
		return leaked == "", "still running:\n" + leaked
	})
}

func recvKey(t *testing.T, ch <-chan string) string {
	t.Helper()
	select {
	case k, ok := <-ch:
		if !ok {
			t.Fatal("watch channel closed")
		}
		return k
	case <-time.After(5 * time.Second):
		t.Fatal("no wake-up within 5s")
	}
	return ""
}

func waitClosed(t *testing.T, ch <-chan string) {
	t.Helper()
	testenv.Eventually(t, 5*time.Second, "the watch channel to close after the context ended", testenv.Closed(ch))
}

func TestWatchPartitionsSignalsPublishedKeys(t *testing.T) {
	b, _ := newBroker(t)
	ctx, cancel := context.WithCancel(t.Context())
	ch, err := b.WatchPartitions(ctx, cat)
	if err != nil {
		t.Fatal(err)
	}
	// Subscribed before the return: this publish, right after, is seen.
	publish(t, b, "a", "", 1)
	if _, err := b.PublishPartitioned(t.Context(), "other::cat", "x", "", []byte("x")); err != nil {
		t.Fatal(err)
	}
	publish(t, b, "b", "backfill", 1)
	if k := recvKey(t, ch); k != "a" {
		t.Fatalf("first wake-up = %q, want a", k)
	}
	if k := recvKey(t, ch); k != "b" {
		t.Fatalf("second wake-up = %q, want b (another category's key leaked in?)", k)
	}
	if watchGoroutine() == "" {
		t.Fatal("the leak check sees no watch goroutine while watching; it cannot detect a leak")
	}
	cancel()
	waitClosed(t, ch)
	wantNoWatchGoroutines(t)
}

// Nobody reads: the forwarder does not block, and it does not drop a
// wake-up silently either: the channel closes after the one it holds
// (decision 0053), and no goroutine is left.
func TestWatchPartitionsEndsWhenFull(t *testing.T) {
	b, _ := newBroker(t, redisbroker.WithWatchBuffer(1))
	ch, err := b.WatchPartitions(t.Context(), cat)
	if err != nil {
		t.Fatal(err)
	}
	publish(t, b, "a", "", 50)
	wantNoWatchGoroutines(t)
	n := 0
	for range ch {
		n++
	}
	if n != 1 {
		t.Fatalf("%d wake-ups before the close, want the one the buffer holds", n)
	}
}

func TestWatchPartitionsRefusesBadCategory(t *testing.T) {
	b, _ := newBroker(t)
	_, err := b.WatchPartitions(t.Context(), "")
	wantInvalid(t, "watch of no category", err, "category")
}
