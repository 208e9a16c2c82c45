package topic

import (
	"sync/atomic"
	"time"

	"github.com/protctl/protctl/pkg/runtime/ledger"
	"github.com/twmb/franz-go/pkg/kgo"
)

// subPart is one subscription on one held partition: its position, its
// in-flight window, its lanes (one per aggregate) and the aggregates it
// has parked. Everything but dedup is guarded by tp.mu.
//
// A record's way through it:
//
//	delivered (next advances, a window slot is taken)
//	  │ aggregate parked?  ── yes ─▶ skipped: done at once (the ledger
//	  │                               entry's offset covers it for a retry)
//	  ▼
//	queued on its aggregate's lane ─▶ a worker takes the lane
//	  ▼
//	dropped if its identity was handled before, else handled:
//	  ok ─▶ done     aggregate failure ─▶ retried, then parked (durably,
//	                 fenced) ─▶ done     systemic ─▶ partition backing
//	                 off, retried             fatal ─▶ subscription stops
//
// The checkpoint is the window's low watermark: the offset of the oldest
// record not done, or next when all are done.
type subPart struct {
	tp    *topicPart
	sr    *Runtime
	dedup *dedupMemory

	next     int64 // next offset to deliver; everything below was delivered
	saved    int64 // the stored checkpoint (-1 when none)
	attached bool  // receives the shared reader's records
	catching bool  // a catch-up reader runs
	win      window
	lanes    map[string]*aggLane
	blocks   laneBlocks
	ready    laneQueue
	workers  int // worker goroutines
	busy     int // workers holding a lane
	// backingOff: a systemic failure holds the subscription back on this
	// partition (setBackingOff); not an operator's pause (pause.go).
	backingOff bool
	// backingOffFlag mirrors backingOff for workers between records.
	backingOffFlag atomic.Bool
	parked         map[string]*parkState
	parks          []time.Time // recent parks, for the burst rule
	// seeking stops workers taking lanes while a seek is carried out;
	// seekGen counts seeks, so that a catch-up scan begun before one
	// stops (seek.go).
	seeking bool
	// seekingFlag mirrors seeking for workers between the records of a
	// batch: a seek waits for the record in hand, not for the rest of
	// its batch (up to laneTurn handler calls).
	seekingFlag atomic.Bool
	seekGen     uint64
}

// parkState is an aggregate parked on this partition.
type parkState struct {
	entry ledger.Parked
	// retrying: a retry's records are queued (or being scanned), or a
	// skip is resolving the entry. The aggregate's new records are then
	// queued, not skipped.
	retrying bool
	// seen is the subscription's ledger read count (ledgerReads) once
	// this node knew the entry as it is: read after the fenced write that
	// created or changed it returned, or after the read it was taken
	// from returned. A poll's list whose number is above seen started
	// later, so the ledger it read held the entry unless the entry was
	// resolved since: only such a list may drop the park, or change it.
	// A list with a number at or below seen may have read the ledger
	// before the write landed (Park is several round trips); judging it
	// by a time taken before the write un-parked a fresh park, let its
	// later records run past the parked head, and a Retry then dropped
	// the head as handled.
	seen int64
}

// deliverLocked takes the records at or past next, in offset order;
// infos[i] is recs[i]'s recInfo.
func (sp *subPart) deliverLocked(recs []*kgo.Record, infos []recInfo) {
	for i, r := range recs {
		sp.deliverOneLocked(r, &infos[i])
	}
	sp.kickLocked()
}

func (sp *subPart) deliverOneLocked(r *kgo.Record, in *recInfo) {
	if r.Offset < sp.next {
		return
	}
	sp.next = r.Offset + 1
	seq := sp.win.push(r.Offset)
	var ln *aggLane
	if in.keyed {
		// Map lookups by string(bytes) do not allocate: the common case
		// (a key aggregate with a lane or no parked entry) costs nothing.
		if len(sp.parked) > 0 {
			if st := sp.parked[string(r.Key)]; st != nil && !st.retrying {
				sp.win.markDone(seq)
				sp.sr.c.skipped.Add(1)
				return
			}
		}
		if ln = sp.lanes[string(r.Key)]; ln == nil {
			ln = sp.laneLocked(string(r.Key))
		}
	} else {
		if st := sp.parked[in.agg]; st != nil && !st.retrying {
			sp.win.markDone(seq)
			sp.sr.c.skipped.Add(1)
			return
		}
		ln = sp.laneLocked(in.agg)
	}
	// Filled in place, field by field: a laneItem assigned whole is a
	// typed copy with a bulk write barrier while the GC marks, which it
	// does much of the time here (the fetches allocate fast).
	it := ln.slot(&sp.blocks)
	it.rec, it.value, it.headers = r, r.Value, r.Headers
	it.seq, it.off, it.id = seq, r.Offset, in.id
	it.idState, it.keyed = in.idState, in.keyed
	sp.activateLocked(ln)
}

func (sp *subPart) laneLocked(agg string) *aggLane {
	ln := sp.lanes[agg]
	if ln == nil {
		ln = &aggLane{agg: agg}
		ln.opPaused.Store(sp.sr.pause.paused(agg))
		sp.lanes[agg] = ln
		sp.blocks.lanes = len(sp.lanes)
	}
	return ln
}

// releaseHoldLocked lets a held lane run again (or forgets it if empty).
func (sp *subPart) releaseHoldLocked(ln *aggLane) {
	ln.hold = false
	if ln.len() == 0 && !ln.active {
		if sp.lanes[ln.agg] == ln {
			delete(sp.lanes, ln.agg)
			sp.blocks.lanes = len(sp.lanes)
		}
		return
	}
	sp.activateLocked(ln)
	sp.kickLocked()
}

func (sp *subPart) activateLocked(ln *aggLane) {
	if !ln.active && !ln.hold && !ln.opPaused.Load() && ln.len() > 0 {
		ln.active = true
		sp.ready.push(ln)
	}
}

// runnableLocked says whether workers may take lanes: not once a
// handoff began.
func (sp *subPart) runnableLocked() bool {
	return !sp.backingOff && !sp.seeking && sp.tp.ctx.Err() == nil && !sp.sr.failed.Load() && !sp.tp.handingOff.Load()
}

// kickLocked starts workers for lanes that wait, up to Lanes.
func (sp *subPart) kickLocked() {
	for sp.workers < sp.tp.t.cfg.Lanes && sp.workers-sp.busy < sp.ready.len() && sp.runnableLocked() {
		sp.workers++
		sp.tp.wg.Add(1)
		go sp.work()
	}
}
