package runtime

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/protctl/protctl/pkg/broker"
	"github.com/protctl/protctl/pkg/runtime/kafkasource"
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
//	                 fenced) ─▶ done     systemic ─▶ partition paused,
//	                 retried with backoff     fatal ─▶ subscription stops
//
// The checkpoint is the window's low watermark: the offset of the oldest
// record not done, or next when all are done.
type subPart struct {
	tp    *topicPart
	sr    *SubscriptionRuntime
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
	paused   bool
	// pausedFlag mirrors paused for workers between records.
	pausedFlag atomic.Bool
	parked     map[string]*parkState
	parks      []time.Time // recent parks, for the burst rule
	// seeking stops workers taking lanes while a seek is carried out;
	// seekGen counts seeks, so that a catch-up scan begun before one
	// stops (topic_seek.go).
	seeking bool
	seekGen uint64
}

// parkState is an aggregate parked on this partition.
type parkState struct {
	entry Parked
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

// aggLane is one aggregate's queue. active means a worker holds it or it
// waits in ready; hold means a retry is scanning for its older records,
// so its queued records must wait.
//
// Its items are kept in fixed-size blocks taken from, and given back to,
// the subscription's laneBlocks: a lane's backlog can run to hundreds of
// records (a fetch holds tens of thousands of records of a hundred
// aggregates), and a slice per lane grew to it by doubling (allocated,
// cleared and copied) on every new lane and was kept at its largest.
type aggLane struct {
	agg        string
	head, tail *laneBlock
	hi         int // the first item of head
	ti         int // items in tail
	n          int // items queued
	active     bool
	hold       bool
	// opPaused: an operator's pause holds the aggregate back
	// (topic_pause.go); its records wait in the lane, not done. Written
	// under the partition's lock, read by a worker between records.
	opPaused atomic.Bool
}

// laneBlockLen is the number of items in one laneBlock.
const laneBlockLen = 32

type laneBlock struct {
	items [laneBlockLen]laneItem
	next  *laneBlock
}

// laneBlocks is a subscription's (one partition's) free blocks, under the
// partition's lock. It keeps as many as its lanes can use at once: one
// per lane, and the blocks of its records in flight at most (its window,
// soft by up to one and a half fetches), so that lanes filling and
// emptying fetch after fetch reuse their blocks instead of allocating.
type laneBlocks struct {
	free     []*laneBlock
	inflight int // blocks for the records in flight at most
	lanes    int // lanes kept (len(subPart.lanes))
}

func (p *laneBlocks) get() *laneBlock {
	if n := len(p.free); n > 0 {
		b := p.free[n-1]
		p.free[n-1] = nil
		p.free = p.free[:n-1]
		return b
	}
	return new(laneBlock)
}

// put takes back a block whose items were all cleared.
func (p *laneBlocks) put(b *laneBlock) {
	b.next = nil
	if len(p.free) < p.inflight+p.lanes {
		p.free = append(p.free, b)
	}
}

type itemKind uint8

const (
	itemLive    itemKind = iota // from the reader: has a window slot
	itemRetry                   // re-scanned for a retry: no window slot
	itemResolve                 // after a retry's records: resolve the entry
)

// laneItem is a queued record with what the worker needs of it, copied
// on delivery while the reader's fetch is still in the CPU cache: a
// worker then never touches the kgo.Record itself (it would pay a cache
// miss per record, the record having been decoded thousands of records
// earlier), only the lane's blocks, which it reads in order.
type laneItem struct {
	rec     *kgo.Record
	value   []byte             // rec.Value
	headers []kgo.RecordHeader // rec.Headers
	seq     int64
	off     int64 // rec.Offset
	// id hashes the record's identity when idState is idKnown (hashed on
	// delivery too).
	id      uint64
	idState identity
	kind    itemKind
	// keyed: the record's key is its aggregate (the default aggregate, a
	// key present), so Message.Key is the lane's aggregate and a worker
	// need not read rec.Key.
	keyed bool
}

func (l *aggLane) len() int { return l.n }

func (l *aggLane) push(it laneItem, bs *laneBlocks) {
	*l.slot(bs) = it
}

// slot appends an empty item and returns it, for the caller to fill in
// place.
func (l *aggLane) slot(bs *laneBlocks) *laneItem {
	switch {
	case l.tail == nil:
		l.head = bs.get()
		l.tail, l.hi, l.ti = l.head, 0, 0
	case l.ti == laneBlockLen:
		b := bs.get()
		l.tail.next = b
		l.tail, l.ti = b, 0
	}
	it := &l.tail.items[l.ti]
	l.ti++
	l.n++
	return it
}

// take moves items from the front of the lane to dst, as many as it
// holds or the lane has, and returns how many. It copies a block's run of
// them at a time: one bulk copy per run instead of a copy of every item
// (a laneItem holds pointers, so each copy is a typed copy with write
// barriers while the GC marks). Items are cleared (so that a free block
// holds no record) a block at a time when the block is given back, not
// one by one, for the same reason.
func (l *aggLane) take(dst []laneItem, bs *laneBlocks) int {
	n := 0
	for n < len(dst) && l.n > 0 {
		b := l.head
		end := laneBlockLen
		if b == l.tail {
			end = l.ti
		}
		k := copy(dst[n:], b.items[l.hi:end])
		n += k
		l.hi += k
		l.n -= k
		switch {
		case l.n == 0:
			// Then head is tail: a block after head always holds items.
			clear(b.items[:l.ti])
			bs.put(b)
			l.head, l.tail, l.hi, l.ti = nil, nil, 0, 0
		case l.hi == laneBlockLen:
			l.head, l.hi = b.next, 0
			clear(b.items[:])
			bs.put(b)
		}
	}
	return n
}

// unpop puts an item back in front.
func (l *aggLane) unpop(it laneItem, bs *laneBlocks) {
	if l.head == nil {
		l.push(it, bs)
		return
	}
	if l.hi == 0 {
		b := bs.get()
		b.next = l.head
		l.head, l.hi = b, laneBlockLen
	}
	l.hi--
	l.head.items[l.hi] = it
	l.n++
}

// laneQueue is a FIFO of lanes waiting for a worker.
type laneQueue struct {
	q    []*aggLane
	head int
}

func (q *laneQueue) len() int { return len(q.q) - q.head }

func (q *laneQueue) push(l *aggLane) { q.q = append(q.q, l) }

func (q *laneQueue) pop() *aggLane {
	l := q.q[q.head]
	q.q[q.head] = nil
	q.head++
	if q.head == len(q.q) {
		q.q, q.head = q.q[:0], 0
	}
	return l
}

// window tracks the delivered records not done yet, in delivery (offset)
// order, to find the low watermark. Each record has a sequence number;
// marking it done is O(1) and the low watermark advances over the done
// prefix.
type window struct {
	base  int64 // sequence number of offs[start]
	offs  []int64
	done  []bool
	start int
}

func (w *window) push(off int64) int64 {
	seq := w.base + int64(len(w.offs)-w.start)
	w.offs = append(w.offs, off)
	w.done = append(w.done, false)
	return seq
}

func (w *window) markDone(seq int64) {
	i := w.start + int(seq-w.base)
	if i < w.start || i >= len(w.offs) {
		return
	}
	w.done[i] = true
	for w.start < len(w.offs) && w.done[w.start] {
		w.start++
		w.base++
	}
	if w.start == len(w.offs) {
		w.offs, w.done, w.start = w.offs[:0], w.done[:0], 0
	} else if w.start >= 1024 && 2*w.start >= len(w.offs) {
		n := copy(w.offs, w.offs[w.start:])
		copy(w.done, w.done[w.start:])
		w.offs, w.done, w.start = w.offs[:n], w.done[:n], 0
	}
}

// inflight counts the records from the oldest not done to the newest
// delivered.
func (w *window) inflight() int { return len(w.offs) - w.start }

// low is the checkpoint: the oldest offset not done, or next.
func (w *window) low(next int64) int64 {
	if w.start < len(w.offs) {
		return w.offs[w.start]
	}
	return next
}

// dedupMemory is what a subscription remembers of the records it
// handled on one partition, to drop them when they come again. It
// outlives the partition's lease (a partition that comes back to this
// node drops what it handled before) and is bounded: aggregates are kept
// in two generations of at most max each, the current one becoming the
// old one when full.
//
// Per aggregate it keeps two things, each for one way a record comes
// again:
//
//   - the offset of the newest record handled. A handover or a restart
//     replays from the checkpoint, the low watermark, so what comes again
//     is records at or past it, some handled, some not. Records of an
//     aggregate are handled in offset order, so a record at or below the
//     newest offset handled of its aggregate was handled (or, for an
//     aggregate parked and then skipped, was meant not to be). Exact, and
//     it needs no identity.
//   - the identities of the last dedupIDs records handled: a producer that
//     sent a record twice (a retry without idempotence) writes it again
//     at a new offset, soon after the first.
//
// Both are checked per batch of a lane under one lock and recorded under
// one more, so dedup costs two lock round trips and two map lookups per
// batch, and a few comparisons per record.
type dedupMemory struct {
	mu       sync.Mutex
	max      int
	cur, old map[string]*aggMemory
}

// dedupIDs is how many identities are kept per aggregate.
const dedupIDs = 8

type aggMemory struct {
	handled int64 // offset of the newest record handled; -1 when none
	ids     [dedupIDs]uint64
	n       int // identities recorded so far; the ring's next slot is n % dedupIDs
}

func (a *aggMemory) seen(off int64, id uint64, known bool) bool {
	if off <= a.handled {
		return true
	}
	if known {
		for i := range min(a.n, dedupIDs) {
			if a.ids[i] == id {
				return true
			}
		}
	}
	return false
}

func (a *aggMemory) add(off int64, id uint64, known bool) {
	a.handled = max(a.handled, off)
	if known {
		a.ids[a.n%dedupIDs] = id
		a.n++
	}
}

// newDedupMemory remembers about size identities: dedupIDs for each of
// size/dedupIDs aggregates per generation.
func newDedupMemory(size int) *dedupMemory {
	n := max(size/dedupIDs, 1)
	return &dedupMemory{max: n, cur: make(map[string]*aggMemory)}
}

// getLocked returns the aggregate's memory, nil when there is none.
func (d *dedupMemory) getLocked(agg string) *aggMemory {
	if a := d.cur[agg]; a != nil {
		return a
	}
	return d.old[agg]
}

// touchLocked returns the aggregate's memory, made current.
func (d *dedupMemory) touchLocked(agg string) *aggMemory {
	if a := d.cur[agg]; a != nil {
		return a
	}
	a := d.old[agg]
	if a == nil {
		a = &aggMemory{handled: -1}
	}
	if len(d.cur) >= d.max {
		d.old, d.cur = d.cur, make(map[string]*aggMemory, d.max)
	}
	d.cur[agg] = a
	return a
}

// seenAll sets dup[i] for each batch[i] of aggregate agg handled before,
// counting the batch's earlier records as handled: the batch is handled
// in order and stops at the first record that is not handled (parked,
// resolved or abandoned), so a flag is only used when every record
// before it was handled (or was a duplicate itself).
func (d *dedupMemory) seenAll(agg string, batch []laneItem, dup []bool) []bool {
	dup = dup[:0]
	mem := aggMemory{handled: -1}
	d.mu.Lock()
	if a := d.getLocked(agg); a != nil {
		mem = *a
	}
	d.mu.Unlock()
	for i := range batch {
		it := &batch[i]
		seen := it.rec != nil && mem.seen(it.off, it.id, it.idState == idKnown)
		if !seen && it.rec != nil {
			mem.add(it.off, it.id, it.idState == idKnown)
		}
		dup = append(dup, seen)
	}
	return dup
}

// addAll records batch[i] for each i in handled.
func (d *dedupMemory) addAll(agg string, batch []laneItem, handled []int) {
	if len(handled) == 0 {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	a := d.touchLocked(agg)
	for _, i := range handled {
		a.add(batch[i].off, batch[i].id, batch[i].idState == idKnown)
	}
}

// forgetOffsets drops the offsets remembered: the partition's offsets
// went back (the topic was deleted and created again), so they no
// longer say what was handled.
func (d *dedupMemory) forgetOffsets() {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, m := range []map[string]*aggMemory{d.cur, d.old} {
		for _, a := range m {
			a.handled = -1
		}
	}
}

// dedupSeed and dedupSeed2 key the dedup hashes; dedup memory never
// leaves the process.
var dedupSeed, dedupSeed2 = maphash.MakeSeed(), maphash.MakeSeed()

// identity says what is known of a lane item's identity.
type identity uint8

const (
	idNone  identity = iota // the record has none
	idKnown                 // laneItem.id is its hash
	idParse                 // not read yet: the envelope must be parsed
)

// headerIdentity hashes the record's identity from its id and version
// headers (Identity.Key: ID, or ID@Version), read in place. A record
// without an id header may carry the id in its envelope (idParse), unless
// its value does not even contain the id path's first key. It runs on
// delivery, under the partition's lock, so it does no parsing: that is
// envelopeIdentity's, on a worker.
func (t *TopicSubscriptions) headerIdentity(r *kgo.Record) (uint64, identity) {
	if id, ok := lastHeader(r, t.idHeader); ok && len(id) > 0 {
		h := maphash.Bytes(dedupSeed2, id)
		if v, ok := lastHeader(r, t.versionHeader); ok && len(v) > 0 {
			h = h*0x9e3779b97f4a7c15 ^ maphash.Bytes(dedupSeed, v)
		}
		return h, idKnown
	}
	// A failed envelope lookup costs an error value per record: skip
	// values that cannot hold the id.
	if !bytes.Contains(r.Value, t.idPathKey) {
		return 0, idNone
	}
	return 0, idParse
}

// envelopeIdentity hashes the identity in the record's envelope (a record
// without an id header).
func (t *TopicSubscriptions) envelopeIdentity(r *kgo.Record) (uint64, identity) {
	id, err := t.cfg.Identity.Identity(r)
	if err != nil {
		return 0, idNone
	}
	h := maphash.String(dedupSeed2, id.ID)
	if id.Version != "" {
		h = h*0x9e3779b97f4a7c15 ^ maphash.String(dedupSeed, id.Version)
	}
	return h, idKnown
}

// lastHeader returns the value of the last header named name, as
// kafkasource reads identities (Kafka allows repeats; the last wins).
func lastHeader(r *kgo.Record, name string) ([]byte, bool) {
	for i := len(r.Headers) - 1; i >= 0; i-- {
		if r.Headers[i].Key == name {
			return r.Headers[i].Value, true
		}
	}
	return nil, false
}

// aggregateOf is the record's aggregate; a record without one is ordered
// with the others of its partition.
func (t *TopicSubscriptions) aggregateOf(r *kgo.Record, pstr string) string {
	if t.keyAggregate && len(r.Key) > 0 {
		return string(r.Key)
	}
	if a, err := t.cfg.Aggregate.Aggregate(r); err == nil {
		return a
	}
	return "partition:" + pstr
}

// recInfo is what delivery derives from a record alone: its identity and
// its aggregate. The shared reader derives it for a chunk of a fetch
// before taking the partition's lock (once for all subscriptions), so the
// lock is held only for the window and the lanes.
type recInfo struct {
	id      uint64
	idState identity
	keyed   bool   // the aggregate is the record's key (agg is not set)
	agg     string // the aggregate, when not keyed
}

func (t *TopicSubscriptions) recInfoOf(r *kgo.Record, pstr string) recInfo {
	in := recInfo{keyed: t.keyAggregate && len(r.Key) > 0}
	in.id, in.idState = t.headerIdentity(r)
	if !in.keyed {
		in.agg = t.aggregateOf(r, pstr)
	}
	return in
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
	return !sp.paused && !sp.seeking && sp.tp.ctx.Err() == nil && !sp.sr.failed.Load() && !sp.tp.handingOff.Load()
}

// kickLocked starts workers for lanes that wait, up to Lanes.
func (sp *subPart) kickLocked() {
	for sp.workers < sp.tp.t.cfg.Lanes && sp.workers-sp.busy < sp.ready.len() && sp.runnableLocked() {
		sp.workers++
		sp.tp.wg.Add(1)
		go sp.work()
	}
}

// laneTurn is how many records a worker takes from one lane at once: it
// handles them without the lock, then lets the lanes waiting behind it go
// first.
const laneTurn = 64

// outcome is how process left an item.
type outcome uint8

const (
	outDone      outcome = iota // done
	outChanged                  // done, and the aggregate was parked or resolved
	outAbandoned                // not done: the partition ends or the subscription failed
)

// work takes ready lanes and handles their records, one at a time per
// lane, until none is ready (or the partition pauses or ends). It takes
// up to laneTurn records of a lane under one lock and marks them done
// under one more, so the lock costs little per record.
func (sp *subPart) work() {
	tp := sp.tp
	defer tp.wg.Done()
	var (
		batch   = make([]laneItem, 0, laneTurn)
		dup     = make([]bool, 0, laneTurn)
		handled = make([]int, 0, laneTurn) // indexes into batch
		posBuf  = make([]byte, 0, 16*laneTurn)
		posEnd  = make([]int, 0, laneTurn)
	)
	tp.mu.Lock()
	for {
		if sp.ready.len() == 0 || !sp.runnableLocked() {
			sp.workers--
			tp.cond.Broadcast()
			tp.mu.Unlock()
			return
		}
		ln := sp.ready.pop()
		sp.busy++
		// The batch is taken a block's run of items at a time; the items
		// that need no handler call are settled and dropped from it, and
		// more taken, until it is full or the lane empty.
		var st *parkState
		if len(sp.parked) > 0 {
			st = sp.parked[ln.agg]
		}
		batch = batch[:0]
		for len(batch) < laneTurn && ln.len() > 0 && !ln.hold && !ln.opPaused.Load() {
			from := len(batch)
			k := ln.take(batch[from:laneTurn], &sp.blocks)
			batch = batch[:from+sp.settleLocked(st, batch[from:from+k])]
		}
		tp.mu.Unlock()

		// Dedup for the whole batch at once: one lock for the checks, one
		// for recording what was handled.
		handled = handled[:0]
		// batch is read in place, by index, here and below: a laneItem
		// copied is a typed copy of a struct of pointers.
		for i := range batch {
			if it := &batch[i]; it.idState == idParse {
				it.id, it.idState = tp.t.envelopeIdentity(it.rec)
			}
		}
		dup = sp.dedup.seenAll(ln.agg, batch, dup)
		// Message.Position for the whole batch: one string, sliced.
		posBuf, posEnd = posBuf[:0], posEnd[:0]
		for i := range batch {
			if it := &batch[i]; it.rec != nil {
				posBuf = strconv.AppendInt(posBuf, it.off, 10)
			}
			posEnd = append(posEnd, len(posBuf))
		}
		positions := string(posBuf)
		n, processed := 0, 0
		for n < len(batch) {
			if n > 0 && (sp.pausedFlag.Load() || ln.opPaused.Load()) {
				break // another lane paused the partition, or an operator the aggregate
			}
			if dup[n] {
				sp.sr.c.duplicates.Add(1)
				n++
				continue
			}
			from := 0
			if n > 0 {
				from = posEnd[n-1]
			}
			res := sp.process(ln.agg, &batch[n], positions[from:posEnd[n]])
			if res == outAbandoned {
				break // not done: the checkpoint stays below it
			}
			if res == outDone && batch[n].rec != nil {
				handled = append(handled, n)
				processed++
			}
			n++
			if res == outChanged {
				break // the rest is settled anew under the lock
			}
		}
		sp.dedup.addAll(ln.agg, batch, handled)
		if processed > 0 {
			sp.sr.c.processed.Add(int64(processed))
		}

		tp.mu.Lock()
		for i := range batch[:n] {
			sp.doneLocked(&batch[i])
		}
		for i := len(batch) - 1; i >= n; i-- {
			ln.unpop(batch[i], &sp.blocks)
		}
		clear(batch)
		sp.busy--
		switch {
		case ln.hold || ln.opPaused.Load():
			ln.active = false
		case ln.len() > 0:
			sp.ready.push(ln)
		default:
			ln.active = false
			// Idle lanes are kept (a hot aggregate would otherwise be
			// allocated again and again) up to a bound.
			if len(sp.lanes) > max(tp.t.cfg.MaxInFlight, 4*tp.t.cfg.Lanes) {
				delete(sp.lanes, ln.agg)
				sp.blocks.lanes = len(sp.lanes)
			}
		}
	}
}

// settleLocked finishes the items that need no handler call, records of
// a parked aggregate and retry items whose retry ended, and drops them:
// it moves the others, in order, to the front of items and returns how
// many there are. st is the aggregate's parked entry, nil when none: the
// caller looks it up once per batch, as nothing done under the lock
// while the batch is taken changes sp.parked.
func (sp *subPart) settleLocked(st *parkState, items []laneItem) int {
	if st != nil && st.retrying {
		// A retry's records, its resolve and the records queued behind
		// them are all handled.
		return len(items)
	}
	j := 0
	for i := range items {
		it := &items[i]
		switch {
		case it.kind != itemLive:
			// A retry's item, the retry having ended: dropped.
		case st == nil:
			if i != j {
				items[j] = *it
			}
			j++
		default:
			// The aggregate is parked: its ledger entry covers the record.
			sp.sr.c.skipped.Add(1)
			sp.doneLocked(it)
		}
	}
	clear(items[j:]) // no record is kept past the batch's end
	return j
}

// doneLocked marks a live record done: the low watermark may move, and
// backpressure may ease.
func (sp *subPart) doneLocked(it *laneItem) {
	if it.kind != itemLive {
		return
	}
	sp.win.markDone(it.seq)
	tp := sp.tp
	n := sp.win.inflight()
	if n <= tp.t.cfg.MaxInFlight/2 && (sp.catching || tp.closed) {
		tp.cond.Broadcast()
	}
	// The window is a span (from the oldest record not done), so it can
	// drop by many at once: wake the waiting feed once a chunk fits.
	if tp.feedWaiting && n <= tp.feedLimit()-deliverChunk {
		tp.feedWaiting = false
		tp.cond.Broadcast()
	}
	if tp.fetchPaused && sp.attached && n+tp.undelivered <= tp.resumeAtLocked() {
		tp.balanceLocked()
		if !tp.fetchPaused {
			tp.kickFetch()
		}
	}
	if n == 0 && tp.closed {
		tp.cond.Broadcast()
	}
}

// process handles one item and says how it left it: done (handled,
// dropped as a duplicate, parked), or abandoned: the partition ends
// (lease lost, handoff timeout, stop) or the subscription failed. A
// record handled counts as processed in the caller's tally (one atomic
// add per lane batch).
func (sp *subPart) process(agg string, it *laneItem, pos string) outcome {
	if it.kind == itemResolve {
		if sp.resolveRetry(agg) {
			return outChanged
		}
		return outAbandoned
	}
	tp := sp.tp
	t := tp.t
	sr := sp.sr
	r := it.rec
	key := agg // the aggregate is the key unless configured otherwise
	if !it.keyed {
		key = string(r.Key)
	}
	msg := Message{
		Subscription: sr.cfg.Name,
		Source:       SourceKafka,
		Topic:        t.cfg.Topic,
		Partition:    tp.p,
		Key:          key,
		Aggregate:    agg,
		Position:     pos,
		Data:         it.value,
		Generation:   tp.lease.gen,
	}
	if !sr.cfg.SkipHeaders {
		msg.Headers = KafkaHeaders(it.headers)
	}
	retry := newBackoff(sr.cfg.Retry.Backoff, sr.cfg.Retry.MaxBackoff, t.jit)
	pause := newBackoff(t.cfg.SystemicBackoff, t.cfg.SystemicMaxBackoff, t.jit)
	pausedHere := false // this record paused the partition
	// An aggregate being retried goes on counting attempts from those it
	// was parked with (park adds them to the ledger's count the same way).
	base := 0
	tp.mu.Lock()
	if st := sp.parked[agg]; st != nil {
		base = st.entry.Attempts
	}
	tp.mu.Unlock()
	for attempt := 1; ; attempt++ {
		// The trust window is enforced by the lease's watchTrust (it
		// marks the lease lost the moment the window passes). Once a
		// handoff began no call starts, a retry's neither: the record
		// stays below the checkpoint for the next owner.
		if tp.lease.lost.Load() || tp.ctx.Err() != nil || sr.failed.Load() || tp.handingOff.Load() {
			return outAbandoned
		}
		msg.Attempt = base + attempt
		err := sp.call(msg)
		if err == nil {
			if pausedHere {
				sp.setPaused(false, nil, 0)
			}
			return outDone
		}
		sr.c.failed.Add(1)
		if tp.ctx.Err() != nil {
			// The lease went (or the partition is being stopped) while the
			// handler ran: its failure says nothing about the record.
			return outAbandoned
		}
		var wait time.Duration
		switch sr.cfg.Classify(err) {
		case FailFatal:
			sr.fail(fmt.Errorf("runtime: %s: partition %d offset %d: %w", sr.cfg.Name, tp.p, r.Offset, err))
			return outAbandoned
		case FailSystemic:
			wait = pause.next()
			sp.setPaused(true, err, wait)
			pausedHere = true
		default:
			if attempt < sr.cfg.Retry.Attempts {
				wait = retry.next()
				break
			}
			if n := sp.burst(); n >= t.cfg.ParkBurst {
				// Many aggregates failing at once is a dependency down,
				// not bad records: pause instead of parking them all.
				wait = pause.next()
				sp.setPaused(true, fmt.Errorf("%d aggregates parked within %s: %w", n, t.cfg.ParkBurstWindow, err), wait)
				pausedHere = true
				break
			}
			if !sp.park(agg, it, err, attempt) {
				return outAbandoned
			}
			if pausedHere {
				// The pause this record caused ends with it: the
				// partition moves on past the parked aggregate.
				sp.setPaused(false, nil, 0)
			}
			return outChanged
		}
		if !tp.sleepUnlessHandoff(wait) {
			return outAbandoned
		}
	}
}

// sleepUnlessHandoff waits d between a record's attempts; false when the
// partition ends or a handoff begins first (the next owner retries it).
func (tp *topicPart) sleepUnlessHandoff(d time.Duration) bool {
	tm := tp.t.clk.NewTimer(d)
	defer tm.Stop()
	select {
	case <-tm.C():
		return !tp.handingOff.Load() && tp.ctx.Err() == nil
	case <-tp.ctx.Done():
		return false
	case <-tp.handoffCh:
		return false
	}
}

// call runs the handler once, turning a panic into an aggregate failure.
func (sp *subPart) call(msg Message) (err error) {
	t := sp.tp.t
	obs := t.obs
	var start time.Time
	observe := obs != nil && obs.OnHandled != nil
	if observe {
		start = t.clk.Now()
	}
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("runtime: handler panicked: %v", r)
		}
		if observe {
			var class FailureClass
			if err != nil {
				class = sp.sr.cfg.Classify(err)
			}
			obs.handled(HandledEvent{Subscription: msg.Subscription, Source: SourceKafka, Partition: sp.tp.pstr,
				Aggregate: msg.Aggregate, Position: msg.Position, Attempt: msg.Attempt,
				Duration: t.clk.Now().Sub(start), Err: err, Class: class})
		}
	}()
	return sp.sr.cfg.Handler.Handle(sp.tp.ctx, msg)
}

