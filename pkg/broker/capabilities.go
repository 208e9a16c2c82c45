package broker

import "strings"

// Capabilities is a set of bit flags a broker advertises. Callers test a
// flag with Has before relying on the behaviour it names; partitioning
// methods on a broker without StreamPartitioning fail with
// ErrPartitioningUnsupported instead of half-working.
type Capabilities uint32

// The individual capabilities.
const (
	// Publish: messages can be appended to a stream.
	Publish Capabilities = 1 << iota
	// Subscribe: messages can be read from a stream.
	Subscribe
	// ConsumerGroups: several consumers share a stream through a named group.
	ConsumerGroups
	// AckNack: a consumer acknowledges each message; unacked ones stay pending.
	AckNack
	// DeliveryGuarantees: at-least-once delivery with redelivery of pending messages.
	DeliveryGuarantees
	// MessageOrdering: messages of one stream are delivered in append order.
	MessageOrdering
	// BlockingRead: a read can wait for new messages instead of polling.
	BlockingRead
	// DeadLetterQueue: failed messages can be moved to a dead-letter stream.
	DeadLetterQueue
	// Replay: a stream can be re-read from an earlier position.
	Replay
	// StreamPartitioning: one stream per partition key, a partition index,
	// fenced leases and fenced read/ack (the contract of PartitionedBroker).
	StreamPartitioning
)

// Composite capability sets, each a superset of the one before it.
const (
	BasicPubSub         = Publish | Subscribe
	SimpleQueuing       = BasicPubSub | ConsumerGroups
	ReliableMessaging   = SimpleQueuing | AckNack | DeliveryGuarantees
	OrderedMessaging    = ReliableMessaging | MessageOrdering
	EnterpriseStreaming = OrderedMessaging | BlockingRead | DeadLetterQueue | Replay
	// PartitionedStreaming is everything protctl's runtime needs for
	// ordered, per-key, fenced consumption.
	PartitionedStreaming = EnterpriseStreaming | StreamPartitioning
)

var capabilityNames = []struct {
	c    Capabilities
	name string
}{
	{Publish, "publish"},
	{Subscribe, "subscribe"},
	{ConsumerGroups, "consumer-groups"},
	{AckNack, "ack-nack"},
	{DeliveryGuarantees, "delivery-guarantees"},
	{MessageOrdering, "message-ordering"},
	{BlockingRead, "blocking-read"},
	{DeadLetterQueue, "dead-letter-queue"},
	{Replay, "replay"},
	{StreamPartitioning, "stream-partitioning"},
}

// Has reports whether every flag of want is set in c.
func (c Capabilities) Has(want Capabilities) bool { return c&want == want }

// String lists the set flags, e.g. "publish|subscribe"; "none" when empty.
func (c Capabilities) String() string {
	var parts []string
	for _, n := range capabilityNames {
		if c.Has(n.c) {
			parts = append(parts, n.name)
		}
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, "|")
}
