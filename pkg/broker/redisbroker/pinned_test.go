package redisbroker_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/protctl/protctl/internal/testenv"
	"github.com/protctl/protctl/pkg/broker"
	"github.com/protctl/protctl/pkg/broker/redisbroker"
)

// pinnedReader is what PinnedReader's reader offers besides reads.
type pinnedReader interface {
	broker.AckReader
	AcquirePartitionLease(ctx context.Context, leaseKey, generationKey, owner string, ttl time.Duration) (broker.Lease, bool, error)
	LastEntryIDs(ctx context.Context, streams []string) (map[string]string, error)
	AcquirePartitionLeaseAndTails(ctx context.Context, leaseKey, generationKey, owner string, ttl time.Duration, streams []string) (broker.Lease, bool, map[string]string, error)
}

func newPinned(t *testing.T, b *redisbroker.Broker) pinnedReader {
	t.Helper()
	ar, closeFn := b.PinnedReader()
	t.Cleanup(func() {
		if err := closeFn(context.Background()); err != nil {
			t.Error(err)
		}
	})
	r, ok := ar.(pinnedReader)
	if !ok {
		t.Fatalf("the pinned reader %T does not acquire and tail", ar)
	}
	return r
}

// protoClient empties the server and returns a client on it speaking
// RESP proto (2 or 3).
func protoClient(t *testing.T, proto int) *redis.Client {
	t.Helper()
	server.FlushAll(t)
	opts := server.Options()
	opts.Protocol = proto
	c := redis.NewClient(opts)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// wantNoWatchLeft fails when the pool hands out a connection that still
// watches lease: it touches lease, then runs a transaction on a
// connection taken from c's pool (Conn, not TxPipelined, which may use a
// pool of its own), which a watch left behind would refuse.
func wantNoWatchLeft(t *testing.T, c *redis.Client, lease string) {
	t.Helper()
	if err := c.PExpire(t.Context(), lease, time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	cn := c.Conn()
	defer cn.Close()
	_, err := cn.TxPipelined(t.Context(), func(p redis.Pipeliner) error {
		p.Set(t.Context(), "other", "1", 0)
		return nil
	})
	if err != nil {
		t.Fatalf("a transaction on a pooled connection: %v (a watch was left)", err)
	}
}

func pinnedAcquire(t *testing.T, r pinnedReader, k, o string) broker.Lease {
	t.Helper()
	l, ok, err := r.AcquirePartitionLease(t.Context(), layout.LeaseKey(group, k), layout.GenerationKey(group, k), o, time.Minute)
	if err != nil || !ok {
		t.Fatalf("acquire %s by %s = %v, %v", k, o, ok, err)
	}
	return l
}

// tripCounter counts round trips (a command or a pipeline is one).
type tripCounter struct{ commandCounter }

func (h *tripCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	inner := h.commandCounter.ProcessPipelineHook(next)
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if name := cmds[0].Name(); name != "hello" && name != "client" {
			h.mu.Lock()
			h.cmds = append(h.cmds, "|")
			h.mu.Unlock()
		}
		return inner(ctx, cmds)
	}
}

// A pinned reader carries the lease check from one call to the next: the
// acquisition ends with WATCH and GET of the lease, and so does every
// transaction, after its EXEC, so that each fenced read is one round trip
// (the plain Broker's take two).
func TestPinnedReaderCarriesTheWatch(t *testing.T) {
	for _, proto := range []int{2, 3} {
		t.Run(fmt.Sprintf("RESP%d", proto), func(t *testing.T) { testPinnedReaderCarriesTheWatch(t, proto) })
	}
}

func testPinnedReaderCarriesTheWatch(t *testing.T, proto int) {
	c := protoClient(t, proto)
	counter := &tripCounter{}
	c.AddHook(counter)
	b := newRedisBroker(c)
	redisbroker.ProbeMulti(b, c) // the one-time MULTI check (multi.go), before the counting
	st := layout.Stream(cat, key)
	pub := publish(t, b, key, "", 25)
	acquire(t, b, "warm", owner, time.Minute) // the script is cached
	r := newPinned(t, b)
	counter.reset()
	l := pinnedAcquire(t, r, key, owner)
	if cmds := counter.reset(); !slices.Equal(cmds, []string{"|", "evalsha", "watch", "get"}) {
		t.Fatalf("the acquisition sent %v", cmds)
	}
	tails, err := r.LastEntryIDs(t.Context(), []string{st})
	if err != nil || tails[st] != pub[24] {
		t.Fatalf("tails = %v, %v", tails, err)
	}
	counter.reset()
	msgs, err := r.AckAndReadPartitionFenced(t.Context(), l.Fence, st, group, nil, 10, broker.ReadNew)
	if err != nil || !slices.Equal(msgIDs(msgs), pub[:10]) {
		t.Fatalf("first read = %v, %v", msgIDs(msgs), err)
	}
	carried := []string{"|", "multi", "xgroup", "xreadgroup", "exec", "watch", "get"}
	if cmds := counter.reset(); !slices.Equal(cmds, carried) {
		t.Fatalf("the first read sent %v, want %v", cmds, carried)
	}
	msgs, err = r.AckAndReadPartitionFenced(t.Context(), l.Fence, st, group, msgIDs(msgs), 10, broker.ReadNew)
	if err != nil || !slices.Equal(msgIDs(msgs), pub[10:20]) {
		t.Fatalf("ack and read = %v, %v", msgIDs(msgs), err)
	}
	carried[2] = "xack"
	if cmds := counter.reset(); !slices.Equal(cmds, carried) {
		t.Fatalf("an ack and read sent %v, want %v", cmds, carried)
	}
	if p := c.XPending(t.Context(), st, group).Val(); p.Count != 10 || p.Lower != pub[10] || p.Consumers[l.Token] != 10 {
		t.Fatalf("pending = %+v, want the second batch, for %s", p, l.Token)
	}
	// Pending entries, then the rest, then nothing.
	msgs, err = r.AckAndReadPartitionFenced(t.Context(), l.Fence, st, group, nil, 10, broker.ReadPending)
	if err != nil || !slices.Equal(msgIDs(msgs), pub[10:20]) {
		t.Fatalf("read pending = %v, %v", msgIDs(msgs), err)
	}
	msgs, err = r.AckAndReadPartitionFenced(t.Context(), l.Fence, st, group, msgIDs(msgs), 10, broker.ReadNew)
	if err != nil || !slices.Equal(msgIDs(msgs), pub[20:]) {
		t.Fatalf("ack and read the rest = %v, %v", msgIDs(msgs), err)
	}
	msgs, err = r.AckAndReadPartitionFenced(t.Context(), l.Fence, st, group, msgIDs(msgs), 10, broker.ReadNew)
	if err != nil || len(msgs) != 0 {
		t.Fatalf("read past the end = %v, %v", msgIDs(msgs), err)
	}
	cmds := counter.reset()
	if n := count(cmds, "|"); n != 3 || slices.Contains(cmds, "evalsha") {
		t.Fatalf("three reads sent %v, want three round trips and no script", cmds)
	}
	if p := c.XPending(t.Context(), st, group).Val(); p.Count != 0 {
		t.Fatalf("pending = %+v, want nothing", p)
	}
}

// The check a pinned reader carries from its last call is a WATCH: a
// lease taken over, expired or released since then (and even taken again
// by the same owner, with the next generation) refuses EXEC, and the
// stale owner gets ErrLeaseLost with nothing changed: no entry acked,
// none delivered.
func TestPinnedReaderCarriedWatchRefusesAChangedLease(t *testing.T) {
	for _, tc := range []struct {
		name   string
		change func(t *testing.T, b *redisbroker.Broker, c *redis.Client, l broker.Lease)
	}{
		{"taken over", func(t *testing.T, b *redisbroker.Broker, c *redis.Client, l broker.Lease) {
			takeOver(t, b, c, l, "node-b")
		}},
		{"taken again by its owner", func(t *testing.T, b *redisbroker.Broker, c *redis.Client, l broker.Lease) {
			takeOver(t, b, c, l, owner)
		}},
		{"released", func(t *testing.T, b *redisbroker.Broker, c *redis.Client, l broker.Lease) {
			if ok, err := b.ReleasePartitionLease(t.Context(), l.Fence); err != nil || !ok {
				t.Fatalf("release = %v, %v", ok, err)
			}
		}},
		{"expired", func(t *testing.T, b *redisbroker.Broker, c *redis.Client, l broker.Lease) {
			if err := c.PExpire(t.Context(), l.LeaseKey, 50*time.Millisecond).Err(); err != nil {
				t.Fatal(err)
			}
			testenv.Eventually(t, 5*time.Second, "the lease to expire", func() (bool, string) {
				n, err := c.Exists(t.Context(), l.LeaseKey).Result()
				return err == nil && n == 0, fmt.Sprintf("EXISTS %d, err %v", n, err)
			})
		}},
	} {
		for _, mode := range []broker.ReadMode{broker.ReadNew, broker.ReadPending} {
			for _, proto := range []int{2, 3} {
				t.Run(fmt.Sprintf("%s/mode %d/RESP%d", tc.name, mode, proto), func(t *testing.T) {
					c := protoClient(t, proto)
					b := redisbroker.New(c)
					st := layout.Stream(cat, key)
					pub := publish(t, b, key, "", 20)
					r := newPinned(t, b)
					l := pinnedAcquire(t, r, key, owner)
					first, err := r.AckAndReadPartitionFenced(t.Context(), l.Fence, st, group, nil, 5, broker.ReadNew)
					if err != nil || len(first) != 5 {
						t.Fatal(len(first), err)
					}
					// The reader's connection now watches the lease, as read
					// right after the first EXEC.
					tc.change(t, b, c, l)
					before := snapshot(t, c)
					msgs, err := r.AckAndReadPartitionFenced(t.Context(), l.Fence, st, group, msgIDs(first), 5, mode)
					var lle *broker.LeaseLostError
					if !errors.Is(err, broker.ErrLeaseLost) || !errors.As(err, &lle) || lle.Token != l.Token || len(msgs) != 0 {
						t.Fatalf("stale ack and read = %v, %v; want ErrLeaseLost for %s", msgIDs(msgs), err, l.Token)
					}
					wantUnchanged(t, c, before)
					p := c.XPending(t.Context(), st, group).Val()
					if p.Count != 5 || p.Lower != pub[0] || p.Higher != pub[4] || p.Consumers[l.Token] != 5 {
						t.Fatalf("pending = %+v, want the first batch, still the stale owner's", p)
					}
					// The same reader serves the next owner (a new generation
					// on this node, or another node's lease it was given).
					nl := takeOver(t, b, c, l, "node-c")
					if _, err := b.ReclaimPartitionPending(t.Context(), nl.Fence, st, group, 0, 100); err != nil {
						t.Fatal(err)
					}
					msgs, err = r.AckAndReadPartitionFenced(t.Context(), nl.Fence, st, group, nil, 20, broker.ReadPending)
					if err != nil || !slices.Equal(msgIDs(msgs), pub[:5]) {
						t.Fatalf("the next owner's pending = %v, %v", msgIDs(msgs), err)
					}
					msgs, err = r.AckAndReadPartitionFenced(t.Context(), nl.Fence, st, group, msgIDs(msgs), 20, broker.ReadNew)
					if err != nil || !slices.Equal(msgIDs(msgs), pub[5:]) {
						t.Fatalf("the next owner's read = %v, %v", msgIDs(msgs), err)
					}
					// And the stale fence stays refused.
					if _, err := r.AckAndReadPartitionFenced(t.Context(), l.Fence, st, group, msgIDs(msgs), 5, broker.ReadNew); !errors.Is(err, broker.ErrLeaseLost) {
						t.Fatalf("stale read after the next owner's = %v, want ErrLeaseLost", err)
					}
				})
			}
		}
	}
}

// The owner's own renewal between two reads touches the watched key:
// EXEC refuses, and the WATCH and GET sent after it in the same round
// trip are the retry's check, so the read costs one more round trip and
// no script.
func TestPinnedReaderRetriesAfterRenewal(t *testing.T) {
	for _, proto := range []int{2, 3} {
		t.Run(fmt.Sprintf("RESP%d", proto), func(t *testing.T) { testPinnedReaderRetriesAfterRenewal(t, proto) })
	}
}

func testPinnedReaderRetriesAfterRenewal(t *testing.T, proto int) {
	c := protoClient(t, proto)
	counter := &tripCounter{}
	c.AddHook(counter)
	b := newRedisBroker(c)
	st := layout.Stream(cat, key)
	pub := publish(t, b, key, "", 10)
	r := newPinned(t, b)
	l := pinnedAcquire(t, r, key, owner)
	msgs, err := r.AckAndReadPartitionFenced(t.Context(), l.Fence, st, group, nil, 4, broker.ReadNew)
	if err != nil || !slices.Equal(msgIDs(msgs), pub[:4]) {
		t.Fatalf("read = %v, %v", msgIDs(msgs), err)
	}
	renewer := redisbroker.New(server.Client(t))
	if ok, err := renewer.RenewPartitionLease(t.Context(), l.Fence, time.Minute); err != nil || !ok {
		t.Fatalf("renew = %v, %v", ok, err)
	}
	counter.reset()
	msgs, err = r.AckAndReadPartitionFenced(t.Context(), l.Fence, st, group, msgIDs(msgs), 4, broker.ReadNew)
	if err != nil || !slices.Equal(msgIDs(msgs), pub[4:8]) {
		t.Fatalf("ack and read after a renewal = %v, %v", msgIDs(msgs), err)
	}
	tx := []string{"|", "multi", "xack", "xreadgroup", "exec", "watch", "get"}
	if cmds := counter.reset(); !slices.Equal(cmds, slices.Concat(tx, tx)) {
		t.Fatalf("sent %v, want the refused transaction and its retry, %v twice", cmds, tx)
	}
	if p := c.XPending(t.Context(), st, group).Val(); p.Count != 4 || p.Lower != pub[4] {
		t.Fatalf("pending = %+v, want the second batch only", p)
	}
}

// A pinned reader watches one lease at a time: moving to another
// partition unwatches the last one in the same round trip, so a change
// to the old lease (its release) does not refuse the new one's EXEC.
func TestPinnedReaderMovesBetweenPartitions(t *testing.T) {
	server.FlushAll(t)
	c := server.Client(t)
	counter := &tripCounter{}
	c.AddHook(counter)
	b := newRedisBroker(c)
	redisbroker.ProbeMulti(b, c)              // the one-time MULTI check (multi.go), before the counting
	acquire(t, b, "warm", owner, time.Minute) // the script is cached
	r := newPinned(t, b)
	for i, k := range []string{"k1", "k2", "k1"} {
		st := layout.Stream(cat, k)
		publish(t, b, k, "", 2)
		counter.reset()
		l := pinnedAcquire(t, r, k, owner)
		want := []string{"|", "unwatch", "evalsha", "watch", "get"}
		if i == 0 {
			want = slices.Delete(want, 1, 2)
		}
		if cmds := counter.reset(); !slices.Equal(cmds, want) {
			t.Fatalf("acquiring %s sent %v, want %v", k, cmds, want)
		}
		msgs, err := r.AckAndReadPartitionFenced(t.Context(), l.Fence, st, group, nil, 10, broker.ReadNew)
		if err != nil || len(msgs) != 2 {
			t.Fatalf("read %s = %v, %v", k, msgIDs(msgs), err)
		}
		if _, err := r.AckAndReadPartitionFenced(t.Context(), l.Fence, st, group, msgIDs(msgs), 10, broker.ReadNew); err != nil {
			t.Fatal(err)
		}
		if ok, err := b.ReleasePartitionLease(t.Context(), l.Fence); err != nil || !ok {
			t.Fatalf("release %s = %v, %v", k, ok, err)
		}
		if cmds := counter.reset(); count(cmds, "|") != 2 || count(cmds, "evalsha") != 1 {
			t.Fatalf("reading %s and releasing it sent %v, want two round trips and the release", k, cmds)
		}
	}
}

// AcquirePartitionLeaseAndTails takes the lease, its WATCH and GET, and
// the streams' newest ids in one round trip; without the lease it returns
// no tails. A reader past the pinning limit (on the pool) answers alike.
func TestPinnedReaderAcquiresWithTails(t *testing.T) {
	for _, pinned := range []bool{true, false} {
		t.Run(fmt.Sprintf("pinned=%v", pinned), func(t *testing.T) {
			server.FlushAll(t)
			opts := server.Options()
			opts.PoolSize = 2 // one pinned reader
			c := redis.NewClient(opts)
			t.Cleanup(func() { _ = c.Close() })
			counter := &tripCounter{}
			c.AddHook(counter)
			b := redisbroker.New(c)
			redisbroker.ProbeMulti(b, c)              // the one-time MULTI check (multi.go), before the counting
			acquire(t, b, "warm", owner, time.Minute) // the script is cached
			if !pinned {
				pinnedAcquire(t, newPinned(t, b), "other", owner) // takes the one place
			}
			r := newPinned(t, b)
			st, bf := layout.Stream(cat, key), layout.Stream(cat, key+":"+broker.DefaultBackfillSuffix)
			pub := publish(t, b, key, "", 3)
			counter.reset()
			lk, gk := layout.LeaseKey(group, key), layout.GenerationKey(group, key)
			l, ok, tails, err := r.AcquirePartitionLeaseAndTails(t.Context(), lk, gk, owner, time.Minute, []string{st, bf})
			if err != nil || !ok || l.Generation != 1 || tails[st] != pub[2] || tails[bf] != "0-0" || len(tails) != 2 {
				t.Fatalf("acquire with tails = %+v, %v, %v, %v", l, ok, tails, err)
			}
			want := []string{"|", "evalsha", "watch", "get", "xrevrange", "xrevrange"}
			if !pinned {
				want = []string{"evalsha", "|", "xrevrange", "xrevrange"}
			}
			if cmds := counter.reset(); !slices.Equal(cmds, want) {
				t.Fatalf("sent %v, want %v", cmds, want)
			}
			msgs, err := r.AckAndReadPartitionFenced(t.Context(), l.Fence, st, group, nil, 10, broker.ReadNew)
			if err != nil || !slices.Equal(msgIDs(msgs), pub) {
				t.Fatalf("read = %v, %v", msgIDs(msgs), err)
			}
			if cmds := counter.reset(); pinned && count(cmds, "|") != 1 {
				t.Fatalf("the read after the acquisition sent %v, want one round trip", cmds)
			}
			_, ok, tails, err = r.AcquirePartitionLeaseAndTails(t.Context(), lk, gk, "node-b", time.Minute, []string{st, bf})
			if err != nil || ok || tails != nil {
				t.Fatalf("acquire of a held lease = %v, %v, %v", ok, tails, err)
			}
		})
	}
}

// Tails that cannot be read (a lane key of the wrong type) do not fail an
// acquisition that took the lease: the lease comes back, with nil tails
// and no error, so that its owner can release it (the runtime would
// otherwise drop a held lease, and the partition would stall until its
// TTL), and LastEntryIDs reports why. Pinned or not alike.
func TestPinnedReaderAcquiresWithUnreadableTails(t *testing.T) {
	for _, pinned := range []bool{true, false} {
		t.Run(fmt.Sprintf("pinned=%v", pinned), func(t *testing.T) {
			server.FlushAll(t)
			opts := server.Options()
			opts.PoolSize = 2 // one pinned reader
			c := redis.NewClient(opts)
			t.Cleanup(func() { _ = c.Close() })
			b := redisbroker.New(c)
			if !pinned {
				pinnedAcquire(t, newPinned(t, b), "other", owner) // takes the one place
			}
			r := newPinned(t, b)
			st, bf := layout.Stream(cat, key), layout.Stream(cat, key+":"+broker.DefaultBackfillSuffix)
			publish(t, b, key, "", 1)
			if err := c.Set(t.Context(), bf, "x", 0).Err(); err != nil {
				t.Fatal(err)
			}
			lk, gk := layout.LeaseKey(group, key), layout.GenerationKey(group, key)
			l, ok, tails, err := r.AcquirePartitionLeaseAndTails(t.Context(), lk, gk, owner, time.Minute, []string{st, bf})
			if err != nil || !ok || tails != nil || l.Generation != 1 {
				t.Fatalf("acquire with a wrong-type lane = %+v, %v, %v, %v; want the lease, nil tails, no error", l, ok, tails, err)
			}
			_, err = r.LastEntryIDs(t.Context(), []string{st, bf})
			wantWrongType(t, "last entry ids", err, bf, "stream")
			if ok, err := b.ReleasePartitionLease(t.Context(), l.Fence); err != nil || !ok {
				t.Fatalf("release = %v, %v", ok, err)
			}
		})
	}
}

// A server that lost its scripts (a restart, SCRIPT FLUSH) refuses the
// acquisition's EVALSHA; the reader sends the script's body in a second
// round trip, which watches the lease again, and reads in one.
func TestPinnedReaderAcquiresAfterNoScript(t *testing.T) {
	server.FlushAll(t)
	c := server.Client(t)
	counter := &tripCounter{}
	c.AddHook(counter)
	b := newRedisBroker(c)
	redisbroker.ProbeMulti(b, c) // the one-time MULTI check (multi.go), before the counting
	st := layout.Stream(cat, key)
	pub := publish(t, b, key, "", 3)
	if err := c.ScriptFlush(t.Context()).Err(); err != nil {
		t.Fatal(err)
	}
	r := newPinned(t, b)
	counter.reset()
	l := pinnedAcquire(t, r, key, owner)
	msgs, err := r.AckAndReadPartitionFenced(t.Context(), l.Fence, st, group, nil, 10, broker.ReadNew)
	if err != nil || !slices.Equal(msgIDs(msgs), pub) {
		t.Fatalf("read = %v, %v", msgIDs(msgs), err)
	}
	want := []string{"|", "evalsha", "watch", "get", "|", "unwatch", "eval", "watch", "get",
		"|", "multi", "xgroup", "xreadgroup", "exec", "watch", "get"}
	if cmds := counter.reset(); !slices.Equal(cmds, want) {
		t.Fatalf("sent %v, want %v", cmds, want)
	}
}

// close gives the connection back unwatched: a transaction on it is not
// refused by a change to the lease the reader watched. The pool has one
// connection, so the transaction runs on the one the reader gave back.
func TestPinnedReaderCloseUnwatches(t *testing.T) {
	server.FlushAll(t)
	opts := server.Options()
	opts.PoolSize = 2 // one connection may be pinned, and it is the only one made
	c := redis.NewClient(opts)
	t.Cleanup(func() { _ = c.Close() })
	b := redisbroker.New(c)
	st := layout.Stream(cat, key)
	publish(t, b, key, "", 3)
	ar, closeFn := b.PinnedReader()
	t.Cleanup(func() { _ = closeFn(context.Background()) })
	r := ar.(pinnedReader)
	l := pinnedAcquire(t, r, key, owner)
	if _, err := r.AckAndReadPartitionFenced(t.Context(), l.Fence, st, group, nil, 10, broker.ReadNew); err != nil {
		t.Fatal(err)
	}
	if n := c.PoolStats().TotalConns; n != 1 {
		t.Fatalf("%d connections, want the pinned one only", n)
	}
	if err := closeFn(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := closeFn(t.Context()); err != nil {
		t.Fatalf("second close: %v", err)
	}
	if s := c.PoolStats(); s.TotalConns != 1 || s.IdleConns != 1 {
		t.Fatalf("pool %+v: want the connection back", s)
	}
	wantNoWatchLeft(t, c, l.LeaseKey)
	// A closed reader still works, and pins a connection again.
	if _, err := r.AckAndReadPartitionFenced(t.Context(), l.Fence, st, group, nil, 10, broker.ReadNew); err != nil {
		t.Fatal(err)
	}
	if s := c.PoolStats(); s.TotalConns-s.IdleConns != 1 {
		t.Fatalf("pool %+v: want the reader's connection pinned again", s)
	}
	if err := closeFn(t.Context()); err != nil {
		t.Fatal(err)
	}
	wantNoWatchLeft(t, c, l.LeaseKey)
}

// close is bounded by its context: with a context that is done (on a
// client that honours contexts), it fails at once, and the connection,
// which may still watch the lease, is dropped instead of pooled.
func TestPinnedReaderCloseHonoursTheContext(t *testing.T) {
	server.FlushAll(t)
	opts := server.Options()
	opts.PoolSize = 2
	opts.ContextTimeoutEnabled = true
	c := redis.NewClient(opts)
	t.Cleanup(func() { _ = c.Close() })
	b := redisbroker.New(c)
	st := layout.Stream(cat, key)
	publish(t, b, key, "", 3)
	ar, closeFn := b.PinnedReader()
	r := ar.(pinnedReader)
	l := pinnedAcquire(t, r, key, owner)
	if _, err := r.AckAndReadPartitionFenced(t.Context(), l.Fence, st, group, nil, 10, broker.ReadNew); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), -time.Second)
	defer cancel()
	err := closeFn(ctx)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("close with an expired context = %v, want DeadlineExceeded", err)
	}
	if s := c.PoolStats(); s.TotalConns != 0 {
		t.Fatalf("pool %+v: the connection that did not unwatch was kept", s)
	}
	wantNoWatchLeft(t, c, l.LeaseKey)
	if err := closeFn(t.Context()); err != nil {
		t.Fatalf("second close: %v", err)
	}
}

