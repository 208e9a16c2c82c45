package repair

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/protctl/protctl/internal/inspect"
	"github.com/protctl/protctl/pkg/broker"
)

// Broker is the part of the partitioning contract repairs use
// (redisbroker.Broker implements it). Every write goes through it, so the
// broker's atomic checks are the last word on safety.
type Broker interface {
	broker.LeaseManager
	broker.Maintainer
	DeadLetterPartitionFenced(ctx context.Context, f broker.Fence, stream, group, id, dlqStream, reason string) (string, error)
	ConsumerDeleter
	Layout() broker.Layout
}

// Ledger is the part of the failure ledger parked retry and skip use
// (ledger.Reader and ledger.Requester; redisstore.Store
// implements it).
type Ledger interface {
	inspect.Ledger
	RequestRetry(ctx context.Context, subscription, partition, aggregate, by string) error
	RequestSkip(ctx context.Context, subscription, partition, aggregate, reason, by string) error
}

// DefaultOperator is the owner name of the short lease Apply takes to
// dead-letter the head of a partition nobody holds.
const DefaultOperator = "protctl-operator"

// Repairer plans and applies repairs. It is safe for concurrent use.
type Repairer struct {
	client  redis.UniversalClient
	broker  Broker
	inspect *inspect.Inspector
	cfg     config
}

type config struct {
	backfill string
	ledger   Ledger
	operator string
	leaseTTL time.Duration
	now      func() time.Time
	recorder Recorder
	seekWait time.Duration
}

// Option configures New.
type Option func(*config)

// WithBackfillSuffix names the backfill lane. Default
// broker.DefaultBackfillSuffix.
func WithBackfillSuffix(s string) Option { return func(c *config) { c.backfill = s } }

// WithLedger enables parked retry and skip. Default: none (planning them
// fails).
func WithLedger(l Ledger) Option { return func(c *config) { c.ledger = l } }

// WithOperator names the owner of the operator lease (see ActionDeadLetter
// in doc.go). Default DefaultOperator.
func WithOperator(owner string) Option { return func(c *config) { c.operator = owner } }

// WithOperatorLeaseTTL bounds the operator lease. Default 30s.
func WithOperatorLeaseTTL(d time.Duration) Option { return func(c *config) { c.leaseTTL = d } }

// WithNow sets the clock that stamps Plan.CreatedAt. Default time.Now.
func WithNow(now func() time.Time) Option { return func(c *config) { c.now = now } }

func (c *config) validate() {
	if c.backfill == "" {
		c.backfill = broker.DefaultBackfillSuffix
	}
	if c.operator == "" {
		c.operator = DefaultOperator
	}
	if c.leaseTTL <= 0 {
		c.leaseTTL = 30 * time.Second
	}
	if c.now == nil {
		c.now = time.Now
	}
	if c.seekWait <= 0 {
		c.seekWait = 30 * time.Second
	}
}

// New returns a Repairer that reads through client and writes through b,
// in b's layout. It does no I/O.
func New(client redis.UniversalClient, b Broker, opts ...Option) *Repairer {
	var cfg config
	for _, o := range opts {
		o(&cfg)
	}
	cfg.validate()
	iopts := []inspect.Option{inspect.WithBackfillSuffix(cfg.backfill)}
	if cfg.ledger != nil {
		iopts = append(iopts, inspect.WithLedger(cfg.ledger))
	}
	return &Repairer{client: client, broker: b, inspect: inspect.New(client, b.Layout(), iopts...), cfg: cfg}
}

// Inspector returns the Inspector the Repairer plans with.
func (r *Repairer) Inspector() *inspect.Inspector { return r.inspect }

// ReapRequest asks for reaps of a category's partitions.
type ReapRequest struct {
	Category string
	// Keys to reap; with AllCold, every key of the index is considered
	// and only the reapable ones become items.
	Keys    []string
	AllCold bool
	// MinIdle is the minimum age of the newest entry (server clock).
	MinIdle time.Duration
	// Force allows reaping a partition whose lease a group's live owner
	// holds; the apply is then fenced on that lease value and deletes it.
	Force bool
}

// PlanReap plans reaps: one item per key, allowed when the plan's own
// check (the broker's reap rules) passes, otherwise refused with the lane,
// group and reason that block it.
func (r *Repairer) PlanReap(ctx context.Context, req ReapRequest) (*Plan, error) {
	return r.planReap(ctx, req)
}

// ReleaseRequest asks for the release of group's lease on key.
type ReleaseRequest struct {
	// Category, when set (the CLI always sets it), must be known, with
	// Key one of its partitions and Group reading it, or the plan fails
	// with an error wrapping inspect.ErrNotFound; the apply checks again.
	// Empty: the lease alone is planned on.
	Category string
	Group    string
	Key      string
	// Force allows releasing a held lease (a live owner loses the
	// partition). Without it a held lease is refused.
	Force bool
}

