package partitioned

import (
	"errors"
	"maps"

	"github.com/protctl/protctl/pkg/broker"
	"github.com/protctl/protctl/pkg/runtime/internal/lease"
)

// Blocking reads (docs/decisions/0054-blocking-reads.md).
//
// A drained partition that holds its lease waits for news: an
// announcement or the watched set's wait wakes it, and then it reads. An
// entry so costs two round trips, one to learn of it and one to read it,
// and a pass through the node's loops between them, where a plain
// XREADGROUP BLOCK consumer pays one round trip: with a few hot keys the
// runtime's median was twice the plain loop's (BenchmarkLatencyRedis, hot
// keys). With a broker.WaitReader the worker waits instead on its own
// lanes, from the ids it knows delivered, with its fenced reads of the
// main lanes queued behind the wait on the same connection: the server
// runs them as soon as an entry ends the wait, and the worker receives
// the entry with the news.
//
// The wait holds a connection, so only a partition that drained more
// than once in its generation (news came while it held its lease: a hot
// key, not one that drained once and will go idle) waits so, and at most
// Workers at once; the others wait as before. The reads are fenced as
// every read is; only the wait is not, and it delivers nothing. Whatever
// the reads delivered is known before the worker goes on: it is handled
// (w.prefetch, read by the next round), or left pending when the worker
// ends (handed over, stopping, lease lost), and such an end is never a
// clean release (workerDone), so the next generation reclaims it.

