package runtime

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"time"

	"github.com/protctl/protctl/pkg/runtime/source"
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

// leaseCheckKey is the context key of a handler call's lease check.
type leaseCheckKey struct{}

// WithLeaseCheck returns ctx carrying check, which says whether the lease
// a handler call runs under is still trusted (LeaseTrusted). The Redis
// runtime gives every handler call such a context; a test of a handler
// can too.
func WithLeaseCheck(ctx context.Context, check func() bool) context.Context {
	return context.WithValue(ctx, leaseCheckKey{}, check)
}

// LeaseTrusted reports whether the handler call of ctx may still act on
// its message: ctx is not done and, when the call runs under a lease that
// the runtime checks (a Redis partition), the lease is still trusted now.
//
// The runtime checks the lease before it calls the handler. A handler that
// waits inside for a resource of its own before its effect (a slot of a
// bounded pool, a connection) checks again after the wait: a process
// stopped in that wait (SIGSTOP, a long GC pause, a suspended VM) may
// resume after its lease expired and another node handled the message,
// and the runtime cancels ctx only when it notices, which may come after
// the wait ends. The exec and process handlers of `run node` do.
func LeaseTrusted(ctx context.Context) bool {
	if ctx.Err() != nil {
		return false
	}
	check, ok := ctx.Value(leaseCheckKey{}).(func() bool)
	return !ok || check()
}

// HandlerFunc adapts a function to Handler.
type HandlerFunc func(ctx context.Context, m Message) error

// Handle calls f.
func (f HandlerFunc) Handle(ctx context.Context, m Message) error { return f(ctx, m) }

// Message is what a handler receives.
type Message struct {
	Subscription string
	Source       source.Kind

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
	// Headers are the Kafka record's headers (empty for Redis): a view
	// over the record, read with Get, Lookup or All; nothing is copied
	// unless the handler asks.
	Headers Headers

	// Generation is the lease generation the message is processed under.
	Generation int64
	// Attempt counts deliveries to this handler, from 1. It goes on
	// counting across an operator's retry of a parked entry: the first
	// delivery of a retry after 3 parked attempts is attempt 4.
	Attempt int
}

// Headers are a message's headers, in the order the producer wrote them.
// Kafka allows a key to repeat: Get and Lookup return the last value
// written, the producer's final word (as a map built in order would).
//
// Headers is a view, not a copy: the topic engine hands a Kafka record's
// headers over without allocating anything per message (building a map
// per record cost more CPU than everything else the topic runtime does
// per record; Header has the layout of franz-go's RecordHeader, which the
// engine checks at compile time). Get, Lookup and Map allocate the
// strings they return; Value, All and Len do not. The zero value is
// empty. A Headers value is safe for concurrent reads and stays valid
// after Handle returns; its byte slices must not be modified.
type Headers []Header

// Header is one header of a message.
type Header struct {
	Key   string
	Value []byte
}

// HeadersOf returns headers from key, value pairs, in order: for tests,
// and for sources other than Kafka. It panics on an odd number of
// arguments.
func HeadersOf(pairs ...string) Headers {
	if len(pairs)%2 != 0 {
		panic("runtime: HeadersOf needs key, value pairs")
	}
	if len(pairs) == 0 {
		return nil
	}
	kv := make(Headers, 0, len(pairs)/2)
	for i := 0; i < len(pairs); i += 2 {
		kv = append(kv, Header{Key: pairs[i], Value: []byte(pairs[i+1])})
	}
	return kv
}

// Len is the number of headers, repeated keys counted each time.
func (h Headers) Len() int { return len(h) }

// Value returns the last value of key without copying it; ok is false
// when there is no such header.
func (h Headers) Value(key string) (v []byte, ok bool) {
	for i := len(h) - 1; i >= 0; i-- {
		if h[i].Key == key {
			return h[i].Value, true
		}
	}
	return nil, false
}

// Lookup returns the last value of key as a string; ok is false when
// there is no such header.
func (h Headers) Lookup(key string) (string, bool) {
	v, ok := h.Value(key)
	return string(v), ok
}

// Get returns the last value of key, or "" when there is none.
func (h Headers) Get(key string) string {
	v, _ := h.Value(key)
	return string(v)
}

// All yields every header in order, repeats included. The values are
// not copied.
func (h Headers) All() iter.Seq2[string, []byte] {
	return func(yield func(string, []byte) bool) {
		for _, kv := range h {
			if !yield(kv.Key, kv.Value) {
				return
			}
		}
	}
}

// Map copies the headers into a map, the last value of a repeated key
// winning; nil when there are none. It allocates: prefer Get.
func (h Headers) Map() map[string]string {
	if len(h) == 0 {
		return nil
	}
	m := make(map[string]string, len(h))
	for _, kv := range h {
		m[kv.Key] = string(kv.Value)
	}
	return m
}

// String formats the headers as key=value pairs, for logs and test
// failures.
func (h Headers) String() string {
	b := []byte{'['}
	for i, kv := range h {
		if i > 0 {
			b = append(b, ' ')
		}
		b = append(b, kv.Key...)
		b = append(b, '=')
		b = append(b, kv.Value...)
	}
	return string(append(b, ']'))
}

// RetryPolicy is how aggregate failures are retried before parking.
type RetryPolicy struct {
	// Attempts is the number of deliveries before parking. Default: 3.
	Attempts int
	// Backoff is the shortest wait between attempts. Each wait is drawn
	// at random (the node's jitter source, NodeConfig.JitterSeed) from
	// [Backoff, ceiling], the ceiling starting at 2 x Backoff and doubling
	// up to MaxBackoff, so nodes that fail together retry apart. Default:
	// 200ms.
	Backoff time.Duration
	// MaxBackoff caps the wait. Default: 10s.
	MaxBackoff time.Duration
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
