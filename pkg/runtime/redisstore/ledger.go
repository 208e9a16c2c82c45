package redisstore

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/protctl/protctl/pkg/broker"
	"github.com/protctl/protctl/pkg/internal/redisadapter"
	"github.com/protctl/protctl/pkg/runtime/internal/storecontract"
	"github.com/protctl/protctl/pkg/runtime/ledger"
)

// Park creates or replaces the entry of (p.Subscription, f's partition,
// p.Aggregate), fenced by f; the aggregate's entries on other partitions
// (under other leases) stay. It takes three round trips, in this order:
//
//  1. the index script adds the entry's record key
//     (RecordKey(f.LeaseKey, ...)) with a new park id to the aggregate's
//     field of ParkedEntriesKey;
//  2. one pipeline: SADD the subscription to ParkedSubscriptionsKey, and
//     HSET the aggregate to the record key in ParkedIndexKey (the layout
//     before decision 0007, for nodes and CLIs of earlier versions);
//  3. the fenced script: the lease must hold exactly f.Token, then SET
//     the record (with the park id).
//
// The indexes live in other slots than the record, so they cannot be
// written in the fenced script. Writing them first means a record never
// exists without its index entry; a refused park can leave an index entry
// without a record, which every reader skips. When the record key holds
// another type the index entries this call added are taken back, so the
// refused call changes nothing a reader can see. Once Park returned,
// every reader that starts later finds the entry: only a Resolve of this
// very park (its park id) drops it from ParkedEntriesKey.
//
// A stale f fails with a *broker.LeaseLostError (Op "park"). p.Error is
// cut to ledger.MaxErrorLen bytes; an empty p.Status means
// ledger.StatusParked and a zero p.ParkedAt the local time.
func (s *Store) Park(ctx context.Context, f broker.Fence, p ledger.Parked) error {
	const op = "park"
	if err := storecontract.Park(op, f, p); err != nil {
		return err
	}
	p = storecontract.ParkDefaults(p, s.cfg.now)
	id, err := newParkID()
	if err != nil {
		return fmt.Errorf("redisstore: %s: %w", op, err)
	}
	data, err := json.Marshal(storedParked{ParkedJSON: storecontract.NewParkedJSON(p), ParkID: id})
	if err != nil {
		return fmt.Errorf("redisstore: %s: %w", op, err)
	}
	rec := RecordKey(f.LeaseKey, p.Subscription, p.Aggregate)
	entries, idx := ParkedEntriesKey(p.Subscription), ParkedIndexKey(p.Subscription)
	if err := indexScript.Run(ctx, s.client, []string{entries}, "add", p.Aggregate, rec, id).Err(); err != nil {
		return mapErr(call{Op: op, Keys: []string{entries}}, err)
	}
	var sadd, added *redis.IntCmd
	cmds, err := s.client.Pipelined(ctx, func(pl redis.Pipeliner) error {
		sadd = pl.SAdd(ctx, ParkedSubscriptionsKey, p.Subscription)
		added = pl.HSet(ctx, idx, p.Aggregate, rec)
		return nil
	})
	// undo takes back the index entries of this call: this park's id in
	// ParkedEntriesKey, and the old index's entry only when this call
	// created it (one that existed may be another call's, for the same
	// record).
	undo := func() {
		_ = indexScript.Run(ctx, s.client, []string{entries}, "drop", p.Aggregate, rec, id).Err()
		if n, err := added.Result(); err == nil && n == 1 {
			_ = unindexScript.Run(ctx, s.client, []string{idx}, p.Aggregate, rec).Err()
		}
	}
	if err := pipelineErr(call{Op: op}, cmds, err); err != nil {
		undo()
		return err
	}
	if err := sadd.Err(); err != nil {
		undo()
		return mapErr(call{Op: op, Key: ParkedSubscriptionsKey, Want: "set"}, err)
	}
	if err := added.Err(); err != nil {
		undo()
		return mapErr(call{Op: op, Key: idx, Want: "hash"}, err)
	}
	keys := []string{f.LeaseKey, rec}
	if err := parkScript.Run(ctx, s.client, keys, f.Token, data).Err(); err != nil {
		err = mapErr(call{Op: op, Keys: keys, Fence: &f}, err)
		// A record key of another type cannot be a concurrent park's
		// record, so taking the index entries back is safe. After a lost
		// lease it is not for the old index: the new owner may be parking
		// the same record (ParkedEntriesKey keeps the new owner's park id).
		if errors.Is(err, broker.ErrWrongType) {
			undo()
		}
		return err
	}
	return nil
}

