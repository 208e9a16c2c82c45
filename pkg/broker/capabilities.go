package broker

// Capabilities is a set of bit flags a broker advertises. Callers test a
// flag with Has before relying on the behaviour it names; partitioning
// methods on a broker without StreamPartitioning fail with
// ErrPartitioningUnsupported instead of half-working.
//
// Only flags something checks are kept (decision 0040): the optional
// behaviours the runtime uses are interfaces (optional.go, broker.go,
// batch.go) found by type assertion, not flags.
type Capabilities uint32

// StreamPartitioning: one stream per partition key, a partition index,
// fenced leases and fenced read/ack (the contract of PartitionedBroker).
// The runtime's partitioned engine and Publisher check it.
const StreamPartitioning Capabilities = 1 << 9

// Has reports whether every flag of want is set in c.
func (c Capabilities) Has(want Capabilities) bool { return c&want == want }

// String is "stream-partitioning" or "none".
func (c Capabilities) String() string {
	if c.Has(StreamPartitioning) {
		return "stream-partitioning"
	}
	return "none"
}
