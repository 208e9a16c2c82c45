package storecontract

import (
	"cmp"
	"encoding/json"
	"slices"
	"time"

	"github.com/protctl/protctl/pkg/runtime"
)

// ParkDefaults is the entry Ledger.Park stores for p: an empty Status
// means runtime.StatusParked, Error is cut to runtime.MaxErrorLen bytes,
// and a zero ParkedAt is now().
func ParkDefaults(p runtime.Parked, now func() time.Time) runtime.Parked {
	if p.Status == "" {
		p.Status = runtime.StatusParked
	}
	p.Error = runtime.TruncateError(p.Error)
	if p.ParkedAt.IsZero() {
		p.ParkedAt = now()
	}
	return p
}

// EncodeStatus is the record Membership.Heartbeat stores for st: a zero
// LastSeen is now(), and nil Held, BackingOff, Paused and Throttled are
// empty lists,
// so that readers of the JSON (the CLI's -o json) see one shape.
func EncodeStatus(st runtime.NodeStatus, now func() time.Time) ([]byte, error) {
	if st.LastSeen.IsZero() {
		st.LastSeen = now()
	}
	if st.Held == nil {
		st.Held = []runtime.HeldPartition{}
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
	return json.Marshal(st)
}

// SortParked orders entries as Ledger.ListParked returns them: oldest
// ParkedAt first, then by subscription, aggregate and partition, so that
// equal times list the same way every time.
func SortParked(ps []runtime.Parked) {
	slices.SortFunc(ps, func(a, b runtime.Parked) int {
		return cmp.Or(a.ParkedAt.Compare(b.ParkedAt),
			cmp.Compare(a.Subscription, b.Subscription),
			cmp.Compare(a.Aggregate, b.Aggregate),
			cmp.Compare(a.Partition, b.Partition))
	})
}
