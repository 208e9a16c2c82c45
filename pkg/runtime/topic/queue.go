package topic

import (
	"sync/atomic"

	"github.com/twmb/franz-go/pkg/kgo"
)

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
	// opPaused: an operator's pause holds the aggregate back (pause.go);
	// its records wait in the lane, not done. Written under the
	// partition's lock, read by a worker between records.
	opPaused atomic.Bool
	// parking is set while the worker holding the lane parks its
	// aggregate, and closed once the rest of its batch is back in the
	// lane: an operator's retry or skip waits for it (settledLocked).
	parking chan struct{}
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
