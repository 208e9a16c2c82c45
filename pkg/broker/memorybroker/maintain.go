package memorybroker

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/protctl/protctl/pkg/broker"
)

// ReapPartition removes key from category's index and deletes its main and
// backfill lanes in one atomic step, only when nothing on them is still
// needed. It checks the main lane, then the backfill lane, and reports the
// first blocker it finds:
//
//   - a non-empty lane without any consumer group;
//   - a group with pending entries;
//   - a group not yet delivered up to the lane's newest entry;
//   - a group registered for category (RegisterGroup) that is absent from
//     a non-empty lane;
//   - a lane whose last generated id is younger than minIdle by the
//     broker's clock (the last generated id, not the newest remaining
//     entry, as the Redis adapter reads it).
//
// The dead-letter stream and the generation keys stay.
func (b *Broker) ReapPartition(ctx context.Context, category, key string, minIdle time.Duration, backfillSuffix string) (broker.ReapResult, error) {
	if err := b.begin(ctx, "ReapPartition"); err != nil {
		return broker.ReapResult{}, err
	}
	return b.reap(category, key, minIdle, backfillSuffix, nil)
}

// ReapPartitionLeases is ReapPartition that also requires each of leases
// to hold the value seen (no key for "") in the same atomic step, and
// deletes those lease keys with the lanes (broker.LeaseReaper).
func (b *Broker) ReapPartitionLeases(ctx context.Context, category, key string, minIdle time.Duration, backfillSuffix string, leases []broker.SeenLease) (broker.ReapResult, error) {
	if err := b.begin(ctx, "ReapPartitionLeases"); err != nil {
		return broker.ReapResult{}, err
	}
	for _, sl := range leases {
		if err := b.cfg.layout.ValidateName("reap", "group", sl.Group); err != nil {
			return broker.ReapResult{}, err
		}
	}
	return b.reap(category, key, minIdle, backfillSuffix, leases)
}

func (b *Broker) reap(category, key string, minIdle time.Duration, backfillSuffix string, leases []broker.SeenLease) (broker.ReapResult, error) {
	const op = "reap"
	l := b.cfg.layout
	if err := l.ValidateName(op, "category", category); err != nil {
		return broker.ReapResult{}, err
	}
	if backfillSuffix == "" {
		backfillSuffix = broker.DefaultBackfillSuffix
	}
	if backfillSuffix == broker.DLQSuffix || strings.Contains(backfillSuffix, ":") {
		// A "dlq" suffix would make the reap delete the dead letters.
		return broker.ReapResult{}, invalid(op, "backfillSuffix", strconv.Quote(backfillSuffix), `must not be "dlq" or contain ":"`)
	}
	if err := b.validKey(op, key, backfillSuffix); err != nil {
		return broker.ReapResult{}, err
	}
	idleMs, err := idleMillis(op, minIdle)
	if err != nil {
		return broker.ReapResult{}, err
	}
	idxKey := l.IndexKey(category)
	lanes := [2]string{l.Stream(category, key), l.LaneStream(category, key, backfillSuffix)}

	now := b.lock()
	defer b.mu.Unlock()
	idx, err := b.setAt(op, idxKey, now)
	if err != nil {
		return broker.ReapResult{}, err
	}
	registered, err := b.setAt(op, l.GroupsKey(category), now)
	if err != nil {
		return broker.ReapResult{}, err
	}
	var streams [2]*stream
	for i, lane := range lanes {
		if streams[i], err = b.streamAt(op, lane, now); err != nil {
			return broker.ReapResult{}, err
		}
	}
	var regNames []string
	if registered != nil {
		regNames = registered.sorted()
	}
	leaseKeys := make([]string, len(leases))
	held := make([]string, len(leases))
	for i, sl := range leases {
		leaseKeys[i] = l.LeaseKey(sl.Group, key)
		o, err := b.stringAt(op, leaseKeys[i], now)
		if err != nil {
			return broker.ReapResult{}, err
		}
		if o != nil {
			held[i] = o.str
		}
	}
	for i, s := range streams {
		if s == nil {
			continue
		}
		if res, blocked := reapBlocker(lanes[i], s, regNames, msOf(now), idleMs); blocked {
			return res, nil
		}
	}
	for i, sl := range leases {
		if held[i] != sl.Token {
			return broker.ReapResult{Group: sl.Group, Reason: fmt.Sprintf("the lease %s of group %q holds %s, the caller saw %s",
				leaseKeys[i], sl.Group, leaseText(held[i]), leaseText(sl.Token))}, nil
		}
	}
	for _, k := range leaseKeys {
		delete(b.keys, k)
	}

	if idx != nil {
		idx.remove(key)
		if len(idx.members) == 0 {
			delete(b.keys, idxKey) // Redis deletes an emptied set
		}
	}
	for _, lane := range lanes {
		delete(b.keys, lane)
	}
	return broker.ReapResult{Reaped: true}, nil
}