// setPaused pauses or resumes the subscription on this partition.
func (sp *subPart) setPaused(paused bool, err error, retryIn time.Duration) {
	tp := sp.tp
	t := tp.t
	tp.mu.Lock()
	changed := sp.paused != paused
	sp.paused = paused
	sp.pausedFlag.Store(paused)
	if changed && !paused {
		sp.kickLocked()
	}
	tp.mu.Unlock()
	if !changed && !paused {
		return
	}
	t.obs.pause(PauseEvent{Subscription: sp.sr.cfg.Name, Partition: tp.pstr, Paused: paused, Err: err, RetryIn: retryIn})
	switch {
	case paused && changed:
		t.log.Warn("partition paused by a systemic failure", "subscription", sp.sr.cfg.Name, "partition", tp.p, "err", err, "retryIn", retryIn)
	case !paused:
		t.log.Info("partition resumed", "subscription", sp.sr.cfg.Name, "partition", tp.p)
	}
}

// burst counts the parks within ParkBurstWindow and, when there are
// fewer than ParkBurst, takes a slot for the park the caller is about to
// make. Counting and taking under one lock matters: workers of other
// aggregates park at the same time, and when each counted first and
// recorded its park only after the ledger write, several could pass the
// check together and park more than ParkBurst (TestTopicParkBurst failed
// about one run in five, before this change as well). A slot taken for a
// park that then fails stays counted: the park failed because the
// partition is ending.
func (sp *subPart) burst() int {
	tp := sp.tp
	now := tp.t.clk.Now()
	tp.mu.Lock()
	defer tp.mu.Unlock()
	keep := sp.parks[:0]
	for _, at := range sp.parks {
		if now.Sub(at) < tp.t.cfg.ParkBurstWindow {
			keep = append(keep, at)
		}
	}
	sp.parks = keep
	if len(keep) < tp.t.cfg.ParkBurst {
		sp.parks = append(sp.parks, now)
	}
	return len(keep)
}

