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
// nothing. A broker without StreamPartitioning must refuse every
// partitioning method with broker.ErrPartitioningUnsupported.
package brokertest
