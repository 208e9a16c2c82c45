package topic

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/protctl/protctl/pkg/runtime"
	"github.com/protctl/protctl/pkg/runtime/internal/lease"
	"github.com/protctl/protctl/pkg/runtime/internal/observe"
	"github.com/protctl/protctl/pkg/runtime/kafkasource"
	"github.com/protctl/protctl/pkg/runtime/ledger"
)

// topicPart is one partition this node holds under one lease generation,
// from acquire to handoff or loss. The shared reader delivers its records
// (deliverTail) to every attached subscription; each subscription's
// subPart runs the lanes.
//
// Locking: mu guards the partition and all its subParts (one lock keeps
// the tail position, the subscriptions' positions and windows consistent
// with each other); fetchMu serializes the reader's Pause and Resume calls
// and is never taken with mu held.
type topicPart struct {
	t     *Consumer
	p     int32
	pstr  string
	lease *topicLease

	ctx    context.Context // handlers, catch-ups, retries; cancelled on loss or after the drain
	cancel context.CancelCauseFunc

	handoffCh     chan struct{}
	handoffOnce   sync.Once
	handoffReason atomic.Value // string
	// handingOff is set the moment a handoff begins: from then on no
	// record starts (no worker takes a lane, no handler call or retry
	// attempt begins); the drain waits only for the calls already running.
	handingOff atomic.Bool
	released   atomic.Bool
	fetchKick  chan struct{}
	// feedKick wakes feedLoop, which delivers the batches the shared
	// reader queued (queue): the poll loop hands a fetch's partitions over
	// and polls on, so partitions are delivered in parallel, each as fast
	// as its lanes take its records, and a partition whose lanes are full
	// never holds the reader (and so the other partitions) back.
	feedKick chan struct{}

	mu          sync.Mutex
	cond        *sync.Cond
	subs        []*subPart
	epoch       uint64 // of the reader's Assign for this run
	tailPos     int64  // next offset the shared reader delivers
	head        int64  // the partition's head as last seen
	closed      bool   // no more deliveries: handoff or loss began
	fetchPaused bool   // wanted: no attached subscription has room
	lastFetch   int    // records in the shared reader's last batch
	feedWaiting bool   // deliverTail waits for room (feedRoomLocked)
	// queue holds the shared reader's batches not yet taken by feedLoop,
	// and undelivered counts their records and the rest of the batch
	// feedLoop is delivering. They count against the window for fetching
	// (balanceLocked), as if delivered: a partition whose lanes are full
	// stops fetching, so what waits here is bounded by what was fetched
	// before that.
	queue       []kafkasource.Batch
	undelivered int
	drainOver   bool
	pending     []pendingAction

	infos []recInfo // deliverTail's scratch, the poll loop's alone

	fetchMu      sync.Mutex
	fetchApplied bool // what the reader was last told
	// saveMu serializes checkpoint saves with seeks (seek.go): a save
	// read before a seek must not land after it.
	saveMu sync.Mutex

	wg sync.WaitGroup // workers, catch-ups, actions, fetchLoop
}

// pendingAction is a ledger entry to act on once the partition runs: an
// operator's request, or a retry a previous owner did not finish.
type pendingAction struct {
	sp     *subPart
	action ledger.Action
	entry  ledger.Parked
}

func newTopicPart(t *Consumer, l *topicLease) *topicPart {
	ctx, cancel := context.WithCancelCause(t.runCtx)
	tp := &topicPart{
		t:         t,
		p:         l.p,
		pstr:      strconv.Itoa(int(l.p)),
		lease:     l,
		ctx:       ctx,
		cancel:    cancel,
		handoffCh: make(chan struct{}),
		fetchKick: make(chan struct{}, 1),
		feedKick:  make(chan struct{}, 1),
	}
	tp.cond = sync.NewCond(&tp.mu)
	l.onLose = func(cause error) { tp.cancel(cause) }
	return tp
}

// addSub adds a subscription starting at next (saved is its stored
// checkpoint, -1 when none).
func (tp *topicPart) addSub(sr *Runtime, next, saved int64) {
	tp.subs = append(tp.subs, &subPart{
		tp:     tp,
		sr:     sr,
		next:   next,
		saved:  saved,
		lanes:  make(map[string]*aggLane),
		blocks: laneBlocks{inflight: tp.inflightBlocksLocked()},
		parked: make(map[string]*parkState),
		dedup:  sr.dedupOf(tp.p),
	})
}