// An error reply (here WRONGTYPE, reading the tail of a key that is not
// a stream) leaves the pinned connection sound and watching: it stays
// pinned rather than going back to the pool with its watch, and the next
// round trip unwatches it. Only a transport failure drops it.
func TestPinnedReaderKeepsItsConnectionOnAnErrorReply(t *testing.T) {
	server.FlushAll(t)
	opts := server.Options()
	opts.PoolSize = 2 // one connection may be pinned
	c := redis.NewClient(opts)
	t.Cleanup(func() { _ = c.Close() })
	b := redisbroker.New(c)
	st := layout.Stream(cat, key)
	pub := publish(t, b, key, "", 3)
	if err := c.Set(t.Context(), "not-a-stream", "x", 0).Err(); err != nil {
		t.Fatal(err)
	}
	r := newPinned(t, b)
	l := pinnedAcquire(t, r, key, owner)
	_, err := r.LastEntryIDs(t.Context(), []string{st, "not-a-stream"})
	wantWrongType(t, "last entry ids", err, "not-a-stream", "stream")
	if s := c.PoolStats(); s.TotalConns-s.IdleConns != 1 {
		t.Fatalf("pool %+v: want the reader's connection still pinned", s)
	}
	wantNoWatchLeft(t, c, l.LeaseKey) // on another connection: none watches
	// The lease key was touched since the reader's WATCH: the read is
	// refused once, retried, and reads.
	msgs, err := r.AckAndReadPartitionFenced(t.Context(), l.Fence, st, group, nil, 10, broker.ReadNew)
	if err != nil || !slices.Equal(msgIDs(msgs), pub) {
		t.Fatalf("read after the error = %v, %v", msgIDs(msgs), err)
	}
}

