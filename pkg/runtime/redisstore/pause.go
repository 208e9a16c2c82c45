package redisstore

import (
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/protctl/protctl/pkg/internal/redisadapter"
	"github.com/protctl/protctl/pkg/runtime/pause"
)

// Operators' pauses (docs/decisions/0045-pause.md):
//
//	protctl:pauses:{<scope>/<sub>}          HASH selector -> JSON pause.Entry
//	protctl:pauses:{<scope>/<sub>}:changed  Pub/Sub channel: the entries changed
//	protctl:pauses:__subscriptions__        SET "<scope>/<sub>" that have had entries
//
// One key per (scope, subscription), in its own slot: every change is one
// script over it, and a node reads all of a subscription's entries in one
// HGETALL on each lease renewal tick.

//go:embed pause.lua
var pauseLua string

var pauseScript = newScript(pauseLua)

var _ pause.Store = (*Store)(nil)

// PausesKey is the HASH of subscription's pause entries in scope ("" for
// a Redis partitioned subscription, the lease group for a Kafka topic
// subscription).
func PausesKey(scope, subscription string) string {
	return prefix + "pauses:{" + scope + "/" + subscription + "}"
}

// PausedSubscriptionsKey is the SET of "<scope>/<subscription>" that
// have had pause entries, so that a listing finds them without a scan.
// SetPause adds to it before it records the entry (another slot): a
// member whose HASH is empty pauses nothing.
const PausedSubscriptionsKey = prefix + "pauses:__subscriptions__"

// PausesChannel is the Pub/Sub channel SetPause and RemovePause publish
// on after a change.
func PausesChannel(scope, subscription string) string {
	return PausesKey(scope, subscription) + ":changed"
}

// ErrPauseChanged is returned by SetPause and RemovePause when the entry
// is no longer as the caller saw it (a stale plan); nothing was changed.
var ErrPauseChanged = errors.New("redisstore: pause entry changed since it was read")

// ReadPauses implements pause.Store.
func (s *Store) ReadPauses(ctx context.Context, scope, subscription string) (pause.Set, error) {
	const op = "read pauses"
	key := PausesKey(scope, subscription)
	m, err := s.client.HGetAll(ctx, key).Result()
	if err != nil {
		return nil, mapErr(call{Op: op, Keys: []string{key}}, err)
	}
	ps := make(pause.Set, 0, len(m))
	for sel, v := range m {
		var p pause.Entry
		if err := json.Unmarshal([]byte(v), &p); err != nil {
			// A malformed entry still pauses what it names: holding a
			// key back by mistake is recoverable (resume), handling it
			// against the operator's wish is not.
			p = pause.Entry{}
		}
		p.Selector = pause.Selector(sel)
		ps = append(ps, p)
	}
	pause.Sort(ps)
	return ps, nil
}

// WatchPauses implements pause.Store.
func (s *Store) WatchPauses(ctx context.Context, scope, subscription string) (<-chan struct{}, error) {
	const op = "watch pauses"
	ch, err := redisadapter.WatchChanges(ctx, s.client, PausesChannel(scope, subscription))
	if err != nil {
		return nil, mapErr(call{Op: op}, err)
	}
	return ch, nil
}

// RawPause is an entry as stored (its JSON), what a plan records and
// SetPause and RemovePause compare; "" is no entry.
type RawPause string

// ReadPause returns the stored form of one entry ("" when there is none).
func (s *Store) ReadPause(ctx context.Context, scope, subscription string, sel pause.Selector) (RawPause, error) {
	key := PausesKey(scope, subscription)
	v, err := s.client.HGet(ctx, key, string(sel)).Result()
	if isNil(err) {
		return "", nil
	}
	if err != nil {
		return "", mapErr(call{Op: "read pause", Keys: []string{key}}, err)
	}
	return RawPause(v), nil
}

// SetPause records the entry sel (by and reason for display, the time is
// the server's) if it is still seen (""; or the entry replaced), then
// signals the change. It returns the entry written, or ErrPauseChanged.
func (s *Store) SetPause(ctx context.Context, scope, subscription string, sel pause.Selector, seen RawPause, by, reason string) (RawPause, error) {
	return s.changePause(ctx, "set pause", scope, subscription, sel, seen, "set", by, reason)
}

