package memorybroker

import (
	"math"
	"slices"
	"time"

	"github.com/protctl/protctl/pkg/broker"
)

// Field is a stream entry field other than broker.DataField, such as the
// origin fields of a dead-letter entry.
type Field struct {
	Name, Value string
}

type entry struct {
	id     broker.StreamID
	data   []byte
	fields []Field // extra fields after data; nil for ordinary entries
}

// stream is a Redis stream: entries in id order, the last generated id
// (which survives deletions, as in Redis) and consumer groups.
//
// Entries are a sorted slice, so a lookup by id is a binary search, a read
// after a group's last-delivered id costs O(log n + count), and a trim
// drops a prefix. Only deleting an entry from the middle (XDEL, a fault a
// tool outside protctl causes) copies.
type stream struct {
	entries []entry
	lastID  broker.StreamID
	groups  map[string]*group
}

func newStream() *stream {
	return &stream{groups: make(map[string]*group)}
}

func compareEntry(e entry, id broker.StreamID) int { return e.id.Compare(id) }

// nextID is the id XADD * gives at ms: ms-0 when the clock has moved past
// the last id, otherwise the last id's sequence plus one, so ids keep
// growing when the clock stands still or goes back.
func (s *stream) nextID(ms uint64) broker.StreamID {
	last := s.lastID
	switch {
	case ms > last.Ms:
		return broker.StreamID{Ms: ms}
	case last.Seq == math.MaxUint64:
		return broker.StreamID{Ms: last.Ms + 1}
	default:
		return broker.StreamID{Ms: last.Ms, Seq: last.Seq + 1}
	}
}

// add appends an entry with a fresh id at ms; it keeps data (the caller
// passes a copy).
func (s *stream) add(ms uint64, data []byte, fields []Field) broker.StreamID {
	id := s.nextID(ms)
	s.entries = append(s.entries, entry{id: id, data: data, fields: fields})
	s.lastID = id
	return id
}

// lowerBound is the index of the first entry with an id >= id.
func (s *stream) lowerBound(id broker.StreamID) int {
	i, _ := slices.BinarySearchFunc(s.entries, id, compareEntry)
	return i
}

// upperBound is the index of the first entry with an id > id.
func (s *stream) upperBound(id broker.StreamID) int {
	i, found := slices.BinarySearchFunc(s.entries, id, compareEntry)
	if found {
		i++
	}
	return i
}

func (s *stream) find(id broker.StreamID) (*entry, bool) {
	i, found := slices.BinarySearchFunc(s.entries, id, compareEntry)
	if !found {
		return nil, false
	}
	return &s.entries[i], true
}

// del removes entry id without touching any pending list (XDEL).
func (s *stream) del(id broker.StreamID) bool {
	i, found := slices.BinarySearchFunc(s.entries, id, compareEntry)
	if !found {
		return false
	}
	s.entries = slices.Delete(s.entries, i, i+1)
	return true
}

// removeFront drops the n oldest entries.
func (s *stream) removeFront(n int) {
	clear(s.entries[:n]) // let the dropped bodies be collected
	s.entries = s.entries[n:]
}

func (s *stream) newest() (broker.StreamID, bool) {
	if len(s.entries) == 0 {
		return broker.StreamID{}, false
	}
	return s.entries[len(s.entries)-1].id, true
}

// safeFloor is the smallest, over the groups, of the last-delivered id and
// the oldest pending id: nothing at or after it may be trimmed. ok is false
// without groups.
func (s *stream) safeFloor() (floor broker.StreamID, ok bool) {
	for _, g := range s.groups {
		f := g.lastDelivered
		if p, has := g.oldestPending(); has && p.Less(f) {
			f = p
		}
		if !ok || f.Less(floor) {
			floor, ok = f, true
		}
	}
	return floor, ok
}

// group is a consumer group: its last-delivered id, its pending entries
// list (PEL) and its consumers. Every pending entry belongs to exactly one
// consumer, as in Redis.
type group struct {
	lastDelivered broker.StreamID
	pel           map[broker.StreamID]*pending
	order         idOrder // pel's ids in id order
	consumers     map[string]*consumer
}

type consumer struct {
	name     string
	seen     time.Time
	npending int
	order    idOrder // this consumer's pending ids in id order
}

type pending struct {
	owner      *consumer
	delivered  time.Time
	deliveries int64
}