// adopt takes the subscription's parked entries of this partition, before
// the partition starts: their aggregates are skipped, and requests (or a
// retry a previous owner did not finish) are acted on once it runs.
func (sp *subPart) adopt(entries []ledger.Parked) {
	tp := sp.tp
	for _, e := range entries {
		// Read by a list that returned before now: a later poll's list
		// sees the entry unless it was resolved.
		sp.parked[e.Aggregate] = &parkState{entry: e, seen: sp.sr.ledgerReads.Load()}
		switch {
		case e.Request != nil:
			tp.pending = append(tp.pending, pendingAction{sp: sp, action: e.Request.Action, entry: e})
		case e.Status == ledger.StatusRetrying:
			// The previous owner took the retry up and did not finish.
			tp.pending = append(tp.pending, pendingAction{sp: sp, action: ledger.ActionRetry, entry: e})
		}
	}
}

// releaseUnstarted gives back the lease of a partition that never
// started (a join undone, or a failed acquire).
func (tp *topicPart) releaseUnstarted() {
	t := tp.t
	tp.cancel(errHandoff)
	t.partsMu.Lock()
	if t.acquired[tp.p] == tp.lease {
		delete(t.acquired, tp.p)
	}
	t.partsMu.Unlock()
	tp.releaseLease("undo")
	tp.released.Store(true)
}

// releaseLease gives the partition's lease back, unless it was lost, and
// reports its end (endLease): released for reason, lost when the store
// refused the release (the lease was no longer this node's), released
// with reason "expires" when the call failed (the lease is left to its
// TTL).
func (tp *topicPart) releaseLease(reason string) {
	t := tp.t
	if !tp.lease.lost.Load() {
		ctx, cancel := context.WithTimeout(t.bgCtx, t.cfg.OpTimeout)
		ok, err := t.cfg.Leases.ReleasePartitionLease(ctx, tp.lease.fence)
		cancel()
		switch {
		case err != nil:
			t.log.Warn("releasing a lease failed; it will expire", "partition", tp.p, "err", err)
			observe.Error(t.obs, runtime.ErrorEvent{Subscription: t.name, Op: "release", Err: err})
			reason = "expires"
		case !ok:
			t.loseLease(tp.lease, lease.ErrLost)
		}
	}
	t.endLease(tp.lease, reason)
}

// start assigns the partition on the shared reader and starts its
// goroutines. The shared reader starts at the lowest position among the
// subscriptions not farther than CatchUpLag behind the most advanced one;
// those farther behind catch up on their own reader.
func (tp *topicPart) start() {
	t := tp.t
	hi := int64(-1)
	for _, sp := range tp.subs {
		hi = max(hi, sp.next)
	}
	tail := hi
	for _, sp := range tp.subs {
		if sp.next >= hi-t.cfg.CatchUpLag {
			tail = min(tail, sp.next)
		}
	}
	t.c.held.Add(1)
	tp.mu.Lock()
	tp.tailPos = tail
	t.partsMu.Lock()
	t.parts[tp.p] = tp
	if t.acquired[tp.p] == tp.lease {
		delete(t.acquired, tp.p)
	}
	t.partsMu.Unlock()
	// Assign under mu: the poll loop may see this run's first batch as
	// soon as Assign returns, and must find the epoch set when it gets mu.
	tp.epoch = t.reader.Assign(map[int32]int64{tp.p: tail})
	for _, sp := range tp.subs {
		if sp.next >= tail {
			sp.attached = true
			continue
		}
		sp.startCatchUpLocked()
	}
	pending := tp.pending
	tp.pending = nil
	tp.mu.Unlock()

	tp.wg.Add(3)
	go tp.fetchLoop()
	go tp.feedLoop()
	go func() {
		defer tp.wg.Done()
		tp.lease.watchTrust(tp.ctx, t)
	}()
	t.wg.Add(1)
	go tp.supervise()
	for _, a := range pending {
		tp.wg.Add(1)
		go func() {
			defer tp.wg.Done()
			a.sp.act(tp.ctx, a.action, a.entry)
		}()
	}
}

// handoff asks the partition to stop reading, stop starting records,
// wait for those running, save and release.
func (tp *topicPart) handoff(reason string) {
	tp.handoffOnce.Do(func() {
		tp.handoffReason.Store(reason)
		tp.handingOff.Store(true)
		close(tp.handoffCh)
		if hook := tp.t.handoffHook; hook != nil {
			hook(tp.p)
		}
	})
}

