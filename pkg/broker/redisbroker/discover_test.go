package redisbroker_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/protctl/protctl/internal/acl"
	"github.com/protctl/protctl/internal/testenv"
	"github.com/protctl/protctl/pkg/broker/redisbroker"
)

// noTracking is a server whose default user may not turn client tracking
// on (as an ACL without client|tracking, or a server older than Redis 6).
var noTracking = []string{"--user", "default", "on", "nopass", "~*", "&*", "+@all", "-client|tracking"}

// WatchAppends names the keys of the category written by any client (a
// plain SADD and XADD, as Protean writes them), through client tracking on
// a server with the default configuration, and through keyspace events
// where tracking is refused and the operator enabled them. Group commands
// (XGROUP, XREADGROUP, XACK, XAUTOCLAIM: the runtime's own reads) are not
// announced: a node woken by its own reads would read again forever.
func TestWatchAppendsNamesWritesOfAnyPublisher(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		// indexNamed: the index's SADD of a new key is announced too
		// (tracking names every key written under the prefix).
		indexNamed bool
	}{
		{"client tracking", nil, true},
		{"keyspace events", append(append([]string{}, noTracking...), "--notify-keyspace-events", "Et"), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := testenv.StartRedis(t, testenv.WithArgs(tc.args...))
			c := srv.Client(t)
			b := redisbroker.New(c)
			ctx, cancel := context.WithCancel(t.Context())
			ch, err := b.WatchAppends(ctx, cat)
			if err != nil {
				t.Fatal(err)
			}
			bg := context.Background()
			// Watched before the return: these writes, right after, are seen.
			stream := layout.Stream(cat, "o-9")
			if err := c.SAdd(bg, layout.IndexKey(cat), "o-9").Err(); err != nil {
				t.Fatal(err)
			}
			if err := c.XAdd(bg, &redis.XAddArgs{Stream: "other::cat:x", Values: []any{"a", 1}}).Err(); err != nil {
				t.Fatal(err)
			}
			if err := c.XAdd(bg, &redis.XAddArgs{Stream: stream, Values: []any{"a", 1}}).Err(); err != nil {
				t.Fatal(err)
			}
			if tc.indexNamed {
				wantName(t, ch, layout.IndexKey(cat))
			}
			wantName(t, ch, stream)
			// The runtime's own group commands, then a marker append: the
			// next name is the marker's (a connection's messages keep
			// their order).
			must(t, c.XGroupCreate(bg, stream, "g", "0").Err())
			must(t, c.XReadGroup(bg, &redis.XReadGroupArgs{Group: "g", Consumer: "c", Streams: []string{stream, ">"}, Count: 10}).Err())
			must(t, c.XAutoClaim(bg, &redis.XAutoClaimArgs{Stream: stream, Group: "g", Consumer: "d", Start: "0"}).Err())
			ids, err := c.XRange(bg, stream, "-", "+").Result()
			must(t, err)
			must(t, c.XAck(bg, stream, "g", ids[0].ID).Err())
			must(t, c.XGroupSetID(bg, stream, "g", "0").Err())
			marker := layout.Stream(cat, "o-10")
			must(t, c.XAdd(bg, &redis.XAddArgs{Stream: marker, Values: []any{"a", 1}}).Err())
			wantName(t, ch, marker)
			cancel()
			waitClosed(t, ch)
			wantNoWatchGoroutines(t)
		})
	}
}

// A server that announces nothing (tracking refused, no keyspace events)
// is ErrNoAppendEvents, and leaves nothing running.
func TestWatchAppendsWithoutAnnouncements(t *testing.T) {
	srv := testenv.StartRedis(t, testenv.WithArgs(noTracking...))
	b := redisbroker.New(srv.Client(t))
	if _, err := b.WatchAppends(t.Context(), cat); !errors.Is(err, redisbroker.ErrNoAppendEvents) {
		t.Fatalf("WatchAppends = %v, want ErrNoAppendEvents", err)
	}
	wantNoWatchGoroutines(t)
}

// A tracking connection the server dropped is re-established by go-redis,
// but writes made meanwhile were not announced: the watch ends, so that
// the caller watches again and scans the index.
func TestWatchAppendsEndsWhenItsConnectionIsLost(t *testing.T) {
	srv := testenv.StartRedis(t)
	c := srv.Client(t)
	b := redisbroker.New(c)
	ch, err := b.WatchAppends(t.Context(), cat)
	if err != nil {
		t.Fatal(err)
	}
	must(t, c.Do(context.Background(), "CLIENT", "KILL", "TYPE", "pubsub").Err())
	testenv.Eventually(t, 10*time.Second, "the watch to end after its connection was killed", testenv.Closed(ch))
	wantNoWatchGoroutines(t)
}

// A watch whose reader fell behind (a name dropped) ends, so that the
// caller watches again and scans for what it missed.
func TestWatchAppendsEndsWhenANameIsDropped(t *testing.T) {
	srv := testenv.StartRedis(t)
	c := srv.Client(t)
	ch, err := redisbroker.New(c, redisbroker.WithWatchBuffer(1)).WatchAppends(t.Context(), cat)
	if err != nil {
		t.Fatal(err)
	}
	// One pipeline: the server announces its 50 appends in one turn,
	// more than the reader (which reads nothing here) has room for.
	pipe := c.Pipeline()
	for i := range 50 {
		pipe.XAdd(context.Background(), &redis.XAddArgs{Stream: layout.Stream(cat, fmt.Sprintf("o-%d", i)), Values: []any{"a", 1}})
	}
	_, err = pipe.Exec(context.Background())
	must(t, err)
	testenv.Eventually(t, 10*time.Second, "the watch to end after dropping a name", testenv.Closed(ch))
	wantNoWatchGoroutines(t)
}

func wantName(t *testing.T, ch <-chan string, want string) {
	t.Helper()
	if got := recvKey(t, ch); got != want {
		t.Fatalf("announced %q, want %q", got, want)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil && !errors.Is(err, redis.Nil) {
		t.Fatal(err)
	}
}

// The node role's ACL profile (broad, and narrowed to the category)
// grants what client tracking needs: a node under it finds new keys
// through the server's announcements, not by polling.
func TestWatchAppendsUnderTheNodeProfile(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts acl.Options
	}{
		{"broad", acl.Options{}},
		{"narrowed", acl.Options{Categories: []string{cat}, Groups: []string{group}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := testenv.StartRedis(t)
			admin := srv.Client(t)
			tc.opts.User = "node"
			p, err := acl.For(acl.Node, tc.opts)
			if err != nil {
				t.Fatal(err)
			}
			args := []any{"ACL", "SETUSER", p.User, "reset", "on", ">pw"}
			for _, r := range p.Rules() {
				args = append(args, r)
			}
			must(t, admin.Do(context.Background(), args...).Err())
			node := redis.NewClient(&redis.Options{Addr: srv.Addr, Username: p.User, Password: "pw"})
			t.Cleanup(func() { _ = node.Close() })
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			ch, err := redisbroker.New(node).WatchAppends(ctx, cat)
			if err != nil {
				t.Fatalf("WatchAppends under the node profile: %v", err)
			}
			stream := layout.Stream(cat, "o-1")
			must(t, node.XAdd(context.Background(), &redis.XAddArgs{Stream: stream, Values: []any{"a", 1}}).Err())
			wantName(t, ch, stream)
		})
	}
}
