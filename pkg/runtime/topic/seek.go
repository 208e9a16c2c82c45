package topic

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/protctl/protctl/pkg/broker"
	"github.com/protctl/protctl/pkg/runtime"
	"github.com/protctl/protctl/pkg/runtime/internal/backoff"
	"github.com/protctl/protctl/pkg/runtime/internal/lease"
	"github.com/protctl/protctl/pkg/runtime/internal/observe"
	"github.com/protctl/protctl/pkg/runtime/internal/rewatch"
)

// Online seeks (protctl topics seek of a held partition; see
// docs/decisions/0044-topic-seek.md). An operator records a runtime.SeekRequest
// for the partition's lease; the owner finds it (a Pub/Sub hint, and a
// poll every RenewEvery so that a lost hint costs at most one renewal
// period), and at a batch boundary, under its fence:
//
//  1. stops starting records of the subscription on the partition (its
//     workers finish the record in hand, start no other record of their
//     batch and take no other lane);
//  2. sets the checkpoint, backwards too, and records the result, in one
//     fenced step (runtime.CheckpointSeeker.CompleteSeek), holding the
//     partition's lock so nothing is delivered, done or saved meanwhile
//     (saveMu keeps a periodic save read before the seek from landing
//     after it);
//  3. drops the records queued for the subscription (its lanes and
//     in-flight window) and, moving back, its dedup memory of the
//     partition, so that replayed records are handled and not dropped as
//     duplicates, and reads on from the new position: a running catch-up
//     restarts from it (seekGen), a rewind below the shared reader's
//     position catches up on its own reader, a forward seek lets the
//     records below it go by. A seek planned forward never moves the
//     owner back (see seek).
//
// Parked aggregates are left as they are: their ledger entries still
// cover them, so replayed records of a parked aggregate are skipped like
// any record of it, until the operator retries or skips the entry.

// seekLoop answers the seek requests of the held partitions until ctx
// ends. Without a runtime.CheckpointSeeker store it returns at once.
func (t *Consumer) seekLoop(ctx context.Context) {
	defer t.wg.Done()
	seeker, ok := t.cfg.Checkpoints.(runtime.CheckpointSeeker)
	if !ok {
		return
	}
	kick := make(chan struct{}, 1)
	done := make(chan struct{})
	runs := &seekRuns{busy: make(map[seekRunKey]bool)}
	defer runs.wg.Wait()
	defer func() { <-done }()
	go func() {
		defer close(done)
		rewatch.Loop[string]{
			Clock:   t.clk,
			Backoff: backoff.New(time.Second, t.cfg.RenewEvery, t.jit),
			Watch: func(ctx context.Context) (<-chan string, error) {
				return seeker.WatchSeeks(ctx, t.group)
			},
			Established: func() {
				select {
				case kick <- struct{}{}:
				default:
				}
			},
			Follow: func(ch <-chan string) {
				for range ch {
					select {
					case kick <- struct{}{}:
					default:
					}
				}
			},
			Failed: func(err error) {
				observe.Error(t.obs, runtime.ErrorEvent{Subscription: t.name, Op: "watch seeks", Err: err})
			},
		}.Run(ctx)
	}()
	for {
		t.checkSeeks(ctx, seeker, runs)
		tm := t.clk.NewTimer(t.cfg.RenewEvery)
		select {
		case <-ctx.Done():
			tm.Stop()
			return
		case <-kick:
		case <-tm.C():
		}
		tm.Stop()
	}
}

// seekRuns are the seeks under way, one at most per subscription and
// partition: each runs on its own goroutine, so that a partition whose
// handler is slow to finish its batch delays no other partition's seek.
type seekRuns struct {
	mu   sync.Mutex
	busy map[seekRunKey]bool
	wg   sync.WaitGroup
}

type seekRunKey struct {
	sub string
	p   int32
}

// start runs fn for key unless a seek of key is under way.
func (r *seekRuns) start(key seekRunKey, fn func()) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.busy[key] {
		return
	}
	r.busy[key] = true
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		defer func() {
			r.mu.Lock()
			delete(r.busy, key)
			r.mu.Unlock()
		}()
		fn()
	}()
}

// checkSeeks reads every subscription's pending requests and starts
// those of the partitions this node holds that are not under way.
func (t *Consumer) checkSeeks(ctx context.Context, seeker runtime.CheckpointSeeker, runs *seekRuns) {
	for _, sr := range t.subs {
		octx, cancel := context.WithTimeout(ctx, t.cfg.OpTimeout)
		reqs, err := seeker.PendingSeeks(octx, t.group, sr.cfg.Name)
		cancel()
		if err != nil {
			if ctx.Err() == nil {
				observe.Error(t.obs, runtime.ErrorEvent{Subscription: t.name, Op: "read seeks", Err: err})
			}
			continue
		}
		for p, req := range reqs {
			tp := t.heldPart(p)
			if tp == nil {
				continue
			}
			runs.start(seekRunKey{sub: sr.cfg.Name, p: p}, func() {
				if err := tp.seek(ctx, seeker, sr, req); err != nil && ctx.Err() == nil {
					t.log.Warn("seek failed; it is tried again", "subscription", sr.cfg.Name, "partition", p, "err", err)
					observe.Error(t.obs, runtime.ErrorEvent{Subscription: t.name, Op: "seek", Err: err})
				}
			})
		}
	}
}

