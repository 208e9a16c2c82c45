package memorybroker

import (
	"context"
	"strconv"
	"time"

	"github.com/protctl/protctl/pkg/broker"
)

// ReadPartitionFenced reads up to count entries of stream for group as
// consumer f.Token, under the fence. It creates the stream and the group
// (from id 0) when missing, like XGROUP CREATE ... 0 MKSTREAM.
//
// ReadNew is XREADGROUP >: entries after the group's last-delivered id,
// which become pending for the consumer. ReadPending is XREADGROUP 0: the
// consumer's pending entries in id order; each one whose body exists has
// its delivery count incremented, and each one whose body was deleted
// comes back with Missing set and its count unchanged (as in Redis).
// ReadPendingThenNew reads pending entries and, when there are none, new
// ones.
func (b *Broker) ReadPartitionFenced(ctx context.Context, f broker.Fence, streamKey, groupName string, count int64, mode broker.ReadMode) ([]broker.Message, error) {
	const op = "read"
	if err := b.begin(ctx, "ReadPartitionFenced"); err != nil {
		return nil, err
	}
	if err := firstErr(
		validFence(op, f),
		nonEmpty(op, "stream", streamKey),
		b.validGroup(op, groupName),
		positive(op, "count", count),
	); err != nil {
		return nil, err
	}
	if mode != broker.ReadPendingThenNew && mode != broker.ReadPending && mode != broker.ReadNew {
		return nil, invalid(op, "mode", strconv.Itoa(int(mode)), "unknown read mode")
	}

	now := b.lock()
	defer b.mu.Unlock()
	s, err := b.streamAt(op, streamKey, now)
	if err != nil {
		return nil, err
	}
	if err := b.checkFence(op, streamKey, f, now); err != nil {
		return nil, err
	}
	s = b.ensureStream(streamKey, s)
	g := s.groups[groupName]
	if g == nil {
		g = newGroup(broker.StreamID{})
		s.groups[groupName] = g
	}
	c := g.consumer(f.Token, now)

	var msgs []broker.Message
	if mode != broker.ReadNew {
		msgs = readPending(streamKey, s, g, c, count, now)
	}
	if mode == broker.ReadNew || (mode == broker.ReadPendingThenNew && len(msgs) == 0) {
		msgs = readNew(streamKey, s, g, c, count, now)
	}
	return msgs, nil
}

func readPending(streamKey string, s *stream, g *group, c *consumer, count int64, now time.Time) []broker.Message {
	var msgs []broker.Message
	c.order.each(g.owns(c), func(id broker.StreamID) bool {
		m := broker.Message{Stream: streamKey, ID: id.String()}
		if e, ok := s.find(id); ok {
			m.Data = copyData(e.data)
			p := g.pel[id]
			p.delivered = now
			p.deliveries++
		} else {
			m.Missing = true
		}
		msgs = append(msgs, m)
		return int64(len(msgs)) < count
	})
	return msgs
}

func readNew(streamKey string, s *stream, g *group, c *consumer, count int64, now time.Time) []broker.Message {
	start := s.upperBound(g.lastDelivered)
	end := len(s.entries)
	if int64(end-start) > count {
		end = start + int(count)
	}
	if start == end {
		return nil
	}
	msgs := make([]broker.Message, 0, end-start)
	for i := start; i < end; i++ {
		e := &s.entries[i]
		g.deliver(c, e.id, now)
		msgs = append(msgs, broker.Message{Stream: streamKey, ID: e.id.String(), Data: copyData(e.data)})
	}
	g.lastDelivered = s.entries[end-1].id
	return msgs
}

// AckPartitionFenced acknowledges ids for group under the fence (XACK) and
// returns how many of them were pending. A missing stream or group has
// nothing pending. Every id is parsed before anything changes.
func (b *Broker) AckPartitionFenced(ctx context.Context, f broker.Fence, streamKey, groupName string, ids ...string) (int64, error) {
	const op = "ack"
	if err := b.begin(ctx, "AckPartitionFenced"); err != nil {
		return 0, err
	}
	if err := firstErr(validFence(op, f), nonEmpty(op, "stream", streamKey), b.validGroup(op, groupName)); err != nil {
		return 0, err
	}
	parsed := make([]broker.StreamID, len(ids))
	for i, s := range ids {
		id, err := parseID(op, s)
		if err != nil {
			return 0, err
		}
		parsed[i] = id
	}

	now := b.lock()
	defer b.mu.Unlock()
	s, err := b.streamAt(op, streamKey, now)
	if err != nil {
		return 0, err
	}
	if err := b.checkFence(op, streamKey, f, now); err != nil || s == nil {
		return 0, err
	}
	g := s.groups[groupName]
	if g == nil {
		return 0, nil
	}
	var n int64
	for _, id := range parsed {
		if g.ack(id) {
			n++
		}
	}
	return n, nil
}

