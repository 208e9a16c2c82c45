package partitioned

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/protctl/protctl/pkg/runtime"
	"github.com/protctl/protctl/pkg/runtime/internal/backoff"
	"github.com/protctl/protctl/pkg/runtime/internal/observe"
	"github.com/protctl/protctl/pkg/runtime/internal/rewatch"
)

// seekMarks are the keys with a seek request to look at: the seek loop
// adds them, the key's worker takes them at its next batch boundary.
type seekMarks struct {
	n  atomic.Int64 // len(m), read without the lock on the hot path
	mu sync.Mutex
	m  map[string]struct{}
}

func (s *seekMarks) add(keys []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.m == nil {
		s.m = make(map[string]struct{})
	}
	for _, k := range keys {
		s.m[k] = struct{}{}
	}
	s.n.Store(int64(len(s.m)))
}

// has reports whether key is marked, leaving the mark.
func (s *seekMarks) has(key string) bool {
	if s.n.Load() == 0 {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.m[key]
	return ok
}

func (s *seekMarks) take(key string) bool {
	if s.n.Load() == 0 {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.m[key]
	delete(s.m, key)
	s.n.Store(int64(len(s.m)))
	return ok
}

// seekLoop follows seek requests: signals from WatchSeekRequests and a
// re-read of SeekRequests every RenewEvery, so that a lost signal delays
// a seek by at most one renewal period. Each key found is marked and its
// partition signalled (evSignal): an active worker is woken and takes the
// mark at its next batch boundary; an idle partition of this node is
// activated, and its new worker finds the mark before its first read.
// Each time the watch is established the requests are re-read at once.
func (p *Subscription) seekLoop(ctx context.Context) {
	defer p.wg.Done()
	reread := make(chan struct{}, 1)
	notify := func(keys []string) {
		if len(keys) == 0 {
			return
		}
		p.seeks.add(keys)
		p.send(evSignal{keys: keys})
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Add(1)
	go func() {
		defer wg.Done()
		rewatch.Loop[string]{
			Clock:   p.clk,
			Backoff: backoff.New(time.Second, p.cfg.RenewEvery, p.jit),
			Watch: func(ctx context.Context) (<-chan string, error) {
				return p.seeker.WatchSeekRequests(ctx, p.cfg.Name)
			},
			Established: func() {
				select {
				case reread <- struct{}{}:
				default:
				}
			},
			Follow: func(ch <-chan string) {
				for key := range ch {
					notify([]string{key})
				}
			},
			Failed: func(err error) {
				observe.Error(p.obs, runtime.ErrorEvent{Subscription: p.cfg.Name, Op: "watch seek requests", Err: err})
			},
		}.Run(ctx)
	}()
	for {
		keys, err := p.seeker.SeekRequests(ctx, p.cfg.Name)
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			observe.Error(p.obs, runtime.ErrorEvent{Subscription: p.cfg.Name, Op: "list seek requests", Err: err})
		} else {
			notify(keys)
		}
		t := p.clk.NewTimer(p.cfg.RenewEvery)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C():
		case <-reread:
			t.Stop()
		}
	}
}

// seekIfAsked carries out a seek request marked for the worker's key, at a
// batch boundary: it acks what was handled, then lets the broker move the
// group's positions and settle the pending entries in one step fenced by
// the worker's lease. What the worker knew of its lanes (tails, drained
// pending lists, empty lanes) is forgotten, so the next round reads the
// kept pending entries first and then everything after the new position.
func (w *worker) seekIfAsked() (result, bool) {
	p := w.p
	if p.seeker == nil || !p.seeks.take(w.key) {
		return result{}, false
	}
	if r, done := w.flushAcks(); done {
		return r, true
	}
	moved, err := p.seeker.ApplyPartitionSeek(w.ctx, w.lease.fence, w.lease.gen, p.cfg.Name, w.key, w.streams())
	if err != nil {
		return w.ioFail("seek", err), true
	}
	if !moved {
		return result{}, false
	}
	w.prefetch = nil
	clear(w.empty)
	clear(w.drainedPending)
	for _, ln := range w.lanes {
		delete(w.after, ln.stream)
	}
	p.log.Info("partition sought by an operator's request", "subscription", p.cfg.Name, "key", w.key, "generation", w.lease.gen)
	return result{}, false
}
