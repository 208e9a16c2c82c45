package redisbroker

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/protctl/protctl/pkg/broker"
)

var readModes = map[broker.ReadMode]string{
	broker.ReadPendingThenNew: "both",
	broker.ReadPending:        "pending",
	broker.ReadNew:            "new",
}

// ReadPartitionFenced reads up to count entries of stream for group as the
// consumer f.Token, proving the lease in the same atomic step. In
// ReadPendingThenNew mode one script reads the consumer's pending entries
// and, only when there are none, new ones: one round trip either way. In
// ReadPending and ReadNew mode, on a single node or a Redis Cluster, the
// read is an optimistic transaction instead (WATCH and GET of the lease,
// then MULTI, XREADGROUP, EXEC; see fencedtx.go), two round trips whose
// entries come back without passing through Lua; anything unusual (a
// lost lease, a missing group, a wrong type) is decided by the script,
// so every outcome is the script's.
//
// A missing group (or stream) is created from id 0 with MKSTREAM and the
// read retried once inside the same script, which is also how a group
// deleted under a running owner is recovered.
func (b *Broker) ReadPartitionFenced(ctx context.Context, f broker.Fence, stream, group string, count int64, mode broker.ReadMode) ([]broker.Message, error) {
	return b.readPartitionFenced(ctx, nil, f, stream, group, count, mode)
}

// readPartitionFenced is ReadPartitionFenced, its transaction on pc's
// connection when pc is not nil (PinnedReader).
func (b *Broker) readPartitionFenced(ctx context.Context, pc *pinnedConn, f broker.Fence, stream, group string, count int64, mode broker.ReadMode) ([]broker.Message, error) {
	const op = "read"
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
	if id := txReadID(mode); id != "" {
		if c := b.txClient(ctx, f.LeaseKey); c != nil {
			msgs, outcome, err := b.tx(ctx, pc, c, op, f, stream, group, nil, count, id)
			if outcome == txDecided || err != nil {
				return msgs, err
			}
		}
	}
	keys := []string{f.LeaseKey, stream}
	res, err := readScript.Run(ctx, b.client, keys, f.Token, group, count, m).Slice()
	if err != nil {
		return nil, mapErr(call{Op: op, Keys: keys, Fence: &f, Stream: stream}, err)
	}
	msgs, err := parseEntries(stream, res)
	if err != nil {
		return nil, fmt.Errorf("redisbroker: %s: %w", op, err)
	}
	return msgs, nil
}

// parseEntries decodes read_lane's flat reply (readlib.lua): {id, v, ...}
// where v is the data field's value, nil for a pending entry whose body
// was deleted, or the whole field list of an entry without a data field.
// It returns nil for an empty reply.
//
// The data of a batch is copied into one buffer, each Message.Data a
// full slice expression of it (capacity = length, so an append by the
// caller reallocates instead of overwriting the next entry): two
// allocations per batch here instead of one per entry. A caller that
// keeps one Message keeps its batch's buffer alive.
func parseEntries(stream string, res []any) ([]broker.Message, error) {
	if len(res) == 0 {
		return nil, nil
	}
	if len(res)%2 != 0 {
		return nil, fmt.Errorf("unexpected reply of %d items", len(res))
	}
	size := 0
	for i := 1; i < len(res); i += 2 {
		if v, ok := res[i].(string); ok {
			size += len(v)
		}
	}
	buf := make([]byte, 0, size)
	msgs := make([]broker.Message, len(res)/2)
	for i := range msgs {
		id, ok := res[2*i].(string)
		if !ok {
			return nil, fmt.Errorf("unexpected entry id %v", res[2*i])
		}
		m := &msgs[i]
		m.Stream, m.ID = stream, id
		switch v := res[2*i+1].(type) {
		case string:
			start := len(buf)
			buf = append(buf, v...)
			m.Data = buf[start:len(buf):len(buf)]
		case nil:
			m.Missing = true
		case []any:
			// An entry written by another tool, without a data field: hand
			// its fields over as a JSON object rather than dropping them.
			fields := make(map[string]string, len(v)/2)
			for j := 0; j+1 < len(v); j += 2 {
				k, _ := v[j].(string)
				fv, _ := v[j+1].(string)
				fields[k] = fv
			}
			data, err := json.Marshal(fields)
			if err != nil {
				return nil, err
			}
			m.Data = data
		default:
			return nil, fmt.Errorf("unexpected fields of entry %s: %T", id, v)
		}
	}
	return msgs, nil
}

