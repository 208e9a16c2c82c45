package topic

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/protctl/protctl/pkg/broker"
	"github.com/protctl/protctl/pkg/runtime"
	"github.com/protctl/protctl/pkg/runtime/clock"
	"github.com/protctl/protctl/pkg/runtime/kafkasource"
	"github.com/protctl/protctl/pkg/runtime/ledger"
	"github.com/protctl/protctl/pkg/runtime/pause"
)

// Subscription is one subscription of a topic: a name (its
// checkpoints and ledger entries are kept under it) and a handler.
type Subscription struct {
	// Name is unique among the topic's subscriptions. Required.
	Name string
	// Handler handles the records. Required.
	Handler runtime.Handler
	// Retry governs aggregate failures: a record is tried Retry.Attempts
	// times, with jittered waits from Retry.Backoff up to Retry.MaxBackoff
	// between them (see RetryPolicy), then its aggregate is parked.
	// Defaults: 3, 200ms, 10s.
	Retry runtime.RetryPolicy
	// Classify decides a handler error's class. Default: Classify (errors
	// marked with Systemic or Fatal, everything else aggregate).
	Classify func(error) runtime.FailureClass
	// SkipHeaders leaves Message.Headers empty. Default: false, headers
	// are passed.
	//
	// Deprecated: Message.Headers is a view over the record's headers and
	// costs nothing per record unless the handler reads it, so there is
	// nothing left to save. The field still works.
	SkipHeaders bool
}

