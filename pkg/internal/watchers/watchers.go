// Package watchers holds the hint channels of the in-memory adapters
// (memorybroker, memstore): buffered channels by name, each closed when
// its context ends or when a hint does not fit. Closing rather than
// dropping is what the Redis adapters do too (redisadapter.Watch): a
// reader that fell behind learns that it missed a hint, watches again
// and re-reads, instead of waiting for its next periodic read.
package watchers

import (
	"context"
	"sync"
)

// Set is the watchers of each name. The zero Set is ready to use; it
// must not be copied after first use.
type Set[T any] struct {
	mu sync.Mutex
	// by holds each watcher's channel and the stop of its context's
	// AfterFunc, called when a full buffer closes it first (else the
	// channel and its buffer live as long as the reader's context).
	by map[string]map[chan T]func() bool
}

// Add returns a channel of buffer hints for name, closed when ctx ends or
// when a hint finds it full. No goroutine runs while ctx is live.
func (s *Set[T]) Add(ctx context.Context, name string, buffer int) <-chan T {
	ch := make(chan T, buffer)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.by == nil {
		s.by = make(map[string]map[chan T]func() bool)
	}
	ws := s.by[name]
	if ws == nil {
		ws = make(map[chan T]func() bool)
		s.by[name] = ws
	}
	// Registered under s.mu: drop, which also takes it, never sees the
	// channel without its stop.
	ws[ch] = context.AfterFunc(ctx, func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		s.drop(name, ch)
	})
	return ch
}

// Signal sends v to name's watchers, closing those that have no room for
// it. A caller that holds a lock of its own while it calls Signal (so that
// a watcher that receives v can already read what v stands for) must
// not be called under s's lock: Set calls nothing of the caller's.
func (s *Set[T]) Signal(name string, v T) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for ch := range s.by[name] {
		select {
		case ch <- v:
		default:
			s.drop(name, ch)
		}
	}
}

// drop closes ch and forgets it, once; s.mu is held.
func (s *Set[T]) drop(name string, ch chan T) {
	ws := s.by[name]
	stop, ok := ws[ch]
	if !ok {
		return
	}
	stop()
	delete(ws, ch)
	if len(ws) == 0 {
		delete(s.by, name)
	}
	close(ch)
}
