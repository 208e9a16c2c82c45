package topic

import (
	"bytes"
	"hash/maphash"

	"github.com/twmb/franz-go/pkg/kgo"
)

// dedupSeed and dedupSeed2 key the dedup hashes; dedup memory never
// leaves the process.
var dedupSeed, dedupSeed2 = maphash.MakeSeed(), maphash.MakeSeed()

// identity says what is known of a lane item's identity.
type identity uint8

const (
	idNone  identity = iota // the record has none
	idKnown                 // laneItem.id is its hash
	idParse                 // not read yet: the envelope must be parsed
)

// headerIdentity hashes the record's identity from its id and version
// headers (Identity.Key: ID, or ID@Version), read in place. A record
// without an id header may carry the id in its envelope (idParse), unless
// its value does not even contain the id path's first key. It runs on
// delivery, under the partition's lock, so it does no parsing: that is
// envelopeIdentity's, on a worker.
func (t *Consumer) headerIdentity(r *kgo.Record) (uint64, identity) {
	if id, ok := lastHeader(r, t.idHeader); ok && len(id) > 0 {
		h := maphash.Bytes(dedupSeed2, id)
		if v, ok := lastHeader(r, t.versionHeader); ok && len(v) > 0 {
			h = h*0x9e3779b97f4a7c15 ^ maphash.Bytes(dedupSeed, v)
		}
		return h, idKnown
	}
	// A failed envelope lookup costs an error value per record: skip
	// values that cannot hold the id.
	if !bytes.Contains(r.Value, t.idPathKey) {
		return 0, idNone
	}
	return 0, idParse
}

// envelopeIdentity hashes the identity in the record's envelope (a record
// without an id header).
func (t *Consumer) envelopeIdentity(r *kgo.Record) (uint64, identity) {
	id, err := t.cfg.Identity.Identity(r)
	if err != nil {
		return 0, idNone
	}
	h := maphash.String(dedupSeed2, id.ID)
	if id.Version != "" {
		h = h*0x9e3779b97f4a7c15 ^ maphash.String(dedupSeed, id.Version)
	}
	return h, idKnown
}

// lastHeader returns the value of the last header named name, as
// kafkasource reads identities (Kafka allows repeats; the last wins).
func lastHeader(r *kgo.Record, name string) ([]byte, bool) {
	for i := len(r.Headers) - 1; i >= 0; i-- {
		if r.Headers[i].Key == name {
			return r.Headers[i].Value, true
		}
	}
	return nil, false
}

// aggregateOf is the record's aggregate; a record without one is ordered
// with the others of its partition.
func (t *Consumer) aggregateOf(r *kgo.Record, pstr string) string {
	if t.keyAggregate && len(r.Key) > 0 {
		return string(r.Key)
	}
	if a, err := t.cfg.Aggregate.Aggregate(r); err == nil {
		return a
	}
	return "partition:" + pstr
}

// recInfo is what delivery derives from a record alone: its identity and
// its aggregate. The shared reader derives it for a chunk of a fetch
// before taking the partition's lock (once for all subscriptions), so the
// lock is held only for the window and the lanes.
type recInfo struct {
	id      uint64
	idState identity
	keyed   bool   // the aggregate is the record's key (agg is not set)
	agg     string // the aggregate, when not keyed
}

func (t *Consumer) recInfoOf(r *kgo.Record, pstr string) recInfo {
	in := recInfo{keyed: t.keyAggregate && len(r.Key) > 0}
	in.id, in.idState = t.headerIdentity(r)
	if !in.keyed {
		in.agg = t.aggregateOf(r, pstr)
	}
	return in
}