// Config configures Consumer. The zero value of every
// optional field means its default, written in the field's comment.
type Config struct {
	// Topic is the Kafka topic. Required.
	Topic string
	// Subscriptions share one reader per held partition. At least one.
	Subscriptions []Subscription

	// Source reads the topic. Required.
	Source Source
	// Leases grants the partitions' fenced leases (the broker's lease
	// primitives: redisbroker or memorybroker). Required. When it also
	// implements BatchRenewer, one call renews every lease.
	Leases broker.LeaseManager
	// Checkpoints stores each (subscription, partition)'s next offset,
	// fenced by the partition's lease, and names the leases' keys
	// (runtime.Checkpoints.LeaseKeys): the partitions are leased in the
	// lease group "<service>|topic:<Topic>" of the node's service, derived
	// at Start. Required.
	Checkpoints runtime.Checkpoints
	// Ledger records parked aggregates, fenced by the partition's lease.
	// Required.
	Ledger ledger.Ledger
	// Pauses holds operators' pauses (`protctl pause`), per subscription
	// under the scope of the lease group ("<service>|topic:<Topic>"); nil:
	// nothing is ever paused. See pause.go.
	Pauses pause.Store

	// Aggregate says where a record's aggregate is. Default: the record
	// key. A record without one is ordered with the other such records of
	// its partition under the aggregate "partition:<n>".
	Aggregate kafkasource.AggregateFrom
	// Identity says where a record's identity (for dedup) is. Default:
	// kafkasource.DefaultIdentity.
	Identity kafkasource.IdentityFrom
	// StartFrom is where a subscription without a checkpoint starts on the
	// partitions the topic had when this node joined:
	// kafkasource.FromEarliest or kafkasource.FromHead. Partitions added
	// later are always read from their beginning. Default: FromEarliest.
	StartFrom int64

	// LeaseTTL is the partition leases' time to live. Default: 15s.
	LeaseTTL time.Duration
	// RenewEvery is the renewal period. Default: LeaseTTL/5.
	RenewEvery time.Duration
	// TrustWindow is how long after the start of its last successful
	// renewal a lease is trusted; past it the partition stops before the
	// store can hand the lease to another node. Default: LeaseTTL -
	// RenewEvery; it must lie between RenewEvery and LeaseTTL.
	TrustWindow time.Duration
	// MaxPartitions caps the partitions a node holds (HRW with a cap).
	// Default: 0, no cap.
	MaxPartitions int

	// Lanes bounds the aggregates of one (subscription, partition) handled
	// at once. Default: 16.
	Lanes int
	// MaxInFlight is the in-flight window of one (subscription,
	// partition): records delivered and not yet done, counted from the
	// oldest one not done. A partition whose attached subscriptions' windows
	// are all full stops fetching (Throttled). Default: 1000.
	MaxInFlight int
	// CatchUpLag is how far (in offsets) a subscription may be behind the
	// others on a partition and still share its reader; farther behind, it
	// catches up on its own reader. Default: 10 x MaxInFlight.
	CatchUpLag int64
	// CatchUp bounds the catch-up readers running at once. Share one
	// between the Consumer of a node to bound them node-wide.
	// Default: a limit of 2 for this Consumer alone.
	CatchUp *CatchUpLimit
	// DedupSize bounds what a (subscription, partition) remembers to drop
	// records it handled when they come again: per aggregate, the newest
	// offset handled (replays after a handover) and the last 8 identities
	// (a producer's duplicates), for DedupSize/8 aggregates per
	// generation, two generations. Default: 10 x MaxInFlight.
	DedupSize int

	// CheckpointEvery is the period of checkpoint saves. Default: 1s.
	CheckpointEvery time.Duration
	// HandoffTimeout bounds a handoff's wait for the handler calls running
	// when it began (no record, and no retry attempt, starts after that:
	// the next owner reads them from the checkpoint); after it those calls
	// are cancelled. Default: 10s.
	HandoffTimeout time.Duration
	// RefreshEvery is the period of the partition list refresh. Default:
	// 30s.
	RefreshEvery time.Duration
	// LedgerPollEvery is the period of the re-read of the parked entries
	// (operator requests are also signalled). Default: 30s.
	LedgerPollEvery time.Duration
	// OpTimeout bounds one store or Kafka call of the runtime's own (an
	// acquire, a checkpoint save, a park). Default: LeaseTTL/3.
	OpTimeout time.Duration
	// JoinBackoff is the shortest wait after a failed join; waits are
	// jittered below a ceiling that doubles up to JoinMaxBackoff (see
	// RetryPolicy). Defaults: 500ms and 30s.
	JoinBackoff    time.Duration
	JoinMaxBackoff time.Duration
	// SystemicBackoff is the shortest pause after a systemic failure;
	// pauses are jittered below a ceiling that doubles up to
	// SystemicMaxBackoff (see RetryPolicy). Defaults: 1s and 30s.
	SystemicBackoff    time.Duration
	SystemicMaxBackoff time.Duration
	// ParkBurst parks within ParkBurstWindow on one (subscription,
	// partition) trip into a systemic pause: the next aggregate failure
	// pauses the partition instead of parking. Defaults: 10 within 1m.
	ParkBurst       int
	ParkBurstWindow time.Duration

	// Clock, Logger and Observer default to the host's.
	Clock    clock.Clock
	Logger   *slog.Logger
	Observer *runtime.Observer
}

