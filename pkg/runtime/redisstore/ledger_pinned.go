package redisstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/protctl/protctl/pkg/runtime/internal/storecontract"
	"github.com/protctl/protctl/pkg/runtime/ledger"
)

var _ ledger.PinnedRequester = (*Store)(nil)

// RequestPinned records r on its entry only while the entry matches
// r.Pin, and at most once per r.Token (ledger.PinnedRequester). It
// takes four round trips:
//
//  1. HGET the record key that an earlier call with r.Token tried for
//     this entry from RequestTokensKey(r.Token);
//  2. find the entry's record through the indexes (two round trips, as
//     GetParked); when it is gone, or is another record than the earlier
//     call's, look for the earlier record's marker (one more): found, the
//     request was recorded there (*ledger.AlreadyRequestedError);
//  3. when the record is new to the token, note it in RequestTokensKey
//     (one script: HSET and the TTL), before anything is recorded, so
//     that a repeat after the owner resolved the entry still finds its
//     marker;
//  4. one script on the record and its RequestMarkerKey (one slot): the
//     marker exists (recorded before); else the pin is checked, the
//     request set with r.Token, and the marker written with the TTL
//     (WithRequestTokenTTL), all in one step.
//
// Then the aggregate is published on RequestsChannel, as by
// RequestRetry. Whatever point a caller is killed at, a repeat either
// finds the marker or records the request now: never twice.
func (s *Store) RequestPinned(ctx context.Context, r ledger.PinnedRequest) error {
	const op = "request pinned"
	if err := storecontract.Pinned(op, r); err != nil {
		return err
	}
	e := entryName{r.Subscription, r.Aggregate}
	tokens, field := RequestTokensKey(r.Token), tokenField(r)
	prev, err := s.client.HGet(ctx, tokens, field).Result()
	if err != nil && !isNil(err) {
		return mapErr(call{Op: op, Key: tokens, Want: "hash"}, err)
	}
	rec, _, err := s.entry(ctx, op, e, r.Partition)
	if prev != "" && (errors.Is(err, ledger.ErrNotParked) || (err == nil && rec != prev)) {
		marker := RequestMarkerKey(prev, r.Token)
		m, merr := s.client.Get(ctx, marker).Result()
		switch {
		case merr == nil:
			return alreadyRequested(op, r, marker, m)
		case !isNil(merr):
			return mapErr(call{Op: op, Key: marker, Want: "string"}, merr)
		}
	}
	if err != nil {
		return err
	}
	ttl := ttlMillis(s.cfg.tokenTTL)
	if rec != prev {
		if err := requestToken.Run(ctx, s.client, []string{tokens}, field, rec, ttl).Err(); err != nil {
			return mapErr(call{Op: op, Key: tokens, Want: "hash"}, err)
		}
	}
	marker := RequestMarkerKey(rec, r.Token)
	keys := []string{rec, marker}
	res, err := requestPinned.Run(ctx, s.client, keys,
		string(r.Action), r.SkipReason(), r.By, r.Token, ttl,
		r.Pin.Position, r.Pin.Attempts, r.Pin.Generation, string(r.Pin.Status), string(r.Pin.Request)).StringSlice()
	if err != nil {
		return mapEntryErr(call{Op: op, Keys: keys}, e, err)
	}
	if len(res) != 2 {
		return fmt.Errorf("redisstore: %s: unexpected reply %q", op, res)
	}
	switch res[0] {
	case "done":
		return alreadyRequested(op, r, marker, res[1])
	case "changed":
		now, err := decodeParked(op, rec, res[1])
		if err != nil {
			return err
		}
		return fmt.Errorf("redisstore: %s: %w", op, &ledger.ParkChangedError{
			Subscription: r.Subscription, Partition: r.Partition, Aggregate: r.Aggregate, Pin: r.Pin, Now: now})
	}
	// The request is recorded: a failed publish loses only the hint.
	_ = s.client.Publish(ctx, RequestsChannel(r.Subscription), r.Aggregate).Err()
	return nil
}

// tokenField names r's entry in RequestTokensKey: the subscription and
// the partition as asked, each with its length, then the aggregate.
func tokenField(r ledger.PinnedRequest) string {
	return strconv.Itoa(len(r.Subscription)) + ":" + r.Subscription + ":" +
		strconv.Itoa(len(r.Partition)) + ":" + r.Partition + ":" + r.Aggregate
}

// requestMarker is a RequestMarkerKey's value.
type requestMarker struct {
	Action ledger.Action `json:"action"`
	At     time.Time     `json:"at"`
	By     string        `json:"by,omitempty"`
}

func alreadyRequested(op string, r ledger.PinnedRequest, key, raw string) error {
	var m requestMarker
	if err := json.Unmarshal([]byte(raw), &m); err != nil {
		return fmt.Errorf("redisstore: %s: key %q does not hold a request marker: %w", op, key, err)
	}
	return fmt.Errorf("redisstore: %s: %w", op, &ledger.AlreadyRequestedError{
		Subscription: r.Subscription, Partition: r.Partition, Aggregate: r.Aggregate,
		Token: r.Token, Action: m.Action, By: m.By, At: m.At})
}