// A pinned connection killed between two reads (CLIENT KILL, a server
// restart, a dropped socket) fails the read that meets it: the carried
// watch is gone with it, and neither go-redis nor the reader may send the
// transaction again on another socket, which did not WATCH. The next read
// takes a new connection and checks the lease afresh.
func TestPinnedReaderConnectionKilledBetweenReads(t *testing.T) {
	for _, proto := range []int{2, 3} {
		t.Run(fmt.Sprintf("RESP%d", proto), func(t *testing.T) {
			c := protoClient(t, proto)
			b := redisbroker.New(c)
			killer := server.Client(t)
			st := layout.Stream(cat, key)
			pub := publish(t, b, key, "", 6)
			r := newPinned(t, b)
			l := pinnedAcquire(t, r, key, owner)
			first, err := r.AckAndReadPartitionFenced(t.Context(), l.Fence, st, group, nil, 3, broker.ReadNew)
			if err != nil || !slices.Equal(msgIDs(first), pub[:3]) {
				t.Fatalf("read = %v, %v", msgIDs(first), err)
			}
			if err := killer.Do(t.Context(), "client", "kill", "type", "normal", "skipme", "yes").Err(); err != nil {
				t.Fatal(err)
			}
			before := snapshot(t, killer)
			msgs, err := r.AckAndReadPartitionFenced(t.Context(), l.Fence, st, group, msgIDs(first), 3, broker.ReadNew)
			if !errors.Is(err, broker.ErrUnavailable) || len(msgs) != 0 {
				t.Fatalf("read on a killed connection = %v, %v; want ErrUnavailable", msgIDs(msgs), err)
			}
			wantUnchanged(t, killer, before)
			msgs, err = r.AckAndReadPartitionFenced(t.Context(), l.Fence, st, group, msgIDs(first), 3, broker.ReadNew)
			if err != nil || !slices.Equal(msgIDs(msgs), pub[3:]) {
				t.Fatalf("read on a new connection = %v, %v", msgIDs(msgs), err)
			}
		})
	}
}