var errSeekBusy = errors.New("runtime: seek: a retry of a parked aggregate is under way on the partition")

// seek carries out req on this partition for sr (see the top of the
// file). A request for another lease is answered runtime.SeekStale.
//
// Where to: a request planned as a move forward (req.Forward) only
// skips records, so it sets max(req.Next, the owner's position): an
// owner that handled past the target since the plan keeps its position
// rather than handling those records again. Any other request (a rewind,
// or a plan that saw no checkpoint) sets req.Next exactly: a rewind is
// relative to what the plan saw, and records handled since the plan are
// handled again too. The dedup memory is dropped only when the position
// moves back (records are to be handled again); moving forward it is
// kept, so records the owner handled past the new position (out of
// order, in other lanes) are dropped as duplicates when read again.
func (tp *topicPart) seek(ctx context.Context, seeker runtime.CheckpointSeeker, sr *Runtime, req runtime.SeekRequest) error {
	t := tp.t
	if !tp.lease.trusted(t.clk.Now()) {
		return nil
	}
	lg := t.group
	res := runtime.SeekResult{ID: req.ID, From: -1, Next: req.Next, Lease: tp.lease.fence.Token}
	if req.Lease != tp.lease.fence.Token {
		res.Status, res.AtMs = runtime.SeekStale, t.clk.Now().UnixMilli()
		octx, cancel := context.WithTimeout(ctx, t.cfg.OpTimeout)
		defer cancel()
		_, err := seeker.CompleteSeek(octx, tp.lease.fence, lg, sr.cfg.Name, tp.p, res)
		return tp.seekErr(err)
	}
	tp.mu.Lock()
	sp := tp.subOf(sr)
	if sp == nil || tp.closed {
		tp.mu.Unlock()
		return nil
	}
	sp.seeking = true
	sp.seekingFlag.Store(true)
	if hook := t.seekHook; hook != nil {
		hook(tp.p)
	}
	resume := func() {
		sp.seeking = false
		sp.seekingFlag.Store(false)
		sp.kickLocked()
		tp.cond.Broadcast()
	}
	// The record boundary: workers take no other lane while seeking and
	// start no other record of their batch (seekingFlag), and each says
	// when it leaves (work broadcasts). saveMu is not held
	// meanwhile: a handler slow to return must not stop checkpoint saves.
	for sp.workers > 0 && !tp.closed && tp.ctx.Err() == nil {
		tp.cond.Wait()
	}
	tp.mu.Unlock()
	// saveMu, then mu (saveCheckpoints' order): a save that read the
	// position before the seek lands before it, not over it.
	tp.saveMu.Lock()
	defer tp.saveMu.Unlock()
	tp.mu.Lock()
	defer tp.mu.Unlock()
	for sp.workers > 0 && !tp.closed && tp.ctx.Err() == nil {
		tp.cond.Wait()
	}
	if tp.closed || tp.ctx.Err() != nil {
		resume()
		return nil
	}
	if sp.retryingLocked() {
		resume()
		return errSeekBusy
	}
	from := sp.win.low(sp.next)
	next := req.Next
	if req.Forward() {
		next = max(next, from)
	}
	res.Status, res.From, res.Next, res.AtMs = runtime.SeekDone, from, next, t.clk.Now().UnixMilli()
	octx, cancel := context.WithTimeout(ctx, t.cfg.OpTimeout)
	ok, err := seeker.CompleteSeek(octx, tp.lease.fence, lg, sr.cfg.Name, tp.p, res)
	cancel()
	if err != nil || !ok {
		resume()
		return tp.seekErr(err)
	}
	if next != from {
		sp.resetLocked(next, next < from)
	} else {
		sp.saved = max(sp.saved, next)
	}
	t.log.Info("seek applied", "subscription", sr.cfg.Name, "partition", tp.p, "from", res.From, "to", next, "asked", req.Next, "id", req.ID)
	resume()
	return nil
}

// seekErr maps a refused fence to the partition's loss.
func (tp *topicPart) seekErr(err error) error {
	if errors.Is(err, broker.ErrLeaseLost) {
		tp.t.loseLease(tp.lease, lease.ErrLost)
	}
	return err
}

// retryingLocked says whether a retry or skip of a parked aggregate is
// under way: its records are queued on a held lane, which a seek would
// drop.
func (sp *subPart) retryingLocked() bool {
	for _, st := range sp.parked {
		if st.retrying {
			return true
		}
	}
	for _, ln := range sp.lanes {
		if ln.hold {
			return true
		}
	}
	return false
}

// resetLocked drops what the subscription holds of the partition (queued
// records, window, and with forget its dedup memory) and reads on from
// next. No worker runs.
func (sp *subPart) resetLocked(next int64, forget bool) {
	tp := sp.tp
	sp.lanes = make(map[string]*aggLane)
	sp.blocks.lanes = 0
	sp.ready = laneQueue{}
	sp.win = window{}
	sp.next, sp.saved = next, next
	if forget {
		sp.dedup.forgetAll()
	}
	sp.seekGen++
	if sp.attached && next < tp.tailPos {
		sp.attached = false
		sp.startCatchUpLocked()
	}
	tp.balanceLocked()
	tp.kickFetch()
}

// forgetAll drops everything remembered: a seek replays records on
// purpose.
func (d *dedupMemory) forgetAll() {
	d.mu.Lock()
	defer d.mu.Unlock()
	clear(d.cur)
	d.old = nil
}
