package memorybroker_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/protctl/protctl/pkg/broker"
	"github.com/protctl/protctl/pkg/broker/memorybroker"
)

// The tests below run in synctest bubbles: synctest.Test fails if any
// goroutine the broker started is still blocked when the test returns,
// which is this package's goroutine-leak check.

func TestWatchPartitionsSignalsPublishesUntilCanceled(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memorybroker.New()
		ctx, cancel := context.WithCancel(t.Context())
		ch, err := b.WatchPartitions(ctx, cat)
		if err != nil {
			t.Fatal(err)
		}
		publish := func(category, k, lane string) {
			if _, err := b.PublishPartitioned(t.Context(), category, k, lane, []byte("x")); err != nil {
				t.Fatal(err)
			}
		}
		publish(cat, "o-1", "")
		publish("other", "o-9", "")
		publish(cat, "o-2", broker.DefaultBackfillSuffix)
		if _, err := b.Append(t.Context(), broker.ProteanLayout.Stream(cat, "o-3"), []byte("x")); err != nil {
			t.Fatal(err)
		}
		var got []string
		for len(ch) > 0 {
			got = append(got, <-ch)
		}
		if !slices.Equal(got, []string{"o-1", "o-2"}) {
			t.Fatalf("signals = %v, want o-1, o-2 (only publishes to the category)", got)
		}

		cancel()
		synctest.Wait()
		if _, open := <-ch; open {
			t.Fatal("channel still open after ctx ended")
		}
		publish(cat, "o-1", "") // no watcher left to signal, no panic
	})
}

// A watcher that falls behind is told so: its channel closes after the
// signals it holds, rather than dropping one silently (decision 0053).
func TestWatchPartitionsEndsWhenFull(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memorybroker.New()
		ch, err := b.WatchPartitions(t.Context(), cat)
		if err != nil {
			t.Fatal(err)
		}
		for range 3000 {
			if _, err := b.PublishPartitioned(t.Context(), cat, key, "", nil); err != nil {
				t.Fatal(err)
			}
		}
		n := 0
		for range ch {
			n++
		}
		if n != 1024 {
			t.Fatalf("%d signals before the close, want the 1024 the buffer holds", n)
		}
	})
}

func TestWaitForEntries(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memorybroker.New()
		ctx := t.Context()
		a, err := b.Append(ctx, "a", []byte("1"))
		if err != nil {
			t.Fatal(err)
		}

		// Ready at once: "a" has an entry after 0-0; "missing" is empty.
		got, err := b.WaitForEntries(ctx, map[string]string{"a": "0-0", "missing": "0"}, 0)
		if err != nil || !slices.Equal(got, []string{"a"}) {
			t.Fatalf("wait with an entry ready = %v, %v", got, err)
		}

		// Blocks until an append to one of the streams.
		start := time.Now()
		go func() {
			time.Sleep(2 * time.Second)
			if _, err := b.Append(ctx, "other", nil); err != nil {
				t.Error(err)
			}
			time.Sleep(time.Second)
			if _, err := b.Append(ctx, "b", nil); err != nil {
				t.Error(err)
			}
		}()
		got, err = b.WaitForEntries(ctx, map[string]string{"a": a, "b": "0-0"}, time.Minute)
		if err != nil || !slices.Equal(got, []string{"b"}) || time.Since(start) != 3*time.Second {
			t.Fatalf("wait = %v, %v after %v; want [b] after 3s", got, err, time.Since(start))
		}

		// Times out with nil.
		start = time.Now()
		got, err = b.WaitForEntries(ctx, map[string]string{"a": a}, 5*time.Second)
		if got != nil || err != nil || time.Since(start) != 5*time.Second {
			t.Fatalf("wait = %v, %v after %v; want a timeout after 5s", got, err, time.Since(start))
		}

		// Ends with ctx.
		cctx, cancel := context.WithCancel(ctx)
		go func() {
			time.Sleep(time.Second)
			cancel()
		}()
		if _, err := b.WaitForEntries(cctx, map[string]string{"a": a}, 0); !errors.Is(err, context.Canceled) {
			t.Fatalf("wait after cancel: err = %v", err)
		}
		if n := memorybroker.EntryWaiters(b); n != 0 {
			t.Fatalf("%d waiters left registered", n)
		}
	})
}
