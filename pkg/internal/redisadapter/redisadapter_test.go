package redisadapter_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/protctl/protctl/internal/testenv"
	"github.com/protctl/protctl/pkg/broker"
	"github.com/protctl/protctl/pkg/internal/redisadapter"
)

// replyErr is an error reply as go-redis returns it (redis.Error).
type replyErr string

func (e replyErr) Error() string { return string(e) }
func (replyErr) RedisError()     {}

func TestUnavailable(t *testing.T) {
	for _, c := range []struct {
		err  error
		want bool
	}{
		{io.EOF, true},
		{fmt.Errorf("dial: %w", syscall.ECONNREFUSED), true},
		{context.DeadlineExceeded, true},
		{redis.ErrClosed, true},
		{replyErr("LOADING Redis is loading the dataset in memory"), true},
		{replyErr("CLUSTERDOWN The cluster is down"), true},
		{replyErr("WRONGTYPE Operation against a key holding the wrong kind of value"), false},
		{redis.Nil, false},
		{errors.New("some other failure"), false},
	} {
		if got := redisadapter.Unavailable(c.err); got != c.want {
			t.Errorf("Unavailable(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}

func TestMap(t *testing.T) {
	f := &broker.Fence{LeaseKey: "g:k:__lease__", Token: "n:3"}
	c := redisadapter.Call{Op: "ack", Keys: []string{"g:k:__lease__", "c:k"}, Key: "c:k", Want: "stream", Fence: f, Stream: "c:k"}

	var we *broker.WrongTypeError
	err := redisadapter.Map("pkg", c, replyErr("PROTCTL_WRONGTYPE stream hash 2 script: abc, on @user_script:9."), nil)
	if !errors.As(err, &we) || we.Key != "c:k" || we.Want != "stream" || we.Got != "hash" || !errors.Is(err, broker.ErrWrongType) {
		t.Fatalf("PROTCTL_WRONGTYPE: %#v", err)
	}
	err = redisadapter.Map("pkg", redisadapter.Call{Op: "get", Key: "x", Want: "string"}, replyErr("WRONGTYPE Operation against a key"), nil)
	if !errors.As(err, &we) || we.Key != "x" || we.Want != "string" {
		t.Fatalf("WRONGTYPE: %#v", err)
	}
	var ll *broker.LeaseLostError
	err = redisadapter.Map("pkg", c, replyErr("PROTCTL_LEASELOST script: abc"), nil)
	if !errors.As(err, &ll) || ll.LeaseKey != f.LeaseKey || ll.Token != f.Token || ll.Stream != "c:k" || !errors.Is(err, broker.ErrLeaseLost) {
		t.Fatalf("PROTCTL_LEASELOST: %#v", err)
	}
	// Without a fence the reply is not a lease lost by this call.
	unfenced := c
	unfenced.Fence = nil
	if err := redisadapter.Map("pkg", unfenced, replyErr("PROTCTL_LEASELOST"), nil); errors.As(err, &ll) || err.Error() != "pkg: ack: PROTCTL_LEASELOST" {
		t.Fatalf("unfenced PROTCTL_LEASELOST: %v", err)
	}
	err = redisadapter.Map("pkg", c, fmt.Errorf("read: %w", syscall.ECONNRESET), nil)
	if !errors.Is(err, broker.ErrUnavailable) || !errors.Is(err, syscall.ECONNRESET) || !strings.HasPrefix(err.Error(), "pkg: ack: ") {
		t.Fatalf("transport failure: %v", err)
	}
	sentinel := errors.New("not parked")
	more := func(reply string) error {
		if strings.HasPrefix(reply, "PROTCTL_NOTPARKED") {
			return sentinel
		}
		return nil
	}
	if err := redisadapter.Map("pkg", c, replyErr("PROTCTL_NOTPARKED"), more); err != sentinel {
		t.Fatalf("a package's own reply: %v", err)
	}
	if err := redisadapter.Map("pkg", c, replyErr("ERR unknown"), more); err == nil || err.Error() != "pkg: ack: ERR unknown" {
		t.Fatalf("another reply: %v", err)
	}
	if err := redisadapter.Map("pkg", c, redis.Nil, more); !errors.Is(err, redis.Nil) {
		t.Fatalf("redis.Nil: %v", err)
	}
	if redisadapter.Map("pkg", c, nil, more) != nil {
		t.Fatal("nil error mapped to an error")
	}
}

// TestPreludeRaisesTheCodesMapReads runs the prelude's functions on a
// real server: the replies they raise are the ones Map turns into typed
// errors, naming the key by its index in KEYS.
func TestPreludeRaisesTheCodesMapReads(t *testing.T) {
	srv := testenv.StartRedis(t)
	c := srv.Client(t)
	ctx := t.Context()
	if err := c.Set(ctx, "lease", "n:1", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if err := c.HSet(ctx, "h", "f", "v").Err(); err != nil {
		t.Fatal(err)
	}
	script := redisadapter.NewScript(`
key_type(1, 'string')
key_type(2, 'stream')
fence(1, ARGV[1])
return numcmp(ARGV[2], ARGV[3])`)
	keys := []string{"lease", "h"}
	call := redisadapter.Call{Op: "test", Keys: keys, Fence: &broker.Fence{LeaseKey: "lease", Token: "n:1"}}

	var we *broker.WrongTypeError
	err := redisadapter.Map("pkg", call, script.Run(ctx, c, keys, "n:1", "1", "2").Err(), nil)
	if !errors.As(err, &we) || we.Key != "h" || we.Want != "stream" || we.Got != "hash" {
		t.Fatalf("a hash where a stream should be: %v", err)
	}
	keys[1] = "missing" // none passes key_type
	err = redisadapter.Map("pkg", call, script.Run(ctx, c, keys, "n:2", "1", "2").Err(), nil)
	if !errors.Is(err, broker.ErrLeaseLost) {
		t.Fatalf("a stale token: %v", err)
	}
	for _, tc := range []struct {
		a, b string
		want int64
	}{{"9", "10", -1}, {"18446744073709551615", "18446744073709551614", 1}, {"42", "42", 0}} {
		got, err := script.Run(ctx, c, keys, "n:1", tc.a, tc.b).Int64()
		if err != nil || got != tc.want {
			t.Errorf("numcmp(%s, %s) = %d, %v; want %d", tc.a, tc.b, got, err, tc.want)
		}
	}
}

// forwarding reports whether a forwarder or go-redis's Pub/Sub reader is
// running.
func forwarding() bool {
	return testenv.Goroutine("redisadapter.Follow", "go-redis/v9.(*channel)") != ""
}

// wantForwarderEnded waits until no forwarder or go-redis Pub/Sub reader
// is left running.
func wantForwarderEnded(t *testing.T, what string) {
	t.Helper()
	testenv.Eventually(t, 10*time.Second, what, func() (bool, string) {
		g := testenv.Goroutine("redisadapter.Follow", "go-redis/v9.(*channel)")
		return g == "", "still running:\n" + g
	})
}

// TestWatchEndsWhenFullAndStopsClean: nobody reads, the buffer fills,
// messages keep coming. The forwarder does not block, and it does not
// drop a hint silently either: the channel closes after what it holds,
// so that the reader knows to watch again and re-read. No goroutine is
// left.
func TestWatchEndsWhenFullAndStopsClean(t *testing.T) {
	srv := testenv.StartRedis(t)
	c := srv.Client(t)
	ch, err := redisadapter.Watch(t.Context(), c, "hints", 1)
	if err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 10*time.Second, "the forwarder to run (else the check below could not see one end)", func() (bool, string) {
		return forwarding(), "no forwarder running while subscribed"
	})
	for i := range 200 {
		if err := c.Publish(t.Context(), "hints", fmt.Sprint(i)).Err(); err != nil {
			t.Fatal(err)
		}
	}
	wantForwarderEnded(t, "the forwarder to end when a hint found the buffer full")
	var got []string
	for h := range ch {
		got = append(got, h)
	}
	if !slices.Equal(got, []string{"0"}) {
		t.Fatalf("hints before the close: %q, want just the first published (\"0\")", got)
	}
}

// TestWatchEndsWhenItsConnectionIsLost: the server drops the
// subscription's connection. go-redis would re-establish it and
// subscribe again without a word, losing what was published meanwhile;
// the channel closes instead, so that the reader watches again and
// re-reads.
func TestWatchEndsWhenItsConnectionIsLost(t *testing.T) {
	srv := testenv.StartRedis(t)
	c := srv.Client(t)
	ctx := t.Context()
	ch, err := redisadapter.Watch(ctx, c, "hints", 16)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Publish(ctx, "hints", "before").Err(); err != nil {
		t.Fatal(err)
	}
	if h := <-ch; h != "before" {
		t.Fatalf("hint %q, want before", h)
	}
	if n, err := c.ClientKillByFilter(ctx, "TYPE", "pubsub").Result(); err != nil || n != 1 {
		t.Fatalf("CLIENT KILL TYPE pubsub: %d killed, %v; want 1", n, err)
	}
	testenv.Eventually(t, 10*time.Second, "the channel to close after its connection was killed", testenv.Closed(ch))
	wantForwarderEnded(t, "the forwarder to end")
}

// TestWatchStopsCleanWhenTheContextEnds: the channel closes and no
// goroutine is left.
func TestWatchStopsCleanWhenTheContextEnds(t *testing.T) {
	srv := testenv.StartRedis(t)
	c := srv.Client(t)
	ctx, cancel := context.WithCancel(t.Context())
	ch, err := redisadapter.Watch(ctx, c, "hints", 1)
	if err != nil {
		t.Fatal(err)
	}
	cancel()
	testenv.Eventually(t, 10*time.Second, "the channel to close after the context ended", testenv.Closed(ch))
	wantForwarderEnded(t, "the forwarder to end")
}

func TestWatchRefusedIsReturned(t *testing.T) {
	srv := testenv.StartRedis(t)
	c := srv.Client(t)
	srv.Stop()
	if _, err := redisadapter.Watch(t.Context(), c, "hints", 1); !redisadapter.Unavailable(err) {
		t.Fatalf("subscribe to a stopped server: %v, want an unavailable error", err)
	}
}

func TestHashTag(t *testing.T) {
	for key, want := range map[string]string{
		"g:{o-1}:__lease__":  "o-1",
		"g:o-1:__lease__":    "",
		"{}x{y}":             "",
		"a{b":                "",
		"a}{b}":              "b",
		"{o-1}{o-2}":         "o-1",
		"protctl:{svc}:pins": "svc",
	} {
		if got := redisadapter.HashTag(key); got != want {
			t.Errorf("HashTag(%q) = %q, want %q", key, got, want)
		}
	}
}

// recvSignal receives from ch, failing t if it closes or stays empty for
// 10 s.
func recvSignal(t *testing.T, ch <-chan struct{}) {
	t.Helper()
	select {
	case _, ok := <-ch:
		if !ok {
			t.Fatal("the change watch closed")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no change signalled within 10s")
	}
}

// TestWatchChangesMergesRatherThanEnds: a change watch nobody reads for a
// while merges what it is told into its one pending signal and stays
// open (nothing was lost); a lost connection still closes it.
func TestWatchChangesMergesRatherThanEnds(t *testing.T) {
	srv := testenv.StartRedis(t)
	c := srv.Client(t)
	ctx := t.Context()
	ch, err := redisadapter.WatchChanges(ctx, c, "changes")
	if err != nil {
		t.Fatal(err)
	}
	for range 50 {
		if err := c.Publish(ctx, "changes", "x").Err(); err != nil {
			t.Fatal(err)
		}
	}
	recvSignal(t, ch)
	// Published after the signal was taken: a watch still open signals
	// it again, one that ended on the 50 would be closed.
	if err := c.Publish(ctx, "changes", "x").Err(); err != nil {
		t.Fatal(err)
	}
	recvSignal(t, ch)
	if err := c.ClientKillByFilter(ctx, "TYPE", "pubsub").Err(); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 10*time.Second, "the change watch to close after its connection was killed", testenv.Closed(ch))
	wantForwarderEnded(t, "the change watch's reader to end")
}

// TestFollowEndsOnAHalfOpenConnection: the network stops carrying the
// subscription's bytes without closing it. After quiet, Follow pings; no
// pong within quiet more ends it.
func TestFollowEndsOnAHalfOpenConnection(t *testing.T) {
	srv := testenv.StartRedis(t)
	proxy := testenv.StartProxy(t, srv.Addr)
	c := redis.NewClient(&redis.Options{Addr: proxy.Addr})
	t.Cleanup(func() { _ = c.Close() })
	ps, err := redisadapter.Subscribe(t.Context(), c, "hints")
	if err != nil {
		t.Fatal(err)
	}
	ended := make(chan struct{})
	go func() {
		defer close(ended)
		redisadapter.Follow(t.Context(), ps, 100*time.Millisecond, func(*redis.Message) bool { return true })
	}()
	proxy.Blackhole(testenv.Both)
	select {
	case <-ended:
	case <-time.After(20 * time.Second):
		t.Fatal("Follow still running 20s after its connection went silent (quiet 100ms)")
	}
}
