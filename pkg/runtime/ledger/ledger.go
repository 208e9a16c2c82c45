// Package ledger holds the failure ledger's records and its store
// interfaces: the entries a subscription parks when an aggregate's head
// keeps failing (Parked), the operators' retry and skip requests on them
// (Request, PinnedRequest) and the interfaces a store implements (Ledger,
// Reader, Requester, PinnedRequester). The engines park and resolve
// through a Ledger; operators' tools read and request through Reader,
// Requester and PinnedRequester. docs/decisions/0040-runtime-packages.md
// says why it is a package of its own.
package ledger

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/protctl/protctl/pkg/broker"
	"github.com/protctl/protctl/pkg/runtime/source"
)

// Errors returned by the stores.
var (
	// ErrNotParked is returned by GetParked, RequestRetry and RequestSkip
	// when no ledger entry exists for the subscription and aggregate (on
	// the partition asked for).
	ErrNotParked = errors.New("runtime: not parked")
	// ErrAmbiguousParked is returned (as an *AmbiguousParkedError) by
	// GetParked, RequestRetry and RequestSkip called without a partition
	// for an aggregate parked on more than one partition.
	ErrAmbiguousParked = errors.New("runtime: aggregate is parked on more than one partition")
	// ErrUnrecoverable is returned by RequestRetry for an entry whose
	// records the source no longer retains: it can only be skipped.
	ErrUnrecoverable = errors.New("runtime: parked entry is unrecoverable")
	// ErrParkChanged is returned (as a *ParkChangedError) by
	// PinnedRequester.RequestPinned when the entry is no longer
	// the park, or not in the state, the request was pinned to.
	ErrParkChanged = errors.New("runtime: parked entry changed")
	// ErrAlreadyRequested is returned (as an *AlreadyRequestedError) by
	// PinnedRequester.RequestPinned when a request with the same
	// token was recorded on the entry before.
	ErrAlreadyRequested = errors.New("runtime: request already recorded")
)

// AmbiguousParkedError says which partitions hold an entry of an
// aggregate that a caller named without a partition. A Kafka aggregate
// taken from a header or a JSON path, or a key that moved when the topic
// gained partitions, can be parked on several partitions at once: each is
// its own entry (its own parked head), retried or skipped on its own.
type AmbiguousParkedError struct {
	Subscription string
	Aggregate    string
	Partitions   []string // sorted
}

func (e *AmbiguousParkedError) Error() string {
	return fmt.Sprintf("runtime: %q of subscription %q is parked on partitions %s: name one",
		e.Aggregate, e.Subscription, strings.Join(e.Partitions, ", "))
}

func (e *AmbiguousParkedError) Unwrap() error { return ErrAmbiguousParked }

// MaxErrorLen bounds a parked entry's error text, in bytes.
const MaxErrorLen = 1024

// TruncateError cuts s to MaxErrorLen bytes (on a UTF-8 boundary) and
// marks the cut.
func TruncateError(s string) string {
	if len(s) <= MaxErrorLen {
		return s
	}
	const mark = "…"
	cut := MaxErrorLen - len(mark)
	for cut > 0 && s[cut]&0xC0 == 0x80 {
		cut--
	}
	return s[:cut] + mark
}

// Status is a ledger entry's state.
type Status string

const (
	// StatusParked: handling failed N times; the aggregate waits for an
	// operator.
	StatusParked Status = "parked"
	// StatusRetrying: an operator asked for a retry; the owner is on it.
	StatusRetrying Status = "retrying"
	// StatusUnrecoverable: the source no longer has the parked records;
	// only a skip resolves the entry.
	StatusUnrecoverable Status = "unrecoverable"
)

// Action is an operator's request on a parked entry.
type Action string

const (
	ActionRetry Action = "retry"
	ActionSkip  Action = "skip"
)

// Request is an operator's pending request, stored in the entry itself so
// that it survives restarts and reaches whichever node owns the partition
// (now or later).
type Request struct {
	Action      Action    `json:"action"`
	Reason      string    `json:"reason,omitempty"`
	By          string    `json:"by,omitempty"`
	RequestedAt time.Time `json:"requestedAt"`
	// Token names the pinned request that recorded it
	// (PinnedRequest.Token, e.g. the id of an operator's plan); "" for a
	// request made with RequestRetry or RequestSkip.
	Token string `json:"token,omitempty"`
}