// ReclaimPartitionPending moves every pending entry of group idle for at
// least minIdle, whoever holds it, to consumer f.Token, as XAUTOCLAIM ...
// JUSTID looped until its cursor is exhausted (the Redis adapter's
// calls): a claimed entry's idle time restarts and its delivery count
// stays; a pending entry whose body was deleted is dropped from the
// pending list and listed in Missing. The
// whole pass is one atomic step under the fence, so count (the batch size
// on Redis) only needs to be positive. A missing stream or group has
// nothing to reclaim. Then every other consumer of the group without
// pending entries is deleted (ReclaimResult.Pruned), as XGROUP
// DELCONSUMER in the Redis adapter's last batch.
func (b *Broker) ReclaimPartitionPending(ctx context.Context, f broker.Fence, streamKey, groupName string, minIdle time.Duration, count int64) (broker.ReclaimResult, error) {
	const op = "reclaim"
	if err := b.begin(ctx, "ReclaimPartitionPending"); err != nil {
		return broker.ReclaimResult{}, err
	}
	if err := firstErr(validFence(op, f), nonEmpty(op, "stream", streamKey), b.validGroup(op, groupName)); err != nil {
		return broker.ReclaimResult{}, err
	}
	idleMs, err := idleMillis(op, minIdle)
	if err != nil {
		return broker.ReclaimResult{}, err
	}
	if err := positive(op, "count", count); err != nil {
		return broker.ReclaimResult{}, err
	}

	now := b.lock()
	defer b.mu.Unlock()
	s, err := b.streamAt(op, streamKey, now)
	if err != nil {
		return broker.ReclaimResult{}, err
	}
	if err := b.checkFence(op, streamKey, f, now); err != nil || s == nil {
		return broker.ReclaimResult{}, err
	}
	g := s.groups[groupName]
	if g == nil {
		return broker.ReclaimResult{}, nil
	}

	// Idle times are compared in whole milliseconds, as XAUTOCLAIM does.
	nowMs := int64(msOf(now))
	var idle []broker.StreamID
	g.order.each(g.isPending, func(id broker.StreamID) bool {
		if nowMs-int64(msOf(g.pel[id].delivered)) >= idleMs {
			idle = append(idle, id)
		}
		return true
	})
	var res broker.ReclaimResult
	if len(idle) > 0 {
		c := g.consumer(f.Token, now)
		for _, id := range idle {
			if _, ok := s.find(id); !ok {
				g.ack(id)
				res.Missing = append(res.Missing, id.String())
				continue
			}
			p := g.pel[id]
			g.move(p, id, c)
			p.delivered = now // JUSTID: the delivery count stays
			res.Claimed++
		}
	}
	// As the Redis adapter's last batch: the other consumers left empty go.
	res.Pruned = g.prune(f.Token)
	return res, nil
}

// DeadLetterPartitionFenced, in one atomic step under the fence, appends
// to dlqStream the dead letter of entry id in Protean's format
// (broker.DeadLetterEntry: the original data with _dlq_metadata, naming
// the stream, id, group, the consumer it was pending to, its delivery
// count, the time by the broker's clock and reason), then acknowledges id
// for group. It returns the dead-letter entry's id. dlqStream must differ
// from stream.
func (b *Broker) DeadLetterPartitionFenced(ctx context.Context, f broker.Fence, streamKey, groupName, id, dlqStream, reason string) (string, error) {
	const op = "dead-letter"
	if err := b.begin(ctx, "DeadLetterPartitionFenced"); err != nil {
		return "", err
	}
	if err := firstErr(
		validFence(op, f),
		nonEmpty(op, "stream", streamKey),
		b.validGroup(op, groupName),
	); err != nil {
		return "", err
	}
	eid, err := parseID(op, id)
	if err != nil {
		return "", err
	}
	if err := nonEmpty(op, "dlqStream", dlqStream); err != nil {
		return "", err
	}
	if dlqStream == streamKey {
		return "", invalid(op, "dlqStream", strconv.Quote(dlqStream), "must differ from the stream")
	}

	now := b.lock()
	defer b.mu.Unlock()
	src, err := b.streamAt(op, streamKey, now)
	if err != nil {
		return "", err
	}
	dst, err := b.streamAt(op, dlqStream, now)
	if err != nil {
		return "", err
	}
	if err := b.checkFence(op, streamKey, f, now); err != nil {
		return "", err
	}

	var data []byte
	missing := true
	meta := broker.DeadLetterMetadata{
		OriginalStream: streamKey, OriginalID: id, ConsumerGroup: groupName,
		FailedAt: now.UTC().Format(broker.FailedAtLayout), FailureReason: reason,
	}
	if src != nil {
		if e, ok := src.find(eid); ok {
			data, missing = e.data, false
		}
		if g := src.groups[groupName]; g != nil {
			if p := g.pel[eid]; p != nil {
				meta.Consumer, meta.RetryCount = p.owner.name, p.deliveries
			}
		}
	}
	var fields []Field
	for _, f := range broker.DeadLetterEntry(data, missing, meta) {
		if f[0] == broker.DataField {
			data = []byte(f[1])
		} else {
			fields = append(fields, Field{f[0], f[1]})
		}
	}
	dlqID := b.ensureStream(dlqStream, dst).add(msOf(now), data, fields)
	b.appended(dlqStream)
	if src != nil {
		if g := src.groups[groupName]; g != nil {
			g.ack(eid)
		}
	}
	return dlqID.String(), nil
}
