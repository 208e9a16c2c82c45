package rewatch_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/protctl/protctl/pkg/runtime/clock"
	"github.com/protctl/protctl/pkg/runtime/internal/backoff"
	"github.com/protctl/protctl/pkg/runtime/internal/rewatch"
)

// run starts a Loop whose watches each last lasts (0: closed at once),
// or fail when fail is set, and counts watches and re-reads.
func run(ctx context.Context, lasts time.Duration, fail bool) (watches, established, failed *atomic.Int32) {
	watches, established, failed = new(atomic.Int32), new(atomic.Int32), new(atomic.Int32)
	go rewatch.Loop[int]{
		Clock:   clock.System(),
		Backoff: backoff.New(time.Second, 8*time.Second, nil),
		Watch: func(ctx context.Context) (<-chan int, error) {
			watches.Add(1)
			if fail {
				return nil, errors.New("refused")
			}
			ch := make(chan int)
			var once sync.Once
			end := func() { once.Do(func() { close(ch) }) }
			time.AfterFunc(lasts, end)
			context.AfterFunc(ctx, end)
			return ch, nil
		},
		Established: func() { established.Add(1) },
		Follow: func(ch <-chan int) {
			for range ch {
			}
		},
		Failed: func(error) { failed.Add(1) },
	}.Run(ctx)
	return watches, established, failed
}

// A watch that ends as soon as it began is asked for again after a
// back-off that grows, not in a loop: each attempt costs the server a
// connection and the reader a re-read.
func TestAWatchThatEndsAtOnceBacksOff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		watches, established, _ := run(ctx, 0, false)
		synctest.Wait()
		if n := watches.Load(); n != 1 {
			t.Fatalf("%d watches at once, want 1", n)
		}
		time.Sleep(10 * time.Second) // back-offs of at most 2, 4, 8 s
		synctest.Wait()
		if n := watches.Load(); n < 2 || n > 4 {
			t.Fatalf("%d watches in 10 s, want 2-4", n)
		}
		if e, w := established.Load(), watches.Load(); e != w {
			t.Fatalf("%d re-reads for %d watches established", e, w)
		}
	})
}

// A watch that lasted past Settled is asked for again at once when it
// ends, with a re-read each time.
func TestASettledWatchIsAskedForAgainAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		watches, established, _ := run(ctx, 2*rewatch.Settled, false)
		time.Sleep(2*rewatch.Settled + time.Millisecond)
		synctest.Wait()
		if n := watches.Load(); n != 2 {
			t.Fatalf("%d watches after the first ended, want 2", n)
		}
		if n := established.Load(); n != 2 {
			t.Fatalf("%d re-reads, want 2", n)
		}
	})
}

// A failed watch is reported, backed off and tried again; the reader is
// not told to re-read.
func TestAFailedWatchIsTriedAgainAfterABackOff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancel(t.Context())
		watches, established, failed := run(ctx, 0, true)
		synctest.Wait()
		if n := watches.Load(); n != 1 {
			t.Fatalf("%d watches at once, want 1", n)
		}
		time.Sleep(10 * time.Second)
		synctest.Wait()
		if n, f := watches.Load(), failed.Load(); n < 2 || n > 4 || f != n {
			t.Fatalf("%d watches and %d failures in 10 s, want 2-4 of each", n, f)
		}
		if n := established.Load(); n != 0 {
			t.Fatalf("%d re-reads for failed watches", n)
		}
		cancel()
		synctest.Wait() // Run returns: nothing left in the bubble
	})
}
