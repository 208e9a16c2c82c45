package redisbroker_test

import (
	"bytes"
	"context"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/protctl/protctl/pkg/broker"
	"github.com/protctl/protctl/pkg/broker/redisbroker"
)

// loadingConn turns the next empty-array reply ("*0\r\n") it reads, once
// armed, into "-LOADING ...": what a Redis error go-redis retries looks
// like on the first call of a pipeline (TRYAGAIN on a Cluster slot being
// migrated, READONLY/LOADING around a failover) while the calls after it
// ran and answered.
type loadingConn struct {
	net.Conn
	armed *atomic.Bool
	mu    sync.Mutex
	buf   []byte
}

func (c *loadingConn) Read(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.buf) == 0 {
		tmp := make([]byte, len(p))
		n, err := c.Conn.Read(tmp)
		if n == 0 {
			return 0, err
		}
		c.buf = tmp[:n]
		if c.armed.Load() {
			var lead []byte
			if bytes.HasPrefix(c.buf, []byte("+PONG\r\n")) {
				lead = []byte("+PONG\r\n")
			}
			if rest := c.buf[len(lead):]; bytes.HasPrefix(rest, []byte("*0\r\n")) {
				c.armed.Store(false)
				c.buf = append(append(lead, "-LOADING Redis is loading the dataset in memory\r\n"...), rest[4:]...)
			}
		}
	}
	n := copy(p, c.buf)
	c.buf = c.buf[n:]
	return n, nil
}

func TestBatchNotResentAfterARetryableErrorOnItsFirstCall(t *testing.T) {
	_, admin := newBroker(t)
	ctx := t.Context()
	var armed atomic.Bool
	o := server.Options()
	o.MaxRetries = 3 // go-redis's default, as `run node` builds its client
	o.Dialer = func(ctx context.Context, network, addr string) (net.Conn, error) {
		var d net.Dialer
		c, err := d.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return &loadingConn{Conn: c, armed: &armed}, nil
	}
	c := redis.NewClient(o)
	t.Cleanup(func() { _ = c.Close() })
	b := redisbroker.New(c)

	// p-0 has no new entry (its read answers "*0"); p-1 has two.
	var pub []string
	for range 2 {
		id, err := b.PublishPartitioned(ctx, cat, "p-1", "", []byte(`{}`))
		if err != nil {
			t.Fatal(err)
		}
		pub = append(pub, id)
	}
	var fences []broker.Fence
	for _, k := range []string{"p-0", "p-1"} {
		l, ok, err := b.AcquirePartitionLease(ctx, layout.LeaseKey(group, k), layout.GenerationKey(group, k), owner, time.Minute)
		if err != nil || !ok {
			t.Fatal(ok, err)
		}
		fences = append(fences, l.Fence)
	}
	reads := []broker.FencedRead{
		{Fence: fences[0], Stream: layout.Stream(cat, "p-0"), Group: group, Count: 1, Mode: broker.ReadNew},
		{Fence: fences[1], Stream: layout.Stream(cat, "p-1"), Group: group, Count: 1, Mode: broker.ReadNew},
	}
	// Scripts cached, groups made, so the batch below is one EVALSHA each.
	_ = b.AckAndReadPartitionsFenced(ctx, []broker.FencedRead{
		{Fence: fences[0], Stream: layout.Stream(cat, "p-0"), Group: group, Count: 1, Mode: broker.ReadPending},
		{Fence: fences[1], Stream: layout.Stream(cat, "p-1"), Group: group, Count: 1, Mode: broker.ReadPending},
	})
	armed.Store(true)
	res := b.AckAndReadPartitionsFenced(ctx, reads)
	t.Logf("p-0: %v %v; p-1: %v %v", msgIDs(res[0].Messages), res[0].Err, msgIDs(res[1].Messages), res[1].Err)
	p, err := admin.XPendingExt(ctx, &redis.XPendingExtArgs{Stream: layout.Stream(cat, "p-1"), Group: group, Start: "-", End: "+", Count: 10}).Result()
	if err != nil {
		t.Fatal(err)
	}
	var pend []string
	for _, e := range p {
		pend = append(pend, e.ID)
	}
	if res[1].Err == nil && !slices.Equal(msgIDs(res[1].Messages), pub[:1]) {
		t.Errorf("p-1's read returned %v with no error, pending %v: it ran twice and %s was delivered and never returned",
			msgIDs(res[1].Messages), pend, pub[0])
	}
}
