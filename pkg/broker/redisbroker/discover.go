package redisbroker

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"

	"github.com/protctl/protctl/pkg/internal/redisadapter"
)

// ErrNoAppendEvents is returned by WatchAppends when the server announces
// no writes to this client: it refuses client tracking (an ACL without
// client|tracking, or Redis older than 6) and does not publish keyspace
// events for stream appends (notify-keyspace-events lacks E or t, or
// CONFIG GET is refused). Callers fall back to polling (pkg/runtime's
// discovery does).
var ErrNoAppendEvents = errors.New("redisbroker: the server announces no writes (client tracking refused, and notify-keyspace-events lacks E and t)")

// CountPartitionKeys returns the number of keys in category's index
// (SCARD): one command whatever the index's size. A change between two
// calls means the index gained or lost keys; what changed takes a scan
// (ScanPartitionKeys) to learn.
func (b *Broker) CountPartitionKeys(ctx context.Context, category string) (int64, error) {
	const op = "count partition keys"
	if err := b.validCategory(op, category); err != nil {
		return 0, err
	}
	index := b.cfg.layout.IndexKey(category)
	n, err := b.client.SCard(ctx, index).Result()
	if err != nil {
		return 0, mapErr(call{Op: op, Key: index, Want: "set"}, err)
	}
	return n, nil
}

// PartitionKeysIndexed reports, for each of keys, whether category's index
// holds it (SMISMEMBER, one command).
func (b *Broker) PartitionKeysIndexed(ctx context.Context, category string, keys []string) ([]bool, error) {
	const op = "partition keys indexed"
	if err := b.validCategory(op, category); err != nil {
		return nil, err
	}
	if len(keys) == 0 {
		return nil, nil
	}
	index := b.cfg.layout.IndexKey(category)
	members := make([]any, len(keys))
	for i, k := range keys {
		members[i] = k
	}
	in, err := b.client.SMIsMember(ctx, index, members...).Result()
	if err != nil {
		return nil, mapErr(call{Op: op, Key: index, Want: "set"}, err)
	}
	return in, nil
}

// WatchAppends sends the name of every key of category anybody writes
// to (XADD by any publisher, protctl's or not) until ctx ends; then it
// closes the channel. Names come as written, lanes included (C:K,
// C:K:backfill); the caller maps them to partition keys and should check
// them against the index, since a key may itself contain the lane
// separator.
//
// The server tells it in one of two ways (docs/decisions/0031-new-key-discovery.md):
//
//   - Server-assisted client tracking (Redis 6+, no setting needed): a
//     connection of its own with CLIENT TRACKING ON BCAST PREFIX "C:"
//     and REDIRECT to itself, subscribed to __redis__:invalidate. The
//     server sends the names of the category's keys that writes changed
//     (XADD, SADD of a new member, XTRIM, expiry: not the group commands
//     XREADGROUP, XACK, XCLAIM, XGROUP, which change no key for the
//     tracking table), batched per event-loop turn and filtered by the
//     prefix on the server. It is tried first; an ACL without
//     client|tracking (or an older server) refuses it.
//   - Keyspace events, when the operator enabled them
//     (notify-keyspace-events containing E and t, or E and A; protctl
//     never changes the setting): __keyevent@<db>__:xadd, which carries
//     every XADD of the database (it cannot be narrowed to a prefix);
//     the filtering is done here.
//
// When neither is available it returns ErrNoAppendEvents. On a Redis
// Cluster the server announces the writes of the node that ran them
// only, so it watches every master known when it is called; after a
// failover or a resharding the caller's periodic re-discovery (and a new
// call when the channel closes) covers the gap. A tracking connection
// that is re-established (the server restarted, a Sentinel failover, a
// dropped connection) closes the channel, since writes were missed
// meanwhile: the caller calls again and scans.
//
// Like WatchPartitions, the subscription is confirmed before the call
// returns, and names are hints: when the caller falls behind the channel
// closes, as it does on a lost connection.
func (b *Broker) WatchAppends(ctx context.Context, category string) (<-chan string, error) {
	const op = "watch appends"
	if err := b.validCategory(op, category); err != nil {
		return nil, err
	}
	var masters []*redis.Client
	switch c := b.client.(type) {
	case *redis.ClusterClient:
		var mu sync.Mutex
		err := c.ForEachMaster(ctx, func(ctx context.Context, node *redis.Client) error {
			mu.Lock()
			masters = append(masters, node)
			mu.Unlock()
			return nil
		})
		if err != nil {
			return nil, mapErr(call{Op: op}, err)
		}
	case *redis.Client:
		masters = []*redis.Client{c}
	default:
		return nil, ErrNoAppendEvents
	}
	prefix := category + ":"
	wctx, cancel := context.WithCancel(ctx)
	srcs, err := trackAll(wctx, masters, prefix)
	if errors.Is(err, errNoTracking) {
		srcs, err = subscribeAll(wctx, masters)
	}
	if err != nil {
		cancel()
		if errors.Is(err, ErrNoAppendEvents) {
			return nil, err
		}
		return nil, mapErr(call{Op: op}, err)
	}
	out := make(chan string, b.cfg.watchBuffer)
	// The category's groups set shares its prefix and is no stream. The
	// index is named (a SADD of a new key, with tracking): a publisher
	// that appends before it indexes (the cluster layout) has its key
	// announced before the index holds it, and the caller checks such
	// keys again when the index changes.
	skip := map[string]bool{b.cfg.layout.GroupsKey(category): true}
	var wg sync.WaitGroup
	for _, src := range srcs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// The first source to end ends the watch: the caller scans
			// when it calls again.
			defer cancel()
			forwardNames(wctx, src, prefix, skip, out)
		}()
	}
	go func() {
		wg.Wait()
		cancel()
		close(out)
	}()
	return out, nil
}

