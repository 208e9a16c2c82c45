// Package memstore implements the runtime's stores in memory: the failure
// ledger (ledger.Ledger), node membership (runtime.Membership) and
// checkpoints (runtime.Checkpoints), with the same semantics as
// pkg/runtime/redisstore, for the embedded demo and fast tests.
//
// Fenced writes read the lease's value from the broker that grants the
// leases (Leases; memorybroker's Faults value is one) and write under the
// store's lock, which every store method takes: no store call can see the
// state between a fenced call's lease check and its write, which is the
// guarantee a Redis script gives. Values are kept as the JSON Redis would
// hold, so both stores hand back the same shapes.
//
// Time is the injected clock.Clock (WithClock): membership expiry, request
// times and the defaults of LastSeen and ParkedAt all read it, so tests
// move a clock.Fake instead of sleeping.
package memstore
