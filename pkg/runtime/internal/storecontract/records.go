package storecontract

import (
	"cmp"
	"encoding/json"
	"slices"
	"time"

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

// EncodeStatus is the record Membership.Heartbeat stores for st: a zero
// LastSeen is now(), and nil Held, Paused and Throttled are empty lists,
// so that readers of the JSON (the CLI's -o json) see one shape.
func EncodeStatus(st runtime.NodeStatus, now func() time.Time) ([]byte, error) {
	if st.LastSeen.IsZero() {
		st.LastSeen = now()
	}
	if st.Held == nil {
		st.Held = []runtime.HeldPartition{}
	}
	if st.Paused == nil {
		st.Paused = []string{}
	}
	if st.Throttled == nil {
		st.Throttled = []string{}
	}
	return json.Marshal(st)
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