// park records the aggregate in the ledger, fenced, before its record
// counts as done; it retries the write until it succeeds or the lease is
// gone.
func (sp *subPart) park(agg string, it *laneItem, herr error, attempts int) bool {
	tp := sp.tp
	t := tp.t
	now := t.clk.Now()
	tp.mu.Lock()
	if st := sp.parked[agg]; st != nil {
		attempts += st.entry.Attempts
	}
	tp.mu.Unlock()
	e := Parked{
		Subscription:  sp.sr.cfg.Name,
		Source:        SourceKafka,
		Aggregate:     agg,
		Topic:         t.cfg.Topic,
		Partition:     tp.pstr,
		Position:      strconv.FormatInt(it.rec.Offset, 10),
		Error:         TruncateError(herr.Error()),
		Attempts:      attempts,
		ParkedAt:      now,
		LastAttemptAt: now,
		Status:        StatusParked,
		Owner:         t.node,
		Generation:    tp.lease.gen,
	}
	if err := sp.fenced(func(ctx context.Context) error { return t.cfg.Ledger.Park(ctx, tp.lease.fence, e) }, "park"); err != nil {
		return false
	}
	// Read after the write returned: see parkState.seen.
	seen := sp.sr.ledgerReads.Load()
	tp.mu.Lock()
	sp.parked[agg] = &parkState{entry: e, seen: seen}
	tp.mu.Unlock()
	sp.sr.c.parked.Add(1)
	t.log.Warn("aggregate parked", "subscription", sp.sr.cfg.Name, "partition", tp.p, "aggregate", agg,
		"offset", it.rec.Offset, "attempts", attempts, "err", herr)
	t.obs.parked(e)
	return true
}

