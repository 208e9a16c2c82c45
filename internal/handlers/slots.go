package handlers

import (
	"context"
	"errors"
	goruntime "runtime"
	"sync/atomic"
	"time"
)

// DefaultExecConcurrency is the bound of a node's exec handler runs when
// the config gives none: four per CPU. A fork and exec costs a few
// milliseconds of CPU, so past a few runs per core more runs at once only
// make every run slower (on 2 cores, 40 at once made a script's own
// `sleep 0.02` take 540 ms), until handlers time out for no fault of their
// events. Four per core keeps the cores busy while runs wait on I/O.
func DefaultExecConcurrency() int { return 4 * goruntime.NumCPU() }

// Slots bounds how many handler runs a node has at once, across its
// subscriptions; a call beyond the bound waits for a slot (in the order
// the calls came, as Go queues a channel's senders) before its run, and
// so before its timeout, starts. One Slots is shared by every exec
// handler of a node (ExecConfig.Slots).
//
// It is safe for concurrent use. The zero value is not usable: call
// NewSlots.
type Slots struct {
	sem     chan struct{}
	waiting atomic.Int64
	// waits counts the calls that ever had to wait: a run during which it
	// moved, or that ends with calls waiting, ran on a saturated node.
	waits  atomic.Uint64
	onWait func(time.Duration)
}

// SlotStats is a Slots' state at one moment.
type SlotStats struct {
	Size    int // the bound
	Running int // slots taken
	Waiting int // calls waiting for a slot
}

// NewSlots returns a bound of n runs at once (n < 1 means
// DefaultExecConcurrency). onWait, when not nil, is called with how long
// each call waited for its slot (0 when one was free): it must be fast
// and safe for concurrent use (a histogram's observe).
func NewSlots(n int, onWait func(time.Duration)) *Slots {
	if n < 1 {
		n = DefaultExecConcurrency()
	}
	return &Slots{sem: make(chan struct{}, n), onWait: onWait}
}

// Stats returns the bound, the slots taken and the calls waiting.
func (s *Slots) Stats() SlotStats {
	return SlotStats{Size: cap(s.sem), Running: len(s.sem), Waiting: int(s.waiting.Load())}
}

// errNoSlot is returned by acquire when ctx ends while the call waits.
var errNoSlot = errors.New("handlers: no free slot before the call was stopped")

// acquire takes a slot, waiting while none is free, until ctx ends. It
// returns the slot's release and a mark for saturatedSince.
func (s *Slots) acquire(ctx context.Context) (release func(), mark uint64, err error) {
	select {
	case s.sem <- struct{}{}:
		s.observe(0)
		return s.release, s.waits.Load(), nil
	default:
	}
	s.waiting.Add(1)
	s.waits.Add(1)
	start := time.Now()
	defer s.waiting.Add(-1)
	select {
	case s.sem <- struct{}{}:
		s.observe(time.Since(start))
		return s.release, s.waits.Load(), nil
	case <-ctx.Done():
		return nil, 0, errNoSlot
	}
}

func (s *Slots) observe(d time.Duration) {
	if s.onWait != nil {
		s.onWait(d)
	}
}

func (s *Slots) release() { <-s.sem }

// saturatedSince reports whether the node ran out of slots since mark
// (from acquire) or is out of them now: some call had to wait.
func (s *Slots) saturatedSince(mark uint64) bool {
	return s.waiting.Load() > 0 || s.waits.Load() != mark
}