// RemovePause removes the entry sel if it is still seen, then signals the
// change. It returns the entry removed, or ErrPauseChanged.
func (s *Store) RemovePause(ctx context.Context, scope, subscription string, sel pause.Selector, seen RawPause) (RawPause, error) {
	return s.changePause(ctx, "remove pause", scope, subscription, sel, seen, "remove", "", "")
}

func (s *Store) changePause(ctx context.Context, op, scope, subscription string, sel pause.Selector, seen RawPause, verb, by, reason string) (RawPause, error) {
	if _, err := pause.Parse(string(sel)); err != nil {
		return "", err
	}
	if verb == "set" {
		if err := s.client.SAdd(ctx, PausedSubscriptionsKey, scope+"/"+subscription).Err(); err != nil {
			return "", mapErr(call{Op: op, Keys: []string{PausedSubscriptionsKey}}, err)
		}
	}
	keys := []string{PausesKey(scope, subscription)}
	res, err := pauseScript.Run(ctx, s.client, keys, string(sel), string(seen), verb, by, reason).Slice()
	if err != nil {
		return "", mapErr(call{Op: op, Keys: keys}, err)
	}
	if len(res) != 2 {
		return "", fmt.Errorf("redisstore: %s: unexpected reply %v", op, res)
	}
	entry, _ := res[1].(string)
	if ok, _ := res[0].(int64); ok != 1 {
		return RawPause(entry), fmt.Errorf("%w: %s of %q (now %q)", ErrPauseChanged, sel, subscription, entry)
	}
	// The change is made: a failed publish loses only the hint, which
	// the nodes' re-read on each renewal tick makes up for.
	_ = s.client.Publish(ctx, PausesChannel(scope, subscription), string(sel)).Err()
	return RawPause(entry), nil
}

// ReadAllPauses returns the entries of every subscription of scope that
// has any, by subscription: one SMEMBERS and one HGETALL per subscription
// that has had entries (they are few: pauses are an operator's).
func (s *Store) ReadAllPauses(ctx context.Context, scope string) (map[string]pause.Set, error) {
	const op = "read pauses"
	members, err := s.client.SMembers(ctx, PausedSubscriptionsKey).Result()
	if err != nil {
		return nil, mapErr(call{Op: op, Keys: []string{PausedSubscriptionsKey}}, err)
	}
	out := map[string]pause.Set{}
	for _, m := range members {
		if len(m) <= len(scope) || m[:len(scope)+1] != scope+"/" {
			continue
		}
		sub := m[len(scope)+1:]
		set, err := s.ReadPauses(ctx, scope, sub)
		if err != nil {
			return nil, err
		}
		if len(set) > 0 {
			out[sub] = set
		}
	}
	return out, nil
}

// ReadEveryPause returns the entries of every subscription of every scope
// that has any, by scope then subscription: ReadAllPauses over all the
// scopes at once, for a report that covers Redis partitioned
// subscriptions (scope "") and Kafka topic subscriptions ("S|topic:T")
// alike (`protctl check`). A member is "<scope>/<subscription>"; scopes
// hold no '/', so the first one ends the scope.
func (s *Store) ReadEveryPause(ctx context.Context) (map[string]map[string]pause.Set, error) {
	const op = "read pauses"
	members, err := s.client.SMembers(ctx, PausedSubscriptionsKey).Result()
	if err != nil {
		return nil, mapErr(call{Op: op, Keys: []string{PausedSubscriptionsKey}}, err)
	}
	out := map[string]map[string]pause.Set{}
	for _, m := range members {
		scope, sub, ok := strings.Cut(m, "/")
		if !ok {
			continue
		}
		set, err := s.ReadPauses(ctx, scope, sub)
		if err != nil {
			return nil, err
		}
		if len(set) == 0 {
			continue
		}
		if out[scope] == nil {
			out[scope] = map[string]pause.Set{}
		}
		out[scope][sub] = set
	}
	return out, nil
}