// fenced runs a fenced store write until it succeeds, retrying transient
// failures with backoff. It gives up (returning the error) when the
// lease is refused (the partition is then lost) or the partition ends.
func (sp *subPart) fenced(write func(ctx context.Context) error, op string) error {
	tp := sp.tp
	t := tp.t
	b := newBackoff(100*time.Millisecond, t.cfg.RenewEvery, t.jit)
	for {
		if tp.lease.lost.Load() {
			return errLeaseLost
		}
		ctx, cancel := context.WithTimeout(tp.ctx, t.cfg.OpTimeout)
		err := write(ctx)
		cancel()
		if err == nil {
			return nil
		}
		if errors.Is(err, broker.ErrLeaseLost) {
			t.loseLease(tp.lease, errLeaseLost)
			t.log.Warn("a fenced write was refused: the lease is gone", "op", op, "partition", tp.p, "err", err)
			return err
		}
		if tp.ctx.Err() != nil {
			return err
		}
		t.log.Warn("a fenced write failed; retrying", "op", op, "partition", tp.p, "err", err)
		t.obs.error(ErrorEvent{Subscription: t.name, Op: op, Err: err})
		if !t.sleep(tp.ctx, b.next()) {
			return err
		}
	}
}

// resolveRetry runs after a retry's records were all handled: the entry
// is resolved and the aggregate's later records flow again.
func (sp *subPart) resolveRetry(agg string) bool {
	tp := sp.tp
	t := tp.t
	if err := sp.fenced(func(ctx context.Context) error {
		return t.cfg.Ledger.Resolve(ctx, tp.lease.fence, sp.sr.cfg.Name, agg)
	}, "resolve"); err != nil {
		return false
	}
	tp.mu.Lock()
	st := sp.parked[agg]
	delete(sp.parked, agg)
	tp.mu.Unlock()
	sp.sr.c.resolved.Add(1)
	pos := ""
	if st != nil {
		pos = st.entry.Position
	}
	t.log.Info("parked aggregate retried", "subscription", sp.sr.cfg.Name, "partition", tp.p, "aggregate", agg, "position", pos)
	t.obs.resolved(ResolvedEvent{Subscription: sp.sr.cfg.Name, Aggregate: agg, Position: pos, Action: ActionRetry})
	return true
}

