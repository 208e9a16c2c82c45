package partitioned

import (
	"context"
	"fmt"

	"github.com/protctl/protctl/pkg/broker"
)

// Publisher writes envelopes to partitions: the producer side of the
// partitioned subscription.
//
// On a broker with broker.StreamPartitioning it appends to the partition's
// stream and records the key in the category's index in one atomic step
// (broker.PartitionPublisher), which also wakes the category's idle
// consumers. Low-priority messages go to the partition's backfill lane,
// which consumers drain only when the main lane is empty.
//
// On a broker without StreamPartitioning, ordering by key is a deliberate
// no-op: every message of a category is appended to the category's own
// stream (broker.Appender), whatever its key and priority.
//
// Durability is the broker's: over the Redis adapter built with
// redisbroker.WithPublishReplicas, Publish returns only once the replicas
// hold the entry, and fails with broker.ErrNotReplicated (a
// *broker.NotReplicatedError naming the entry left on the primary) when
// they do not acknowledge it in time; docs/guarantees.md says what each
// setting survives.
//
// A Publisher holds no state beyond its configuration and is safe for
// concurrent use.
type Publisher struct {
	b              broker.Broker
	layout         broker.Layout
	backfillSuffix string
	partitioned    broker.PartitionPublisher
	appender       broker.Appender
}

// PublisherOption configures NewPublisher.
type PublisherOption func(*Publisher)

// WithBackfillSuffix names the backfill lane low-priority
// messages go to. Default: broker.DefaultBackfillSuffix; "" means the
// default. It must match the consumers' BackfillSuffix.
func WithBackfillSuffix(suffix string) PublisherOption {
	return func(p *Publisher) { p.backfillSuffix = suffix }
}

// NewPublisher returns a Publisher over b. It does no I/O. b must
// implement broker.PartitionPublisher when it advertises
// StreamPartitioning, and broker.Appender otherwise.
func NewPublisher(b broker.Broker, opts ...PublisherOption) (*Publisher, error) {
	if b == nil {
		return nil, fmt.Errorf("runtime: new publisher: nil broker")
	}
	p := &Publisher{b: b, backfillSuffix: broker.DefaultBackfillSuffix}
	for _, o := range opts {
		o(p)
	}
	if p.backfillSuffix == "" {
		p.backfillSuffix = broker.DefaultBackfillSuffix
	}
	if pb, ok := b.(broker.PartitionedBroker); ok {
		p.layout = pb.Layout()
	}
	if b.Capabilities().Has(broker.StreamPartitioning) {
		pp, ok := b.(broker.PartitionPublisher)
		if !ok {
			return nil, fmt.Errorf("runtime: new publisher: broker advertises stream partitioning but is not a broker.PartitionPublisher")
		}
		p.partitioned = pp
		return p, nil
	}
	ap, ok := b.(broker.Appender)
	if !ok {
		return nil, fmt.Errorf("runtime: new publisher: broker can neither partition nor append")
	}
	p.appender = ap
	return p, nil
}

// PublishOption changes one Publish call.
type PublishOption func(*publishOptions)

type publishOptions struct{ low bool }

// LowPriority routes the message to the partition's backfill lane: it is
// handled after everything in the main lane, in its own order. Ignored on
// a broker without stream partitioning.
func LowPriority() PublishOption { return func(o *publishOptions) { o.low = true } }

// Publish appends envelope (stored as the entry's data field) to partition
// key of category and returns the entry id. The key is validated as
// Protean validates it (see broker.Layout.ValidateKey) on every broker, so
// that a publisher's behaviour does not depend on the broker it runs on;
// invalid input fails with broker.ErrInvalidArgument before any I/O.
func (p *Publisher) Publish(ctx context.Context, category, key string, envelope []byte, opts ...PublishOption) (string, error) {
	var o publishOptions
	for _, opt := range opts {
		opt(&o)
	}
	if err := p.layout.ValidateName("publish", "category", category); err != nil {
		return "", err
	}
	if err := p.layout.ValidateKey(key, p.backfillSuffix); err != nil {
		return "", err
	}
	if p.partitioned == nil {
		id, err := p.appender.Append(ctx, category, envelope)
		if err != nil {
			return "", fmt.Errorf("runtime: publish to %s: %w", category, err)
		}
		return id, nil
	}
	lane := ""
	if o.low {
		lane = p.backfillSuffix
	}
	id, err := p.partitioned.PublishPartitioned(ctx, category, key, lane, envelope)
	if err != nil {
		return "", fmt.Errorf("runtime: publish to %s key %q: %w", category, key, err)
	}
	return id, nil
}