// The Brokers of one client share one PinLimit: readers of both pin at
// most half of the pool together, the rest run on the pool with the same
// results, and the client still has connections for everything else
// while every place is held. close gives the place back.
func TestPinnedReaderLimit(t *testing.T) {
	server.FlushAll(t)
	opts := server.Options()
	opts.PoolSize = 4
	opts.PoolTimeout = time.Second
	c := redis.NewClient(opts)
	t.Cleanup(func() { _ = c.Close() })
	pins := redisbroker.NewPinLimit(c)
	brokers := []*redisbroker.Broker{
		redisbroker.New(c, redisbroker.WithPinLimit(pins)),
		redisbroker.New(c, redisbroker.WithPinLimit(pins), redisbroker.WithBackfillSuffix("bf")),
	}
	var closers []func(context.Context) error
	for i := range 6 {
		ar, closeFn := brokers[i%2].PinnedReader()
		t.Cleanup(func() { _ = closeFn(context.Background()) })
		closers = append(closers, closeFn)
		r := ar.(pinnedReader)
		k := fmt.Sprintf("k%d", i)
		st := layout.Stream(cat, k)
		pub := publish(t, brokers[0], k, "", 2)
		l := pinnedAcquire(t, r, k, owner)
		msgs, err := r.AckAndReadPartitionFenced(t.Context(), l.Fence, st, group, nil, 10, broker.ReadNew)
		if err != nil || !slices.Equal(msgIDs(msgs), pub) {
			t.Fatalf("reader %d: %v, %v", i, msgIDs(msgs), err)
		}
		if n := pins.Held(); n > 2 {
			t.Fatalf("%d connections pinned by two Brokers, want at most half of a pool of 4", n)
		}
		if s := c.PoolStats(); s.TotalConns-s.IdleConns > 2 {
			t.Fatalf("pool %+v: more than half of it held", s)
		}
		if err := c.Ping(t.Context()).Err(); err != nil {
			t.Fatalf("ping with %d readers: %v", i+1, err)
		}
	}
	if n := pins.Held(); n != 2 {
		t.Fatalf("%d pinned, want 2", n)
	}
	if err := closers[5](t.Context()); err != nil || pins.Held() != 2 {
		t.Fatalf("closing a reader that never pinned = %v, %d pinned", err, pins.Held())
	}
	if err := closers[0](t.Context()); err != nil || pins.Held() != 1 {
		t.Fatalf("closing a pinned reader = %v, %d pinned", err, pins.Held())
	}
}

