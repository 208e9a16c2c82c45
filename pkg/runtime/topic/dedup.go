package topic

import (
	"sync"
)

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
