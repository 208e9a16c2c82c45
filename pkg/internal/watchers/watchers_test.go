package watchers_test

import (
	"context"
	"runtime"
	"slices"
	"sync"
	"testing"

	"github.com/protctl/protctl/pkg/internal/watchers"
)

func drain(ch <-chan string) []string {
	var got []string
	for v := range ch {
		got = append(got, v)
	}
	return got
}

// A reader that falls behind is told so: its channel closes after what
// it holds, while a reader with room keeps its channel and every hint.
func TestSignalClosesAFullWatcherOnly(t *testing.T) {
	var s watchers.Set[string]
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	slow := s.Add(ctx, "a", 1)
	roomy := s.Add(ctx, "a", 8)
	other := s.Add(ctx, "b", 1)
	for _, v := range []string{"1", "2", "3"} {
		s.Signal("a", v)
	}
	if got := drain(slow); !slices.Equal(got, []string{"1"}) {
		t.Errorf("the full watcher saw %q before its close, want [1]", got)
	}
	if got := []string{<-roomy, <-roomy, <-roomy}; !slices.Equal(got, []string{"1", "2", "3"}) {
		t.Errorf("the watcher with room saw %q, want [1 2 3]", got)
	}
	select {
	case v, ok := <-other:
		t.Errorf("a watcher of another name received %q (open %v)", v, ok)
	default:
	}
	cancel()
	if got := drain(roomy); len(got) != 0 {
		t.Errorf("after the context ended: %q", got)
	}
	drain(other) // closed by the context too, or this blocks
}

// A watcher closed by a full buffer and then by its context, racing
// signals, is closed once (a second close would panic).
func TestCloseOnceUnderRace(t *testing.T) {
	var s watchers.Set[string]
	var wg sync.WaitGroup
	for range 50 {
		ctx, cancel := context.WithCancel(t.Context())
		ch := s.Add(ctx, "a", 1)
		wg.Add(2)
		go func() {
			defer wg.Done()
			for range 3 {
				s.Signal("a", "x")
			}
		}()
		go func() {
			defer wg.Done()
			cancel()
		}()
		wg.Wait()
		drain(ch)
	}
}

// A reader that keeps falling behind, on a context that lives on, does
// not pile up its closed channels: each overflow releases the hook on
// the context with the channel and its buffer (before, 2,000 overflows
// of 1,024-slot channels kept over 32 MB until the context ended).
func TestOverflowsReleaseTheirChannels(t *testing.T) {
	var s watchers.Set[string]
	ctx := t.Context() // lives to the end of the test
	for range 2_000 {
		ch := s.Add(ctx, "a", 1024)
		for range 1025 {
			s.Signal("a", "x")
		}
		if _, ok := <-ch; !ok {
			t.Fatal("a channel closed before its buffer was read")
		}
	}
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	if m.HeapInuse > 16<<20 {
		t.Fatalf("%d MB of heap in use after 2,000 overflows: the closed channels are kept", m.HeapInuse>>20)
	}
}
