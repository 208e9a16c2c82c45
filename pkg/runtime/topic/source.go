package topic

import (
	"context"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/protctl/protctl/pkg/runtime/kafkasource"
)

// Source is what topic subscriptions need from Kafka. Kafka(src) makes
// one of a *kafkasource.Source; see that package for the contract of each
// method (no consumer group, nothing committed, ErrTopicNotFound,
// ErrOffsetNotRetained).
type Source interface {
	// Partitions lists the topic's partitions (refresh picks up new ones).
	Partitions(ctx context.Context, topic string) ([]int32, error)
	// Watermarks returns the earliest retained offset and the head of the
	// given partitions.
	Watermarks(ctx context.Context, topic string, partitions ...int32) (map[int32]kafkasource.Watermarks, error)
	// NewReader returns the shared tail reader of one (node, topic).
	NewReader(topic string) (Reader, error)
	// Scan reads [from, to) of one partition with plain fetches: the
	// catch-up reader of a subscription far behind, and a retry's re-scan.
	Scan(ctx context.Context, topic string, partition int32, from, to int64, fn func(*kgo.Record) error) (int64, error)
}

// Reader is the shared tail reader of one (node, topic): the partitions
// the node holds, assigned by hand from chosen offsets
// (*kafkasource.Reader; see it for each method's contract). It is safe
// for concurrent use.
type Reader interface {
	// Assign starts reading each partition at its offset; the returned
	// epoch tells the batches of this assignment from earlier ones.
	Assign(offsets map[int32]int64) uint64
	// Unassign stops reading the partitions.
	Unassign(partitions ...int32)
	// Pause and Resume stop and restart fetching the partitions
	// (back-pressure) without losing their positions.
	Pause(partitions ...int32)
	Resume(partitions ...int32)
	// Poll blocks until records arrive, ctx ends or the reader closes.
	Poll(ctx context.Context) ([]kafkasource.Batch, error)
	// Close stops the reader.
	Close()
}

var _ Reader = (*kafkasource.Reader)(nil)

// Kafka returns src as a Source: the glue between the Kafka client
// (whose NewReader returns its concrete reader) and the engine. A
// kafkasource.Source's Reachable stays visible, so a subscription whose
// brokers stop answering reports itself unavailable.
func Kafka(src *kafkasource.Source) Source { return kafkaSource{src} }

type kafkaSource struct{ *kafkasource.Source }

func (k kafkaSource) NewReader(topic string) (Reader, error) {
	r, err := k.Source.NewReader(topic)
	if err != nil {
		return nil, err
	}
	return r, nil
}

var _ reachability = kafkaSource{}
