package topic

import (
	"context"
	"errors"
	"time"

	"github.com/protctl/protctl/pkg/runtime"
	"github.com/protctl/protctl/pkg/runtime/internal/observe"
	"github.com/protctl/protctl/pkg/runtime/kafkasource"
)

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
		observe.Error(t.obs, runtime.ErrorEvent{Subscription: t.name, Op: "read", Err: err})
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

// pollLoop is the shared reader: one per (node, topic). It hands each
// batch to the partition it belongs to (its feedLoop).
func (t *Consumer) pollLoop(ctx context.Context) {
	defer t.wg.Done()
	for ctx.Err() == nil {
		batches, err := t.reader.Poll(ctx)
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, kafkasource.ErrClosed) {
				return
			}
			t.log.Warn("polling the topic failed", "err", err)
			observe.Error(t.obs, runtime.ErrorEvent{Subscription: t.name, Op: "poll", Err: err})
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
