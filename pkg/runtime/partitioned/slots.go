package partitioned

import (
	"time"
)

// takeSlot waits for a worker slot. stop means the worker must end
// instead (its lease, if any, released).
func (w *worker) takeSlot() (result, bool) {
	if w.slot {
		return result{}, false
	}
	p := w.p
	select {
	case p.sem <- struct{}{}:
	default:
		p.slotWaiters.Add(1)
		r, stop := w.take(p.sem)
		p.slotWaiters.Add(-1)
		if stop {
			return r, true
		}
	}
	w.slot = true
	w.slotAt, w.slotRounds = p.clk.Now(), 0
	w.rd = p.takeReader()
	return result{}, false
}

// take waits for a place in sem (a worker slot, a place on the live
// path). stop means the worker must end instead: handed over, stopping,
// or its context done (its lease, if any, released).
func (w *worker) take(sem chan<- struct{}) (result, bool) {
	select {
	case sem <- struct{}{}:
		return result{}, false
	case <-w.handover:
		return w.releaseAcked(result{kind: resHandedOff}, "handover")
	case <-w.p.stopping:
		return w.releaseAcked(result{kind: resStopped}, "stop")
	case <-w.ctx.Done():
		return w.ctxResult(), true
	}
}

// slotQuantum is how long a worker that keeps finding entries keeps its
// slot while other workers wait for one: a partition that drains sooner,
// or within two rounds (the common case), never yields, and a yield costs a round trip (the
// slot's pinned reader re-checks a lease it was not reading under).
const slotQuantum = 100 * time.Millisecond

// yieldSlot gives the worker's slot to a worker waiting for one and
// queues for it again (a channel's blocked senders are served in order),
// so that a partition that never drains cannot keep its slot from
// partitions that wait. What was handled stays to be acked by the lane's
// next read, as it would have been without the yield: the wait is
// bounded by the other workers' quanta, well inside the lease's trust
// window. stop means the worker must end.
func (w *worker) yieldSlot() (result, bool) {
	w.releaseSlot()
	return w.takeSlot()
}

func (w *worker) releaseSlot() {
	if w.slot {
		w.slot = false
		w.p.putReader(w.rd)
		w.rd = nil
		<-w.p.sem
	}
}
