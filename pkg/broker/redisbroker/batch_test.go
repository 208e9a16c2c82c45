package redisbroker_test

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/protctl/protctl/pkg/broker"
	"github.com/protctl/protctl/pkg/broker/redisbroker"
)

// A batch of fenced reads of many partitions is one round trip (a
// pipeline of ackread.lua calls), and so is a batch of acquisitions with
// their tails and first reads (acquireread.lua), whatever their number.
// After SCRIPT FLUSH (a restarted server) the refused calls go once more
// with the scripts' bodies: one more round trip, each step applied once.
func TestBatchesAreOneRoundTrip(t *testing.T) {
	b, c := newBroker(t)
	redisbroker.ProbeMulti(b, c) // the one-time MULTI check (multi.go), before the counting
	ctx := t.Context()
	const n = 50
	var (
		keys []string
		pub  = map[string][]string{}
	)
	for i := range n {
		k := fmt.Sprintf("k-%02d", i)
		keys = append(keys, k)
		for j := range 2 {
			id, err := b.PublishPartitioned(ctx, cat, k, "", fmt.Appendf(nil, `{"n":%d}`, j))
			if err != nil {
				t.Fatal(err)
			}
			pub[k] = append(pub[k], id)
		}
	}
	// Both scripts cached: the first run counts no NOSCRIPT resend.
	g := b.AcquirePartitionLeases(ctx, []broker.LeaseRequest{{LeaseKey: "warm:lease", GenerationKey: "warm:gen", Owner: owner, TTL: time.Minute}})
	r := b.AckAndReadPartitionsFenced(ctx, []broker.FencedRead{{Fence: broker.Fence{LeaseKey: "warm:lease", Token: "x:1"}, Stream: "warm", Group: group, Count: 1, Mode: broker.ReadNew}})
	if g[0].Err != nil || r[0].Err == nil {
		t.Fatal(g[0], r[0])
	}
	for _, flush := range []bool{false, true} {
		t.Run(fmt.Sprintf("flushed=%v", flush), func(t *testing.T) {
			trips := &tripCounter{}
			c.AddHook(trips)
			if flush {
				if err := c.ScriptFlush(ctx).Err(); err != nil {
					t.Fatal(err)
				}
			}
			gen := int64(1)
			if flush {
				gen = 2
			}
			reqs := make([]broker.LeaseRequest, n)
			for i, k := range keys {
				reqs[i] = broker.LeaseRequest{
					LeaseKey: layout.LeaseKey(group, k), GenerationKey: layout.GenerationKey(group, k), Owner: owner, TTL: time.Minute,
					Tails: []string{layout.Stream(cat, k)}, ReadAtGeneration: gen, Group: group, Read: []string{layout.Stream(cat, k)}, Count: 10,
				}
			}
			trips.reset()
			grants := b.AcquirePartitionLeases(ctx, reqs)
			wantTrips := 1
			if flush {
				wantTrips = 2
			}
			if got := roundTrips(trips.reset()); got != wantTrips {
				t.Fatalf("%d acquisitions took %d round trips, want %d", n, got, wantTrips)
			}
			reads := make([]broker.FencedRead, n)
			for i, g := range grants {
				k := keys[i]
				if g.Err != nil || !g.Acquired || g.Lease.Generation != gen {
					t.Fatalf("%s: %+v", k, g)
				}
				want := pub[k]
				if flush {
					want = nil // read and acked by the first run
				}
				if len(g.Read) != 1 || g.Read[0].Err != nil || !slices.Equal(msgIDs(g.Read[0].Messages), want) {
					t.Fatalf("%s: read with the lease %+v, want %v", k, g.Read, want)
				}
				// Half in a mode a transaction can read (one transaction
				// of them all), half in ReadPendingThenNew (the scripts).
				mode := broker.ReadNew
				if i%2 == 1 {
					mode = broker.ReadPendingThenNew
				}
				reads[i] = broker.FencedRead{Fence: g.Lease.Fence, Stream: layout.Stream(cat, k), Group: group,
					Ack: msgIDs(g.Read[0].Messages), Count: 10, Mode: mode}
			}
			if flush {
				if err := c.ScriptFlush(ctx).Err(); err != nil {
					t.Fatal(err)
				}
			}
			trips.reset()
			for i, r := range b.AckAndReadPartitionsFenced(ctx, reads) {
				if r.Err != nil || len(r.Messages) != 0 {
					t.Fatalf("%s: ack and read = %v, %v", keys[i], msgIDs(r.Messages), r.Err)
				}
			}
			// The transaction's two round trips (WATCH and MGET, then
			// MULTI ... EXEC), and the scripts' pipeline.
			if got := roundTrips(trips.reset()); got != 2+wantTrips {
				t.Fatalf("%d ack-and-reads took %d round trips, want %d", n, got, 2+wantTrips)
			}
			for _, k := range keys {
				p, err := c.XPending(ctx, layout.Stream(cat, k), group).Result()
				if err != nil || p.Count != 0 {
					t.Fatalf("%s: pending %+v %v after the batch acked it", k, p, err)
				}
				if err := c.Del(ctx, layout.LeaseKey(group, k)).Err(); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}

// roundTrips counts the round trips a tripCounter recorded: a pipeline is
// one ("|" then its commands), a lone command one.
func roundTrips(cmds []string) int {
	inPipeline := func(name string) bool {
		switch name {
		case "ping", "watch", "mget", "multi", "xack", "xreadgroup", "exec":
			// A batch's pipeline (a PING, then its scripts), or a batched
			// transaction's (WATCH and MGET; MULTI ... EXEC).
			return true
		}
		return strings.HasPrefix(name, "eval")
	}
	n := 0
	for i := 0; i < len(cmds); i++ {
		n++
		if cmds[i] == "|" {
			for i+1 < len(cmds) && inPipeline(cmds[i+1]) {
				i++
			}
		}
	}
	return n
}

// A batch whose reply is lost after the server ran it is not sent again:
// the reads fail (unavailable) instead of reading twice. The server here
// closes the connection as soon as a reply is larger than one byte (an
// output buffer limit), after the script ran; a client that resends
// (go-redis does, with MaxRetries) would read the next entry too, which
// the owner would then handle before the one whose reply it lost.
func TestBatchReplyLostIsNotResent(t *testing.T) {
	_, admin := newBroker(t)
	ctx := t.Context()
	o := server.Options()
	o.MaxRetries = 3 // go-redis's default, as `run node` builds its client
	c := redis.NewClient(o)
	t.Cleanup(func() { _ = c.Close() })
	b := redisbroker.New(c)
	var pub []string
	for i := range 2 {
		id, err := b.PublishPartitioned(ctx, cat, key, "", fmt.Appendf(nil, `{"n":%d}`, i))
		if err != nil {
			t.Fatal(err)
		}
		pub = append(pub, id)
	}
	l, ok, err := b.AcquirePartitionLease(ctx, layout.LeaseKey(group, key), layout.GenerationKey(group, key), owner, time.Minute)
	if err != nil || !ok {
		t.Fatal(ok, err)
	}
	read := []broker.FencedRead{{Fence: l.Fence, Stream: layout.Stream(cat, key), Group: group, Count: 1, Mode: broker.ReadNew}}
	// The script cached, the group made: the batch below is one EVALSHA.
	if r := b.AckAndReadPartitionsFenced(ctx, []broker.FencedRead{{Fence: l.Fence, Stream: layout.Stream(cat, key), Group: group, Count: 1, Mode: broker.ReadPending}}); r[0].Err != nil {
		t.Fatal(r[0].Err)
	}
	if err := admin.ConfigSet(ctx, "client-output-buffer-limit", "normal 1 1 0").Err(); err != nil {
		t.Fatal(err)
	}
	r := b.AckAndReadPartitionsFenced(ctx, read)[0]
	if err := admin.ConfigSet(ctx, "client-output-buffer-limit", "normal 0 0 0").Err(); err != nil {
		t.Fatal(err)
	}
	if !errors.Is(r.Err, broker.ErrUnavailable) {
		t.Fatalf("batch read whose reply was lost: %v, %v; want ErrUnavailable", msgIDs(r.Messages), r.Err)
	}
	// It ran once: the first entry is pending, the second still new.
	p, err := admin.XPendingExt(ctx, &redis.XPendingExtArgs{Stream: layout.Stream(cat, key), Group: group, Start: "-", End: "+", Count: 10}).Result()
	if err != nil || len(p) != 1 || p[0].ID != pub[0] {
		t.Fatalf("pending after the lost reply: %+v %v, want only %s", p, err, pub[0])
	}
	if got, err := b.ReadPartitionFenced(ctx, l.Fence, layout.Stream(cat, key), group, 10, broker.ReadNew); err != nil || !slices.Equal(msgIDs(got), pub[1:]) {
		t.Fatalf("new entries after the lost reply: %v %v, want %v (read twice?)", msgIDs(got), err, pub[1:])
	}
}
