package memorybroker

import (
	"context"
	"slices"
	"strings"
	"time"

	"github.com/protctl/protctl/pkg/broker"
)

// The read-only views below (XINFO, XPENDING and XRANGE in Redis terms)
// are what an operator tool shows about an embedded broker. They copy what
// they return and change nothing: no consumer is created, no idle time
// reset, no expired key collected. They work on inline brokers too.

// StreamInfo is a snapshot of one stream.
type StreamInfo struct {
	Length          int64
	FirstID         string // oldest entry's id, "" when empty
	LastID          string // newest entry's id, "" when empty
	LastGeneratedID string // the id XADD last gave out, kept across deletions
	Groups          []GroupInfo
}

// GroupInfo is a consumer group of a stream.
type GroupInfo struct {
	Name            string
	LastDeliveredID string
	Pending         int64
	Consumers       []ConsumerInfo // by name
}

// ConsumerInfo is a consumer of a group; its name is a fence token.
type ConsumerInfo struct {
	Name    string
	Pending int64
	Idle    time.Duration // since the consumer last read or claimed
}

// PendingEntry is one entry of a group's pending list.
type PendingEntry struct {
	ID         string
	Consumer   string
	Deliveries int64
	Idle       time.Duration // since the last delivery
	Missing    bool          // the entry's body was deleted
}

// Entry is one stream entry, fields included.
type Entry struct {
	ID     string
	Data   []byte  // the data field
	Fields []Field // the other fields, in order (a dead letter's origin)
}

// peek is lookup without collecting an expired key.
func (b *Broker) peek(op, key string, now time.Time) (*stream, error) {
	o := b.keys[key]
	if o == nil || (!o.expireAt.IsZero() && !now.Before(o.expireAt)) {
		return nil, nil
	}
	if o.kind != kindStream {
		return nil, wrongType(op, key, kindStream, o.kind)
	}
	return o.stream, nil
}

// StreamInfo describes stream and its groups (sorted by name). found is
// false when the key is missing.
func (b *Broker) StreamInfo(ctx context.Context, streamKey string) (info StreamInfo, found bool, err error) {
	const op = "stream info"
	if err := ctxErr(ctx, op); err != nil {
		return StreamInfo{}, false, err
	}
	now := b.lock()
	defer b.mu.Unlock()
	s, err := b.peek(op, streamKey, now)
	if err != nil || s == nil {
		return StreamInfo{}, false, err
	}
	info.Length = int64(len(s.entries))
	if len(s.entries) > 0 {
		info.FirstID = s.entries[0].id.String()
		info.LastID = s.entries[len(s.entries)-1].id.String()
	}
	info.LastGeneratedID = s.lastID.String()
	for name, g := range s.groups {
		gi := GroupInfo{Name: name, LastDeliveredID: g.lastDelivered.String(), Pending: int64(len(g.pel))}
		for cname, c := range g.consumers {
			gi.Consumers = append(gi.Consumers, ConsumerInfo{Name: cname, Pending: int64(c.npending), Idle: now.Sub(c.seen)})
		}
		slices.SortFunc(gi.Consumers, func(a, b ConsumerInfo) int { return strings.Compare(a.Name, b.Name) })
		info.Groups = append(info.Groups, gi)
	}
	slices.SortFunc(info.Groups, func(a, b GroupInfo) int { return strings.Compare(a.Name, b.Name) })
	return info, true, nil
}

// PendingEntries returns group's pending entries, oldest first, at most
// count of them (all when count <= 0); nil when the stream or group is
// missing.
func (b *Broker) PendingEntries(ctx context.Context, streamKey, group string, count int64) ([]PendingEntry, error) {
	const op = "pending entries"
	if err := ctxErr(ctx, op); err != nil {
		return nil, err
	}
	now := b.lock()
	defer b.mu.Unlock()
	s, err := b.peek(op, streamKey, now)
	if err != nil || s == nil || s.groups[group] == nil {
		return nil, err
	}
	g := s.groups[group]
	var out []PendingEntry
	g.order.each(g.isPending, func(id broker.StreamID) bool {
		p := g.pel[id]
		_, present := s.find(id)
		out = append(out, PendingEntry{
			ID:         id.String(),
			Consumer:   p.owner.name,
			Deliveries: p.deliveries,
			Idle:       now.Sub(p.delivered),
			Missing:    !present,
		})
		return count <= 0 || int64(len(out)) < count
	})
	return out, nil
}

// Range returns up to count entries of stream from id start on, oldest
// first (XRANGE start + COUNT count); start "" or "-" means the beginning.
// A missing stream has no entries.
func (b *Broker) Range(ctx context.Context, streamKey, start string, count int64) ([]Entry, error) {
	const op = "range"
	if err := firstErr(ctxErr(ctx, op), positive(op, "count", count)); err != nil {
		return nil, err
	}
	var from broker.StreamID
	if start != "" && start != "-" {
		var err error
		if from, err = parseID(op, start); err != nil {
			return nil, err
		}
	}
	now := b.lock()
	defer b.mu.Unlock()
	s, err := b.peek(op, streamKey, now)
	if err != nil || s == nil {
		return nil, err
	}
	i := s.lowerBound(from)
	end := min(len(s.entries), i+int(min(count, int64(len(s.entries)))))
	var out []Entry
	for ; i < end; i++ {
		e := &s.entries[i]
		out = append(out, Entry{ID: e.id.String(), Data: copyData(e.data), Fields: slices.Clone(e.fields)})
	}
	return out, nil
}
