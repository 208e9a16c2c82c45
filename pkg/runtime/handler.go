package runtime

import (
	"context"
	"errors"
	"fmt"
)

// Handler processes one message. It is called with at most one message at
// a time per partition key (Redis) or aggregate (Kafka), and concurrently
// across keys, so it must be safe for concurrent use. It returns nil on
// success, or an error whose class (see Classify) decides what happens.
//
// Delivery is at least once: after a crash or a handover the last messages
// may be delivered again; handlers make their effects idempotent.
type Handler interface {
	Handle(ctx context.Context, m Message) error
}

// HandlerFunc adapts a function to Handler.
type HandlerFunc func(ctx context.Context, m Message) error

// Handle calls f.
func (f HandlerFunc) Handle(ctx context.Context, m Message) error { return f(ctx, m) }

// SourceKind says where a message came from.
type SourceKind string

const (
	SourceRedis SourceKind = "redis"
	SourceKafka SourceKind = "kafka"
)

// Message is what a handler receives.
type Message struct {
	Subscription string
	Source       SourceKind

	// Redis: the category, partition key and stream (lane) of the entry.
	Category string
	Key      string
	Stream   string

	// Kafka: topic and partition; Key is the record's key.
	Topic     string
	Partition int32

	// Aggregate is what per-aggregate ordering and parking use: the
	// partition key for Redis, the record's aggregate for Kafka.
	Aggregate string
	// Position is the entry id (Redis) or the offset (Kafka) as a string.
	Position string
	// Data is the envelope: the entry's data field or the record's value.
	Data []byte
	// Headers are the Kafka record's headers (nil for Redis).
	Headers map[string]string

	// Generation is the lease generation the message is processed under.
	Generation int64
	// Attempt counts deliveries to this handler, from 1.
	Attempt int
}

// FailureClass classifies a handler error.
type FailureClass int

const (
	// FailAggregate: this message cannot be handled; park its aggregate.
	FailAggregate FailureClass = iota
	// FailSystemic: a dependency is down; pause and retry, do not park.
	FailSystemic
	// FailFatal: stop the subscription.
	FailFatal
)

func (c FailureClass) String() string {
	switch c {
	case FailSystemic:
		return "systemic"
	case FailFatal:
		return "fatal"
	}
	return "aggregate"
}

type classified struct {
	class FailureClass
	err   error
}

func (c *classified) Error() string { return fmt.Sprintf("%s failure: %v", c.class, c.err) }
func (c *classified) Unwrap() error { return c.err }

// Systemic marks err as a systemic failure (e.g. a database is down).
func Systemic(err error) error { return &classified{FailSystemic, err} }

// Fatal marks err as fatal for the subscription.
func Fatal(err error) error { return &classified{FailFatal, err} }

// Classify returns the class of a handler error; unmarked errors are
// aggregate failures. nil has no class (FailAggregate is returned, but
// callers check for nil first).
func Classify(err error) FailureClass {
	var c *classified
	if errors.As(err, &c) {
		return c.class
	}
	return FailAggregate
}
