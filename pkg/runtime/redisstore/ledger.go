package redisstore

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	"github.com/redis/go-redis/v9"

	"github.com/protctl/protctl/pkg/broker"
	"github.com/protctl/protctl/pkg/runtime"
)

// Park creates or replaces the entry of (p.Subscription, p.Aggregate),
// fenced by f. It takes three round trips, in this order:
//
//  1. HSET the subscription's index to the entry's record key
//     (RecordKey(f.LeaseKey, ...)), idempotent;
//  2. SADD the subscription to ParkedSubscriptionsKey;
//  3. the fenced script: the lease must hold exactly f.Token, then SET
//     the record.
//
// The index lives in another slot than the record, so it cannot be
// written in the fenced script. Writing it first means a record never
// exists without its index entry; a refused park can leave an index
// entry without a record, which every reader skips. When the record key
// holds another type the index entry this call added is taken back, so
// the refused call changes nothing a reader can see.
//
// A stale f fails with a *broker.LeaseLostError (Op "park"). p.Error is
// cut to runtime.MaxErrorLen bytes; an empty p.Status means
// runtime.StatusParked and a zero p.ParkedAt the local time.
func (s *Store) Park(ctx context.Context, f broker.Fence, p runtime.Parked) error {
	const op = "park"
	if err := validEntry(op, f, p.Subscription, p.Aggregate); err != nil {
		return err
	}
	if p.Status == "" {
		p.Status = runtime.StatusParked
	}
	if err := validStatus(op, p.Status); err != nil {
		return err
	}
	p.Error = runtime.TruncateError(p.Error)
	if p.ParkedAt.IsZero() {
		p.ParkedAt = s.cfg.now()
	}
	data, err := json.Marshal(p)
	if err != nil {
		return fmt.Errorf("redisstore: %s: %w", op, err)
	}
	rec := RecordKey(f.LeaseKey, p.Subscription, p.Aggregate)
	idx := ParkedIndexKey(p.Subscription)
	added, err := s.client.HSet(ctx, idx, p.Aggregate, rec).Result()
	if err != nil {
		return mapErr(call{op: op, key: idx, want: "hash"}, err)
	}
	// undo takes back the index entry this call created. Only then: an
	// entry that existed may be another call's, for the same record.
	undo := func() {
		if added == 1 {
			_ = unindexScript.Run(ctx, s.client, []string{idx}, p.Aggregate, rec).Err()
		}
	}
	if err := s.client.SAdd(ctx, ParkedSubscriptionsKey, p.Subscription).Err(); err != nil {
		undo()
		return mapErr(call{op: op, key: ParkedSubscriptionsKey, want: "set"}, err)
	}
	keys := []string{f.LeaseKey, rec}
	if err := parkScript.Run(ctx, s.client, keys, f.Token, data).Err(); err != nil {
		err = mapErr(call{op: op, keys: keys, fence: &f}, err)
		// A record key of another type cannot be a concurrent park's
		// record, so taking the index entry back is safe. After a lost
		// lease it is not: the new owner may be parking the same record.
		if errors.Is(err, broker.ErrWrongType) {
			undo()
		}
		return err
	}
	return nil
}

// SetStatus sets the status of the entry of (subscription, aggregate)
// parked under f's lease and clears its request, in one fenced script.
// A stale f fails with a *broker.LeaseLostError (Op "set status"); a
// missing entry with runtime.ErrNotParked.
func (s *Store) SetStatus(ctx context.Context, f broker.Fence, subscription, aggregate string, status runtime.ParkStatus) error {
	const op = "set status"
	if err := validEntry(op, f, subscription, aggregate); err != nil {
		return err
	}
	if err := validStatus(op, status); err != nil {
		return err
	}
	keys := []string{f.LeaseKey, RecordKey(f.LeaseKey, subscription, aggregate)}
	if err := setStatusScript.Run(ctx, s.client, keys, f.Token, string(status)).Err(); err != nil {
		return mapErr(call{op: op, keys: keys, fence: &f, subscription: subscription, aggregate: aggregate}, err)
	}
	return nil
}

