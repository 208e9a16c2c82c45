package redisbroker_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/protctl/protctl/internal/testenv"
	"github.com/protctl/protctl/pkg/broker"
	"github.com/protctl/protctl/pkg/broker/redisbroker"
)

// noTimeoutBroker is a broker on a client with no ReadTimeout, whose waits
// are not shortened: a wait that stop failed to end would last its whole
// block, an hour, and the test would hit its deadline.
func noTimeoutBroker(t *testing.T) (*redisbroker.Broker, *redis.Client) {
	t.Helper()
	server.FlushAll(t)
	opt := server.Options()
	opt.ReadTimeout = -1
	c := redis.NewClient(opt)
	t.Cleanup(func() { _ = c.Close() })
	return redisbroker.New(c), server.Client(t)
}

func waitReadOf(ctx context.Context, b *redisbroker.Broker, stop <-chan struct{}, after map[string]string, reads []broker.FencedRead) <-chan broker.WaitedReads {
	ch := make(chan broker.WaitedReads, 1)
	go func() {
		res, ok := b.WaitAndReadPartitionsFenced(ctx, stop, after, time.Hour, reads)
		if !ok {
			res.WaitErr = context.Canceled // not expected: the tests check it
		}
		ch <- res
	}()
	return ch
}

func TestWaitAndReadStopEndsABlockedWait(t *testing.T) {
	b, raw := noTimeoutBroker(t)
	pub := publish(t, b, key, "", 1)
	l := acquire(t, b, key, owner, time.Minute)
	stop := make(chan struct{})
	// The wait does not see the entry (it is not past its id); the read
	// behind it does.
	ans := waitReadOf(t.Context(), b, stop, map[string]string{layout.Stream(cat, key): pub[0]},
		[]broker.FencedRead{{Fence: l.Fence, Stream: layout.Stream(cat, key), Group: group, Count: 10, Mode: broker.ReadNew}})
	blocked(t, raw, "1")
	close(stop)
	res := <-ans
	if res.WaitErr != nil || len(res.Ready) != 0 {
		t.Fatalf("wait error %v, ready %v; want neither", res.WaitErr, res.Ready)
	}
	if got := msgIDs(res.Reads[0].Messages); !slices.Equal(got, pub) {
		t.Fatalf("the read behind the stopped wait got %v, want %v", got, pub)
	}
	blocked(t, raw, "0")
}

func TestWaitAndReadContextEndsABlockedWait(t *testing.T) {
	b, raw := noTimeoutBroker(t)
	publish(t, b, key, "", 1)
	l := acquire(t, b, key, owner, time.Minute)
	ctx, cancel := context.WithCancel(t.Context())
	ans := waitReadOf(ctx, b, nil, map[string]string{layout.Stream(cat, key): "9999999999999-0"},
		[]broker.FencedRead{{Fence: l.Fence, Stream: layout.Stream(cat, key), Group: group, Count: 10, Mode: broker.ReadNew}})
	blocked(t, raw, "1")
	cancel()
	res := <-ans
	if res.WaitErr != nil || len(res.Reads[0].Messages) != 1 {
		t.Fatalf("wait error %v, read %v; want the read run after the wait", res.WaitErr, res.Reads[0])
	}
}

// A stop that comes before the XREAD reaches the server still ends it:
// the nudge stream is read from "0-0", so a nudge already there ends the
// wait at once.
func TestWaitAndReadStopBeforeTheWaitIsSent(t *testing.T) {
	b, raw := noTimeoutBroker(t)
	l := acquire(t, b, key, owner, time.Minute)
	stop := make(chan struct{})
	redisbroker.SetBeforeWaitRead(b, func() {
		close(stop)
		testenv.Eventually(t, 10*time.Second, "a nudge stream", func() (bool, string) {
			keys, err := raw.Keys(context.Background(), "__protctl__:wait:*").Result()
			return err == nil && len(keys) > 0, "none yet"
		})
	})
	res := <-waitReadOf(t.Context(), b, stop, map[string]string{layout.Stream(cat, key): "0-0"},
		[]broker.FencedRead{{Fence: l.Fence, Stream: layout.Stream(cat, key), Group: group, Count: 10, Mode: broker.ReadNew}})
	if res.WaitErr != nil || res.Reads[0].Err != nil {
		t.Fatalf("wait error %v, read error %v", res.WaitErr, res.Reads[0].Err)
	}
}

// The wait holds a connection out of the pool: it counts against the
// PinLimit, and past it nothing is sent.
func TestWaitAndReadHonoursThePinLimit(t *testing.T) {
	server.FlushAll(t)
	opt := server.Options()
	opt.PoolSize = 1 // a limit of 0 places
	c := redis.NewClient(opt)
	t.Cleanup(func() { _ = c.Close() })
	b := redisbroker.New(c)
	pub := publish(t, b, key, "", 1)
	l := acquire(t, b, key, owner, time.Minute)
	read := []broker.FencedRead{{Fence: l.Fence, Stream: layout.Stream(cat, key), Group: group, Count: 10, Mode: broker.ReadNew}}
	if _, ok := b.WaitAndReadPartitionsFenced(t.Context(), nil, map[string]string{layout.Stream(cat, key): "0-0"}, time.Second, read); ok {
		t.Fatal("ok = true past the pin limit")
	}
	msgs, err := b.ReadPartitionFenced(t.Context(), l.Fence, layout.Stream(cat, key), group, 10, broker.ReadNew)
	if err != nil || !slices.Equal(msgIDs(msgs), pub) {
		t.Fatalf("read after = %v, %v; want %v (nothing delivered before)", msgIDs(msgs), err, pub)
	}
}

// A server that lost its scripts (a restart, SCRIPT FLUSH) still gets
// the acks and the reads, and the next call finds them loaded again.
func TestWaitAndReadAfterScriptFlush(t *testing.T) {
	b, raw := newBroker(t)
	pub := publish(t, b, key, "", 3)
	l := acquire(t, b, key, owner, time.Minute)
	stream := layout.Stream(cat, key)
	first, err := b.ReadPartitionFenced(t.Context(), l.Fence, stream, group, 1, broker.ReadNew)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		if err := raw.ScriptFlush(t.Context()).Err(); err != nil {
			t.Fatal(err)
		}
		res, ok := b.WaitAndReadPartitionsFenced(t.Context(), nil, map[string]string{stream: "0-0"}, time.Second,
			[]broker.FencedRead{{Fence: l.Fence, Stream: stream, Group: group, Ack: msgIDs(first), Count: 1, Mode: broker.ReadNew}})
		if !ok || res.Reads[0].Err != nil {
			t.Fatalf("call %d: ok %v, read error %v", i, ok, res.Reads[0].Err)
		}
		if got := msgIDs(res.Reads[0].Messages); !slices.Equal(got, pub[i+1:i+2]) {
			t.Fatalf("call %d read %v, want %v", i, got, pub[i+1:i+2])
		}
		first = res.Reads[0].Messages
	}
	pending, err := raw.XPending(t.Context(), stream, group).Result()
	if err != nil {
		t.Fatal(err)
	}
	if pending.Count != 1 {
		t.Fatalf("%d pending, want only the last read's (every ack applied)", pending.Count)
	}
}
