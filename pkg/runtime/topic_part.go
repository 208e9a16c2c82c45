package runtime

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/protctl/protctl/pkg/broker"
	"github.com/protctl/protctl/pkg/runtime/kafkasource"
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
	t     *TopicSubscriptions
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
	// saveMu serializes checkpoint saves with seeks (topic_seek.go): a
	// save read before a seek must not land after it.
	saveMu sync.Mutex

	wg sync.WaitGroup // workers, catch-ups, actions, fetchLoop
}

// pendingAction is a ledger entry to act on once the partition runs: an
// operator's request, or a retry a previous owner did not finish.
type pendingAction struct {
	sp     *subPart
	action Action
	entry  Parked
}

func newTopicPart(t *TopicSubscriptions, l *topicLease) *topicPart {
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
func (tp *topicPart) addSub(sr *SubscriptionRuntime, next, saved int64) {
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
func (sp *subPart) adopt(entries []Parked) {
	tp := sp.tp
	for _, e := range entries {
		// Read by a list that returned before now: a later poll's list
		// sees the entry unless it was resolved.
		sp.parked[e.Aggregate] = &parkState{entry: e, seen: sp.sr.ledgerReads.Load()}
		switch {
		case e.Request != nil:
			tp.pending = append(tp.pending, pendingAction{sp: sp, action: e.Request.Action, entry: e})
		case e.Status == StatusRetrying:
			// The previous owner took the retry up and did not finish.
			tp.pending = append(tp.pending, pendingAction{sp: sp, action: ActionRetry, entry: e})
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
			t.obs.error(ErrorEvent{Subscription: t.name, Op: "release", Err: err})
			reason = "expires"
		case !ok:
			t.loseLease(tp.lease, errLeaseLost)
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
	case errors.Is(cause, errLeaseLost):
		t.log.Warn("partition lease lost", "partition", tp.p, "generation", tp.lease.gen)
	case errors.Is(cause, errUntrusted):
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

// feedLoop delivers the batches the poll loop hands over, until the
// partition's context ends. After a handoff began (closed) deliverTail
// drops them.
func (tp *topicPart) feedLoop() {
	defer tp.wg.Done()
	for {
		select {
		case <-tp.ctx.Done():
			return
		case <-tp.feedKick:
		}
		for {
			tp.mu.Lock()
			if len(tp.queue) == 0 {
				tp.mu.Unlock()
				break
			}
			b := tp.queue[0]
			tp.queue[0] = kafkasource.Batch{}
			tp.queue = tp.queue[1:]
			tp.mu.Unlock()
			tp.deliverTail(b)
		}
	}
}

// enqueue hands a batch of the shared reader to feedLoop. Its records
// count against the window at once, so a batch that fills it pauses the
// partition's fetching before it is delivered.
func (tp *topicPart) enqueue(b kafkasource.Batch) {
	tp.mu.Lock()
	if tp.closed {
		tp.mu.Unlock()
		return
	}
	tp.queue = append(tp.queue, b)
	tp.undelivered += len(b.Records)
	tp.balanceLocked()
	paused := tp.fetchPaused
	tp.mu.Unlock()
	if paused {
		tp.kickFetch()
	}
	select {
	case tp.feedKick <- struct{}{}:
	default:
	}
}

// deliverChunk is how many records of a fetch the shared reader delivers
// under one hold of the partition's lock. A fetch holds whole producer
// batches (tens of thousands of records); delivered under one hold, the
// partition's workers waited for all of it before they could take their
// next lane batch or mark their last one done.
const deliverChunk = 1024

// deliverTail hands one batch of the shared reader to the attached
// subscriptions, chunk by chunk as their windows have room (feedLimit),
// then applies backpressure. Each chunk's
// recInfos are derived before the lock is taken, which also leaves the
// lock free for the workers between chunks.
func (tp *topicPart) deliverTail(b kafkasource.Batch) {
	tp.mu.Lock()
	if tp.closed || b.Epoch != tp.epoch {
		tp.undelivered -= len(b.Records)
		tp.mu.Unlock()
		return
	}
	if b.Err != nil {
		tp.readErrorLocked(b.Err)
	}
	// Once the partition runs only readErrorLocked, here, assigns it
	// again; between chunks it is closed (handoff, loss) that can change.
	// Both are checked before each chunk.
	epoch := tp.epoch
	if n := len(b.Records); n > 0 && n != tp.lastFetch {
		tp.lastFetch = n
		for _, sp := range tp.subs {
			sp.blocks.inflight = tp.inflightBlocksLocked()
		}
	}
	if b.Head > tp.head {
		tp.head = b.Head
	}
	tp.mu.Unlock()
	for recs := b.Records; len(recs) > 0; {
		chunk := recs[:min(len(recs), deliverChunk)]
		recs = recs[len(chunk):]
		infos := tp.infos[:0]
		for _, r := range chunk {
			infos = append(infos, tp.t.recInfoOf(r, tp.pstr))
		}
		tp.infos = infos
		tp.mu.Lock()
		tp.waitFeedRoomLocked(epoch)
		tp.undelivered -= len(chunk)
		if tp.closed || tp.epoch != epoch {
			tp.undelivered -= len(recs)
			tp.mu.Unlock()
			clear(infos)
			return
		}
		for _, sp := range tp.subs {
			if sp.attached && !sp.sr.failed.Load() {
				sp.deliverLocked(chunk, infos)
			}
		}
		tp.tailPos = max(tp.tailPos, chunk[len(chunk)-1].Offset+1)
		tp.mu.Unlock()
		clear(infos)
	}
	tp.mu.Lock()
	tp.balanceLocked()
	tp.mu.Unlock()
	tp.syncFetch()
}

// feedLimit is the window up to which deliverTail hands a fetch's records
// to the lanes; past it, it waits for the workers. A fetch holds whole
// producer batches (tens of thousands of records per partition against a
// window of a thousand): delivered at once, they sat in lane items for
// the workers to reach much later, a lane block per 32 records allocated
// for the burst (about 1,600 per partition of the benchmark's first
// fetch) and out of the CPU cache by the time they were handled (paced,
// the Kafka benchmark's runtime went from about 0.58x to 0.8x of the raw
// consumer, CPU per record about a sixth lower). The rest of the fetch
// waits in the decoded batch, which exists anyway, and counts against
// the window for fetching (undelivered), so a partition whose lanes are
// full stops fetching as before and never holds the shared reader back
// (TestTopicStuckPartitionDoesNotHoldTheReader).
func (tp *topicPart) feedLimit() int {
	return max(tp.t.cfg.MaxInFlight, 2*deliverChunk)
}

// feedRoomLocked says whether deliverTail may deliver its next chunk: an
// attached subscription has room below feedLimit, or none is attached
// (nothing is delivered then, and nothing to wait for).
func (tp *topicPart) feedRoomLocked() bool {
	attached := false
	for _, sp := range tp.subs {
		if !sp.attached || sp.sr.failed.Load() {
			continue
		}
		attached = true
		if sp.win.inflight() < tp.feedLimit() {
			return true
		}
	}
	return !attached
}

// waitFeedRoomLocked waits, under tp.mu, until feedRoomLocked, the
// partition closes or its run (epoch) changes. Workers wake it as their
// windows drain (doneLocked); a timer wakes it every 100ms as well, so
// that a change no waker knows of (a subscription failing, detaching)
// cannot leave it waiting.
func (tp *topicPart) waitFeedRoomLocked(epoch uint64) {
	for !tp.closed && tp.epoch == epoch && !tp.feedRoomLocked() {
		if !tp.fetchPaused {
			// Usually paused already (enqueue), unless the window
			// filled while it was delivered.
			tp.balanceLocked()
			if tp.fetchPaused {
				tp.kickFetch()
			}
		}
		tp.feedWaiting = true
		wake := time.AfterFunc(100*time.Millisecond, func() {
			tp.mu.Lock()
			tp.cond.Broadcast()
			tp.mu.Unlock()
		})
		tp.cond.Wait()
		wake.Stop()
	}
	tp.feedWaiting = false
}

// readErrorLocked handles an error of the shared reader. A position the
// partition no longer has (retention or DeleteRecords went past it before
// it was read) is reported as lost for every subscription that needed it,
// and the partition is assigned again at its earliest offset.
func (tp *topicPart) readErrorLocked(err error) {
	t := tp.t
	var oe *kafkasource.OffsetError
	if !errors.As(err, &oe) {
		t.log.Warn("reading the partition failed", "partition", tp.p, "err", err)
		t.obs.error(ErrorEvent{Subscription: t.name, Op: "read", Err: err})
		return
	}
	for _, sp := range tp.subs {
		if !sp.attached {
			continue
		}
		if sp.next < oe.Earliest {
			sp.sr.reportLost(tp.p, sp.next, oe.Earliest, "retention passed the reader")
		}
		if sp.next > oe.Head {
			// The partition's offsets went back (the topic was deleted
			// and created again): the offsets dedup remembers are of the
			// old one.
			sp.dedup.forgetOffsets()
		}
		if sp.next < oe.Earliest || sp.next > oe.Head {
			sp.next = oe.Earliest
		}
	}
	tp.tailPos = oe.Earliest
	tp.epoch = t.reader.Assign(map[int32]int64{tp.p: oe.Earliest})
}

// balanceLocked decides backpressure. When some attached subscription has
// room, the ones whose window is full detach and catch up on their own
// reader later, so that one slow subscription does not hold the others
// back; when none has room the partition stops fetching (throttled). A
// throttled partition resumes at resumeAtLocked, and throttles again at
// pauseAtLocked.
func (tp *topicPart) balanceLocked() {
	if tp.closed {
		return
	}
	maxIn := tp.t.cfg.MaxInFlight
	limit := tp.pauseAtLocked()
	if tp.fetchPaused {
		limit = tp.resumeAtLocked() + 1
	}
	anyRoom := false
	for _, sp := range tp.subs {
		if sp.attached && !sp.sr.failed.Load() && sp.win.inflight()+tp.undelivered < limit {
			anyRoom = true
		}
	}
	if anyRoom && len(tp.subs) > 1 {
		// deliverTail fills every window up to feedLimit, so a window
		// is full only past it: by a chunk taken for another's sake.
		detachAt := max(maxIn, tp.feedLimit()+deliverChunk)
		for _, sp := range tp.subs {
			if sp.attached && !sp.sr.failed.Load() && sp.win.inflight() >= detachAt {
				sp.attached = false
				sp.startCatchUpLocked()
			}
		}
	}
	if tp.fetchPaused != !anyRoom {
		tp.fetchPaused = !anyRoom
		tp.t.log.Debug("partition throttle", "partition", tp.p, "throttled", tp.fetchPaused)
	}
}

// inflightBlocksLocked is how many lane blocks the records a partition
// holds in flight at most fill: its window, soft by up to one and a half
// fetches.
func (tp *topicPart) inflightBlocksLocked() int {
	return (max(tp.t.cfg.MaxInFlight, tp.lastFetch) * 3 / 2) / laneBlockLen
}

// resumeAtLocked is the window a throttled partition fetches again at:
// half of MaxInFlight, or half of the last fetch when fetches are larger
// than the window. A fetch can hold far more records than MaxInFlight
// (whole producer batches, up to kafkasource's fetch size per partition:
// about 5,000 small records at its 128 KiB, 50,000 at Kafka's usual
// 1 MiB); resuming only at
// MaxInFlight/2 then leaves the reader idle while the lanes work through
// the fetch, and the lanes idle while the next one is read and decoded.
// Resuming when half the last fetch is left overlaps the two (double
// buffering), at the cost of a window soft by about one and a half
// fetches instead of one.
func (tp *topicPart) resumeAtLocked() int {
	return max(tp.t.cfg.MaxInFlight, tp.lastFetch) / 2
}

// pauseAtLocked is the window a fetching partition throttles at:
// MaxInFlight, or above resumeAtLocked when that is higher.
func (tp *topicPart) pauseAtLocked() int {
	return max(tp.t.cfg.MaxInFlight, tp.resumeAtLocked()+1)
}

// kickFetch asks fetchLoop to apply the wanted fetch state.
func (tp *topicPart) kickFetch() {
	select {
	case tp.fetchKick <- struct{}{}:
	default:
	}
}

func (tp *topicPart) fetchLoop() {
	defer tp.wg.Done()
	for {
		select {
		case <-tp.ctx.Done():
			return
		case <-tp.fetchKick:
			tp.syncFetch()
		}
	}
}

// syncFetch tells the reader to pause or resume the partition as wanted.
// Reconciling under fetchMu (rather than calling Pause or Resume where
// the decision is taken) keeps two calls from landing in the wrong order.
func (tp *topicPart) syncFetch() {
	tp.fetchMu.Lock()
	defer tp.fetchMu.Unlock()
	tp.mu.Lock()
	want, closed := tp.fetchPaused, tp.closed
	tp.mu.Unlock()
	if closed || want == tp.fetchApplied {
		return
	}
	if want {
		tp.t.reader.Pause(tp.p)
	} else {
		tp.t.reader.Resume(tp.p)
	}
	tp.fetchApplied = want
}

// saveCheckpoints saves each subscription's low watermark that moved,
// fenced by the lease. A refused save means the lease is gone: the
// partition stops.
func (tp *topicPart) saveCheckpoints(ctx context.Context) error {
	t := tp.t
	if tp.lease.lost.Load() {
		return errLeaseLost
	}
	tp.saveMu.Lock()
	defer tp.saveMu.Unlock()
	var firstErr error
	for _, sp := range tp.subs {
		tp.mu.Lock()
		next, saved := sp.win.low(sp.next), sp.saved
		tp.mu.Unlock()
		if next <= saved {
			continue
		}
		err := t.cfg.Checkpoints.Save(ctx, tp.lease.fence, t.cfg.LeaseGroup.String(), sp.sr.cfg.Name, tp.p, next)
		if err != nil {
			if errors.Is(err, broker.ErrLeaseLost) {
				t.loseLease(tp.lease, errLeaseLost)
				return err
			}
			if firstErr == nil {
				firstErr = err
			}
			continue
		}
		t.c.checkpoints.Add(1)
		tp.mu.Lock()
		sp.saved = max(sp.saved, next)
		tp.mu.Unlock()
	}
	return firstErr
}

// operate carries out an operator's retry or skip on this partition,
// when it is held and trusted; handled is false otherwise (the caller
// forwards the request through the ledger).
func (tp *topicPart) operate(ctx context.Context, sr *SubscriptionRuntime, action Action, e Parked) (error, bool) {
	if !tp.lease.trusted(tp.t.clk.Now()) {
		return nil, false
	}
	tp.mu.Lock()
	closed := tp.closed
	var sp *subPart
	for _, s := range tp.subs {
		if s.sr == sr {
			sp = s
		}
	}
	tp.mu.Unlock()
	if closed || sp == nil {
		return nil, false
	}
	return sp.act(ctx, action, e), true
}

// pollLoop is the shared reader: one per (node, topic). It hands each
// batch to the partition it belongs to (its feedLoop).
func (t *TopicSubscriptions) pollLoop(ctx context.Context) {
	defer t.wg.Done()
	for ctx.Err() == nil {
		batches, err := t.reader.Poll(ctx)
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, kafkasource.ErrClosed) {
				return
			}
			t.log.Warn("polling the topic failed", "err", err)
			t.obs.error(ErrorEvent{Subscription: t.name, Op: "poll", Err: err})
			if !t.sleep(ctx, 100*time.Millisecond) {
				return
			}
			continue
		}
		for _, b := range batches {
			tp := t.heldPart(b.Partition)
			if tp == nil {
				continue
			}
			tp.enqueue(b)
		}
	}
}

// checkpointLoop saves the held partitions' checkpoints every
// CheckpointEvery.
func (t *TopicSubscriptions) checkpointLoop(ctx context.Context) {
	defer t.wg.Done()
	for t.sleep(ctx, t.cfg.CheckpointEvery) {
		t.saveAll(ctx)
	}
}

// saveAll saves every held partition's checkpoints once.
func (t *TopicSubscriptions) saveAll(ctx context.Context) error {
	var firstErr error
	for _, tp := range t.heldParts() {
		octx, cancel := context.WithTimeout(ctx, t.cfg.OpTimeout)
		err := tp.saveCheckpoints(octx)
		cancel()
		if err != nil && ctx.Err() == nil {
			if firstErr == nil {
				firstErr = err
			}
			if !errors.Is(err, broker.ErrLeaseLost) && !errors.Is(err, errLeaseLost) {
				t.log.Warn("saving checkpoints failed", "partition", tp.p, "err", err)
				t.obs.error(ErrorEvent{Subscription: t.name, Op: "checkpoint", Err: err})
			}
		}
	}
	return firstErr
}

// ledgerLoop follows operator requests for sr: signals from
// WatchRequests, and a re-read of its parked entries every
// LedgerPollEvery (signals are hints). The owner of the entry's partition
// acts; other nodes ignore it.
func (t *TopicSubscriptions) ledgerLoop(ctx context.Context, sr *SubscriptionRuntime) {
	defer t.wg.Done()
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Add(1)
	go func() {
		defer wg.Done()
		b := newBackoff(time.Second, t.cfg.LedgerPollEvery, t.jit)
		for ctx.Err() == nil {
			ch, err := t.cfg.Ledger.WatchRequests(ctx, sr.cfg.Name)
			if err != nil {
				if ctx.Err() != nil {
					return
				}
				t.obs.error(ErrorEvent{Subscription: t.name, Op: "watch requests", Err: err})
				if !t.sleep(ctx, b.next()) {
					return
				}
				continue
			}
			b.reset()
			for agg := range ch {
				octx, cancel := context.WithTimeout(ctx, t.cfg.OpTimeout)
				entries, err := t.entriesOf(octx, sr.cfg.Name, agg)
				cancel()
				if err == nil {
					for _, e := range entries {
						t.actOnEntry(ctx, sr, e)
					}
				}
			}
		}
	}()
	b := newBackoff(time.Second, t.cfg.LedgerPollEvery, t.jit)
	for {
		wait := t.cfg.LedgerPollEvery
		if !t.sleep(ctx, wait) {
			return
		}
		// The list's number is taken before it starts: reconcile compares
		// it with when each local park became known (parkState.seen).
		listed := sr.ledgerReads.Add(1)
		octx, cancel := context.WithTimeout(ctx, t.cfg.OpTimeout)
		entries, err := t.cfg.Ledger.ListParked(octx, sr.cfg.Name)
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			t.obs.error(ErrorEvent{Subscription: t.name, Op: "list parked", Err: err})
			t.sleep(ctx, b.next())
			continue
		}
		b.reset()
		byPart := t.entriesByPartition(entries)
		for _, tp := range t.heldParts() {
			if sp := tp.subOf(sr); sp != nil {
				sp.reconcile(byPart[tp.p], listed)
			}
		}
		for _, e := range entries {
			if e.Request == nil {
				continue
			}
			// The list may be stale by now (a signal may have been acted
			// on meanwhile): act on the entry as it is.
			octx, cancel := context.WithTimeout(ctx, t.cfg.OpTimeout)
			fresh, err := t.cfg.Ledger.GetParked(octx, sr.cfg.Name, e.Partition, e.Aggregate)
			cancel()
			if err == nil {
				t.actOnEntry(ctx, sr, fresh)
			}
		}
	}
}

// actOnEntry carries out e's request when this node holds its partition.
func (t *TopicSubscriptions) actOnEntry(ctx context.Context, sr *SubscriptionRuntime, e Parked) {
	if e.Request == nil || e.Source != SourceKafka || e.Topic != t.cfg.Topic {
		return
	}
	p, err := strconv.ParseInt(e.Partition, 10, 32)
	if err != nil {
		return
	}
	tp := t.heldPart(int32(p))
	if tp == nil {
		return
	}
	if err, ok := tp.operate(ctx, sr, e.Request.Action, e); ok && err != nil && ctx.Err() == nil {
		t.log.Warn("operator request failed", "subscription", sr.cfg.Name, "aggregate", e.Aggregate,
			"action", e.Request.Action, "err", err)
	}
}

func (tp *topicPart) subOf(sr *SubscriptionRuntime) *subPart {
	for _, sp := range tp.subs {
		if sp.sr == sr {
			return sp
		}
	}
	return nil
}

// reportLost records offsets [from, to) of partition p that sr can never
// handle: the topic no longer retains them.
func (s *SubscriptionRuntime) reportLost(p int32, from, to int64, why string) {
	t := s.t
	if to <= from {
		return
	}
	s.c.lost.Add(to - from)
	err := &kafkasource.OffsetError{Topic: t.cfg.Topic, Partition: p, Offset: from, Earliest: to, Head: -1,
		Err: kafkasource.ErrOffsetNotRetained}
	t.log.Error("records lost to retention before they were handled", "subscription", s.cfg.Name,
		"partition", p, "from", from, "to", to, "why", why)
	t.obs.error(ErrorEvent{Subscription: t.name, Op: "retention", Err: err})
}
