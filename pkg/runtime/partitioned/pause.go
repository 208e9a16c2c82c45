package partitioned

import (
	"context"
	"sort"
	"sync"
	"time"

	"github.com/protctl/protctl/pkg/runtime"
	"github.com/protctl/protctl/pkg/runtime/internal/backoff"
	"github.com/protctl/protctl/pkg/runtime/internal/lease"
	"github.com/protctl/protctl/pkg/runtime/internal/observe"
	"github.com/protctl/protctl/pkg/runtime/internal/rewatch"
	"github.com/protctl/protctl/pkg/runtime/pause"
)

// Operators' pauses on the partitioned engine
// (docs/decisions/0045-pause.md).
//
// The subscription keeps its pause entries (Config.Pauses) in
// memory, re-read on every RenewEvery tick and at once on a WatchPauses
// signal: a lost signal costs at most one renewal period. A worker asks
// before its lease acquisition (which then reads nothing on the live
// path) and between batches; a paused worker acks what it handled, gives
// its slot back and holds the lease (renewed as any other) without
// reading until the key is resumed, handed over or the node stops. The
// next owner of a paused key reads the entries before its first read:
// no worker starts before the first read of the entries succeeded.
//
//	          first read of the entries
//	(no worker) ───────────────────────▶ ready
//	                                       │ acquire (no prefetch if paused)
//	  resume: retake slot, read ◀── hold ◀─┤ between two batches, paused
//	   (pending entries first)     (lease  │
//	                               kept)   ▼ not paused: read a batch
type pauseState struct {
	mu  sync.Mutex
	set pause.Set
	// changed is closed (and replaced) whenever set changes: the holding
	// workers wait on it.
	changed chan struct{}
	// holding are the keys whose worker holds because of a pause now.
	holding map[string]bool

	ready     chan struct{} // closed once set was read (or no store)
	readyOnce sync.Once
}

func newPauseState() *pauseState {
	return &pauseState{changed: make(chan struct{}), holding: make(map[string]bool), ready: make(chan struct{})}
}

func (s *pauseState) markReady() { s.readyOnce.Do(func() { close(s.ready) }) }

// update installs set; it wakes the holding workers when it differs.
func (s *pauseState) update(set pause.Set) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.set.SameSelectors(set) {
		return
	}
	s.set = set
	close(s.changed)
	s.changed = make(chan struct{})
}

// paused reports whether key is paused now, and the channel closed on
// the next change.
func (s *pauseState) paused(key string) (bool, <-chan struct{}) {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.set.Paused(key)
	return ok, s.changed
}

func (s *pauseState) hold(key string, on bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if on {
		s.holding[key] = true
	} else {
		delete(s.holding, key)
	}
}

// held lists the keys held by a pause, sorted.
func (s *pauseState) held() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	keys := make([]string, 0, len(s.holding))
	for k := range s.holding {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// pauseLoop keeps p.pauses up to date until ctx ends. Without a store
// nothing is ever paused.
func (p *Subscription) pauseLoop(ctx context.Context) {
	defer p.wg.Done()
	if p.cfg.Pauses == nil {
		p.pauses.markReady()
		return
	}
	signals := make(chan struct{}, 1)
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Add(1)
	go func() {
		defer wg.Done()
		rewatch.Loop[struct{}]{
			Clock:   p.clk,
			Backoff: backoff.New(time.Second, p.cfg.RenewEvery*4, p.jit),
			Watch: func(ctx context.Context) (<-chan struct{}, error) {
				return p.cfg.Pauses.WatchPauses(ctx, "", p.cfg.Name)
			},
			Established: func() {
				select {
				case signals <- struct{}{}:
				default:
				}
			},
			Follow: func(ch <-chan struct{}) {
				for range ch {
					select {
					case signals <- struct{}{}:
					default:
					}
				}
			},
			Failed: func(err error) {
				observe.Error(p.obs, runtime.ErrorEvent{Subscription: p.cfg.Name, Op: "watch pauses", Err: err})
			},
		}.Run(ctx)
	}()
	t := p.clk.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C():
		case <-signals:
			t.Stop()
		}
		set, err := p.cfg.Pauses.ReadPauses(ctx, "", p.cfg.Name)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			p.log.Warn("reading the pauses failed", "subscription", p.cfg.Name, "err", err)
			observe.Error(p.obs, runtime.ErrorEvent{Subscription: p.cfg.Name, Op: "read pauses", Err: err})
		} else {
			p.pauses.update(set)
			p.pauses.markReady()
		}
		t.Reset(p.cfg.RenewEvery)
	}
}

// awaitPauses waits, before the worker takes its lease, until the pause
// entries were read once: a node that just started must not read a
// paused key. stop means the worker must end (nothing is held yet).
func (w *worker) awaitPauses() (result, bool) {
	select {
	case <-w.p.pauses.ready:
		return result{}, false
	default:
	}
	select {
	case <-w.p.pauses.ready:
		return result{}, false
	case <-w.handover:
		return result{kind: resHandedOff}, true
	case <-w.p.stopping:
		return result{kind: resStopped}, true
	case <-w.ctx.Done():
		return result{kind: resStopped}, true
	}
}

// pausedNow reports whether the worker's key is paused (for the lease
// acquisition: a paused key's acquisition reads nothing).
func (w *worker) pausedNow() bool {
	paused, _ := w.p.pauses.paused(w.key)
	return paused
}

// holdWhilePaused is called between two batches. While the key is
// paused, it acks what was handled, gives the slot (or the place on the
// live path) back and waits with the lease, which the renewer keeps,
// until the key is resumed (done false: read on, from where it stopped),
// handed over, the node stops or the lease is lost (done true).
func (w *worker) holdWhilePaused() (result, bool) {
	p := w.p
	paused, changed := p.pauses.paused(w.key)
	if !paused {
		return result{}, false
	}
	if w.prefetch != nil {
		// Entries the acquisition read are delivered to this generation
		// and not handled: read them again as pending entries on resume,
		// as a generation that lost its acquisition's reply does.
		w.prefetch = nil
		w.checkLedger = true
		clear(w.drainedPending)
	}
	// The lanes' tails taken with the lease are stale by the resume: the
	// first round takes them again (tails), so that a lane empty then is
	// not skipped once it has entries.
	w.preTails = nil
	if r, done := w.flushAcks(); done {
		return r, true
	}
	w.releaseSlot()
	w.releaseAhead()
	p.pauses.hold(w.key, true)
	defer p.pauses.hold(w.key, false)
	p.log.Info("partition held by an operator's pause", "subscription", p.cfg.Name, "key", w.key)
	for {
		now := p.clk.Now()
		if !w.lease.trusted(now) {
			w.lease.lose(lease.ErrUntrusted)
			return w.lostResult(), true
		}
		t := p.clk.NewTimer(w.lease.trust.Left(now))
		select {
		case <-t.C():
			continue
		case <-w.wake:
			// News for the key: it is read on resume (all lanes).
			t.Stop()
			continue
		case <-changed:
			t.Stop()
			if paused, changed = p.pauses.paused(w.key); paused {
				continue
			}
			p.log.Info("partition resumed by an operator", "subscription", p.cfg.Name, "key", w.key)
			clear(w.empty)
			if p.live != nil {
				return w.takeAhead()
			}
			return w.takeSlot()
		case <-w.handover:
			t.Stop()
			return w.release(result{kind: resHandedOff}, "handover"), true
		case <-p.stopping:
			t.Stop()
			return w.release(result{kind: resStopped}, "stop"), true
		case <-w.ctx.Done():
			t.Stop()
			return w.ctxResult(), true
		}
	}
}