// A pinned reader decodes entries as the script does (data fields,
// entries without one, pending entries whose bodies were deleted, empty
// values), on RESP2 and RESP3, in batches of several sizes.
func TestPinnedReaderDecodesLikeTheScript(t *testing.T) {
	for _, proto := range []int{2, 3} {
		t.Run(fmt.Sprintf("RESP%d", proto), func(t *testing.T) {
			c := protoClient(t, proto)
			b := redisbroker.New(c)
			script := redisbroker.New(c, redisbroker.WithScriptReads())
			st := layout.Stream(cat, key)
			var ids []string
			for i := range 300 {
				var values []any
				switch i % 4 {
				case 0:
					values = []any{"data", fmt.Sprintf(`{"n":%d,"pad":%q}`, i, strings.Repeat("x", i))}
				case 1:
					values = []any{"kind", "ping", "n", fmt.Sprint(i)}
				case 2:
					values = []any{"trace", "t", "data", "raw"}
				case 3:
					values = []any{"data", ""}
				}
				ids = append(ids, c.XAdd(t.Context(), &redis.XAddArgs{Stream: st, Values: values}).Val())
			}
			r := newPinned(t, b)
			l := pinnedAcquire(t, r, key, owner)
			var got []broker.Message
			for _, n := range []int64{3, 200, 1, 96} {
				msgs, err := r.AckAndReadPartitionFenced(t.Context(), l.Fence, st, group, nil, n, broker.ReadNew)
				if err != nil || int64(len(msgs)) != n {
					t.Fatalf("read %d = %d, %v", n, len(msgs), err)
				}
				got = append(got, msgs...)
			}
			for _, id := range ids[10:20] {
				c.XDel(t.Context(), st, id)
			}
			want, err := script.ReadPartitionFenced(t.Context(), l.Fence, st, group, 300, broker.ReadPending)
			if err != nil {
				t.Fatal(err)
			}
			pending, err := r.AckAndReadPartitionFenced(t.Context(), l.Fence, st, group, nil, 300, broker.ReadPending)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.EqualFunc(pending, want, sameMessage) {
				t.Fatalf("pending entries differ:\npinned %+v\nscript %+v", pending, want)
			}
			if !pending[10].Missing || pending[9].Missing || string(pending[2].Data) != "raw" || string(pending[1].Data) != `{"kind":"ping","n":"1"}` {
				t.Fatalf("decoded %+v", pending[:12])
			}
			for i := range got {
				if i >= 10 && i < 20 {
					continue
				}
				if !sameMessage(got[i], pending[i]) {
					t.Fatalf("entry %d: read new %+v, pending %+v", i, got[i], pending[i])
				}
			}
		})
	}
}
