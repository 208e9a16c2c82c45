package redisbroker

import (
	"context"
	"fmt"
	"strconv"

	"github.com/protctl/protctl/pkg/broker"
)

// AckAndReadPartitionFenced acknowledges ack (the batch the owner just
// handled) and reads up to count entries of stream, in one atomic step
// that first proves the lease: exactly AckPartitionFenced followed by
// ReadPartitionFenced. A stale fence fails with a *broker.LeaseLostError
// and changes nothing, neither the ack nor the read. An empty ack only
// reads.
//
// In ReadPendingThenNew mode the step is one script (ackread.lua), one
// round trip. In ReadPending and ReadNew mode, on a single node or a
// Redis Cluster, it is an optimistic transaction (WATCH and GET of the
// lease, then MULTI, XACK, XREADGROUP, EXEC; see fencedtx.go): two round
// trips, with the entries in XREADGROUP's own reply; a lost lease, a
// missing group or a wrong type fall back to the script, which decides.
//
// The read is read.lua's (both compose readlib.lua): it creates a
// missing group from id 0, and in ReadPendingThenNew mode returns the
// consumer's pending entries first, so an entry of ack that was not
// acknowledged (it was not pending) is never re-read by accident.
func (b *Broker) AckAndReadPartitionFenced(ctx context.Context, f broker.Fence, stream, group string, ack []string, count int64, mode broker.ReadMode) ([]broker.Message, error) {
	return b.ackAndReadPartitionFenced(ctx, nil, f, stream, group, ack, count, mode)
}

// ackAndReadPartitionFenced is AckAndReadPartitionFenced, its transaction
// on pc's connection when pc is not nil (PinnedReader).
func (b *Broker) ackAndReadPartitionFenced(ctx context.Context, pc *pinnedConn, f broker.Fence, stream, group string, ack []string, count int64, mode broker.ReadMode) ([]broker.Message, error) {
	const op = "ack and read"
	if err := validFence(op, f); err != nil {
		return nil, err
	}
	if err := nonEmpty(op, "stream", stream); err != nil {
		return nil, err
	}
	if err := b.cfg.layout.ValidateName(op, "group", group); err != nil {
		return nil, err
	}
	if err := positive(op, "count", count); err != nil {
		return nil, err
	}
	m, ok := readModes[mode]
	if !ok {
		return nil, &broker.InvalidArgumentError{Op: op, Arg: "mode", Value: strconv.Itoa(int(mode)), Reason: "unknown read mode"}
	}
	for _, id := range ack {
		if err := validID(op, id); err != nil {
			return nil, err
		}
	}
	if id := txReadID(mode); id != "" {
		if c := b.txClient(ctx, f.LeaseKey); c != nil {
			msgs, outcome, err := b.tx(ctx, pc, c, op, f, stream, group, ack, count, id)
			if outcome == txDecided || err != nil {
				return msgs, err
			}
		}
	}
	// The ids go by pointer: boxing a *string into an interface does not
	// allocate, a string does (go-redis writes both alike).
	args := make([]any, 0, 4+len(ack))
	args = append(args, f.Token, group, count, m)
	for i := range ack {
		args = append(args, &ack[i])
	}
	keys := []string{f.LeaseKey, stream}
	res, err := ackReadScript.Run(ctx, b.client, keys, args...).Slice()
	if err != nil {
		return nil, mapErr(call{Op: op, Keys: keys, Fence: &f, Stream: stream}, err)
	}
	msgs, err := parseEntries(stream, res)
	if err != nil {
		return nil, fmt.Errorf("redisbroker: %s: %w", op, err)
	}
	return msgs, nil
}