// storedParked is a record as stored: the entry and the id of the park
// that wrote it, which Resolve hands to the index script so that it drops
// only this park's index entry.
type storedParked struct {
	storecontract.ParkedJSON
	ParkID string `json:"parkId"`
}

func newParkID() (string, error) {
	var b [12]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	return hex.EncodeToString(b[:]), nil
}

// SetStatus sets the status of the entry of (subscription, aggregate)
// parked under f's lease and clears its request, in one fenced script.
// A stale f fails with a *broker.LeaseLostError (Op "set status"); a
// missing entry with ledger.ErrNotParked.
func (s *Store) SetStatus(ctx context.Context, f broker.Fence, subscription, aggregate string, status ledger.Status) error {
	const op = "set status"
	if err := storecontract.SetStatus(op, f, subscription, aggregate, status); err != nil {
		return err
	}
	keys := []string{f.LeaseKey, RecordKey(f.LeaseKey, subscription, aggregate)}
	if err := setStatusScript.Run(ctx, s.client, keys, f.Token, string(status)).Err(); err != nil {
		return mapEntryErr(call{Op: op, Keys: keys, Fence: &f}, entryName{subscription, aggregate}, err)
	}
	return nil
}

// Resolve deletes the entry of (subscription, f's partition, aggregate)
// in one fenced script, then drops it from the indexes: from
// ParkedEntriesKey only while the aggregate's field holds the park id of
// the record deleted (a newer park of the same record, by a new owner
// after this one stalled past its lease, keeps its entry), from
// ParkedIndexKey only while it points at the record. A stale f fails
// with a *broker.LeaseLostError (Op "resolve") and deletes nothing.
// Resolving a missing entry is not an error.
func (s *Store) Resolve(ctx context.Context, f broker.Fence, subscription, aggregate string) error {
	const op = "resolve"
	if err := storecontract.Entry(op, f, subscription, aggregate); err != nil {
		return err
	}
	rec := RecordKey(f.LeaseKey, subscription, aggregate)
	keys := []string{f.LeaseKey, rec}
	id, err := resolveScript.Run(ctx, s.client, keys, f.Token).Text()
	deleted := err == nil
	if isNil(err) {
		err = nil
	}
	if err != nil {
		return mapErr(call{Op: op, Keys: keys, Fence: &f}, err)
	}
	entries, idx := ParkedEntriesKey(subscription), ParkedIndexKey(subscription)
	_, err = s.client.Pipelined(ctx, func(pl redis.Pipeliner) error {
		if deleted && id != "" {
			indexScript.Eval(ctx, pl, []string{entries}, "drop", aggregate, rec, id)
		}
		unindexScript.Eval(ctx, pl, []string{idx}, aggregate, rec)
		return nil
	})
	if err != nil {
		// The record is gone: readers skip the index entries left behind.
		return mapErr(call{Op: op, Keys: []string{entries, idx}}, err)
	}
	return nil
}

// decodeIndexed reads a ParkedEntriesKey field's value (see index.lua):
// pairs of record key and park id, each <length>:<bytes>.
func decodeIndexed(key, v string) ([]string, error) {
	var out []string
	for n := 0; v != ""; n++ {
		colon := strings.IndexByte(v, ':')
		if colon < 0 {
			return nil, fmt.Errorf("redisstore: key %q holds a bad ledger index value", key)
		}
		l, err := strconv.Atoi(v[:colon])
		if err != nil || l < 0 || colon+1+l > len(v) {
			return nil, fmt.Errorf("redisstore: key %q holds a bad ledger index value", key)
		}
		if n%2 == 0 {
			out = append(out, v[colon+1:colon+1+l])
		}
		v = v[colon+1+l:]
	}
	return out, nil
}