// AckPartitionFenced acknowledges ids in one script that first proves the
// lease, so that a stale owner cannot acknowledge what a newer generation
// is processing. It returns how many ids were pending.
func (b *Broker) AckPartitionFenced(ctx context.Context, f broker.Fence, stream, group string, ids ...string) (int64, error) {
	const op = "ack"
	if err := validFence(op, f); err != nil {
		return 0, err
	}
	if err := nonEmpty(op, "stream", stream); err != nil {
		return 0, err
	}
	if err := b.cfg.layout.ValidateName(op, "group", group); err != nil {
		return 0, err
	}
	args := make([]any, 0, 2+len(ids))
	args = append(args, f.Token, group)
	for _, id := range ids {
		if err := validID(op, id); err != nil {
			return 0, err
		}
		args = append(args, id)
	}
	keys := []string{f.LeaseKey, stream}
	n, err := ackScript.Run(ctx, b.client, keys, args...).Int64()
	if err != nil {
		return 0, mapErr(call{Op: op, Keys: keys, Fence: &f, Stream: stream}, err)
	}
	return n, nil
}

// ReclaimPartitionPending moves group's pending entries idle for at least
// minIdle to the consumer f.Token with XAUTOCLAIM ... JUSTID, count at a
// time. Each batch is its own fenced script, so that a large pending list
// never blocks the server in one long script; the loop ends when the
// cursor comes back as 0-0. A lease lost between batches stops the loop
// with a *broker.LeaseLostError (entries already moved stay with the
// caller's consumer, where the next owner reclaims them again).
//
// XAUTOCLAIM drops pending entries whose bodies were deleted and reports
// their ids; they are returned in Missing so that the caller records them.
//
// The last batch (the one whose cursor comes back as 0-0) also deletes
// every other consumer of the group that holds no pending entries, in
// the same fenced script (Pruned counts them): see "Consumers do not pile
// up" in doc.go.
func (b *Broker) ReclaimPartitionPending(ctx context.Context, f broker.Fence, stream, group string, minIdle time.Duration, count int64) (broker.ReclaimResult, error) {
	const op = "reclaim"
	var res broker.ReclaimResult
	if err := validFence(op, f); err != nil {
		return res, err
	}
	if err := nonEmpty(op, "stream", stream); err != nil {
		return res, err
	}
	if err := b.cfg.layout.ValidateName(op, "group", group); err != nil {
		return res, err
	}
	idle, err := idleMillis(op, minIdle)
	if err != nil {
		return res, err
	}
	if err := positive(op, "count", count); err != nil {
		return res, err
	}
	keys := []string{f.LeaseKey, stream}
	cursor := "0-0"
	for {
		if err := ctx.Err(); err != nil {
			return res, mapErr(call{Op: op}, err)
		}
		reply, err := reclaimScript.Run(ctx, b.client, keys, f.Token, group, idle, cursor, count).Slice()
		if err != nil {
			return res, mapErr(call{Op: op, Keys: keys, Fence: &f, Stream: stream}, err)
		}
		if len(reply) != 4 {
			return res, fmt.Errorf("redisbroker: %s: unexpected reply %v", op, reply)
		}
		next, _ := reply[0].(string)
		claimed, _ := reply[1].(int64)
		res.Claimed += claimed
		pruned, _ := reply[3].(int64)
		res.Pruned += pruned
		deleted, _ := reply[2].([]any)
		for _, d := range deleted {
			if id, ok := d.(string); ok {
				res.Missing = append(res.Missing, id)
			}
		}
		if next == "0-0" || next == "" {
			return res, nil
		}
		cursor = next
	}
}

// DeadLetterPartitionFenced copies entry id of stream to dlqStream and
// acknowledges it, in one fenced script. The dead-letter entry is in
// Protean's format (see broker.DeadLetterEntry and ParseDeadLetter): the
// original data with _dlq_metadata (original_stream, original_id,
// consumer_group, the consumer it was pending to, failed_at by the
// server's clock, retry_count its delivery count, failure_reason reason)
// inside it when it is a JSON object, beside it otherwise. A partition's
// dead-letter stream is Layout.DLQStream (C:K:dlq).
func (b *Broker) DeadLetterPartitionFenced(ctx context.Context, f broker.Fence, stream, group, id, dlqStream, reason string) (string, error) {
	const op = "dead-letter"
	if err := validFence(op, f); err != nil {
		return "", err
	}
	if err := nonEmpty(op, "stream", stream); err != nil {
		return "", err
	}
	if err := b.cfg.layout.ValidateName(op, "group", group); err != nil {
		return "", err
	}
	if err := validID(op, id); err != nil {
		return "", err
	}
	if err := nonEmpty(op, "dlqStream", dlqStream); err != nil {
		return "", err
	}
	if dlqStream == stream {
		return "", &broker.InvalidArgumentError{Op: op, Arg: "dlqStream", Value: strconv.Quote(dlqStream), Reason: "must differ from the stream"}
	}
	keys := []string{f.LeaseKey, stream, dlqStream}
	dlqID, err := deadLetterScript.Run(ctx, b.client, keys, f.Token, group, id, reason).Text()
	if err != nil {
		return "", mapErr(call{Op: op, Keys: keys, Fence: &f, Stream: stream}, err)
	}
	return dlqID, nil
}
