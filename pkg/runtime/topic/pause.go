package topic

import (
	"context"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/protctl/protctl/pkg/runtime"
	"github.com/protctl/protctl/pkg/runtime/internal/backoff"
	"github.com/protctl/protctl/pkg/runtime/internal/observe"
	"github.com/protctl/protctl/pkg/runtime/internal/rewatch"
	"github.com/protctl/protctl/pkg/runtime/pause"
)

// Operators' pauses on the Kafka topic engine
// (docs/decisions/0045-pause.md, point 7).
//
// Each subscription of the topic keeps its pause entries (Config.
// Pauses, scope the lease group, name the subscription's) in memory,
// re-read every RenewEvery and at once on a WatchPauses signal: a lost
// signal costs at most one renewal period.
//
// A paused aggregate's lane is held (aggLane.opPaused): its records are
// delivered and queued as usual but no worker takes them, like a blocked
// aggregate's, while the other aggregates' lanes flow. A held record is
// not done, so the window's low watermark, the checkpoint, stays at the
// first held record: a restart, a handoff or a new owner reads it again.
// A worker checks the flag before every record, so a pause that arrives
// mid-batch stops the lane after the record in the handler.
//
// Held records count in the subscription's in-flight window (a span from
// the oldest record not done): once MaxInFlight records were delivered
// past the first held one, the existing backpressure applies. A
// subscription alone on the partition stops fetching it (Throttled, shown
// next to the PAUSED aggregate); one of several detaches and its
// catch-up reader waits for room. Either way the other aggregates of
// that partition (and that subscription) stall until the resume; other
// partitions flow. The window bound is what keeps a paused aggregate
// from holding unbounded memory.
//
// A whole-subscription pause ("all") holds every lane: nothing is handled
// and, once the window is full, nothing more is fetched for it.
//
// On resume the lane is activated and its records are handled in offset
// order, from the first held one, each once (they never left the lane).
//
// Until the first read of the entries succeeded every lane is held: a
// node that just took a partition over (after a failover) never handles
// a paused aggregate's record.
type topicPause struct {
	// set is nil until the first read: everything is held.
	set atomic.Pointer[pause.Set]
	mu  sync.Mutex // serializes applyPauses
}

// paused reports whether aggregate agg is held back now.
func (p *topicPause) paused(agg string) bool {
	set := p.set.Load()
	if set == nil {
		return true
	}
	if len(*set) == 0 {
		return false
	}
	_, ok := set.Paused(agg)
	return ok
}

// Pauses returns the subscription's pause entries as last read (nil
// before the first read).
func (s *Runtime) Pauses() pause.Set {
	if set := s.pause.set.Load(); set != nil {
		return *set
	}
	return nil
}

// applyPauses installs set and holds or releases the lanes of every held
// partition accordingly.
func (s *Runtime) applyPauses(set pause.Set) {
	s.pause.mu.Lock()
	defer s.pause.mu.Unlock()
	if old := s.pause.set.Load(); old != nil && old.SameSelectors(set) {
		return
	}
	// Stored before the partitions are walked: a lane made meanwhile
	// reads the new set (laneLocked), and a partition started after the
	// walk's snapshot made its lanes after this store.
	s.pause.set.Store(&set)
	for _, tp := range s.t.heldParts() {
		tp.mu.Lock()
		if sp := tp.subOf(s); sp != nil {
			sp.applyPausesLocked()
		}
		tp.mu.Unlock()
	}
}

// applyPausesLocked re-reads the pause of every lane; a released lane
// with records is queued for a worker (tp.mu held).
func (sp *subPart) applyPausesLocked() {
	for _, ln := range sp.lanes {
		now := sp.sr.pause.paused(ln.agg)
		if ln.opPaused.Load() == now {
			continue
		}
		ln.opPaused.Store(now)
		if !now {
			sp.activateLocked(ln)
		}
	}
	sp.kickLocked()
}

// heldLocked lists the aggregates whose records wait because of an
// operator's pause (tp.mu held).
func (sp *subPart) heldLocked(out []string) []string {
	for agg, ln := range sp.lanes {
		if ln.len() > 0 && ln.opPaused.Load() && sp.sr.pause.set.Load() != nil {
			out = append(out, agg)
		}
	}
	return out
}

// Paused lists the aggregates of subscription s held by an operator's
// pause on this node with records waiting, sorted (not the back-off:
// Consumer.BackingOff).
func (s *Runtime) Paused() []string {
	var out []string
	for _, tp := range s.t.heldParts() {
		tp.mu.Lock()
		if sp := tp.subOf(s); sp != nil && !tp.closed {
			out = sp.heldLocked(out)
		}
		tp.mu.Unlock()
	}
	sort.Strings(out)
	return out
}

// pauseLoop keeps s's pause entries up to date until ctx ends. Without a
// store nothing is ever paused.
func (t *Consumer) pauseLoop(ctx context.Context, s *Runtime) {
	defer t.wg.Done()
	if t.cfg.Pauses == nil {
		s.applyPauses(pause.Set{})
		return
	}
	scope, name := t.group, s.cfg.Name
	signals := make(chan struct{}, 1)
	signal := func() {
		select {
		case signals <- struct{}{}:
		default:
		}
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Add(1)
	go func() {
		defer wg.Done()
		rewatch.Loop[struct{}]{
			Clock:   t.clk,
			Backoff: backoff.New(time.Second, t.cfg.RenewEvery*4, t.jit),
			Watch: func(ctx context.Context) (<-chan struct{}, error) {
				return t.cfg.Pauses.WatchPauses(ctx, scope, name)
			},
			Established: func() {
				signal()
			},
			Follow: func(ch <-chan struct{}) {
				for range ch {
					signal()
				}
			},
			Failed: func(err error) {
				observe.Error(t.obs, runtime.ErrorEvent{Subscription: name, Op: "watch pauses", Err: err})
			},
		}.Run(ctx)
	}()
	tm := t.clk.NewTimer(0)
	defer tm.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tm.C():
		case <-signals:
			tm.Stop()
		}
		set, err := t.cfg.Pauses.ReadPauses(ctx, scope, name)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			t.log.Warn("reading the pauses failed", "subscription", name, "err", err)
			observe.Error(t.obs, runtime.ErrorEvent{Subscription: name, Op: "read pauses", Err: err})
		} else {
			s.applyPauses(set)
		}
		tm.Reset(t.cfg.RenewEvery)
	}
}