func leaseText(token string) string {
	if token == "" {
		return "no lease"
	}
	return strconv.Quote(token)
}

func reapBlocker(lane string, s *stream, registered []string, nowMs uint64, minIdleMs int64) (broker.ReapResult, bool) {
	refuse := func(group, format string, args ...any) (broker.ReapResult, bool) {
		return broker.ReapResult{Stream: lane, Group: group, Reason: fmt.Sprintf(format, args...)}, true
	}
	n := len(s.entries)
	if n > 0 && len(s.groups) == 0 {
		return refuse("", "%q has entries but no consumer group", lane)
	}
	names := make([]string, 0, len(s.groups))
	for name := range s.groups {
		names = append(names, name)
	}
	slices.Sort(names)
	newest, hasEntries := s.newest()
	for _, name := range names {
		g := s.groups[name]
		if p := len(g.pel); p > 0 {
			return refuse(name, "group %q has %d pending entries on %q", name, p, lane)
		}
		if hasEntries && g.lastDelivered.Less(newest) {
			return refuse(name, "group %q has been delivered up to %s of %q, whose last entry is %s", name, g.lastDelivered, lane, newest)
		}
	}
	if hasEntries {
		for _, name := range registered {
			if s.groups[name] == nil {
				return refuse(name, "registered group %q has not read %q yet", name, lane)
			}
		}
	}
	// The last generated id also covers entries appended and then deleted
	// or trimmed.
	if age := int64(nowMs) - int64(s.lastID.Ms); age < minIdleMs {
		return refuse("", "the newest entry of %q is %s old, younger than minIdle", lane, time.Duration(age)*time.Millisecond)
	}
	return broker.ReapResult{}, false
}

// Trim removes the oldest entries of stream beyond the newest maxLen, but
// none at or after the safe floor: the smallest, over the stream's groups,
// of the last-delivered id and the oldest pending id. It returns how many
// entries it removed (0 for a missing stream); a non-positive maxLen is
// refused.
//
// Groups registered with RegisterGroup count too, as in the Redis
// adapter: one that has not created itself on stream yet will read it
// from id 0, so Trim removes nothing while such a group exists. Trim gets
// only the stream's name, so it consults the registries of every category
// the name can belong to (see registriesOf); one too many only keeps more.
// Without any group, Trim caps the stream at maxLen.
func (b *Broker) Trim(ctx context.Context, streamKey string, maxLen int64) (int64, error) {
	const op = "trim"
	if err := b.begin(ctx, "Trim"); err != nil {
		return 0, err
	}
	if err := firstErr(nonEmpty(op, "stream", streamKey), positive(op, "maxLen", maxLen)); err != nil {
		return 0, err
	}
	now := b.lock()
	defer b.mu.Unlock()
	s, err := b.streamAt(op, streamKey, now)
	if err != nil {
		return 0, err
	}
	var registries []*set
	for _, key := range b.registriesOf(streamKey) {
		r, err := b.setAt(op, key, now)
		if err != nil {
			return 0, err
		}
		if r != nil {
			registries = append(registries, r)
		}
	}
	if s == nil {
		return 0, nil
	}
	excess := int64(len(s.entries)) - maxLen
	if excess <= 0 {
		return 0, nil
	}
	for _, r := range registries {
		for name := range r.members {
			if s.groups[name] == nil {
				return 0, nil
			}
		}
	}
	if floor, ok := s.safeFloor(); ok {
		excess = min(excess, int64(s.lowerBound(floor)))
	}
	s.removeFront(int(excess))
	return excess, nil
}

// registriesOf returns the group registries (Layout.GroupsKey) of the
// categories stream may belong to: C for a main lane C:K, and C for a lane
// C:K:<suffix>. Categories may contain ':' themselves, so both readings
// are taken.
func (b *Broker) registriesOf(stream string) []string {
	var out []string
	rest := stream
	for range 2 {
		i := strings.LastIndexByte(rest, ':')
		if i <= 0 {
			break
		}
		rest = rest[:i]
		out = append(out, b.cfg.layout.GroupsKey(rest))
	}
	return out
}