// PlanRelease plans a fenced release of the lease seen now.
func (r *Repairer) PlanRelease(ctx context.Context, req ReleaseRequest) (*Plan, error) {
	return r.planRelease(ctx, req)
}

// TrimRequest asks for a safe trim of Stream to MaxLen.
type TrimRequest struct {
	Stream string
	MaxLen int64
}

// PlanTrim plans a trim: the item's precondition shows the floor, the
// group that pins it and how many entries would go.
func (r *Repairer) PlanTrim(ctx context.Context, req TrimRequest) (*Plan, error) {
	return r.planTrim(ctx, req)
}

// DeadLetterRequest asks to dead-letter the head of group on a partition.
type DeadLetterRequest struct {
	Category string
	Key      string
	Group    string
	// ID is the entry to dead-letter; empty means the group's oldest
	// pending entry (over the main lane, then the backfill lane).
	ID string
	// Reason is recorded in the dead-letter entry.
	Reason string
	// MinDeliveries is how many times the entry must have been delivered
	// for the plan to allow it without Force. Default 2.
	MinDeliveries int64
	// Force allows dead-lettering an entry delivered fewer times.
	Force bool
}

// PlanDeadLetter plans moving a pending head to C:K:dlq and acking it,
// fenced on the lease seen now (see doc.go).
func (r *Repairer) PlanDeadLetter(ctx context.Context, req DeadLetterRequest) (*Plan, error) {
	return r.planDeadLetter(ctx, req)
}

// ParkedRequest asks for retries or skips of parked entries: one entry
// (Subscription, Aggregate and, for a Kafka aggregate parked on several
// partitions, Partition), or with All every entry Filter selects.
type ParkedRequest struct {
	Action       Action // ActionRetry or ActionSkip
	Subscription string
	Aggregate    string
	// Partition narrows Aggregate to its entry on one partition (Kafka:
	// the partition number); "" for the aggregate's only entry.
	Partition string
	// All selects every entry Filter matches (the zero Filter: every
	// entry of every subscription). A Filter.Subscription that selects
	// nothing and left no trace in Redis (never parked, no consumer
	// group, no Kafka checkpoint) is an *UnknownSubscriptionError; a
	// known one that selects nothing is an empty plan.
	All    bool
	Filter inspect.ParkedFilterSpec
	// Max caps the items of an All request (the oldest first); 0 means
	// no cap.
	Max    int
	Reason string // required for skip
	By     string // the operator, recorded in the ledger
}

// PlanParked plans parked retries or skips.
func (r *Repairer) PlanParked(ctx context.Context, req ParkedRequest) (*Plan, error) {
	return r.planParked(ctx, req)
}

// ApplyOptions tunes Apply. The zero value is the default.
type ApplyOptions struct {
	// Interval is waited after each change made, before the next item
	// is tried (the CLI's --rps); 0 = none. Items found done by an
	// earlier run of the plan, conflicts and refusals are not paced.
	Interval time.Duration
	// Max bounds how many items this apply tries, not counting those
	// found done by an earlier run (the CLI's apply --max); 0 = no bound.
	// The items left keep no result and the outcome is OutcomePartial:
	// apply the plan again for them.
	Max int
	// OnItem, when set, is called after each item with its result.
	OnItem func(i int, it Item)
	// CommandLine is the command the apply stands for when it is not
	// the process's own invocation: the dashboard applies the plan of an
	// equivalent command (e.g. "protctl partitions release C K --group
	// G --force"), which the audit log records as the command, with the
	// process (protctl tui) as the one it came through. Default: none,
	// the process's own invocation is the command.
	CommandLine string
	// SeekWait bounds how long a seek or topic-seek item of a partition
	// a protctl node owns waits for the node to carry it out (the CLI's
	// seek --wait, topics seek --timeout); 0: the Repairer's
	// (WithSeekWait, default 30s) for a seek, DefaultSeekWait for a
	// topic-seek.
	SeekWait time.Duration
}

// Apply applies p's allowed items in order, re-checking each one's
// precondition atomically in Redis, and records every item's Result and
// Detail in p. Items the plan did not allow are refused without being
// tried. It returns the outcome, and an error (with the items so far
// recorded) only when it could not go on: a transport failure, a
// cancelled context, or a plan of another layout. With WithRecorder, an
// Apply that tried something is recorded, and a failure to record is
// returned as a *RecordError (see Recorder); a RecordChecker that says the
// apply cannot be recorded stops it before its first item, with an error
// wrapping ErrCannotRecord and nothing changed.
func (r *Repairer) Apply(ctx context.Context, p *Plan, opts ApplyOptions) (Outcome, error) {
	return r.apply(ctx, p, opts)
}