// act carries out an operator's action on a parked entry of this
// partition, under the partition's fence.
func (sp *subPart) act(ctx context.Context, action Action, e Parked) error {
	switch action {
	case ActionRetry:
		return sp.retry(ctx, e)
	case ActionSkip:
		return sp.skip(ctx, e)
	}
	return fmt.Errorf("runtime: unknown action %q", action)
}

// retry re-scans the partition from the parked offset for the
// aggregate's records and queues them, in order, ahead of the records of
// it that arrive meanwhile. Records delivered from now on wait in the
// aggregate's lane (hold) instead of being skipped, so the re-scan need
// only cover [parked offset, next at this moment).
func (sp *subPart) retry(ctx context.Context, e Parked) error {
	tp := sp.tp
	t := tp.t
	agg := e.Aggregate
	from, err := strconv.ParseInt(e.Position, 10, 64)
	if err != nil || from < 0 {
		return fmt.Errorf("runtime: retry %q of %q: bad parked position %q", agg, sp.sr.cfg.Name, e.Position)
	}
	tp.mu.Lock()
	st := sp.parked[agg]
	if st == nil {
		// e was read from the ledger before this call.
		st = &parkState{entry: e, seen: sp.sr.ledgerReads.Load()}
		sp.parked[agg] = st
	}
	if st.retrying {
		tp.mu.Unlock()
		return nil // already under way
	}
	st.retrying = true
	cut := sp.next
	ln := sp.laneLocked(agg)
	ln.hold = true
	tp.mu.Unlock()

	undo := func(unpark bool) {
		tp.mu.Lock()
		st.retrying = false
		if unpark {
			delete(sp.parked, agg)
		}
		sp.releaseHoldLocked(ln)
		tp.mu.Unlock()
	}
	octx, cancel := context.WithTimeout(ctx, t.cfg.OpTimeout)
	err = t.cfg.Ledger.SetStatus(octx, tp.lease.fence, sp.sr.cfg.Name, agg, StatusRetrying)
	cancel()
	switch {
	case errors.Is(err, ErrNotParked):
		undo(true)
		return err
	case errors.Is(err, broker.ErrLeaseLost):
		t.loseLease(tp.lease, errLeaseLost)
		undo(false)
		return err
	case err != nil:
		undo(false)
		return err
	}
	var recs []*kgo.Record
	_, err = t.cfg.Source.Scan(ctx, t.cfg.Topic, tp.p, from, cut, func(r *kgo.Record) error {
		if t.aggregateOf(r, tp.pstr) == agg {
			recs = append(recs, r)
		}
		return nil
	})
	if err != nil {
		status := StatusParked
		if errors.Is(err, kafkasource.ErrOffsetNotRetained) {
			status = StatusUnrecoverable
		}
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), t.cfg.OpTimeout)
		serr := t.cfg.Ledger.SetStatus(sctx, tp.lease.fence, sp.sr.cfg.Name, agg, status)
		cancel()
		seen := sp.sr.ledgerReads.Load()
		tp.mu.Lock()
		st.entry.Status = status
		st.seen = max(st.seen, seen)
		tp.mu.Unlock()
		undo(false)
		if status == StatusUnrecoverable {
			t.log.Error("parked aggregate is unrecoverable: its records are no longer retained; only a skip resolves it",
				"subscription", sp.sr.cfg.Name, "partition", tp.p, "aggregate", agg, "position", from, "err", err)
			if serr != nil {
				return fmt.Errorf("%w: %v (and marking it failed: %v)", ErrUnrecoverable, err, serr)
			}
			return fmt.Errorf("%w: %v", ErrUnrecoverable, err)
		}
		return fmt.Errorf("runtime: retry %q of %q: re-scan: %w", agg, sp.sr.cfg.Name, err)
	}
	tp.mu.Lock()
	// The retry's records go ahead of the ones queued meanwhile.
	queued := make([]laneItem, ln.len())
	ln.take(queued, &sp.blocks)
	for _, r := range recs {
		id, idState := t.headerIdentity(r)
		ln.push(laneItem{rec: r, value: r.Value, headers: r.Headers, seq: -1, off: r.Offset, id: id,
			idState: idState, kind: itemRetry, keyed: t.keyAggregate && len(r.Key) > 0}, &sp.blocks)
	}
	ln.push(laneItem{kind: itemResolve}, &sp.blocks)
	for _, it := range queued {
		ln.push(it, &sp.blocks)
	}
	sp.releaseHoldLocked(ln)
	tp.mu.Unlock()
	t.log.Info("retrying parked aggregate", "subscription", sp.sr.cfg.Name, "partition", tp.p, "aggregate", agg,
		"from", from, "records", len(recs))
	return nil
}

