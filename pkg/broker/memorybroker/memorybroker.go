package memorybroker

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"sync"
	"time"

	"github.com/protctl/protctl/pkg/broker"
	"github.com/protctl/protctl/pkg/internal/watchers"
)

// Broker is the in-memory broker. It implements broker.PartitionedBroker,
// broker.PartitionWatcher and broker.EntryWaiter. All its methods are safe
// for concurrent use; each runs as one atomic step under a single lock,
// which is what makes a fenced call's lease check and its read or write
// one step, as a Lua script is on Redis.
type Broker struct {
	cfg    config
	inline bool

	mu           sync.Mutex
	keys         map[string]*object
	watchers     watchers.Set[string]                 // by category
	entryWaiters map[string]map[*entryWaiter]struct{} // by stream
}

// The contract and every optional capability the adapter implements
// (pkg/broker: broker.go, batch.go, optional.go), checked at compile
// time. It lacks PartitionCounter, AppendWatcher (its publishes signal
// through PartitionWatcher), ReaderPinner (no connections to pin) and
// PartitionSeeker (operators' seeks are Redis only).
var (
	_ broker.PartitionedBroker = (*Broker)(nil)
	_ broker.PartitionWatcher  = (*Broker)(nil)
	_ broker.EntryWaiter       = (*Broker)(nil)
	_ broker.ConsumerReleaser  = (*Broker)(nil)
	_ broker.AckReader         = (*Broker)(nil)
	_ broker.BatchReader       = (*Broker)(nil)
	_ broker.BatchAcquirer     = (*Broker)(nil)
	_ broker.BatchReleaser     = (*Broker)(nil)
	_ broker.StreamTailer      = (*Broker)(nil)
	_ broker.BatchRenewer      = (*Broker)(nil)
)

// Option configures New and NewInline.
type Option func(*config)

type config struct {
	clock          Clock
	layout         broker.Layout
	backfillSuffix string
}

// WithClock sets the clock that lease TTLs, entry ids and idle times are
// measured on. Default: the system clock. A nil clock means the default.
func WithClock(c Clock) Option {
	return func(cfg *config) { cfg.clock = c }
}

// WithLayout sets the key layout Layout reports and the partition methods
// use. Default: broker.ProteanLayout.
func WithLayout(l broker.Layout) Option {
	return func(cfg *config) { cfg.layout = l }
}

// WithBackfillSuffix names the backfill lane that partition keys are
// checked against on publish and record (a key must not equal it).
// Default: broker.DefaultBackfillSuffix; an empty suffix means the default.
func WithBackfillSuffix(suffix string) Option {
	return func(cfg *config) { cfg.backfillSuffix = suffix }
}

func (c *config) validate() {
	if c.clock == nil {
		c.clock = systemClock{}
	}
	if c.backfillSuffix == "" {
		c.backfillSuffix = broker.DefaultBackfillSuffix
	}
}

// New returns an empty broker with the whole partitioning contract
// (Capabilities is broker.StreamPartitioning). It does no I/O and starts
// no goroutine.
func New(opts ...Option) *Broker {
	var cfg config
	for _, o := range opts {
		o(&cfg)
	}
	cfg.validate()
	return &Broker{
		cfg:          cfg,
		keys:         make(map[string]*object),
		entryWaiters: make(map[string]map[*entryWaiter]struct{}),
	}
}

// NewInline returns an empty broker without stream partitioning
// (Capabilities lack broker.StreamPartitioning): Append writes plain
// streams, and every partitioning method fails with a
// *broker.UnsupportedError naming it (errors.Is
// broker.ErrPartitioningUnsupported). It is what a deployment that does not
// partition runs on: sequential-by-key is then a deliberate no-op.
func NewInline(opts ...Option) *Broker {
	b := New(opts...)
	b.inline = true
	return b
}

// Capabilities is broker.StreamPartitioning, or none for a broker made by
// NewInline.
func (b *Broker) Capabilities() broker.Capabilities {
	if b.inline {
		return 0
	}
	return broker.StreamPartitioning
}

// Layout is the key layout set by WithLayout.
func (b *Broker) Layout() broker.Layout { return b.cfg.layout }

// begin runs the checks every partitioning method starts with: the
// capability (an inline broker refuses with method named), then ctx.
func (b *Broker) begin(ctx context.Context, method string) error {
	if b.inline {
		return &broker.UnsupportedError{Op: method}
	}
	return ctxErr(ctx, method)
}

func ctxErr(ctx context.Context, op string) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("memorybroker: %s: %w", op, err)
	}
	return nil
}

// lock takes the state lock and reads the clock once: the whole call sees
// one instant, as a script sees one server time.
func (b *Broker) lock() time.Time {
	b.mu.Lock()
	return b.cfg.clock.Now()
}

func invalid(op, arg, value, reason string) error {
	return &broker.InvalidArgumentError{Op: op, Arg: arg, Value: value, Reason: reason}
}

func nonEmpty(op, arg, value string) error {
	if value == "" {
		return invalid(op, arg, `""`, "must not be empty")
	}
	return nil
}

func positive(op, arg string, n int64) error {
	if n <= 0 {
		return invalid(op, arg, strconv.FormatInt(n, 10), "must be positive")
	}
	return nil
}

// ttlOf validates a lease TTL and rounds it up to whole milliseconds, the
// resolution of Redis's PX, so that a positive TTL never becomes 0.
func ttlOf(op string, ttl time.Duration) (time.Duration, error) {
	if ttl <= 0 {
		return 0, invalid(op, "ttl", ttl.String(), "must be positive")
	}
	if ttl > math.MaxInt64-time.Millisecond {
		return ttl, nil
	}
	return ceilMillis(ttl) * time.Millisecond, nil
}

// ceilMillis is d in milliseconds, rounded up.
func ceilMillis(d time.Duration) time.Duration {
	q := d / time.Millisecond
	if d%time.Millisecond > 0 {
		q++
	}
	return q
}

// idleMillis validates a minimum idle time and rounds it up to whole
// milliseconds (the resolution of Redis's idle times and entry ids):
// waiting a fraction of a millisecond longer is the conservative side.
func idleMillis(op string, d time.Duration) (int64, error) {
	if d < 0 {
		return 0, invalid(op, "minIdle", d.String(), "must not be negative")
	}
	return int64(ceilMillis(d)), nil
}

// validKey checks a partition key against the layout's rules, naming op.
func (b *Broker) validKey(op, key, backfillSuffix string) error {
	err := b.cfg.layout.ValidateKey(key, backfillSuffix)
	var ia *broker.InvalidArgumentError
	if errors.As(err, &ia) {
		cp := *ia
		cp.Op = op
		return &cp
	}
	return err
}

// validGroup checks a consumer group name.
func (b *Broker) validGroup(op, group string) error {
	return b.cfg.layout.ValidateName(op, "group", group)
}

func validFence(op string, f broker.Fence) error {
	if err := nonEmpty(op, "lease key", f.LeaseKey); err != nil {
		return err
	}
	return nonEmpty(op, "fence token", f.Token)
}

func firstErr(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

func parseID(op, s string) (broker.StreamID, error) {
	id, err := broker.ParseStreamID(s)
	if err != nil {
		return broker.StreamID{}, invalid(op, "id", strconv.Quote(s), `want "<ms>-<seq>"`)
	}
	return id, nil
}

// copyData returns a private, non-nil copy of data.
func copyData(data []byte) []byte {
	out := make([]byte, len(data))
	copy(out, data)
	return out
}
