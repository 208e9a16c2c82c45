package partitioned

import (
	"maps"
	"time"

	"github.com/protctl/protctl/pkg/runtime/internal/lease"
)

// drained handles a partition with nothing to read: it makes sure the
// node knows where to wait from, then waits for news with the lease for
// IdleAfter and releases it. done false means news came: read again.
func (w *worker) drained() (result, bool) {
	p := w.p
	// A worker that may wait with a blocking read sends its acks with
	// the wait (waitBlocked); any other sends them now.
	if !w.mayWaitBlocked() {
		if r, done := w.flushAcks(); done {
			return r, true
		}
	}
	if w.retrying != nil {
		// The head was handled (or acked by someone else) before this
		// generation read it: the retry is over.
		if r, done := w.resolveRetry(); done {
			return r, true
		}
	}
	if p.waiter != nil {
		var unknown []lane
		spurious := w.fromWaiter.Load() && !w.readSince
		for _, ln := range w.lanes {
			if _, ok := w.after[ln.stream]; !ok || spurious {
				unknown = append(unknown, ln)
			}
		}
		if len(unknown) > 0 {
			got, r, done := w.learnTails(unknown)
			if done {
				return r, true
			}
			if got {
				return result{}, false
			}
		}
		w.drains++
		if r, done, used := w.waitBlocked(); used {
			return r, done
		}
		if r, done := w.flushAcks(); done {
			return r, true
		}
		w.watchDrained()
	}
	w.readSince = false
	w.fromWaiter.Store(false)
	w.releaseSlot()
	w.releaseAhead()

	idleAt := p.clk.Now().Add(p.cfg.IdleAfter)
	for {
		now := p.clk.Now()
		if !w.lease.trusted(now) {
			w.lease.lose(lease.ErrUntrusted)
			p.watch.remove(w.key)
			return w.lostResult(), true
		}
		if !now.Before(idleAt) {
			return w.release(result{kind: resIdle, after: maps.Clone(w.after)}, "idle"), true
		}
		d := min(idleAt.Sub(now), w.lease.trust.Left(now))
		var changed <-chan struct{}
		if p.waiter != nil && !w.watching {
			if !now.Before(w.joinDue()) {
				w.watchDrained()
				continue
			}
			changed = w.covered
			d = min(d, w.joinDue().Sub(now))
		}
		t := p.clk.NewTimer(d)
		select {
		case <-t.C():
			continue
		case <-changed:
			// The announcements changed (ended, or began again: what
			// was appended meanwhile may not have been announced): the
			// partition joins the watched set, whose waits and checks
			// find it.
			t.Stop()
			w.watchDrained()
			continue
		case <-w.wake:
			t.Stop()
			// The main lanes leave the watch here: no wait wakes the
			// worker for them any more, so they are read whatever the
			// wake was about (an entry appended after a backfill lane's
			// wake must not wait for that lane's backlog).
			w.takeNews(newsMain)
			if w.watching {
				p.watch.remove(w.key)
				w.watching = false
			}
			if p.live != nil {
				if r, stop := w.takeAhead(); stop {
					return r, true
				}
			} else if r, stop := w.takeSlot(); stop {
				return r, true
			}
			return result{}, false
		case <-w.handover:
			t.Stop()
			return w.release(result{kind: resHandedOff}, "handover"), true
		case <-w.p.stopping:
			t.Stop()
			return w.release(result{kind: resStopped}, "stop"), true
		case <-w.ctx.Done():
			t.Stop()
			return w.ctxResult(), true
		}
	}
}

// watchDrained makes sure a drained partition's next entry wakes its
// worker: by the announcements, while they are in the state the worker
// took before it last looked at its lanes (w.covered), or else by the
// watched set, which the partition joins from w.after. Joining costs
// the worker a copy of its ids and the set's wait loop a check of its
// lanes (announce.go); under a flow every entry paid it, for a wake-up
// the announcement brought anyway: 8% of the runtime's CPU samples at
// 44,000 events/s, and the process's CPU per event fell 4% at 24,000/s
// without it (BenchmarkSustainableRateRedis).
//
// A partition out of the set is not covered by the set's safety net,
// which bounds what an announcement lost without its watch ending costs
// (a half-open tracking connection keeps the watch up for up to two
// ping periods): so the partition still joins at least every
// WaitTimeout (joinDue), and the join's check finds such an entry, on a
// main lane or on an empty backfill lane that main-lane wakes leave
// unread, within WaitTimeout and a check gap, no later than the safety
// net found it before. Under a flow that is a join per partition per
// WaitTimeout instead of one per entry.
func (w *worker) watchDrained() {
	cover := w.p.announcedCover()
	if cover != nil && cover == w.covered && w.p.clk.Now().Before(w.joinDue()) {
		return
	}
	// The state is taken before joining: from the join on, an entry is
	// found by the join's check or announced.
	w.p.watch.add(w.key, maps.Clone(w.after))
	w.watching = true
	w.covered = cover
	w.joinedAt = w.p.clk.Now()
}

// joinDue is when a drained partition out of the watched set joins it
// whatever the announcements (watchDrained).
func (w *worker) joinDue() time.Time { return w.joinedAt.Add(w.p.cfg.WaitTimeout) }

// learnTails finds where to wait from on lanes this generation knows
// nothing about: it takes the lanes' newest ids, then reads them once
// more. An empty read after the tails were taken proves that everything
// up to them was delivered, and everything appended later has a greater
// id; taking the tails after the read could miss an entry appended in
// between. got says the read found entries (they were handled).
func (w *worker) learnTails(lanes []lane) (got bool, r result, done bool) {
	streams := make([]string, len(lanes))
	for i, ln := range lanes {
		streams[i] = ln.stream
	}
	tails, err := w.tailer().LastEntryIDs(w.ctx, streams)
	if err != nil {
		return false, w.ioFail("last entry ids", err), true
	}
	for _, ln := range lanes {
		msgs, r, done := w.read(ln)
		if done {
			return got, r, true
		}
		if len(msgs) == 0 {
			continue
		}
		got = true
		if r, done := w.handleBatch(ln, msgs); done {
			return true, r, true
		}
	}
	if got {
		return true, result{}, false
	}
	for _, ln := range lanes {
		id := tails[ln.stream]
		if id == "" {
			id = "0-0"
		}
		w.after[ln.stream] = id
	}
	return false, result{}, false
}

// waitOut waits d (a retry or pause) without holding a worker slot. stop
// means the worker must end (handover, stop, lost lease).
//
// Nor a place on the live path (ahead): a back-off lasts up to
// SystemicMaxBackoff, and partitions backing off from their own downstream
// would otherwise keep every place and starve the healthy keys.
func (w *worker) waitOut(d time.Duration) (result, bool) {
	p := w.p
	w.releaseSlot()
	hadAhead := w.ahead
	w.releaseAhead()
	t := p.clk.NewTimer(d)
	defer t.Stop()
	for {
		select {
		case <-t.C():
			if hadAhead {
				if r, stop := w.takeAhead(); stop {
					return r, true
				}
			}
			return w.takeSlot()
		case <-w.wake:
			// News for the key: the rounds after the wait read the
			// lanes it names. Dropping the wake without taking its news
			// would leave a lane that was empty skipped until the next
			// wake, which may never come (the append was announced once).
			w.takeNews(0)
			continue
		case <-w.handover:
			return w.releaseAcked(result{kind: resHandedOff}, "handover")
		case <-p.stopping:
			return w.releaseAcked(result{kind: resStopped}, "stop")
		case <-w.ctx.Done():
			return w.ctxResult(), true
		}
	}
}
