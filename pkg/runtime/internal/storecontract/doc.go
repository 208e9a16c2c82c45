// Package storecontract holds the parts of the runtime's store contract
// (runtime.Membership, runtime.Checkpoints, ledger.Ledger) that do not
// depend on where the data lives, so that memstore and redisstore apply
// them from one place:
//
//   - the argument checks each call makes before any I/O, so that a name
//     that works on one store works on the other and bad input fails the
//     same way (a *broker.InvalidArgumentError naming the argument);
//   - the defaults a call fills in (ParkDefaults, EncodeStatus);
//   - the order ListParked returns entries in (SortParked).
//
// The conformance suite (pkg/runtime/storetest) checks both stores against
// the contract; this package is how they agree by construction.
package storecontract