// appendSource is one master's announcements of writes: a Pub/Sub
// subscription, the client it belongs to when it is one of WatchAppends'
// own (tracking), and a channel closed when its connection was
// re-established.
type appendSource struct {
	ps          *redis.PubSub
	own         *redis.Client
	reconnected <-chan struct{}
}

func (s appendSource) close() {
	_ = s.ps.Close()
	if s.own != nil {
		_ = s.own.Close()
	}
}

// forwardNames sends the names src announces that start with prefix, but
// for those in skip, to out until ctx ends or a name may have been
// missed: src's connection failed (go-redis would re-establish it, but
// writes made meanwhile were not announced, and on a Cluster a failed-over
// master's address may never answer again), it went quiet past a ping
// (a half-open connection), or out was full and a name was dropped. The
// caller then watches again, which asks for a scan.
func forwardNames(ctx context.Context, src appendSource, prefix string, skip map[string]bool, out chan<- string) {
	defer src.close()
	redisadapter.Follow(ctx, src.ps, redisadapter.QuietPing, func(m *redis.Message) bool {
		select {
		case <-src.reconnected:
			return false
		default:
		}
		names := m.PayloadSlice
		if names == nil {
			names = []string{m.Payload}
		}
		for _, name := range names {
			if !strings.HasPrefix(name, prefix) || skip[name] {
				continue
			}
			select {
			case out <- name:
			default:
				return false // dropped: end the watch, so that the caller scans
			}
		}
		return true
	})
}

// errNoTracking says a server refused client tracking (an ACL without
// client|tracking, a server older than Redis 6).
var errNoTracking = errors.New("redisbroker: client tracking refused")

// trackingChannel is where the server sends the invalidation messages of
// a tracking connection that redirects them (RESP2).
const trackingChannel = "__redis__:invalidate"

// trackAll starts a tracking connection on every master; errNoTracking
// when one refuses it.
func trackAll(ctx context.Context, masters []*redis.Client, prefix string) ([]appendSource, error) {
	var out []appendSource
	for _, m := range masters {
		src, err := track(ctx, m, prefix)
		if err != nil {
			for _, s := range out {
				s.close()
			}
			return nil, err
		}
		out = append(out, src)
	}
	return out, nil
}