// ListParked returns subscription's entries ("" for every subscription
// in ParkedSubscriptionsKey), every partition's, oldest ParkedAt first.
// It reads the indexes (ParkedEntriesKey and the earlier layout's
// ParkedIndexKey, merged) in one pipeline, then the records in another:
// one round trip per server node each. Index entries whose record is
// gone (a refused park, a resolve that did not finish) are skipped.
func (s *Store) ListParked(ctx context.Context, subscription string) ([]ledger.Parked, error) {
	const op = "list parked"
	subs := []string{subscription}
	if subscription == "" {
		var err error
		subs, err = s.client.SMembers(ctx, ParkedSubscriptionsKey).Result()
		if err != nil {
			return nil, mapErr(call{Op: op, Key: ParkedSubscriptionsKey, Want: "set"}, err)
		}
		if len(subs) == 0 {
			return nil, nil
		}
	} else if err := storecontract.Subscription(op, subscription); err != nil {
		return nil, err
	}

	newCmds := make([]*redis.MapStringStringCmd, len(subs))
	oldCmds := make([]*redis.MapStringStringCmd, len(subs))
	cmds, err := s.client.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, sub := range subs {
			newCmds[i] = p.HGetAll(ctx, ParkedEntriesKey(sub))
			oldCmds[i] = p.HGetAll(ctx, ParkedIndexKey(sub))
		}
		return nil
	})
	if err := pipelineErr(call{Op: op}, cmds, err); err != nil {
		return nil, err
	}
	var recs []string
	seen := make(map[string]bool)
	add := func(rec string) {
		if !seen[rec] {
			seen[rec] = true
			recs = append(recs, rec)
		}
	}
	for i := range subs {
		m, err := newCmds[i].Result()
		if err != nil {
			return nil, mapErr(call{Op: op, Key: ParkedEntriesKey(subs[i]), Want: "hash"}, err)
		}
		for _, v := range m {
			rs, err := decodeIndexed(ParkedEntriesKey(subs[i]), v)
			if err != nil {
				return nil, err
			}
			for _, r := range rs {
				add(r)
			}
		}
		m, err = oldCmds[i].Result()
		if err != nil {
			return nil, mapErr(call{Op: op, Key: ParkedIndexKey(subs[i]), Want: "hash"}, err)
		}
		for _, r := range m {
			add(r)
		}
	}
	out, _, err := s.records(ctx, op, recs)
	if err != nil {
		return nil, err
	}
	storecontract.SortParked(out)
	return out, nil
}

// records GETs recs in one pipeline and decodes those that exist; keys
// are their record keys.
func (s *Store) records(ctx context.Context, op string, recs []string) (out []ledger.Parked, keys []string, err error) {
	if len(recs) == 0 {
		return nil, nil, nil
	}
	recCmds := make([]*redis.StringCmd, len(recs))
	cmds, err := s.client.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, rec := range recs {
			recCmds[i] = p.Get(ctx, rec)
		}
		return nil
	})
	if err := pipelineErr(call{Op: op}, cmds, err); err != nil {
		return nil, nil, err
	}
	out = make([]ledger.Parked, 0, len(recs))
	for i, c := range recCmds {
		raw, err := c.Result()
		if isNil(err) {
			continue
		}
		if err != nil {
			return nil, nil, mapErr(call{Op: op, Key: recs[i], Want: "string"}, err)
		}
		p, err := decodeParked(op, recs[i], raw)
		if err != nil {
			return nil, nil, err
		}
		out, keys = append(out, p), append(keys, recs[i])
	}
	return out, keys, nil
}

// GetParked returns the entry of (subscription, partition, aggregate)
// found through the indexes, or ledger.ErrNotParked; partition "" names
// the aggregate's only entry (an *ledger.AmbiguousParkedError when it
// is parked on several partitions).
func (s *Store) GetParked(ctx context.Context, subscription, partition, aggregate string) (ledger.Parked, error) {
	const op = "get parked"
	if err := storecontract.Aggregate(op, subscription, aggregate); err != nil {
		return ledger.Parked{}, err
	}
	_, p, err := s.entry(ctx, op, entryName{subscription, aggregate}, partition)
	return p, err
}

// entry finds the record of (e.subscription, partition, e.aggregate)
// through both indexes and reads it: two round trips.
func (s *Store) entry(ctx context.Context, op string, e entryName, partition string) (string, ledger.Parked, error) {
	recs, err := s.recordKeys(ctx, op, e)
	if err != nil {
		return "", ledger.Parked{}, err
	}
	all, allKeys, err := s.records(ctx, op, recs)
	if err != nil {
		return "", ledger.Parked{}, err
	}
	var (
		found []ledger.Parked
		keys  []string
	)
	for i, p := range all {
		if partition == "" || p.Partition == partition {
			found, keys = append(found, p), append(keys, allKeys[i])
		}
	}
	switch len(found) {
	case 0:
		return "", ledger.Parked{}, e.err(op, ledger.ErrNotParked)
	case 1:
		return keys[0], found[0], nil
	}
	if partition != "" {
		// Two records of one partition (under two lease layouts): the
		// newer park is the partition's entry.
		best := 0
		for i := range found {
			if found[i].ParkedAt.After(found[best].ParkedAt) {
				best = i
			}
		}
		return keys[best], found[best], nil
	}
	parts := make([]string, 0, len(found))
	for _, p := range found {
		parts = append(parts, p.Partition)
	}
	slices.Sort(parts)
	return "", ledger.Parked{}, &ledger.AmbiguousParkedError{Subscription: e.subscription, Aggregate: e.aggregate, Partitions: slices.Compact(parts)}
}

