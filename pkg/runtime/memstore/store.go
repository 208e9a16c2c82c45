package memstore

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/protctl/protctl/pkg/broker"
	"github.com/protctl/protctl/pkg/runtime"
	"github.com/protctl/protctl/pkg/runtime/clock"
)

// Leases reads leases as the broker that grants them stores them. The
// in-memory broker's fault injector implements it:
//
//	b := memorybroker.New()
//	s := memstore.New(b.Faults())
type Leases interface {
	// GetString returns the value at key; ok=false when the key is missing
	// (a lease whose TTL ran out is missing).
	GetString(ctx context.Context, key string) (value string, ok bool, err error)
}

// Store is the in-memory implementation of runtime.Ledger,
// runtime.Membership and runtime.Checkpoints. It is safe for concurrent
// use.
type Store struct {
	leases Leases
	cfg    config

	mu          sync.Mutex
	members     map[string]map[string]member          // service -> node
	checkpoints map[string]map[string]map[int32]int64 // lease group -> subscription -> partition
	parked      map[string]map[entryID]entry          // subscription -> (aggregate, lease)
	watchers    map[string]map[*watcher]struct{}      // by subscription
}

var (
	_ runtime.Ledger      = (*Store)(nil)
	_ runtime.Membership  = (*Store)(nil)
	_ runtime.Checkpoints = (*Store)(nil)
)

// member is a node's last heartbeat: its status as JSON and when it
// expires.
type member struct {
	status   []byte
	expireAt time.Time
}

// entry is a parked entry as JSON and the lease it is fenced by: a fenced
// call with another lease key does not see it (on Redis the record's key
// extends the lease key).
type entry struct {
	leaseKey  string
	partition string // runtime.Parked.Partition
	data      []byte
}

// entryID is an entry's identity within its subscription: the aggregate
// and the lease (the partition) it was parked under. An aggregate parked
// on two partitions has two entries, as on Redis, where the record key
// extends the lease key.
type entryID struct {
	aggregate string
	leaseKey  string
}

type watcher struct{ ch chan string }

// Option configures New.
type Option func(*config)

type config struct {
	clock       clock.Clock
	watchBuffer int
}

// WithClock sets the clock membership expiry and timestamps are measured
// on. Default: clock.System(); nil means the default.
func WithClock(c clock.Clock) Option { return func(cfg *config) { cfg.clock = c } }

// WithWatchBuffer sets how many request signals WatchRequests buffers per
// watcher before it drops new ones. Default: 64; a non-positive n means
// the default.
func WithWatchBuffer(n int) Option { return func(cfg *config) { cfg.watchBuffer = n } }

func (c *config) validate() {
	if c.clock == nil {
		c.clock = clock.System()
	}
	if c.watchBuffer <= 0 {
		c.watchBuffer = 64
	}
}

// New returns an empty store whose fenced writes check leases (not nil).
// It starts no goroutine.
func New(leases Leases, opts ...Option) *Store {
	var cfg config
	for _, o := range opts {
		o(&cfg)
	}
	cfg.validate()
	return &Store{
		leases:      leases,
		cfg:         cfg,
		members:     make(map[string]map[string]member),
		checkpoints: make(map[string]map[string]map[int32]int64),
		parked:      make(map[string]map[entryID]entry),
		watchers:    make(map[string]map[*watcher]struct{}),
	}
}

// fence returns a *broker.LeaseLostError unless f.LeaseKey holds exactly
// f.Token. The caller holds s.mu, so nothing else in the store happens
// between this check and the caller's write.
func (s *Store) fence(ctx context.Context, op string, f broker.Fence) error {
	v, ok, err := s.leases.GetString(ctx, f.LeaseKey)
	if err != nil {
		return fmt.Errorf("memstore: %s: read lease: %w", op, err)
	}
	if !ok || v != f.Token {
		return &broker.LeaseLostError{Op: op, LeaseKey: f.LeaseKey, Token: f.Token}
	}
	return nil
}

func ctxErr(ctx context.Context, op string) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("memstore: %s: %w", op, err)
	}
	return nil
}

// Argument checks: the same as redisstore's, so that a name that works
// here works on Redis.

func invalid(op, arg, value, reason string) error {
	return &broker.InvalidArgumentError{Op: op, Arg: arg, Value: value, Reason: reason}
}

func nonEmpty(op, arg, v string) error {
	if v == "" {
		return invalid(op, arg, `""`, "must not be empty")
	}
	return nil
}

// validTagged checks a name that redisstore puts in a hash tag.
func validTagged(op, arg, v string) error {
	if err := nonEmpty(op, arg, v); err != nil {
		return err
	}
	if strings.ContainsAny(v, "{}") {
		return invalid(op, arg, strconv.Quote(v), `must not contain "{" or "}"`)
	}
	return nil
}

func validService(op, service string) error { return validTagged(op, "service", service) }

func validSubscription(op, sub string) error {
	if err := nonEmpty(op, "subscription", sub); err != nil {
		return err
	}
	if len(sub) >= 4 && strings.HasPrefix(sub, "__") && strings.HasSuffix(sub, "__") {
		return invalid(op, "subscription", strconv.Quote(sub), "the form __x__ is reserved")
	}
	return nil
}

func validFence(op string, f broker.Fence) error {
	if err := nonEmpty(op, "lease key", f.LeaseKey); err != nil {
		return err
	}
	return nonEmpty(op, "fence token", f.Token)
}

func validEntry(op string, f broker.Fence, subscription, aggregate string) error {
	if err := validFence(op, f); err != nil {
		return err
	}
	if err := validSubscription(op, subscription); err != nil {
		return err
	}
	return nonEmpty(op, "aggregate", aggregate)
}

func validStatus(op string, s runtime.ParkStatus) error {
	switch s {
	case runtime.StatusParked, runtime.StatusRetrying, runtime.StatusUnrecoverable:
		return nil
	}
	return invalid(op, "status", strconv.Quote(string(s)), `want "parked", "retrying" or "unrecoverable"`)
}

func validCheckpoint(op, leaseGroup, subscription string, partition int32) error {
	if err := validTagged(op, "lease group", leaseGroup); err != nil {
		return err
	}
	if err := nonEmpty(op, "subscription", subscription); err != nil {
		return err
	}
	if partition < 0 {
		return invalid(op, "partition", strconv.FormatInt(int64(partition), 10), "must not be negative")
	}
	return nil
}