// skip resolves a parked entry without handling its records. While the
// entry is being resolved, the aggregate's new records wait in its lane
// (hold) instead of being skipped: once the entry is gone nothing would
// cover them. If the resolve fails they are skipped after all (the entry
// still covers them).
func (sp *subPart) skip(ctx context.Context, e Parked) error {
	tp := sp.tp
	t := tp.t
	agg := e.Aggregate
	tp.mu.Lock()
	st := sp.parked[agg]
	if st != nil && st.retrying {
		tp.mu.Unlock()
		return fmt.Errorf("runtime: skip %q of %q: a retry is under way", agg, sp.sr.cfg.Name)
	}
	if st == nil {
		// e was read from the ledger before this call.
		st = &parkState{entry: e, seen: sp.sr.ledgerReads.Load()}
		sp.parked[agg] = st
	}
	st.retrying = true
	ln := sp.laneLocked(agg)
	ln.hold = true
	tp.mu.Unlock()

	octx, cancel := context.WithTimeout(ctx, t.cfg.OpTimeout)
	err := t.cfg.Ledger.Resolve(octx, tp.lease.fence, sp.sr.cfg.Name, agg)
	cancel()
	tp.mu.Lock()
	st.retrying = false
	if err == nil {
		delete(sp.parked, agg)
	}
	sp.releaseHoldLocked(ln)
	tp.mu.Unlock()
	if err != nil {
		if errors.Is(err, broker.ErrLeaseLost) {
			t.loseLease(tp.lease, errLeaseLost)
		}
		return err
	}
	sp.sr.c.resolved.Add(1)
	t.log.Info("parked aggregate skipped", "subscription", sp.sr.cfg.Name, "partition", tp.p, "aggregate", agg, "position", e.Position)
	t.obs.resolved(ResolvedEvent{Subscription: sp.sr.cfg.Name, Aggregate: agg, Position: e.Position, Action: ActionSkip})
	return nil
}

