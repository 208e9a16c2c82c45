package redisstore

import (
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/protctl/protctl/pkg/runtime"
	"github.com/protctl/protctl/pkg/runtime/ledger"
)

// Store is the Redis implementation of ledger.Ledger, runtime.Membership
// and runtime.Checkpoints. It is safe for concurrent use and keeps no
// state beyond its configuration and, per node it heartbeats, the held
// partitions it last stored (so that heartbeats resend them only when
// they change): any number of Stores, in any number of processes, can
// share a server.
type Store struct {
	client redis.UniversalClient
	cfg    config
	held   heldSent
}

var (
	_ ledger.Ledger       = (*Store)(nil)
	_ runtime.Membership  = (*Store)(nil)
	_ runtime.Checkpoints = (*Store)(nil)
)

// Option configures New.
type Option func(*config)

type config struct {
	watchBuffer int
	now         func() time.Time
	tokenTTL    time.Duration
}

// DefaultRequestTokenTTL is how long RequestPinned remembers a token.
const DefaultRequestTokenTTL = 7 * 24 * time.Hour

// WithRequestTokenTTL sets how long RequestPinned remembers that a
// request with a token was recorded on an entry (RequestTokensKey,
// RequestMarkerKey): a repeat within it is recognised as already
// recorded, even after the entry was resolved. After it, a repeat on an
// entry the request changed fails as changed (the pin no longer holds),
// so nothing is ever recorded twice either way. Default
// DefaultRequestTokenTTL; a non-positive d means the default.
func WithRequestTokenTTL(d time.Duration) Option { return func(c *config) { c.tokenTTL = d } }

// WithWatchBuffer sets how many signals WatchRequests and WatchSeeks
// buffer per watcher; one more ends the watch, which the caller
// re-establishes and follows with a re-read. Default: 64; a non-positive
// n means the default.
func WithWatchBuffer(n int) Option { return func(c *config) { c.watchBuffer = n } }

// WithNow sets the local clock used only for defaults the caller left
// zero: NodeStatus.LastSeen on Heartbeat and Parked.ParkedAt on Park.
// Expiry and request times are always the server's. Default: time.Now; nil
// means the default.
func WithNow(now func() time.Time) Option { return func(c *config) { c.now = now } }

func (c *config) validate() {
	if c.watchBuffer <= 0 {
		c.watchBuffer = 64
	}
	if c.now == nil {
		c.now = time.Now
	}
	if c.tokenTTL <= 0 {
		c.tokenTTL = DefaultRequestTokenTTL
	}
}

// New returns a Store over client (a *redis.Client, *redis.ClusterClient or
// failover client). It does no I/O: the first call dials, and scripts are
// loaded on first use.
func New(client redis.UniversalClient, opts ...Option) *Store {
	var cfg config
	for _, o := range opts {
		o(&cfg)
	}
	cfg.validate()
	return &Store{client: client, cfg: cfg}
}

// ttlMillis converts a TTL to the whole milliseconds PX takes, rounding up
// so that a positive TTL never becomes 0.
func ttlMillis(ttl time.Duration) int64 {
	return (int64(ttl) + int64(time.Millisecond) - 1) / int64(time.Millisecond)
}
