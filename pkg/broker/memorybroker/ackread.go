package memorybroker

import (
	"context"
	"strconv"
	"time"

	"github.com/protctl/protctl/pkg/broker"
)

// AckAndReadPartitionFenced acknowledges ack for group and then reads up
// to count entries of stream as consumer f.Token, in one atomic step under
// the fence: exactly AckPartitionFenced followed by ReadPartitionFenced
// with one lease check, so a stale fence changes nothing, neither the ack
// nor the read. An empty ack only reads. Every id is parsed before
// anything changes.
//
// The public methods take the broker's lock themselves, so this one runs
// their steps (the same helpers, in the same order) under one lock rather
// than calling them.
func (b *Broker) AckAndReadPartitionFenced(ctx context.Context, f broker.Fence, streamKey, groupName string, ack []string, count int64, mode broker.ReadMode) ([]broker.Message, error) {
	const op = "ack and read"
	if err := b.begin(ctx, "AckAndReadPartitionFenced"); err != nil {
		return nil, err
	}
	parsed, err := b.checkAckRead(op, f, streamKey, groupName, ack, count, mode)
	if err != nil {
		return nil, err
	}
	now := b.lock()
	defer b.mu.Unlock()
	return b.ackReadLocked(op, f, streamKey, groupName, parsed, count, mode, now)
}

// checkAckRead checks AckAndReadPartitionFenced's arguments and parses
// the ids to ack.
func (b *Broker) checkAckRead(op string, f broker.Fence, streamKey, groupName string, ack []string, count int64, mode broker.ReadMode) ([]broker.StreamID, error) {
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
	parsed := make([]broker.StreamID, len(ack))
	for i, s := range ack {
		id, err := parseID(op, s)
		if err != nil {
			return nil, err
		}
		parsed[i] = id
	}

	return parsed, nil
}

// ackReadLocked is AckAndReadPartitionFenced's step, with the lock held
// and the arguments checked.
func (b *Broker) ackReadLocked(op string, f broker.Fence, streamKey, groupName string, parsed []broker.StreamID, count int64, mode broker.ReadMode, now time.Time) ([]broker.Message, error) {
	s, err := b.streamAt(op, streamKey, now)
	if err != nil {
		return nil, err
	}
	if err := b.checkFence(op, streamKey, f, now); err != nil {
		return nil, err
	}
	// The ack, as AckPartitionFenced: nothing is pending on a missing
	// stream or group.
	if s != nil {
		if g := s.groups[groupName]; g != nil {
			for _, id := range parsed {
				g.ack(id)
			}
		}
	}
	// The read, as ReadPartitionFenced: create the stream and the group
	// (from id 0) when missing.
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
