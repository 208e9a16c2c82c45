package kafkasource

import (
	"errors"
	"fmt"
)

// Sentinel errors. Test for them with errors.Is; OffsetError carries the
// details and unwraps to ErrOffsetNotRetained or ErrOffsetBeyondHead.
var (
	// ErrOffsetNotRetained is returned by Scan and Rescan, and in a Batch's
	// Err by Reader.Poll, when the requested offset is below the
	// partition's earliest retained offset: retention or DeleteRecords
	// removed the records there, and they cannot be read again. A parked
	// aggregate whose offset is no longer retained is unrecoverable.
	ErrOffsetNotRetained = errors.New("kafkasource: offset no longer retained")

	// ErrOffsetBeyondHead is returned by Scan and Rescan, and in a Batch's
	// Err by Reader.Poll, when the requested offset is past the
	// partition's head: usually a checkpoint from a topic that was deleted
	// and created again.
	ErrOffsetBeyondHead = errors.New("kafkasource: offset beyond the partition's head")

	// ErrTopicNotFound is returned by Partitions, Watermarks, Scan and
	// Rescan when the topic does not exist. It is not created.
	ErrTopicNotFound = errors.New("kafkasource: topic not found")

	// ErrPartitionNotFound is returned by Watermarks, Scan and Rescan for a
	// partition number the topic does not have.
	ErrPartitionNotFound = errors.New("kafkasource: partition not found")

	// ErrUnreachable wraps the failure of any call that could not reach a
	// broker: every recent connection attempt failed (refused, timed out,
	// TLS or SASL handshake failed). The message names the brokers and the
	// last connection error. Source.Reachable returns it, without I/O,
	// while every broker's latest connection attempt or read failed.
	ErrUnreachable = errors.New("kafkasource: brokers unreachable")

	// ErrNoAggregate is returned by AggregateFrom.Aggregate when a record
	// does not carry its aggregate where the configuration says: an empty
	// key, a missing header, a value that is not JSON or lacks the path.
	ErrNoAggregate = errors.New("kafkasource: record has no aggregate")

	// ErrNoIdentity is returned by RecordIdentity and IdentityFrom.Identity
	// when a record has neither an id header nor an envelope id.
	ErrNoIdentity = errors.New("kafkasource: record has no identity")

	// ErrClosed is returned by every call on a closed Source or Reader.
	ErrClosed = errors.New("kafkasource: closed")

	// ErrInvalidArgument is returned, before any I/O, for bad input: no
	// brokers, an empty topic, a negative partition or offset, an unknown
	// SASL mechanism, a malformed aggregate or identity spec.
	ErrInvalidArgument = errors.New("kafkasource: invalid argument")
)

// OffsetError says which offset of which partition could not be read and
// what the partition held at that moment. It unwraps to
// ErrOffsetNotRetained (Offset < Earliest) or ErrOffsetBeyondHead
// (Offset > Head).
type OffsetError struct {
	Topic     string
	Partition int32
	Offset    int64 // the offset that was asked for
	Earliest  int64 // the earliest retained offset then
	Head      int64 // the head (next offset to be written) then
	Err       error // ErrOffsetNotRetained or ErrOffsetBeyondHead
}

func (e *OffsetError) Error() string {
	return fmt.Sprintf("%v: %s/%d offset %d (partition holds [%d, %d))",
		e.Err, e.Topic, e.Partition, e.Offset, e.Earliest, e.Head)
}

func (e *OffsetError) Unwrap() error { return e.Err }

func invalidf(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrInvalidArgument}, args...)...)
}
