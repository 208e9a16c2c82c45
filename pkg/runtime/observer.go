package runtime

import (
	"time"

	"github.com/protctl/protctl/pkg/runtime/ledger"
	"github.com/protctl/protctl/pkg/runtime/source"
)

// Observer receives the runtime's events, for metrics and tracing. Every
// field is optional; a nil *Observer observes nothing.
//
// Hooks are called synchronously on the runtime's own goroutines (partition
// workers, the lease renewer, a subscription's coordinator), often several
// at once. They must therefore be fast and safe for concurrent use: count,
// record, or hand the event to a buffered channel. A hook must never block
// and must never call back into the Node or a subscription.
type Observer struct {
	// OnLease reports lease changes: acquired, released, lost, untrusted
	// (the trust window ran out before a renewal succeeded) and contested
	// (an acquire found the lease held by someone else).
	OnLease func(LeaseEvent)
	// OnHandled reports every handler call, successful or not.
	OnHandled func(HandledEvent)
	// OnParked reports an aggregate (a Redis partition key) parked in the
	// ledger after its head failed the configured number of attempts.
	OnParked func(ledger.Parked)
	// OnResolved reports a parked entry resolved by an operator's retry
	// (the head then succeeded) or skip (the head was dead-lettered).
	OnResolved func(ResolvedEvent)
	// OnMissing reports a pending entry whose body had been deleted (by
	// XDEL or a trim outside protctl). It is acknowledged, never skipped
	// silently.
	OnMissing func(MissingEvent)
	// OnPause reports a partition paused by a systemic failure, and its
	// resumption (Paused false).
	OnPause func(PauseEvent)
	// OnAssignment reports a subscription's new share of partitions after
	// the membership or the set of known partitions changed.
	OnAssignment func(AssignmentEvent)
	// OnFatal reports a subscription stopped by a fatal failure.
	OnFatal func(FatalEvent)
	// OnError reports a failure of the runtime's own I/O that it retries
	// (Redis unreachable during a heartbeat, a discovery scan, a renewal).
	OnError func(ErrorEvent)
}

// LeaseEventKind says what happened to a lease.
type LeaseEventKind string

const (
	LeaseAcquired  LeaseEventKind = "acquired"
	LeaseReleased  LeaseEventKind = "released"
	LeaseLost      LeaseEventKind = "lost"
	LeaseUntrusted LeaseEventKind = "untrusted"
	LeaseContested LeaseEventKind = "contested"
)

// LeaseEvent is one lease change of one partition.
type LeaseEvent struct {
	Subscription string
	Source       source.Kind
	// Partition is the Redis partition key or the Kafka partition number.
	Partition  string
	Kind       LeaseEventKind
	Generation int64
	// Reason says why, e.g. "idle", "handover", "stop", "parked", "undo"
	// (a join given back before it started), or "expires" (the release
	// call failed: the lease is left to its TTL).
	Reason string
}

// HandledEvent is one handler call.
type HandledEvent struct {
	Subscription string
	Source       source.Kind
	Partition    string
	Aggregate    string
	Position     string
	Attempt      int
	Duration     time.Duration
	Err          error        // nil on success
	Class        FailureClass // meaningful when Err != nil
}

// ResolvedEvent is a parked entry leaving the ledger.
type ResolvedEvent struct {
	Subscription string
	Aggregate    string
	Position     string
	Action       ledger.Action // ledger.ActionRetry or ledger.ActionSkip
	// DeadLetterID is the dead-letter entry's id for a skip.
	DeadLetterID string
}

// MissingEvent is a pending entry found without its body.
type MissingEvent struct {
	Subscription string
	Partition    string
	Stream       string
	ID           string
	// During says where it was found: "reclaim" or "read".
	During string
}

// PauseEvent is a partition paused by a systemic failure or resumed.
type PauseEvent struct {
	Subscription string
	Partition    string
	Paused       bool
	Err          error // the systemic failure (pause only)
	RetryIn      time.Duration
}

// AssignmentEvent is a subscription's share after a change.
type AssignmentEvent struct {
	Subscription string
	Members      []string
	Assigned     int // partitions HRW gives this node
	Known        int // partitions known to the subscription
	Gained       int
	Lost         int
}

// FatalEvent is a subscription stopped by a fatal failure.
type FatalEvent struct {
	Subscription string
	Err          error
}

// ErrorEvent is a retried failure of the runtime's own I/O.
type ErrorEvent struct {
	Subscription string // empty for node-level work (heartbeats)
	Op           string // e.g. "heartbeat", "discover", "renew", "wait"
	Err          error
}

// fatal and error are the node's own nil-safe hook calls; the engines
// use internal/observe.

func (o *Observer) fatal(e FatalEvent) {
	if o != nil && o.OnFatal != nil {
		o.OnFatal(e)
	}
}

func (o *Observer) error(e ErrorEvent) {
	if o != nil && o.OnError != nil {
		o.OnError(e)
	}
}

// Counter names used in status records (NodeStatus.Counters). They are
// part of the CLI's JSON output: add names, do not rename them.
const (
	CounterProcessed   = "processed"    // handler calls that succeeded
	CounterFailed      = "failed"       // handler calls that failed
	CounterParked      = "parked"       // partitions parked
	CounterResolved    = "resolved"     // parked entries resolved by retry or skip
	CounterDeadLetters = "deadLettered" // heads dead-lettered by a skip
	CounterMissing     = "missing"      // pending entries found without a body
	CounterAcquired    = "acquired"     // leases acquired
	CounterReleased    = "released"     // leases released
	CounterLeaseLost   = "leaseLost"    // leases lost (renewal refused or fenced call refused)
	CounterUntrusted   = "untrusted"    // leases dropped because renewals failed for the trust window
	CounterContested   = "contested"    // acquires that found the lease held
	CounterReaped      = "reaped"       // partitions retired by reap
	CounterReads       = "reads"        // fenced reads
	CounterAcks        = "acks"         // fenced acks
	CounterRenewals    = "renewals"     // batched renewal rounds
	CounterAssigned    = "assigned"     // gauge: partitions HRW gives this node
	CounterWatched     = "watched"      // gauge: assigned partitions idle without a lease
	CounterActive      = "active"       // gauge: partitions with a worker (leased)
)