func newGroup(lastDelivered broker.StreamID) *group {
	return &group{
		lastDelivered: lastDelivered,
		pel:           make(map[broker.StreamID]*pending),
		consumers:     make(map[string]*consumer),
	}
}

// consumer returns the named consumer, creating it, and marks it seen.
func (g *group) consumer(name string, now time.Time) *consumer {
	c := g.consumers[name]
	if c == nil {
		c = &consumer{name: name}
		g.consumers[name] = c
	}
	c.seen = now
	return c
}

// prune deletes every consumer without pending entries except keep ("" =
// none kept) and returns how many it deleted, as the Redis adapter's
// prune_consumers (XGROUP DELCONSUMER of empty consumers only).
func (g *group) prune(keep string) int64 {
	var n int64
	for name, c := range g.consumers {
		if name != keep && c.npending == 0 {
			delete(g.consumers, name)
			n++
		}
	}
	return n
}

func (g *group) owns(c *consumer) func(broker.StreamID) bool {
	return func(id broker.StreamID) bool {
		p := g.pel[id]
		return p != nil && p.owner == c
	}
}

func (g *group) isPending(id broker.StreamID) bool { return g.pel[id] != nil }

// deliver records that entry id went to c (XREADGROUP >). An id already
// pending (possible only after the group was moved back) is reassigned to c
// with its delivery count reset, as Redis does.
func (g *group) deliver(c *consumer, id broker.StreamID, now time.Time) {
	if p := g.pel[id]; p != nil {
		g.move(p, id, c)
		p.delivered, p.deliveries = now, 1
		return
	}
	g.pel[id] = &pending{owner: c, delivered: now, deliveries: 1}
	g.order.insert(id)
	c.order.insert(id)
	c.npending++
}

// move hands pending entry id to c.
func (g *group) move(p *pending, id broker.StreamID, c *consumer) {
	if p.owner == c {
		return
	}
	old := p.owner
	old.npending--
	old.order.tidy(old.npending, g.owns(old))
	p.owner = c
	c.order.insert(id)
	c.npending++
}

// ack removes id from the PEL and reports whether it was pending.
func (g *group) ack(id broker.StreamID) bool {
	p := g.pel[id]
	if p == nil {
		return false
	}
	delete(g.pel, id)
	p.owner.npending--
	p.owner.order.tidy(p.owner.npending, g.owns(p.owner))
	g.order.tidy(len(g.pel), g.isPending)
	return true
}

func (g *group) oldestPending() (broker.StreamID, bool) {
	var first broker.StreamID
	found := false
	g.order.each(g.isPending, func(id broker.StreamID) bool {
		first, found = id, true
		return false
	})
	return first, found
}

// idOrder keeps ids in ascending order for a set that lives in a map. Ids
// leave the set only in the map (they become stale here) and are swept out
// lazily: skipped when iterating, dropped from the front as iteration
// passes them, and compacted away when they outnumber the live ones. Acks
// and claims are therefore O(1) amortised instead of a slice copy each.
type idOrder struct {
	ids  []broker.StreamID
	head int
}

// insert adds id (a no-op when the slice still holds it, live or stale).
func (o *idOrder) insert(id broker.StreamID) {
	live := o.ids[o.head:]
	if n := len(live); n == 0 || live[n-1].Less(id) {
		o.ids = append(o.ids, id)
		return
	}
	i, found := slices.BinarySearchFunc(live, id, broker.StreamID.Compare)
	if !found {
		o.ids = slices.Insert(o.ids, o.head+i, id)
	}
}

// each calls yield for the live ids in order until yield returns false.
func (o *idOrder) each(live func(broker.StreamID) bool, yield func(broker.StreamID) bool) {
	leading := true
	for i := o.head; i < len(o.ids); i++ {
		id := o.ids[i]
		if !live(id) {
			if leading {
				o.head = i + 1
			}
			continue
		}
		leading = false
		if !yield(id) {
			return
		}
	}
	if leading {
		o.ids, o.head = o.ids[:0], 0
	}
}

// tidy compacts the slice when it holds many more ids than the n live ones.
func (o *idOrder) tidy(n int, live func(broker.StreamID) bool) {
	if n == 0 {
		o.ids, o.head = nil, 0
		return
	}
	if len(o.ids)-o.head <= 2*n+32 {
		return
	}
	kept := make([]broker.StreamID, 0, n)
	for _, id := range o.ids[o.head:] {
		if live(id) {
			kept = append(kept, id)
		}
	}
	o.ids, o.head = kept, 0
}