// reconcile applies a re-read of the ledger's entries of this partition,
// from the list numbered listed (SubscriptionRuntime.ledgerReads):
// entries that are gone (deleted by hand) stop holding their aggregate
// back, and known entries take the ledger's view (status, request). Only
// a list that started after this node knew an entry as it is (listed >
// parkState.seen) may do either: an older one may have read the ledger
// before this node's write landed. Entries being retried or skipped are
// left alone. Entries it does not know are not adopted: only the owner
// parks, so such an entry can only be one this node resolved after the
// read, and adopting it would skip records nothing covers.
func (sp *subPart) reconcile(entries []Parked, listed int64) {
	tp := sp.tp
	tp.mu.Lock()
	defer tp.mu.Unlock()
	in := make(map[string]bool, len(entries))
	for _, e := range entries {
		in[e.Aggregate] = true
		if st := sp.parked[e.Aggregate]; st != nil && !st.retrying && listed > st.seen {
			st.entry = e
		}
	}
	for agg, st := range sp.parked {
		if !in[agg] && !st.retrying && listed > st.seen {
			delete(sp.parked, agg)
		}
	}
}

var (
	errWindowFull   = errors.New("runtime: in-flight window full")
	errCatchUpEnded = errors.New("runtime: catch-up ended")
)