func (c *Config) validate() error {
	const op = "runtime: topic config"
	if c.Topic == "" {
		return fmt.Errorf("%s: Topic is required", op)
	}
	if len(c.Subscriptions) == 0 {
		return fmt.Errorf("%s: at least one subscription is required", op)
	}
	seen := map[string]bool{}
	for i := range c.Subscriptions {
		s := &c.Subscriptions[i]
		if s.Name == "" {
			return fmt.Errorf("%s: subscription %d has no name", op, i)
		}
		if seen[s.Name] {
			return fmt.Errorf("%s: subscription %q listed twice", op, s.Name)
		}
		seen[s.Name] = true
		if s.Handler == nil {
			return fmt.Errorf("%s: subscription %q has no handler", op, s.Name)
		}
		if s.Retry.Attempts < 0 || s.Retry.Backoff < 0 || s.Retry.MaxBackoff < 0 {
			return fmt.Errorf("%s: subscription %q: retry policy must not be negative", op, s.Name)
		}
		if s.Retry.Attempts == 0 {
			s.Retry.Attempts = 3
		}
		if s.Retry.Backoff == 0 {
			s.Retry.Backoff = 200 * time.Millisecond
		}
		if s.Retry.MaxBackoff == 0 {
			s.Retry.MaxBackoff = 10 * time.Second
		}
		if s.Classify == nil {
			s.Classify = runtime.Classify
		}
	}
	switch {
	case c.Source == nil:
		return fmt.Errorf("%s: Source is required", op)
	case c.Leases == nil:
		return fmt.Errorf("%s: Leases is required", op)
	case c.Checkpoints == nil:
		return fmt.Errorf("%s: Checkpoints is required", op)
	case c.Ledger == nil:
		return fmt.Errorf("%s: Ledger is required", op)
	}
	if err := c.Aggregate.Validate(); err != nil {
		return fmt.Errorf("%s: %w", op, err)
	}
	switch c.StartFrom {
	case 0:
		c.StartFrom = kafkasource.FromEarliest
	case kafkasource.FromEarliest, kafkasource.FromHead:
	default:
		return fmt.Errorf("%s: StartFrom must be kafkasource.FromEarliest or FromHead", op)
	}
	for _, d := range []time.Duration{c.LeaseTTL, c.RenewEvery, c.TrustWindow, c.CheckpointEvery, c.HandoffTimeout,
		c.RefreshEvery, c.LedgerPollEvery, c.OpTimeout, c.JoinBackoff, c.JoinMaxBackoff, c.SystemicBackoff,
		c.SystemicMaxBackoff, c.ParkBurstWindow} {
		if d < 0 {
			return errors.New(op + ": durations must not be negative")
		}
	}
	if c.MaxPartitions < 0 || c.Lanes < 0 || c.MaxInFlight < 0 || c.CatchUpLag < 0 || c.DedupSize < 0 || c.ParkBurst < 0 {
		return errors.New(op + ": counts must not be negative")
	}
	def := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	def(&c.LeaseTTL, 15*time.Second)
	def(&c.RenewEvery, c.LeaseTTL/5)
	def(&c.TrustWindow, c.LeaseTTL-c.RenewEvery)
	if c.RenewEvery >= c.LeaseTTL {
		return fmt.Errorf("%s: RenewEvery %s must be below LeaseTTL %s", op, c.RenewEvery, c.LeaseTTL)
	}
	if c.TrustWindow >= c.LeaseTTL || c.TrustWindow <= c.RenewEvery {
		return fmt.Errorf("%s: TrustWindow %s must be between RenewEvery %s and LeaseTTL %s", op, c.TrustWindow, c.RenewEvery, c.LeaseTTL)
	}
	if c.Lanes == 0 {
		c.Lanes = 16
	}
	if c.MaxInFlight == 0 {
		c.MaxInFlight = 1000
	}
	if c.CatchUpLag == 0 {
		c.CatchUpLag = 10 * int64(c.MaxInFlight)
	}
	if c.CatchUp == nil {
		c.CatchUp = NewCatchUpLimit(2)
	}
	if c.DedupSize == 0 {
		c.DedupSize = 10 * c.MaxInFlight
	}
	def(&c.CheckpointEvery, time.Second)
	def(&c.HandoffTimeout, 10*time.Second)
	def(&c.RefreshEvery, 30*time.Second)
	def(&c.LedgerPollEvery, 30*time.Second)
	def(&c.OpTimeout, c.LeaseTTL/3)
	def(&c.JoinBackoff, 500*time.Millisecond)
	def(&c.JoinMaxBackoff, 30*time.Second)
	def(&c.SystemicBackoff, time.Second)
	def(&c.SystemicMaxBackoff, 30*time.Second)
	if c.ParkBurst == 0 {
		c.ParkBurst = 10
	}
	def(&c.ParkBurstWindow, time.Minute)
	return nil
}

// CatchUpLimit bounds how many catch-up readers run at once. One value
// shared by every Consumer of a node makes the bound node-wide.
// It is safe for concurrent use.
type CatchUpLimit struct{ sem chan struct{} }

// NewCatchUpLimit returns a limit of n catch-up readers (at least 1).
func NewCatchUpLimit(n int) *CatchUpLimit {
	return &CatchUpLimit{sem: make(chan struct{}, max(n, 1))}
}

func (l *CatchUpLimit) acquire(ctx context.Context) error {
	select {
	case l.sem <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (l *CatchUpLimit) release() { <-l.sem }

// InUse returns how many catch-up readers hold the limit now.
func (l *CatchUpLimit) InUse() int { return len(l.sem) }
