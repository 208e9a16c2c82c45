package redisstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/protctl/protctl/pkg/internal/redisadapter"
	"github.com/protctl/protctl/pkg/runtime/internal/storecontract"
	"github.com/protctl/protctl/pkg/runtime/placement"
)

// Operator placement: node modes (cordon, drain) and pins (move), per
// service, in the service's slot beside its membership
// (docs/decisions/0046-drain-cordon-move.md):
//
//	protctl:{S}:modes      HASH node -> JSON placement.ModeRecord
//	protctl:{S}:pins       HASH PinField(scope, partition) -> JSON placement.Pin
//	protctl:{S}:placement  Pub/Sub channel: a mode or pin changed
//
// Nothing here expires: a mode survives the node's restart until an
// operator uncordons it, and a pin stays (ignored while its node is not
// a live, active member) until it is removed.

// ErrPlacementChanged is returned by CASNodeMode and CASPin when the
// field no longer holds what the caller saw: nothing was changed.
var ErrPlacementChanged = errors.New("redisstore: placement changed since it was read")

// ModesKey is the HASH of service's node modes.
func ModesKey(service string) string { return prefix + "{" + service + "}:modes" }

// PinsKey is the HASH of service's pins.
func PinsKey(service string) string { return prefix + "{" + service + "}:pins" }

// PlacementChannel is the Pub/Sub channel on which a change of service's
// modes or pins is announced (the message is the field changed).
func PlacementChannel(service string) string { return prefix + "{" + service + "}:placement" }

// PinField names a pin in PinsKey: the scope's length first, so that no
// (scope, partition) pair can spell another's field when either contains
// ':'.
func PinField(scope, partition string) string {
	return strconv.Itoa(len(scope)) + ":" + scope + ":" + partition
}

// RawPlacement returns service's stored modes (node -> JSON) and pins
// (PinField -> JSON) as stored, for plans that must compare them
// unchanged later (CASNodeMode, CASPin). One round trip.
func (s *Store) RawPlacement(ctx context.Context, service string) (modes, pins map[string]string, err error) {
	const op = "read placement"
	if err := storecontract.Service(op, service); err != nil {
		return nil, nil, err
	}
	p := s.client.Pipeline()
	m := p.HGetAll(ctx, ModesKey(service))
	pn := p.HGetAll(ctx, PinsKey(service))
	if _, err := p.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		key := ModesKey(service)
		if m.Err() == nil {
			key = PinsKey(service)
		}
		return nil, nil, mapErr(call{Op: op, Key: key, Want: "hash"}, err)
	}
	return m.Val(), pn.Val(), nil
}

// ReadPlacement returns service's node modes and pins, decoded
// (placement.Reader). A field that does not decode is skipped and
// listed in the state's Skipped (DecodePlacement); an error is a failed
// read of either key (Redis down, a key of another type).
func (s *Store) ReadPlacement(ctx context.Context, service string) (placement.State, error) {
	modes, pins, err := s.RawPlacement(ctx, service)
	if err != nil {
		return placement.State{}, err
	}
	return DecodePlacement(service, modes, pins), nil
}

// DecodePlacement decodes what RawPlacement returned. A field that does
// not decode (bad JSON, a record of a newer schema this binary cannot
// read) is left out and reported in Skipped, naming its key and field,
// rather than failing the whole read: one bad record must not stop every
// node from applying membership changes
// (docs/decisions/0046-drain-cordon-move.md).
func DecodePlacement(service string, modes, pins map[string]string) placement.State {
	st := placement.State{Modes: make(map[string]placement.ModeRecord, len(modes))}
	for _, node := range slices.Sorted(maps.Keys(modes)) {
		var r placement.ModeRecord
		if err := json.Unmarshal([]byte(modes[node]), &r); err != nil {
			st.Skipped = append(st.Skipped, fmt.Errorf("redisstore: read placement: field %q of %q does not hold a JSON node mode: %w", node, ModesKey(service), err))
			continue
		}
		r.Node = node
		st.Modes[node] = r
	}
	for _, field := range slices.Sorted(maps.Keys(pins)) {
		var p placement.Pin
		if err := json.Unmarshal([]byte(pins[field]), &p); err != nil {
			st.Skipped = append(st.Skipped, fmt.Errorf("redisstore: read placement: field %q of %q does not hold a JSON pin: %w", field, PinsKey(service), err))
			continue
		}
		st.Pins = append(st.Pins, p)
	}
	return st
}