// waitBlocked waits for news on a drained partition's lanes with a
// blocking read until the partition has entries, is idle, handed over,
// stopped, sought or paused, or its lease is lost. used is false when it
// could not wait so (no place, or the broker could not now): the caller
// waits as it would have. done false means read on (w.prefetch may hold
// entries of the main lanes the wait's reads delivered).
func (w *worker) waitBlocked() (r result, done, used bool) {
	p := w.p
	if !w.mayWaitBlocked() || w.drains < 2 || len(w.after) < len(w.lanes) {
		return result{}, false, false
	}
	select {
	case p.blocked <- struct{}{}:
	default:
		return result{}, false, false
	}
	seated := true
	leave := func() { // the place, given back before waiting for a slot
		if seated {
			seated = false
			<-p.blocked
		}
	}
	defer leave()
	readOn := func() (result, bool, bool) {
		leave()
		r, done := w.readOn()
		return r, done, true
	}
	if w.watching {
		// The wait covers every lane from w.after: the watched set's
		// would only wake the worker for what it reads anyway.
		p.watch.remove(w.key)
		w.watching = false
	}
	// The main lanes' acks go with the first wait; any other now.
	for _, ln := range w.lanes {
		if len(w.acks[ln.stream]) > 0 && (ln.backfill || !w.drainedPending[ln.stream]) {
			if r, done := w.flushAcks(); done {
				return r, true, true
			}
			break
		}
	}
	w.readSince = false
	w.fromWaiter.Store(false)
	w.releaseSlot()
	w.releaseAhead()

	// woke: a wake was taken while waiting. Its news stay in w.news for
	// the rounds after the wait; the wake itself is sent again then.
	woke := false
	defer func() {
		if woke {
			select {
			case w.wake <- struct{}{}:
			default:
			}
		}
	}()
	idleAt := p.clk.Now().Add(p.cfg.IdleAfter)
	for {
		now := p.clk.Now()
		if !w.lease.trusted(now) {
			w.lease.lose(lease.ErrUntrusted)
			return w.lostResult(), true, true
		}
		if !now.Before(idleAt) {
			// The acks were left for the wait: sent first (on the first
			// pass with an IdleAfter too short to wait at all).
			r, _ := w.releaseAcked(result{kind: resIdle, after: maps.Clone(w.after)}, "idle")
			return r, true, true
		}
		select {
		case <-w.handover:
			r, _ := w.releaseAcked(result{kind: resHandedOff}, "handover")
			return r, true, true
		case <-p.stopping:
			r, _ := w.releaseAcked(result{kind: resStopped}, "stop")
			return r, true, true
		default:
		}
		paused, pauseChanged := p.pauses.paused(w.key)
		if paused || p.seeks.has(w.key) {
			return readOn()
		}
		var (
			lanes []lane
			reads []broker.FencedRead
			count = int64(w.readCount())
		)
		for _, ln := range w.lanes {
			if !ln.backfill && w.drainedPending[ln.stream] {
				lanes = append(lanes, ln)
				reads = append(reads, broker.FencedRead{Fence: w.lease.fence, Stream: ln.stream, Group: p.cfg.Name,
					Ack: w.acks[ln.stream], Count: count, Mode: broker.ReadNew})
			}
		}
		after := maps.Clone(w.after)
		block := min(idleAt.Sub(now), w.lease.trust.Left(now))
		type outcome struct {
			res broker.WaitedReads
			ok  bool
		}
		stop := make(chan struct{})
		answer := make(chan outcome, 1)
		go func() {
			res, ok := p.waitReader.WaitAndReadPartitionsFenced(w.ctx, stop, after, block, reads)
			answer <- outcome{res, ok}
		}()
		var (
			out   outcome
			ended func() result // set when the worker must end
			asked bool          // a seek or a pause ended the wait
		)
		interrupt := func() {
			select {
			case <-stop:
			default:
				close(stop)
			}
		}
	wait:
		for {
			select {
			case out = <-answer:
				break wait
			case <-w.wake:
				woke = true
				if p.seeks.has(w.key) {
					asked = true
					interrupt()
				}
			case <-pauseChanged:
				// Any key's pause changed: the wait ends only for this
				// key's.
				if paused, pauseChanged = p.pauses.paused(w.key); paused {
					pauseChanged = nil
					asked = true
					interrupt()
				}
			case <-w.handover:
				ended = func() result { r, _ := w.releaseAcked(result{kind: resHandedOff}, "handover"); return r }
				interrupt()
				out = <-answer
				break wait
			case <-p.stopping:
				ended = func() result { r, _ := w.releaseAcked(result{kind: resStopped}, "stop"); return r }
				interrupt()
				out = <-answer
				break wait
			case <-w.ctx.Done():
				ended = w.ctxResult
				interrupt()
				out = <-answer
				break wait
			}
		}
		if !out.ok {
			if w.ctx.Err() != nil {
				return w.ctxResult(), true, true
			}
			if ended != nil {
				return ended(), true, true
			}
			return result{}, false, false // the broker cannot now: wait as before
		}
		p.c.reads.Add(int64(len(reads)))
		// What the reads delivered is this generation's, handled or left
		// pending: never dropped before a clean release.
		got, full := false, false
		var readErr error
		for i, rr := range out.res.Reads {
			switch {
			case errors.Is(rr.Err, broker.ErrLeaseLost):
				w.lease.lose(lease.ErrLost)
				return w.lostResult(), true, true
			case rr.Err != nil:
				readErr = rr.Err
				continue
			}
			if ack := reads[i].Ack; len(ack) > 0 {
				p.c.acks.Add(1)
				w.acks[reads[i].Stream] = ack[:0] // kept for the next batch's ids
			}
			switch {
			case len(rr.Messages) > 0:
				got = true
				full = full || len(rr.Messages) >= int(count)
				ln := lanes[i]
				if w.prefetch == nil {
					w.prefetch = make(map[string]broker.ReadResult)
				}
				w.prefetch[ln.stream] = rr
				delete(w.empty, ln.stream)
			}
		}
		if ended != nil {
			return ended(), true, true
		}
		if readErr != nil {
			// The acks of a failed read may not have been sent: send
			// them now, retrying as drained would have, so that the next
			// generation does not handle again what this one handled.
			if r, done := w.flushAcks(); done {
				return r, true, true
			}
			return w.ioFail("wait and read", readErr), true, true
		}
		for _, s := range out.res.Ready {
			delete(w.empty, s)
			if _, ok := w.prefetch[s]; !ok {
				// News the reads did not bring (a backfill lane, or one
				// whose pending list is read first): the rounds read
				// it, and one that finds nothing takes the tails again
				// (drained), so that a stale id cannot make every wait
				// return at once.
				w.fromWaiter.Store(true)
			}
		}
		if out.res.WaitErr != nil && !got {
			return w.ioFail("wait and read", out.res.WaitErr), true, true
		}
		// A short batch from the wait is all there was up to its ids: once
		// handled, the next wait (from them) is the check that the rounds'
		// empty read would be (process).
		w.waited = got && !full && !asked
		if got || asked || len(out.res.Ready) > 0 {
			return readOn()
		}
	}
}

// mayWaitBlocked says whether the worker's next drained wait may be a
// blocking read: the broker can, the wait knows its lanes' ids, news came
// while it held the lease (a second drain), and no operator's retry is
// being carried out (resolveRetry needs the acks sent first).
func (w *worker) mayWaitBlocked() bool {
	return w.p.waitReader != nil && w.drains > 0 && w.retrying == nil
}

// readOn takes what a drained worker needs to read again (a place on the
// live path, or a slot) after news ended its wait.
func (w *worker) readOn() (result, bool) {
	if w.p.live != nil {
		return w.takeAhead()
	}
	return w.takeSlot()
}
