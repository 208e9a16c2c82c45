// Package brokertest is the conformance suite of the broker partitioning
// contract. Every adapter runs it, against a real server where it has one:
//
//	func TestConformance(t *testing.T) {
//		brokertest.Run(t, func(t *testing.T) brokertest.Target {
//			return brokertest.Target{Broker: ..., Advance: time.Sleep, Faults: ...}
//		})
//	}
//
// The suite proves the invariants of the design: a stale owner can never
// read, ack, reclaim or dead-letter; generations strictly increase; reap
// and trim never delete an entry some group has not received and acked,
// even under concurrent publishers; a publish racing a reap never leaves a
// non-empty stream outside the index; bad input is refused and changes
// nothing. Optional capabilities (broker.AckReader) get their own cases,
// run only when the adapter implements them. A target with a broker that
// waits for replica acknowledgements (Target.Unreplicated) is also held to
// broker.ErrNotReplicated's contract: an unacknowledged acquisition
// leaves the lease free, an unacknowledged renewal is an error, an
// unacknowledged publish names its entry. A broker without
// StreamPartitioning must refuse every partitioning method, optional ones
// included, with broker.ErrPartitioningUnsupported.
package brokertest