// Parked is one failure ledger entry: an aggregate (Kafka) or a partition
// key (Redis) whose head message kept failing. JSON names are the CLI's
// stable fields.
type Parked struct {
	Subscription string      `json:"subscription"`
	Source       source.Kind `json:"source"`
	// Aggregate is the parked unit: the Kafka aggregate, or for Redis the
	// partition key.
	Aggregate string `json:"aggregate"`
	Category  string `json:"category,omitempty"` // Redis
	Topic     string `json:"topic,omitempty"`    // Kafka
	// Partition is the Redis partition key or the Kafka partition number.
	Partition string `json:"partition"`
	// Position is the failing entry id (Redis) or offset (Kafka).
	Position      string    `json:"position"`
	Stream        string    `json:"stream,omitempty"` // Redis lane of the head
	Error         string    `json:"error"`
	Attempts      int       `json:"attempts"`
	ParkedAt      time.Time `json:"parkedAt"`
	LastAttemptAt time.Time `json:"lastAttemptAt"`
	Status        Status    `json:"status"`
	Owner         string    `json:"owner,omitempty"`      // node that parked it
	Generation    int64     `json:"generation,omitempty"` // lease generation it was parked under
	Request       *Request  `json:"request,omitempty"`
}

// Reader is what operators' tools read.
//
// An entry is identified by (subscription, partition, aggregate): a Kafka
// aggregate can be parked on several partitions at once, each entry with
// its own head. The calls that name one entry take the partition
// (Parked.Partition); "" names the aggregate's only entry and fails with
// an *AmbiguousParkedError (ErrAmbiguousParked) when there are several.
// A Redis entry's partition is its key, which is also its aggregate, so
// "" always names it.
type Reader interface {
	// ListParked returns the entries of subscription ("" for all), every
	// partition's, oldest first.
	ListParked(ctx context.Context, subscription string) ([]Parked, error)
	// GetParked returns one entry, or ErrNotParked, or (partition "")
	// ErrAmbiguousParked.
	GetParked(ctx context.Context, subscription, partition, aggregate string) (Parked, error)
}

// Requester records operators' requests and signals the owner.
// Neither call needs the partition's lease: the owner acts on the request
// under its own fence. partition is as in GetParked.
type Requester interface {
	// RequestRetry asks the owner to handle the aggregate again from its
	// parked position. ErrNotParked, ErrUnrecoverable, ErrAmbiguousParked.
	RequestRetry(ctx context.Context, subscription, partition, aggregate, by string) error
	// RequestSkip asks the owner to resolve the entry without handling its
	// head (Redis: dead-letter the head; Kafka: drop the parked records).
	// ErrNotParked, ErrAmbiguousParked.
	RequestSkip(ctx context.Context, subscription, partition, aggregate, reason, by string) error
}

// Ledger is the failure ledger. Writes by owners are fenced: f is the
// lease the owner holds on the entry's partition, and a stale f is refused
// with broker.ErrLeaseLost without changing anything.
type Ledger interface {
	Reader
	Requester
	// Park creates or replaces the entry for (p.Subscription, the
	// partition of f, p.Aggregate); entries of the aggregate on other
	// partitions stay. Once Park returned, every ListParked and GetParked
	// that starts later sees the entry until it is resolved.
	Park(ctx context.Context, f broker.Fence, p Parked) error
	// SetStatus changes the status of the entry fenced by f (the
	// partition's) and clears its request (the owner has taken it up).
	// ErrNotParked when missing.
	SetStatus(ctx context.Context, f broker.Fence, subscription, aggregate string, status Status) error
	// Resolve deletes the entry fenced by f (the partition's) after a
	// successful retry or a skip.
	Resolve(ctx context.Context, f broker.Fence, subscription, aggregate string) error
	// WatchRequests signals the aggregates of subscription that received an
	// operator request, until ctx ends or a signal may have been lost (the
	// subscription broke, the reader fell behind); then the channel
	// closes, and the reader watches again and re-reads the ledger.
	// Signals are hints: owners also re-read their entries' requests
	// periodically.
	WatchRequests(ctx context.Context, subscription string) (<-chan string, error)
}
