package memstore

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/protctl/protctl/pkg/broker"
	"github.com/protctl/protctl/pkg/internal/watchers"
	"github.com/protctl/protctl/pkg/runtime"
	"github.com/protctl/protctl/pkg/runtime/clock"
	"github.com/protctl/protctl/pkg/runtime/ledger"
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

// Store is the in-memory implementation of ledger.Ledger,
// runtime.Membership and runtime.Checkpoints. It is safe for concurrent
// use.
type Store struct {
	leases Leases
	cfg    config

	mu          sync.Mutex
	members     map[string]map[string]member          // service -> node
	checkpoints map[string]map[string]map[int32]int64 // lease group -> subscription -> partition
	parked      map[string]map[entryID]entry          // subscription -> (aggregate, lease)
	watchers    watchers.Set[string]                  // by subscription
	// requested remembers pinned requests by token: the entry a call
	// named (as asked) -> the entry it was recorded on (RequestPinned).
	requested map[pinnedName]pinnedMark
	// Seeks (seek.go): pending requests, answers, and the lease groups'
	// watchers.
	seeks        map[seekSub]*seekHash
	seekResults  map[seekSub]map[int32]runtime.SeekResult
	seekWatchers watchers.Set[string]
}

var (
	_ ledger.Ledger       = (*Store)(nil)
	_ runtime.Membership  = (*Store)(nil)
	_ runtime.Checkpoints = (*Store)(nil)
)

// member is a node's last heartbeat: its status as JSON and when it
// expires.
type member struct {
	status   []byte
	held     []byte
	expireAt time.Time
}

// entry is a parked entry as JSON and the lease it is fenced by: a fenced
// call with another lease key does not see it (on Redis the record's key
// extends the lease key).
type entry struct {
	leaseKey  string
	partition string // ledger.Parked.Partition
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

// Option configures New.
type Option func(*config)

type config struct {
	clock       clock.Clock
	watchBuffer int
	tokenTTL    time.Duration
}

// WithRequestTokenTTL sets how long RequestPinned remembers a token (as
// redisstore's option of the same name). Default 7 days; a non-positive d
// means the default.
func WithRequestTokenTTL(d time.Duration) Option { return func(cfg *config) { cfg.tokenTTL = d } }

// WithClock sets the clock membership expiry and timestamps are measured
// on. Default: clock.System(); nil means the default.
func WithClock(c clock.Clock) Option { return func(cfg *config) { cfg.clock = c } }

// WithWatchBuffer sets how many request signals WatchRequests and
// WatchSeeks buffer per watcher; one more closes its channel. Default:
// 64; a non-positive n means the default.
func WithWatchBuffer(n int) Option { return func(cfg *config) { cfg.watchBuffer = n } }

func (c *config) validate() {
	if c.clock == nil {
		c.clock = clock.System()
	}
	if c.watchBuffer <= 0 {
		c.watchBuffer = 64
	}
	if c.tokenTTL <= 0 {
		c.tokenTTL = 7 * 24 * time.Hour
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
		requested:   make(map[pinnedName]pinnedMark),

		seeks:       make(map[seekSub]*seekHash),
		seekResults: make(map[seekSub]map[int32]runtime.SeekResult),
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