// track opens a client of its own to c's server whose connection turns
// client tracking on in broadcast mode for prefix, redirected to itself,
// and subscribes it to the invalidation channel (confirmed). Its
// connections speak RESP2: under RESP3 the server would send the
// invalidations as "invalidate" pushes, which go-redis's Pub/Sub does
// not read. Every connection the client makes turns tracking on again
// (OnConnect); a second one means the first was lost, and closes
// reconnected.
func track(ctx context.Context, c *redis.Client, prefix string) (appendSource, error) {
	opt := *c.Options()
	// Options holds pointers go-redis writes through when a handshake
	// fails (the maintenance notifications' mode): the copy must not
	// share them with c. A RESP2 connection has no such notifications.
	opt.MaintNotificationsConfig = &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}
	opt.PushNotificationProcessor = nil
	opt.ClientSideCacheConfig = nil
	opt.AutoPipelineOptions = nil
	opt.Protocol = 2
	opt.PoolSize = 1
	opt.MinIdleConns = 0
	opt.MaxIdleConns = 0
	reconnected := make(chan struct{})
	var (
		conns   atomic.Int32
		refused atomic.Pointer[error]
		once    sync.Once
	)
	prev := opt.OnConnect
	opt.OnConnect = func(ctx context.Context, cn *redis.Conn) error {
		if prev != nil {
			if err := prev(ctx, cn); err != nil {
				return err
			}
		}
		id, err := cn.ClientID(ctx).Result()
		if err == nil {
			err = cn.Do(ctx, "CLIENT", "TRACKING", "ON", "REDIRECT", id, "BCAST", "PREFIX", prefix).Err()
		}
		if err != nil {
			var rerr redis.Error
			if errors.As(err, &rerr) {
				refused.Store(&err) // the server answered no: not a lost connection
			}
			return err
		}
		if conns.Add(1) > 1 {
			once.Do(func() { close(reconnected) })
		}
		return nil
	}
	own := redis.NewClient(&opt)
	ps, err := redisadapter.Subscribe(ctx, own, trackingChannel)
	if err != nil {
		_ = own.Close()
		if r := refused.Load(); r != nil {
			return appendSource{}, fmt.Errorf("%w: %v", errNoTracking, *r)
		}
		var rerr redis.Error
		if errors.As(err, &rerr) {
			// Tracking on, the channel refused (an ACL that resets
			// channels): as good as no tracking.
			return appendSource{}, fmt.Errorf("%w: %v", errNoTracking, err)
		}
		return appendSource{}, err
	}
	return appendSource{ps: ps, own: own, reconnected: reconnected}, nil
}

// subscribeAll subscribes to the XADD keyevent events of every master.
func subscribeAll(ctx context.Context, masters []*redis.Client) ([]appendSource, error) {
	var out []appendSource
	for _, m := range masters {
		ps, err := subscribeAppends(ctx, m, m.Options().DB)
		if err != nil {
			for _, s := range out {
				s.close()
			}
			return nil, err
		}
		out = append(out, appendSource{ps: ps})
	}
	return out, nil
}

// subscribeAppends checks that c's server publishes XADD keyevent events
// and subscribes to them (confirmed).
func subscribeAppends(ctx context.Context, c *redis.Client, db int) (*redis.PubSub, error) {
	cfg, err := c.ConfigGet(ctx, "notify-keyspace-events").Result()
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrNoAppendEvents, err)
	}
	if !appendEventsOn(cfg["notify-keyspace-events"]) {
		return nil, ErrNoAppendEvents
	}
	return redisadapter.Subscribe(ctx, c, fmt.Sprintf("__keyevent@%d__:xadd", db))
}

// appendEventsOn reports whether a notify-keyspace-events value makes the
// server publish keyevent events for XADD: E, and t or A (A is every
// class but m, n and d).
func appendEventsOn(flags string) bool {
	return strings.ContainsRune(flags, 'E') && strings.ContainsAny(flags, "tA")
}