// Resolve deletes the entry of (subscription, aggregate) parked under f's
// lease in one fenced script, then drops it from the index (unless a newer
// park pointed the index elsewhere meanwhile). A stale f fails with a
// *broker.LeaseLostError (Op "resolve") and deletes nothing. Resolving a
// missing entry is not an error.
func (s *Store) Resolve(ctx context.Context, f broker.Fence, subscription, aggregate string) error {
	const op = "resolve"
	if err := validEntry(op, f, subscription, aggregate); err != nil {
		return err
	}
	rec := RecordKey(f.LeaseKey, subscription, aggregate)
	keys := []string{f.LeaseKey, rec}
	if err := resolveScript.Run(ctx, s.client, keys, f.Token).Err(); err != nil {
		return mapErr(call{op: op, keys: keys, fence: &f}, err)
	}
	idx := []string{ParkedIndexKey(subscription)}
	if err := unindexScript.Run(ctx, s.client, idx, aggregate, rec).Err(); err != nil {
		// The record is gone: readers skip the index entry left behind.
		return mapErr(call{op: op, keys: idx}, err)
	}
	return nil
}

// ListParked returns subscription's entries ("" for every subscription
// in ParkedSubscriptionsKey), oldest ParkedAt first. It reads the indexes
// in one pipeline, then the records in another: one round trip per
// server node each. Index entries whose record is gone (a refused park,
// a resolve that did not finish) are skipped.
func (s *Store) ListParked(ctx context.Context, subscription string) ([]runtime.Parked, error) {
	const op = "list parked"
	subs := []string{subscription}
	if subscription == "" {
		var err error
		subs, err = s.client.SMembers(ctx, ParkedSubscriptionsKey).Result()
		if err != nil {
			return nil, mapErr(call{op: op, key: ParkedSubscriptionsKey, want: "set"}, err)
		}
		if len(subs) == 0 {
			return nil, nil
		}
	} else if err := validSubscription(op, subscription); err != nil {
		return nil, err
	}

	idxCmds := make([]*redis.MapStringStringCmd, len(subs))
	_, _ = s.client.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, sub := range subs {
			idxCmds[i] = p.HGetAll(ctx, ParkedIndexKey(sub))
		}
		return nil
	})
	var recs []string
	for i, c := range idxCmds {
		m, err := c.Result()
		if err != nil {
			return nil, mapErr(call{op: op, key: ParkedIndexKey(subs[i]), want: "hash"}, err)
		}
		for _, rec := range m {
			recs = append(recs, rec)
		}
	}
	if len(recs) == 0 {
		return nil, nil
	}

	recCmds := make([]*redis.StringCmd, len(recs))
	_, _ = s.client.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, rec := range recs {
			recCmds[i] = p.Get(ctx, rec)
		}
		return nil
	})
	out := make([]runtime.Parked, 0, len(recs))
	for i, c := range recCmds {
		raw, err := c.Result()
		if isNil(err) {
			continue
		}
		if err != nil {
			return nil, mapErr(call{op: op, key: recs[i], want: "string"}, err)
		}
		p, err := decodeParked(op, recs[i], raw)
		if err != nil {
			return nil, err
		}
		out = append(out, p)
	}
	sortParked(out)
	return out, nil
}

// sortParked orders entries oldest first, then by subscription and
// aggregate so that equal times list the same way every time.
func sortParked(ps []runtime.Parked) {
	slices.SortFunc(ps, func(a, b runtime.Parked) int {
		return cmp.Or(a.ParkedAt.Compare(b.ParkedAt),
			cmp.Compare(a.Subscription, b.Subscription),
			cmp.Compare(a.Aggregate, b.Aggregate))
	})
}

// GetParked returns the entry of (subscription, aggregate) through the
// index, or runtime.ErrNotParked.
func (s *Store) GetParked(ctx context.Context, subscription, aggregate string) (runtime.Parked, error) {
	const op = "get parked"
	if err := validSubscription(op, subscription); err != nil {
		return runtime.Parked{}, err
	}
	if err := nonEmpty(op, "aggregate", aggregate); err != nil {
		return runtime.Parked{}, err
	}
	c := call{op: op, subscription: subscription, aggregate: aggregate}
	rec, err := s.recordKey(ctx, c)
	if err != nil {
		return runtime.Parked{}, err
	}
	raw, err := s.client.Get(ctx, rec).Result()
	if isNil(err) {
		return runtime.Parked{}, c.entryErr(runtime.ErrNotParked)
	}
	if err != nil {
		c.key, c.want = rec, "string"
		return runtime.Parked{}, mapErr(c, err)
	}
	return decodeParked(op, rec, raw)
}

// recordKey looks the record key of c's entry up in the index.
func (s *Store) recordKey(ctx context.Context, c call) (string, error) {
	idx := ParkedIndexKey(c.subscription)
	rec, err := s.client.HGet(ctx, idx, c.aggregate).Result()
	if isNil(err) {
		return "", c.entryErr(runtime.ErrNotParked)
	}
	if err != nil {
		c.key, c.want = idx, "hash"
		return "", mapErr(c, err)
	}
	return rec, nil
}