func (sp *subPart) startCatchUpLocked() {
	if sp.catching || sp.tp.closed {
		return
	}
	sp.catching = true
	sp.tp.wg.Add(1)
	go sp.catchUp()
}

// catchUp brings a subscription far behind (or detached because its
// window filled while the others went on) up to the shared reader, on
// its own reader: bounded scans from its position to the shared reader's,
// each under the node-wide catch-up limit and only while its window has
// room. When it reaches the shared reader's position it attaches again.
func (sp *subPart) catchUp() {
	tp := sp.tp
	t := tp.t
	defer tp.wg.Done()
	sp.sr.c.catchUps.Add(1)
	b := newBackoff(100*time.Millisecond, t.cfg.RenewEvery, t.jit)
	for {
		tp.mu.Lock()
		for !tp.closed && tp.ctx.Err() == nil && !sp.sr.failed.Load() && sp.win.inflight() > t.cfg.MaxInFlight/2 {
			tp.cond.Wait()
		}
		if tp.closed || tp.ctx.Err() != nil || sp.sr.failed.Load() {
			sp.catching = false
			tp.mu.Unlock()
			return
		}
		if sp.next >= tp.tailPos {
			sp.catching = false
			sp.attached = true
			tp.balanceLocked()
			tp.mu.Unlock()
			tp.kickFetch()
			return
		}
		from, to, gen := sp.next, tp.tailPos, sp.seekGen
		tp.mu.Unlock()

		if err := t.cfg.CatchUp.acquire(tp.ctx); err != nil {
			continue // the loop ends above
		}
		_, err := t.cfg.Source.Scan(tp.ctx, t.cfg.Topic, tp.p, from, to, func(r *kgo.Record) error {
			in := t.recInfoOf(r, tp.pstr)
			tp.mu.Lock()
			defer tp.mu.Unlock()
			if tp.closed || sp.sr.failed.Load() || sp.seekGen != gen {
				return errCatchUpEnded
			}
			if sp.win.inflight() >= t.cfg.MaxInFlight {
				return errWindowFull
			}
			sp.deliverOneLocked(r, &in)
			sp.kickLocked()
			return nil
		})
		t.cfg.CatchUp.release()
		var oe *kafkasource.OffsetError
		switch {
		case err == nil || errors.Is(err, errWindowFull) || errors.Is(err, errCatchUpEnded):
			b.reset()
		case errors.As(err, &oe) && errors.Is(err, kafkasource.ErrOffsetNotRetained):
			tp.mu.Lock()
			if sp.next < oe.Earliest {
				sp.sr.reportLost(tp.p, sp.next, oe.Earliest, "retention passed the catch-up reader")
				sp.next = oe.Earliest
			}
			tp.mu.Unlock()
		case tp.ctx.Err() != nil:
		default:
			t.log.Warn("catch-up read failed", "subscription", sp.sr.cfg.Name, "partition", tp.p, "err", err)
			t.obs.error(ErrorEvent{Subscription: t.name, Op: "catch up", Err: err})
			t.sleep(tp.ctx, b.next())
		}
	}
}
