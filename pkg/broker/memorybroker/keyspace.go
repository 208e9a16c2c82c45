package memorybroker

import (
	"hash/fnv"
	"slices"
	"strings"
	"time"

	"github.com/protctl/protctl/pkg/broker"
)

// kind is the Redis type a key holds.
type kind uint8

const (
	kindString kind = iota + 1
	kindSet
	kindStream
)

func (k kind) String() string {
	switch k {
	case kindString:
		return "string"
	case kindSet:
		return "set"
	case kindStream:
		return "stream"
	}
	return "unknown"
}

// object is the value under one key. Only strings carry an expiry here,
// because leases are the only keys protctl sets a TTL on.
type object struct {
	kind     kind
	str      string
	expireAt time.Time // zero: no expiry
	set      *set
	stream   *stream
}

// set is a Redis set. For SSCAN-style paging it keeps, built on demand and
// dropped on every membership change, its members ordered by a 63-bit
// hash: a cursor is a position in hash space, so members present for a
// whole scan are returned even when others come and go, as with SSCAN.
type set struct {
	members map[string]struct{}
	byHash  []hashedMember // nil when stale
}

type hashedMember struct {
	hash   uint64
	member string
}

func newSet() *set { return &set{members: make(map[string]struct{})} }

func (s *set) add(m string) {
	if _, ok := s.members[m]; !ok {
		s.members[m] = struct{}{}
		s.byHash = nil
	}
}

func (s *set) has(m string) bool {
	_, ok := s.members[m]
	return ok
}

func (s *set) remove(m string) {
	if _, ok := s.members[m]; ok {
		delete(s.members, m)
		s.byHash = nil
	}
}

// sorted returns the members in lexical order (nil when empty).
func (s *set) sorted() []string {
	if len(s.members) == 0 {
		return nil
	}
	out := make([]string, 0, len(s.members))
	for m := range s.members {
		out = append(out, m)
	}
	slices.Sort(out)
	return out
}

func memberHash(m string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(m))
	return h.Sum64() >> 1
}

// scan returns about count members from cursor on and the next cursor (0
// when done). Cursor c > 0 means "members whose hash is >= c-1"; a page
// never splits members of equal hash, so none is skipped.
func (s *set) scan(cursor uint64, count int64) ([]string, uint64) {
	if s.byHash == nil {
		s.byHash = make([]hashedMember, 0, len(s.members))
		for m := range s.members {
			s.byHash = append(s.byHash, hashedMember{memberHash(m), m})
		}
		slices.SortFunc(s.byHash, func(a, b hashedMember) int {
			if a.hash != b.hash {
				if a.hash < b.hash {
					return -1
				}
				return 1
			}
			return strings.Compare(a.member, b.member)
		})
	}
	start := 0
	if cursor > 0 {
		start, _ = slices.BinarySearchFunc(s.byHash, cursor-1, func(e hashedMember, h uint64) int {
			switch {
			case e.hash < h:
				return -1
			case e.hash > h:
				return 1
			}
			return 0
		})
	}
	end := start
	for end < len(s.byHash) && (int64(end-start) < count || s.byHash[end].hash == s.byHash[end-1].hash) {
		end++
	}
	var page []string
	for _, e := range s.byHash[start:end] {
		page = append(page, e.member)
	}
	if end == len(s.byHash) {
		return page, 0
	}
	return page, s.byHash[end].hash + 1
}

// lookup returns the live object under key, deleting it first when it has
// expired: an expired key behaves as missing, as in Redis. A key expires
// when its TTL has fully run (at now >= expireAt).
func (b *Broker) lookup(key string, now time.Time) *object {
	o := b.keys[key]
	if o != nil && !o.expireAt.IsZero() && !now.Before(o.expireAt) {
		delete(b.keys, key)
		return nil
	}
	return o
}

func wrongType(op, key string, want, got kind) error {
	return &broker.WrongTypeError{Op: op, Key: key, Want: want.String(), Got: got.String()}
}

// streamAt returns the stream under key, nil when the key is missing.
func (b *Broker) streamAt(op, key string, now time.Time) (*stream, error) {
	o := b.lookup(key, now)
	if o == nil {
		return nil, nil
	}
	if o.kind != kindStream {
		return nil, wrongType(op, key, kindStream, o.kind)
	}
	return o.stream, nil
}

// setAt returns the set under key, nil when the key is missing.
func (b *Broker) setAt(op, key string, now time.Time) (*set, error) {
	o := b.lookup(key, now)
	if o == nil {
		return nil, nil
	}
	if o.kind != kindSet {
		return nil, wrongType(op, key, kindSet, o.kind)
	}
	return o.set, nil
}

// stringAt returns the string object under key, nil when the key is
// missing.
func (b *Broker) stringAt(op, key string, now time.Time) (*object, error) {
	o := b.lookup(key, now)
	if o == nil {
		return nil, nil
	}
	if o.kind != kindString {
		return nil, wrongType(op, key, kindString, o.kind)
	}
	return o, nil
}

// ensureStream returns s, or creates an empty stream under key when s is
// nil (the caller checked the key's type).
func (b *Broker) ensureStream(key string, s *stream) *stream {
	if s == nil {
		s = newStream()
		b.keys[key] = &object{kind: kindStream, stream: s}
	}
	return s
}

// ensureSet returns s, or creates an empty set under key when s is nil.
func (b *Broker) ensureSet(key string, s *set) *set {
	if s == nil {
		s = newSet()
		b.keys[key] = &object{kind: kindSet, set: s}
	}
	return s
}

// msOf is t in Unix milliseconds, clamped at 0 like a server clock.
func msOf(t time.Time) uint64 {
	ms := t.UnixMilli()
	if ms < 0 {
		return 0
	}
	return uint64(ms)
}