// WatchPlacement signals changes of service's modes and pins until ctx
// ends or its connection is lost (placement.Reader); signals that come
// while one is pending merge into it. Signals are hints: a node re-reads
// on its heartbeat too.
func (s *Store) WatchPlacement(ctx context.Context, service string) (<-chan struct{}, error) {
	const op = "watch placement"
	if err := storecontract.Service(op, service); err != nil {
		return nil, err
	}
	ch, err := redisadapter.WatchChanges(ctx, s.client, PlacementChannel(service))
	if err != nil {
		return nil, mapErr(call{Op: op}, err)
	}
	return ch, nil
}

// CASNodeMode sets node's mode to rec (nil deletes it: the node is
// active) only while the stored record is still expect (nil: none
// stored), and announces the change, in one script. It returns
// ErrPlacementChanged when the record moved. rec's encoding is stored.
func (s *Store) CASNodeMode(ctx context.Context, service, node string, expect *string, rec *placement.ModeRecord) error {
	const op = "set node mode"
	if err := storecontract.Node(op, service, node); err != nil {
		return err
	}
	if rec != nil {
		switch rec.Mode {
		case placement.Cordoned, placement.Draining:
		default:
			return storecontract.Invalid(op, "mode", strconv.Quote(string(rec.Mode)), `want "cordoned" or "draining"`)
		}
		rec.Node = node
	}
	return s.cas(ctx, op, ModesKey(service), node, PlacementChannel(service), expect, rec)
}

// CASPin sets the pin of (scope, partition) to pin (nil removes it) only
// while the stored pin is still expect (nil: none stored), and announces
// the change, in one script. ErrPlacementChanged when it moved.
func (s *Store) CASPin(ctx context.Context, service, scope, partition string, expect *string, pin *placement.Pin) error {
	const op = "set pin"
	if err := storecontract.Service(op, service); err != nil {
		return err
	}
	if err := storecontract.NonEmpty(op, "scope", scope); err != nil {
		return err
	}
	if err := storecontract.NonEmpty(op, "partition", partition); err != nil {
		return err
	}
	if pin != nil {
		if err := storecontract.NonEmpty(op, "node", pin.Node); err != nil {
			return err
		}
		pin.Scope, pin.Partition = scope, partition
	}
	return s.cas(ctx, op, PinsKey(service), PinField(scope, partition), PlacementChannel(service), expect, pin)
}

func (s *Store) cas(ctx context.Context, op, key, field, channel string, expect *string, v any) error {
	exists, want := "0", ""
	if expect != nil {
		exists, want = "1", *expect
	}
	set, data := "0", ""
	if v != nil && !isNilPtr(v) {
		b, err := json.Marshal(v)
		if err != nil {
			return fmt.Errorf("redisstore: %s: %w", op, err)
		}
		set, data = "1", string(b)
	}
	n, err := placementCAS.Run(ctx, s.client, []string{key}, field, exists, want, set, data, channel).Int()
	if err != nil {
		return mapErr(call{Op: op, Keys: []string{key}}, err)
	}
	if n == 0 {
		return fmt.Errorf("%w: %s of %s", ErrPlacementChanged, strconv.Quote(field), key)
	}
	return nil
}

func isNilPtr(v any) bool {
	switch p := v.(type) {
	case *placement.ModeRecord:
		return p == nil
	case *placement.Pin:
		return p == nil
	}
	return false
}

// ParsePinField splits a PinField back into (scope, partition).
func ParsePinField(field string) (scope, partition string, ok bool) {
	n, rest, found := strings.Cut(field, ":")
	if !found {
		return "", "", false
	}
	l, err := strconv.Atoi(n)
	if err != nil || l < 0 || l >= len(rest) || rest[l] != ':' {
		return "", "", false
	}
	return rest[:l], rest[l+1:], true
}

var _ placement.Reader = (*Store)(nil)
