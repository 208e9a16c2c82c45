package broker

import (
	"errors"
	"fmt"
	"time"
)

// Sentinel errors. Test for them with errors.Is; the typed errors below
// carry the details and unwrap to these.
var (
	// ErrLeaseLost is returned by ReadPartitionFenced, AckPartitionFenced,
	// AckAndReadPartitionFenced, ReclaimPartitionPending and
	// DeadLetterPartitionFenced (and by the runtime's fenced stores) when the lease key does not hold exactly the caller's fence token: the
	// lease expired, was released, or was acquired by a newer generation.
	// The caller must stop processing the partition at once.
	ErrLeaseLost = errors.New("broker: lease lost")

	// ErrPartitioningUnsupported is returned by every partitioning method of
	// a broker that does not advertise StreamPartitioning.
	ErrPartitioningUnsupported = errors.New("broker: stream partitioning unsupported")

	// ErrInvalidArgument is returned, before anything is changed, for bad
	// input: an empty or invalid partition key or category, a non-positive
	// maxLen, count or TTL, an empty owner or token.
	ErrInvalidArgument = errors.New("broker: invalid argument")

	// ErrWrongType is returned when a key the operation touches holds a value
	// of another Redis type (a string where a stream is expected, ...). The
	// operation changes nothing.
	ErrWrongType = errors.New("broker: key holds the wrong type")

	// ErrUnavailable wraps transport failures: the server is unreachable,
	// refused the connection or timed out.
	ErrUnavailable = errors.New("broker: unavailable")

	// ErrNotReplicated is returned, as a *NotReplicatedError, by a write
	// made with replica acknowledgements (the Redis adapter's
	// WithLeaseReplicas and WithPublishReplicas) when fewer replicas than
	// asked acknowledged it within the timeout: AcquirePartitionLease(s)
	// (the lease was released again: nobody holds it), RenewPartitionLease(s)
	// (the renewal may or may not survive a failover: the caller must not
	// extend its trust in the lease), PublishPartitioned and Append (the
	// entry is on the primary and may be lost in a failover; publishing it
	// again may duplicate it).
	ErrNotReplicated = errors.New("broker: not acknowledged by enough replicas")
)

// NotReplicatedError says which write the replicas did not acknowledge in
// time. It unwraps to ErrNotReplicated.
type NotReplicatedError struct {
	Op      string        // "acquire lease", "renew lease", "publish", "append"
	Key     string        // the lease key, or the stream written
	ID      string        // publish and append: the entry id on the primary
	Want    int           // replicas asked for
	Acked   int           // replicas that acknowledged within Timeout
	Timeout time.Duration // how long the write waited
}

func (e *NotReplicatedError) Error() string {
	what := fmt.Sprintf("%q", e.Key)
	if e.ID != "" {
		what = fmt.Sprintf("entry %s of %q (written to the primary; it may be lost in a failover)", e.ID, e.Key)
	}
	return fmt.Sprintf("broker: %s: %s acknowledged by %d of %d replicas within %s", e.Op, what, e.Acked, e.Want, e.Timeout)
}

func (e *NotReplicatedError) Unwrap() error { return ErrNotReplicated }

// LeaseLostError says which stream and lease a fenced call was refused on.
// It unwraps to ErrLeaseLost.
type LeaseLostError struct {
	Op       string // the refused operation, e.g. "read", "ack", "reclaim"
	Stream   string // the stream the call targeted (empty for lease calls)
	LeaseKey string
	Token    string // the caller's (stale) fence token
}

func (e *LeaseLostError) Error() string {
	if e.Stream == "" {
		return fmt.Sprintf("broker: lease lost: %s on lease %q with token %q", e.Op, e.LeaseKey, e.Token)
	}
	return fmt.Sprintf("broker: lease lost: %s of %q on lease %q with token %q", e.Op, e.Stream, e.LeaseKey, e.Token)
}

func (e *LeaseLostError) Unwrap() error { return ErrLeaseLost }

// UnsupportedError names the partitioning operation a broker without
// StreamPartitioning refused. It unwraps to ErrPartitioningUnsupported.
type UnsupportedError struct {
	Op string
}

func (e *UnsupportedError) Error() string {
	return fmt.Sprintf("broker: %s: stream partitioning unsupported by this broker", e.Op)
}

func (e *UnsupportedError) Unwrap() error { return ErrPartitioningUnsupported }

// InvalidArgumentError names the argument that was wrong and why. It
// unwraps to ErrInvalidArgument.
type InvalidArgumentError struct {
	Op     string // the operation, e.g. "trim"
	Arg    string // the argument's name, e.g. "maxLen"
	Value  string // the offending value, quoted as given
	Reason string
}

func (e *InvalidArgumentError) Error() string {
	return fmt.Sprintf("broker: %s: invalid %s %s: %s", e.Op, e.Arg, e.Value, e.Reason)
}

func (e *InvalidArgumentError) Unwrap() error { return ErrInvalidArgument }

// WrongTypeError names the key that holds an unexpected type. It unwraps to
// ErrWrongType.
type WrongTypeError struct {
	Op   string
	Key  string
	Want string // e.g. "stream"
	Got  string // e.g. "string"; empty when the server did not say
}

func (e *WrongTypeError) Error() string {
	if e.Got == "" {
		return fmt.Sprintf("broker: %s: key %q holds the wrong type (want %s)", e.Op, e.Key, e.Want)
	}
	return fmt.Sprintf("broker: %s: key %q holds a %s, want a %s", e.Op, e.Key, e.Got, e.Want)
}

func (e *WrongTypeError) Unwrap() error { return ErrWrongType }

func invalid(op, arg, value, reason string) error {
	return &InvalidArgumentError{Op: op, Arg: arg, Value: value, Reason: reason}
}