func decodeParked(op, key, raw string) (runtime.Parked, error) {
	var p runtime.Parked
	if err := json.Unmarshal([]byte(raw), &p); err != nil {
		return runtime.Parked{}, fmt.Errorf("redisstore: %s: key %q does not hold a JSON parked entry: %w", op, key, err)
	}
	return p, nil
}

// RequestRetry records an operator's retry request in the entry and sets
// its status to retrying, then signals the subscription's watchers. It
// needs no fence: the owner acts on the request under its own.
// runtime.ErrNotParked when there is no entry, runtime.ErrUnrecoverable
// when the entry is unrecoverable (only a skip resolves it).
func (s *Store) RequestRetry(ctx context.Context, subscription, aggregate, by string) error {
	return s.request(ctx, "request retry", runtime.ActionRetry, subscription, aggregate, "", by)
}

// RequestSkip records an operator's skip request in the entry (its status
// stays), then signals the subscription's watchers. runtime.ErrNotParked
// when there is no entry.
func (s *Store) RequestSkip(ctx context.Context, subscription, aggregate, reason, by string) error {
	return s.request(ctx, "request skip", runtime.ActionSkip, subscription, aggregate, reason, by)
}

// request finds the record through the index, sets the request in one
// script (RequestedAt is the server's time), and publishes the aggregate
// on RequestsChannel. A lost signal is not an error: signals are hints,
// and owners re-read their entries' requests.
func (s *Store) request(ctx context.Context, op string, action runtime.Action, subscription, aggregate, reason, by string) error {
	if err := validSubscription(op, subscription); err != nil {
		return err
	}
	if err := nonEmpty(op, "aggregate", aggregate); err != nil {
		return err
	}
	c := call{op: op, subscription: subscription, aggregate: aggregate}
	rec, err := s.recordKey(ctx, c)
	if err != nil {
		return err
	}
	c.keys = []string{rec}
	if err := requestScript.Run(ctx, s.client, c.keys, string(action), reason, by).Err(); err != nil {
		return mapErr(c, err)
	}
	// The request is recorded: a failed publish loses only the hint.
	_ = s.client.Publish(ctx, RequestsChannel(subscription), aggregate).Err()
	return nil
}

// WatchRequests subscribes to subscription's RequestsChannel and sends the
// aggregate of every request recorded after it returns, until ctx ends;
// then it closes the channel and the subscription.
//
// The subscription is confirmed by the server before WatchRequests
// returns, so no request made after the return is missed by the server.
// Signals are hints: when the caller falls behind and the buffer
// (WithWatchBuffer) is full they are dropped, and while go-redis
// reconnects a lost connection they are lost; owners re-read their
// entries' requests periodically.
func (s *Store) WatchRequests(ctx context.Context, subscription string) (<-chan string, error) {
	const op = "watch requests"
	if err := validSubscription(op, subscription); err != nil {
		return nil, err
	}
	ps := s.client.Subscribe(ctx, RequestsChannel(subscription))
	msg, err := ps.Receive(ctx)
	if err != nil {
		_ = ps.Close()
		return nil, mapErr(call{op: op}, err)
	}
	if _, ok := msg.(*redis.Subscription); !ok {
		_ = ps.Close()
		return nil, fmt.Errorf("redisstore: %s: unexpected first reply %T", op, msg)
	}
	out := make(chan string, s.cfg.watchBuffer)
	go forward(ctx, ps, out, s.cfg.watchBuffer)
	return out, nil
}

// forward copies payloads from the subscription to out without ever
// blocking on out, so a slow watcher cannot stall go-redis's reader (and
// with it the subscription's health checks).
func forward(ctx context.Context, ps *redis.PubSub, out chan<- string, size int) {
	defer close(out)
	defer ps.Close()
	msgs := ps.Channel(redis.WithChannelSize(size))
	for {
		select {
		case <-ctx.Done():
			return
		case m, ok := <-msgs:
			if !ok {
				return
			}
			select {
			case out <- m.Payload:
			default:
			}
		}
	}
}

func validEntry(op string, f broker.Fence, subscription, aggregate string) error {
	if err := validFence(op, f); err != nil {
		return err
	}
	if err := validSubscription(op, subscription); err != nil {
		return err
	}
	return nonEmpty(op, "aggregate", aggregate)
}
