package redisbroker

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"

	"github.com/protctl/protctl/pkg/internal/redisadapter"
)

// ErrNoAppendEvents is returned by WatchAppends when the server does not
// publish keyspace events for stream appends: its notify-keyspace-events
// setting lacks E (keyevent events) or t (stream commands), or the
// client may not read it (CONFIG GET refused). Callers fall back to
// polling (pkg/runtime's discovery does).
var ErrNoAppendEvents = errors.New("redisbroker: the server does not publish stream append events (notify-keyspace-events needs E and t, or E and A)")

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

// WatchAppends sends the name of every stream of category that anybody
// appends to (XADD by any publisher, protctl's or not), from the server's
// keyspace events, until ctx ends; then it closes the channel. Names come
// as written, lanes included (C:K, C:K:backfill); the caller maps them to
// partition keys and should check them against the index, since a key
// may itself contain the lane separator.
//
// It needs the server to publish keyevent events for stream commands
// (notify-keyspace-events containing E and t, or E and A; protctl never
// changes the setting): otherwise it returns ErrNoAppendEvents. It
// subscribes to __keyevent@<db>__:xadd, which carries every XADD of the
// database (the channel cannot be narrowed to a prefix); the filtering
// is done here. On a Redis Cluster events are published by the node that
// ran the command only, so it subscribes on every master known when it
// is called; after a failover or a resharding the caller's periodic
// re-discovery (and a new call when the channel closes) covers the gap.
//
// Like WatchPartitions, the subscription is confirmed before the call
// returns, and events are hints: dropped when the caller falls behind,
// lost while a connection is re-established.
func (b *Broker) WatchAppends(ctx context.Context, category string) (<-chan string, error) {
	const op = "watch appends"
	if err := b.validCategory(op, category); err != nil {
		return nil, err
	}
	var (
		subs []*redis.PubSub
		err  error
	)
	closeAll := func() {
		for _, ps := range subs {
			_ = ps.Close()
		}
	}
	switch c := b.client.(type) {
	case *redis.ClusterClient:
		var mu sync.Mutex
		err = c.ForEachMaster(ctx, func(ctx context.Context, node *redis.Client) error {
			ps, err := subscribeAppends(ctx, node, node.Options().DB)
			if err != nil {
				return err
			}
			mu.Lock()
			subs = append(subs, ps)
			mu.Unlock()
			return nil
		})
	case *redis.Client:
		var ps *redis.PubSub
		ps, err = subscribeAppends(ctx, c, c.Options().DB)
		if ps != nil {
			subs = append(subs, ps)
		}
	default:
		err = ErrNoAppendEvents
	}
	if err != nil {
		closeAll()
		if errors.Is(err, ErrNoAppendEvents) {
			return nil, err
		}
		return nil, mapErr(call{Op: op}, err)
	}
	out := make(chan string, b.cfg.watchBuffer)
	prefix := category + ":"
	var wg sync.WaitGroup
	for _, ps := range subs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			fwd := make(chan string, b.cfg.watchBuffer)
			go redisadapter.Forward(ctx, ps, fwd, b.cfg.watchBuffer)
			for name := range fwd {
				if !strings.HasPrefix(name, prefix) {
					continue
				}
				select {
				case out <- name:
				default: // a hint: dropped rather than block the reader
				}
			}
		}()
	}
	go func() {
		wg.Wait()
		close(out)
	}()
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