// supervise waits for the partition's end and carries it out.
func (tp *topicPart) supervise() {
	t := tp.t
	defer t.wg.Done()
	select {
	case <-tp.ctx.Done():
	case <-tp.handoffCh:
	}
	if tp.ctx.Err() == nil {
		tp.endGracefully()
		return
	}
	// Lost, abandoned or stopped hard: nothing is saved (a lost lease's
	// writes would be refused; the others end without I/O).
	tp.stopReading()
	tp.wg.Wait()
	switch cause := tp.lease.lostTo(); {
	case errors.Is(cause, lease.ErrLost):
		t.log.Warn("partition lease lost", "partition", tp.p, "generation", tp.lease.gen)
	case errors.Is(cause, lease.ErrUntrusted):
		t.log.Warn("partition lease not renewed within the trust window", "partition", tp.p, "generation", tp.lease.gen)
	}
	// Abandoned or stopped hard: the lease is left to its TTL.
	t.endLease(tp.lease, "expires")
	tp.remove()
	t.post(evTopicPartEnded{tp: tp, lost: true})
}

// endGracefully is the handoff: stop reading, wait up to HandoffTimeout
// for the handler calls running when it began (no record starts after
// that: handingOff), cancel what still runs, save every checkpoint (the
// low watermark of what finished: the records not started are read again
// by the next owner), release.
func (tp *topicPart) endGracefully() {
	t := tp.t
	reason, _ := tp.handoffReason.Load().(string)
	tp.stopReading()
	tp.drain(t.cfg.HandoffTimeout)
	tp.cancel(errHandoff)
	tp.wg.Wait()
	lost := !errors.Is(context.Cause(tp.ctx), errHandoff)
	if !lost {
		ctx, cancel := context.WithTimeout(t.bgCtx, t.cfg.OpTimeout)
		if err := tp.saveCheckpoints(ctx); err != nil {
			t.log.Warn("saving checkpoints at handoff failed", "partition", tp.p, "err", err)
			lost = tp.lease.lost.Load()
		}
		cancel()
		tp.releaseLease(reason)
		t.log.Debug("partition handed off", "partition", tp.p, "generation", tp.lease.gen, "reason", reason)
	} else {
		t.endLease(tp.lease, "expires")
	}
	tp.released.Store(true)
	tp.remove()
	t.post(evTopicPartEnded{tp: tp, lost: lost})
}

// stopReading ends deliveries to the partition.
func (tp *topicPart) stopReading() {
	tp.mu.Lock()
	tp.closed = true
	tp.cond.Broadcast()
	tp.mu.Unlock()
	tp.t.reader.Unassign(tp.p)
}

func (tp *topicPart) remove() {
	t := tp.t
	t.partsMu.Lock()
	if t.parts[tp.p] == tp {
		delete(t.parts, tp.p)
		t.c.held.Add(-1)
	}
	t.partsMu.Unlock()
}

// drain waits until every subscription's workers are gone (they finish
// the handler call they are in and start no other once handingOff is
// set), the timeout passes, or the partition's context ends. Records
// queued and not started stay in the window, so the checkpoint stays
// below them.
func (tp *topicPart) drain(timeout time.Duration) {
	t := tp.t
	done := make(chan struct{})
	go func() {
		tm := t.clk.NewTimer(timeout)
		defer tm.Stop()
		select {
		case <-tm.C():
		case <-tp.ctx.Done():
		case <-done:
			return
		}
		tp.mu.Lock()
		tp.drainOver = true
		tp.cond.Broadcast()
		tp.mu.Unlock()
	}()
	tp.mu.Lock()
	for !tp.drainOver && tp.ctx.Err() == nil && !tp.drainedLocked() {
		tp.cond.Wait()
	}
	timedOut := tp.drainOver
	tp.mu.Unlock()
	close(done)
	if timedOut {
		t.log.Warn("handoff drain timed out; cancelling handlers", "partition", tp.p, "timeout", timeout)
	}
}

func (tp *topicPart) drainedLocked() bool {
	for _, sp := range tp.subs {
		if sp.sr.failed.Load() {
			continue
		}
		if sp.workers > 0 {
			return false
		}
	}
	return true
}
