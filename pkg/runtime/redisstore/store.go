package redisstore

import (
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/protctl/protctl/pkg/broker"
	"github.com/protctl/protctl/pkg/runtime"
)

// Store is the Redis implementation of runtime.Ledger, runtime.Membership
// and runtime.Checkpoints. It is safe for concurrent use and keeps no
// state beyond its configuration: any number of Stores, in any number of
// processes, can share a server.
type Store struct {
	client redis.UniversalClient
	cfg    config
}

var (
	_ runtime.Ledger      = (*Store)(nil)
	_ runtime.Membership  = (*Store)(nil)
	_ runtime.Checkpoints = (*Store)(nil)
)

// Option configures New.
type Option func(*config)

type config struct {
	watchBuffer int
	now         func() time.Time
}

// WithWatchBuffer sets how many request signals WatchRequests buffers per
// watcher before it drops new ones (signals are hints). Default: 64; a
// non-positive n means the default.
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

// Argument checks. They run before any I/O, so bad input never reaches
// the server.

func invalid(op, arg, value, reason string) error {
	return &broker.InvalidArgumentError{Op: op, Arg: arg, Value: value, Reason: reason}
}

func nonEmpty(op, arg, v string) error {
	if v == "" {
		return invalid(op, arg, `""`, "must not be empty")
	}
	return nil
}

// validTagged checks a name that goes inside a hash tag: a brace would
// move the tag and split a call's keys over slots.
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

// validSubscription refuses the empty name and the reserved form __x__
// (ParkedSubscriptionsKey would otherwise be some subscription's index).
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

func validStatus(op string, s runtime.ParkStatus) error {
	switch s {
	case runtime.StatusParked, runtime.StatusRetrying, runtime.StatusUnrecoverable:
		return nil
	}
	return invalid(op, "status", strconv.Quote(string(s)), `want "parked", "retrying" or "unrecoverable"`)
}

// ttlMillis converts a TTL to the whole milliseconds PX takes, rounding up
// so that a positive TTL never becomes 0.
func ttlMillis(op string, ttl time.Duration) (int64, error) {
	if ttl <= 0 {
		return 0, invalid(op, "ttl", ttl.String(), "must be positive")
	}
	return (int64(ttl) + int64(time.Millisecond) - 1) / int64(time.Millisecond), nil
}