// recordKeys looks the record keys of e's aggregate up in both indexes,
// in one pipeline.
func (s *Store) recordKeys(ctx context.Context, op string, e entryName) ([]string, error) {
	entries, idx := ParkedEntriesKey(e.subscription), ParkedIndexKey(e.subscription)
	var nc, oc *redis.StringCmd
	cmds, err := s.client.Pipelined(ctx, func(p redis.Pipeliner) error {
		nc = p.HGet(ctx, entries, e.aggregate)
		oc = p.HGet(ctx, idx, e.aggregate)
		return nil
	})
	if err := pipelineErr(call{Op: op}, cmds, err); err != nil {
		return nil, err
	}
	var recs []string
	v, err := nc.Result()
	switch {
	case isNil(err):
	case err != nil:
		return nil, mapEntryErr(call{Op: op, Key: entries, Want: "hash"}, e, err)
	default:
		if recs, err = decodeIndexed(entries, v); err != nil {
			return nil, err
		}
	}
	old, err := oc.Result()
	switch {
	case isNil(err):
	case err != nil:
		return nil, mapEntryErr(call{Op: op, Key: idx, Want: "hash"}, e, err)
	case !slices.Contains(recs, old):
		recs = append(recs, old)
	}
	return recs, nil
}

func decodeParked(op, key, raw string) (ledger.Parked, error) {
	p, err := storecontract.DecodeParked([]byte(raw))
	if err != nil {
		return ledger.Parked{}, fmt.Errorf("redisstore: %s: key %q does not hold a JSON parked entry: %w", op, key, err)
	}
	return p, nil
}

// RequestRetry records an operator's retry request in the entry of
// (subscription, partition, aggregate) and sets its status to retrying,
// then signals the subscription's watchers. It needs no fence: the owner
// acts on the request under its own. ledger.ErrNotParked when there is
// no entry, ledger.ErrUnrecoverable when the entry is unrecoverable
// (only a skip resolves it), ledger.ErrAmbiguousParked as in GetParked.
func (s *Store) RequestRetry(ctx context.Context, subscription, partition, aggregate, by string) error {
	return s.request(ctx, "request retry", ledger.ActionRetry, subscription, partition, aggregate, "", by)
}

// RequestSkip records an operator's skip request in the entry (its status
// stays), then signals the subscription's watchers. ledger.ErrNotParked
// when there is no entry, ledger.ErrAmbiguousParked as in GetParked.
func (s *Store) RequestSkip(ctx context.Context, subscription, partition, aggregate, reason, by string) error {
	return s.request(ctx, "request skip", ledger.ActionSkip, subscription, partition, aggregate, reason, by)
}

// request finds the record through the indexes, sets the request in one
// script (RequestedAt is the server's time), and publishes the aggregate
// on RequestsChannel. A lost signal is not an error: signals are hints,
// and owners re-read their entries' requests.
func (s *Store) request(ctx context.Context, op string, action ledger.Action, subscription, partition, aggregate, reason, by string) error {
	if err := storecontract.Aggregate(op, subscription, aggregate); err != nil {
		return err
	}
	e := entryName{subscription, aggregate}
	rec, _, err := s.entry(ctx, op, e, partition)
	if err != nil {
		return err
	}
	// Resolved since it was read: the script finds no record
	// (ledger.ErrNotParked).
	keys := []string{rec}
	if err := requestScript.Run(ctx, s.client, keys, string(action), reason, by).Err(); err != nil {
		return mapEntryErr(call{Op: op, Keys: keys}, e, err)
	}
	// The request is recorded: a failed publish loses only the hint.
	_ = s.client.Publish(ctx, RequestsChannel(subscription), aggregate).Err()
	return nil
}

// WatchRequests subscribes to subscription's RequestsChannel and sends the
// aggregate of every request recorded after it returns, until ctx ends
// or a signal may have been lost; then it closes the channel and the
// subscription.
//
// The subscription is confirmed by the server before WatchRequests
// returns, so no request made after the return is missed by the server.
// A signal may have been lost when the connection failed or when the
// caller fell behind and the buffer (WithWatchBuffer) was full: the
// caller watches again and re-reads the ledger (redisadapter.Watch).
func (s *Store) WatchRequests(ctx context.Context, subscription string) (<-chan string, error) {
	const op = "watch requests"
	if err := storecontract.Subscription(op, subscription); err != nil {
		return nil, err
	}
	ch, err := redisadapter.Watch(ctx, s.client, RequestsChannel(subscription), s.cfg.watchBuffer)
	if err != nil {
		return nil, mapErr(call{Op: op}, err)
	}
	return ch, nil
}
