// Package kafkasource is the runtime's view of a Kafka topic: a set of
// numbered partitions, each an ordered log it reads from an offset of its
// own choosing. It is built on franz-go and deliberately uses none of
// Kafka's consumer-group machinery.
//
// # Why no consumer group
//
// The runtime already decides who owns what: partitions are leased in the
// lease group (service, "topic:<topic>") and spread over nodes by HRW, with
// generations that fence a stale owner (see pkg/runtime/hrw and the lease
// store). A Kafka group would be a second, unfenced owner election racing
// the first, and its committed offsets a second record of progress that a
// stale owner could still move. So a Reader is assigned partitions by
// hand, reads from the checkpoint the runtime stored, and commits nothing:
// the runtime's fenced checkpoint is the only progress there is.
//
// # What it offers
//
// The runtime uses it through an interface it declares itself; Source
// satisfies this shape:
//
//	Partitions(ctx, topic) ([]int32, error)               // refresh picks up new partitions
//	Watermarks(ctx, topic, partitions...) (map[int32]Watermarks, error)
//	NewReader(topic) (*Reader, error)                      // the shared tail and catch-up readers
//	Scan(ctx, topic, partition, from, to, fn) (int64, error)
//	Rescan(ctx, topic, partition, from, aggregate) ([]*kgo.Record, error)
//
// A Reader (one per node and topic) tails the partitions the node holds:
// Assign at a checkpoint, Unassign on handoff, Pause and Resume for
// backpressure. Every Assign returns an epoch that its batches carry, so
// records fetched before a partition moved are told from those after.
//
// Scan and Rescan read a bounded range with plain fetch requests instead
// of a consumer: a retry of a parked aggregate reads from the parked
// offset up to the head as it was when the retry began, then stops. A
// consumer cannot say "I reached the end" (it just waits for more), and a
// range ending in transaction markers or compacted-away records would
// leave it waiting for an offset that never comes.
//
// # Nothing is skipped silently
//
// Left to itself, franz-go answers an offset that is no longer retained by
// jumping to another one. Here that is a loss the operator must see: a
// parked aggregate whose records are gone is unrecoverable and can only be
// skipped, and a partition whose checkpoint fell behind retention lost
// records nobody handled. So Scan and Rescan fail with ErrOffsetNotRetained
// (or ErrOffsetBeyondHead for a checkpoint from a deleted and re-created
// topic), and a Reader reports the same in Batch.Err and unassigns the
// partition until the runtime reassigns it knowingly.
//
// # Aggregates and identity
//
// A record's aggregate, the unit of ordering, is its key unless configured
// as a header or a JSON path (AggregateFrom). Its identity for dedup after
// a replay is the envelope's metadata.headers.id or an id header, with the
// aggregate's version when there is one (IdentityFrom). Both read headers
// first and parse JSON only when they must, since they run per record.
//
// # Failure and time
//
// Every call that talks to Kafka takes a context, and is also bounded by
// the retry budget (WithRetry), so even a context without a deadline
// cannot hang on a dead cluster. When no broker can be reached the error
// is ErrUnreachable and names the seeds, the TLS and SASL settings and the
// last connection error, not just "context deadline exceeded".
package kafkasource
