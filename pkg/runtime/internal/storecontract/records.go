package storecontract

import (
	"cmp"
	"encoding/json"
	"slices"
	"time"
	"unicode/utf8"

	"github.com/protctl/protctl/pkg/runtime"
	"github.com/protctl/protctl/pkg/runtime/ledger"
)

// ParkDefaults is the entry Ledger.Park stores for p: an empty Status
// means ledger.StatusParked, Error is cut to ledger.MaxErrorLen bytes,
// and a zero ParkedAt is now().
func ParkDefaults(p ledger.Parked, now func() time.Time) ledger.Parked {
	if p.Status == "" {
		p.Status = ledger.StatusParked
	}
	p.Error = ledger.TruncateError(p.Error)
	if p.ParkedAt.IsZero() {
		p.ParkedAt = now()
	}
	return p
}

// EncodeStatus is the status record Membership.Heartbeat stores for st,
// without its held partitions (EncodeHeld; docs/decisions/0051): a zero
// LastSeen is now(), and nil BackingOff, Paused and Throttled are empty
// lists, so that readers of the JSON (the CLI's -o json) see one shape.
func EncodeStatus(st runtime.NodeStatus, now func() time.Time) ([]byte, error) {
	if st.LastSeen.IsZero() {
		st.LastSeen = now()
	}
	if st.BackingOff == nil {
		st.BackingOff = []string{}
	}
	if st.Paused == nil {
		st.Paused = []string{}
	}
	if st.Throttled == nil {
		st.Throttled = []string{}
	}
	type record runtime.NodeStatus // no methods
	return json.Marshal(struct {
		record
		// Held shadows record's and is left out: the held partitions are
		// a record of their own.
		Held *struct{} `json:"held,omitempty"`
	}{record: record(st)})
}

// EncodeHeld is the record of a node's held partitions that
// Membership.Heartbeat stores beside its status record:
// {"tag":tag,"held":[...]}, the list never null. tag names this write
// (redisstore checks it before it extends the record unchanged); it
// must need no JSON escaping, as HeldTagPrefix assumes.
func EncodeHeld(tag string, held []runtime.HeldPartition) ([]byte, error) {
	if held == nil {
		held = []runtime.HeldPartition{}
	}
	return json.Marshal(heldRecord{Tag: tag, Held: held})
}

// HeldTagPrefix is how a held record written with tag begins.
func HeldTagPrefix(tag string) string { return `{"tag":"` + tag + `",` }

type heldRecord struct {
	Tag  string                  `json:"tag"`
	Held []runtime.HeldPartition `json:"held"`
}

// DecodeStatus reads a status record. withHeld false leaves Held nil
// (Membership.Live); true makes it the list a record of a release that
// kept the held partitions in the status record has, else empty, for
// DecodeHeld to fill from the held record.
func DecodeStatus(data []byte, withHeld bool) (runtime.NodeStatus, error) {
	var st runtime.NodeStatus
	if err := json.Unmarshal(data, &st); err != nil {
		return st, err
	}
	switch {
	case !withHeld:
		st.Held = nil
	case st.Held == nil:
		st.Held = []runtime.HeldPartition{}
	}
	return st, nil
}

// DecodeHeld sets st.Held from a held record (EncodeHeld).
func DecodeHeld(st *runtime.NodeStatus, data []byte) error {
	var r heldRecord
	if err := json.Unmarshal(data, &r); err != nil {
		return err
	}
	if r.Held == nil {
		r.Held = []runtime.HeldPartition{}
	}
	st.Held = r.Held
	return nil
}

// SortParked orders entries as Ledger.ListParked returns them: oldest
// ParkedAt first, then by subscription, aggregate and partition, so that
// equal times list the same way every time.
func SortParked(ps []ledger.Parked) {
	slices.SortFunc(ps, func(a, b ledger.Parked) int {
		return cmp.Or(a.ParkedAt.Compare(b.ParkedAt),
			cmp.Compare(a.Subscription, b.Subscription),
			cmp.Compare(a.Aggregate, b.Aggregate),
			cmp.Compare(a.Partition, b.Partition))
	})
}

// ParkedJSON is an entry as both stores keep it: ledger.Parked's fields
// and, when the aggregate is not valid UTF-8 (a binary Kafka key or
// header), its bytes as well. JSON strings carry UTF-8 only: encoding/json
// writes other bytes as U+FFFD, an aggregate nobody has. Read back under
// that name, the entry matched none of the owner's aggregates: its poll
// dropped the park (the aggregate's later records ran past the parked
// head), a new owner adopted a name no record has, and an operator's
// retry or skip named a record that does not exist.
type ParkedJSON struct {
	ledger.Parked
	// AggregateBytes is Aggregate's bytes (base64 in JSON) when they are
	// not valid UTF-8; Aggregate then holds their U+FFFD rendering, for
	// readers of the JSON.
	AggregateBytes []byte `json:"aggregateBytes,omitempty"`
}

// NewParkedJSON is p as it is stored.
func NewParkedJSON(p ledger.Parked) ParkedJSON {
	if utf8.ValidString(p.Aggregate) {
		return ParkedJSON{Parked: p}
	}
	return ParkedJSON{Parked: p, AggregateBytes: []byte(p.Aggregate)}
}

// Entry is the entry r stores, its aggregate's bytes as they were.
func (r ParkedJSON) Entry() ledger.Parked {
	p := r.Parked
	if r.AggregateBytes != nil {
		p.Aggregate = string(r.AggregateBytes)
	}
	return p
}

// EncodeParked is p's stored JSON (ParkedJSON).
func EncodeParked(p ledger.Parked) ([]byte, error) {
	return json.Marshal(NewParkedJSON(p))
}

// DecodeParked reads an entry's stored JSON (ParkedJSON).
func DecodeParked(data []byte) (ledger.Parked, error) {
	var r ParkedJSON
	if err := json.Unmarshal(data, &r); err != nil {
		return ledger.Parked{}, err
	}
	return r.Entry(), nil
}
