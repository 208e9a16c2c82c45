package redisbroker_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/protctl/protctl/internal/testenv"
	"github.com/protctl/protctl/pkg/broker"
	"github.com/protctl/protctl/pkg/broker/redisbroker"
)

// The fenced reads of ReadNew and ReadPending, alone or with an ack, are
// an optimistic transaction: two round trips, WATCH and GET of the lease,
// then MULTI, XACK, XREADGROUP, EXEC, and no script.
func TestFencedReadTransactionCommands(t *testing.T) {
	server.FlushAll(t)
	c := server.Client(t)
	counter := &commandCounter{}
	c.AddHook(counter)
	b := newRedisBroker(c)
	redisbroker.ProbeMulti(b, c) // the one-time MULTI check (multi.go), before the counting
	st := layout.Stream(cat, key)
	pub := publish(t, b, key, "", 30)
	l := acquire(t, b, key, owner, time.Minute)
	if _, err := b.ReadPartitionFenced(t.Context(), l.Fence, st, group, 1, broker.ReadPendingThenNew); err != nil {
		t.Fatal(err) // creates the group
	}
	counter.reset()
	msgs, err := b.ReadPartitionFenced(t.Context(), l.Fence, st, group, 10, broker.ReadPending)
	if err != nil || !slices.Equal(msgIDs(msgs), pub[:1]) {
		t.Fatalf("read pending = %v, %v", msgIDs(msgs), err)
	}
	if cmds := counter.reset(); !slices.Equal(cmds, []string{"watch", "get", "multi", "xgroup", "xreadgroup", "exec"}) {
		t.Fatalf("a pending read sent %v", cmds)
	}
	msgs, err = b.AckAndReadPartitionFenced(t.Context(), l.Fence, st, group, msgIDs(msgs), 10, broker.ReadNew)
	if err != nil || !slices.Equal(msgIDs(msgs), pub[1:11]) {
		t.Fatalf("ack and read new = %v, %v", msgIDs(msgs), err)
	}
	if cmds := counter.reset(); !slices.Equal(cmds, []string{"watch", "get", "multi", "xack", "xreadgroup", "exec"}) {
		t.Fatalf("an ack and a read sent %v", cmds)
	}
	if p := c.XPending(t.Context(), st, group).Val(); p.Count != 10 || p.Lower != pub[1] || p.Consumers[l.Token] != 10 {
		t.Fatalf("pending = %+v, want the second batch, for %s", p, l.Token)
	}
	// Nothing new: an empty read, still no script.
	if _, err := b.AckAndReadPartitionFenced(t.Context(), l.Fence, st, group, pub[1:30], 30, broker.ReadNew); err != nil {
		t.Fatal(err)
	}
	msgs, err = b.AckAndReadPartitionFenced(t.Context(), l.Fence, st, group, pub[11:30], 10, broker.ReadNew)
	if err != nil || len(msgs) != 0 {
		t.Fatalf("read past the end = %v, %v", msgIDs(msgs), err)
	}
	if cmds := counter.reset(); slices.Contains(cmds, "evalsha") || slices.Contains(cmds, "eval") {
		t.Fatalf("reads sent %v", cmds)
	}
}

// Every way out of a transaction leaves its connection unwatched: a
// lease check that fails (the script then decides) sends UNWATCH, and
// EXEC ends the watch otherwise. A watch left behind would refuse the
// next transaction on the pooled connection.
func TestFencedReadTransactionLeavesNoWatch(t *testing.T) {
	server.FlushAll(t)
	opts := server.Options()
	opts.PoolSize = 1 // every call gets the same connection
	c := redis.NewClient(opts)
	t.Cleanup(func() { _ = c.Close() })
	other := server.Client(t)
	b := redisbroker.New(c)
	st := layout.Stream(cat, key)
	publish(t, b, key, "", 3)
	l := acquire(t, b, key, owner, time.Minute)
	stale := broker.Fence{LeaseKey: l.LeaseKey, Token: owner + ":0"}
	for _, tc := range []struct {
		name string
		call func() error
	}{
		{"stale token", func() error {
			_, err := b.ReadPartitionFenced(t.Context(), stale, st, group, 1, broker.ReadNew)
			if !errors.Is(err, broker.ErrLeaseLost) {
				return fmt.Errorf("stale read = %v", err)
			}
			return nil
		}},
		{"missing group", func() error {
			_, err := b.ReadPartitionFenced(t.Context(), l.Fence, st, group, 1, broker.ReadNew)
			return err
		}},
		{"read", func() error {
			_, err := b.ReadPartitionFenced(t.Context(), l.Fence, st, group, 1, broker.ReadNew)
			return err
		}},
	} {
		if err := tc.call(); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		other.PExpire(t.Context(), l.LeaseKey, time.Minute) // touch it
		_, err := c.TxPipelined(t.Context(), func(p redis.Pipeliner) error {
			p.Set(t.Context(), "other", "1", 0)
			return nil
		})
		if err != nil {
			t.Fatalf("after %s, a transaction on the same connection: %v (a watch was left)", tc.name, err)
		}
	}
}

// The transaction and the script decode entries alike: data fields,
// entries written by other tools (no data field), pending entries whose
// bodies were deleted; on RESP2 and RESP3 connections.
func TestFencedReadTransactionDecodesLikeTheScript(t *testing.T) {
	for _, proto := range []int{2, 3} {
		t.Run(fmt.Sprintf("RESP%d", proto), func(t *testing.T) {
			c := protoClient(t, proto)
			tx := redisbroker.New(c)
			script := redisbroker.New(c, redisbroker.WithScriptReads())
			st := layout.Stream(cat, key)
			ids := []string{
				c.XAdd(t.Context(), &redis.XAddArgs{Stream: st, Values: []any{"data", `{"a":1}`}}).Val(),
				c.XAdd(t.Context(), &redis.XAddArgs{Stream: st, Values: []any{"kind", "ping", "n", "3"}}).Val(),
				c.XAdd(t.Context(), &redis.XAddArgs{Stream: st, Values: []any{"trace", "t", "data", "raw"}}).Val(),
				c.XAdd(t.Context(), &redis.XAddArgs{Stream: st, Values: []any{"data", ""}}).Val(),
				c.XAdd(t.Context(), &redis.XAddArgs{Stream: st, Values: []any{"data", "gone"}}).Val(),
			}
			l := acquire(t, tx, key, owner, time.Minute)
			if _, err := tx.ReadPartitionFenced(t.Context(), l.Fence, st, group, 10, broker.ReadPending); err != nil {
				t.Fatal(err) // creates the group (through the script)
			}
			counter := &commandCounter{}
			c.AddHook(counter)
			fromTx, err := tx.ReadPartitionFenced(t.Context(), l.Fence, st, group, 10, broker.ReadNew)
			if err != nil || len(fromTx) != len(ids) {
				t.Fatalf("read new = %v, %v", fromTx, err)
			}
			c.XDel(t.Context(), st, ids[4])
			pendingTx, err := tx.ReadPartitionFenced(t.Context(), l.Fence, st, group, 10, broker.ReadPending)
			if err != nil {
				t.Fatal(err)
			}
			pendingScript, err := script.ReadPartitionFenced(t.Context(), l.Fence, st, group, 10, broker.ReadPending)
			if err != nil {
				t.Fatal(err)
			}
			if cmds := counter.reset(); count(cmds, "exec") != 2 || count(cmds, "evalsha") != 1 {
				t.Fatalf("sent %v, want two transactions and one script", cmds)
			}
			if !slices.EqualFunc(pendingTx, pendingScript, sameMessage) {
				t.Fatalf("pending entries:\ntransaction %+v\nscript      %+v", pendingTx, pendingScript)
			}
			if !pendingTx[4].Missing || pendingTx[0].Missing || string(pendingTx[2].Data) != "raw" || string(pendingTx[1].Data) != `{"kind":"ping","n":"3"}` {
				t.Fatalf("decoded %+v", pendingTx)
			}
			if !slices.EqualFunc(fromTx[:4], pendingTx[:4], sameMessage) {
				t.Fatalf("new %+v, pending %+v", fromTx, pendingTx)
			}
		})
	}
}

func sameMessage(a, b broker.Message) bool {
	return a.ID == b.ID && a.Stream == b.Stream && a.Missing == b.Missing && string(a.Data) == string(b.Data)
}

// takeOver makes another owner the holder of l's partition, as a node
// does when l's lease expired: the lease is deleted and acquired again,
// with the next generation.
func takeOver(t *testing.T, b *redisbroker.Broker, c *redis.Client, l broker.Lease, by string) broker.Lease {
	t.Helper()
	if err := c.Del(context.Background(), l.LeaseKey).Err(); err != nil {
		t.Error(err)
	}
	nl, ok, err := b.AcquirePartitionLease(context.Background(), l.LeaseKey, layout.GenerationKey(group, key), by, time.Minute)
	if err != nil || !ok {
		t.Errorf("take over by %s = %v, %v", by, ok, err)
	}
	return nl
}

// A stale owner whose lease is taken over after it checked the lease
// (between its WATCH and GET round trip and its EXEC) gets ErrLeaseLost
// and changes nothing: no entry moves to its pending list, none is
// acknowledged, the group's last-delivered id stays.
func TestFencedReadTransactionTakenOverBeforeExec(t *testing.T) {
	for _, tc := range []struct {
		name string
		mode broker.ReadMode
		ack  bool
	}{
		{"read new", broker.ReadNew, false},
		{"read pending", broker.ReadPending, false},
		{"ack and read new", broker.ReadNew, true},
		{"ack and read pending", broker.ReadPending, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, c := newBroker(t)
			st := layout.Stream(cat, key)
			pub := publish(t, b, key, "", 20)
			l := acquire(t, b, key, owner, time.Minute)
			first, err := b.ReadPartitionFenced(t.Context(), l.Fence, st, group, 5, broker.ReadNew)
			if err != nil || len(first) != 5 {
				t.Fatal(len(first), err)
			}
			var before map[string]string
			var calls atomic.Int32
			redisbroker.SetBetweenTx(b, func() {
				if calls.Add(1) == 1 {
					takeOver(t, b, c, l, "node-b")
					before = snapshot(t, c)
				}
			})
			var ack []string
			if tc.ack {
				ack = msgIDs(first)
			}
			var msgs []broker.Message
			if tc.ack {
				msgs, err = b.AckAndReadPartitionFenced(t.Context(), l.Fence, st, group, ack, 5, tc.mode)
			} else {
				msgs, err = b.ReadPartitionFenced(t.Context(), l.Fence, st, group, 5, tc.mode)
			}
			var lle *broker.LeaseLostError
			if !errors.Is(err, broker.ErrLeaseLost) || !errors.As(err, &lle) || lle.Token != l.Token || lle.Stream != st || len(msgs) != 0 {
				t.Fatalf("stale %s = %v, %v; want ErrLeaseLost for %s", tc.name, msgIDs(msgs), err, l.Token)
			}
			if calls.Load() != 1 {
				t.Fatalf("the seam ran %d times, want once (the second check sees the new owner)", calls.Load())
			}
			wantUnchanged(t, c, before)
			// And concretely: the first batch is still pending, for the
			// stale consumer only, nothing else was delivered.
			p := c.XPending(t.Context(), st, group).Val()
			if p.Count != 5 || p.Lower != pub[0] || p.Higher != pub[4] || p.Consumers[l.Token] != 5 {
				t.Fatalf("pending = %+v", p)
			}
		})
	}
}

// A lease key touched between the check and EXEC by the owner's own
// renewal refuses EXEC; the transaction looks again and reads.
func TestFencedReadTransactionRetriesAfterRenewal(t *testing.T) {
	server.FlushAll(t)
	c := server.Client(t)
	counter := &commandCounter{}
	c.AddHook(counter)
	b := newRedisBroker(c)
	st := layout.Stream(cat, key)
	pub := publish(t, b, key, "", 10)
	l := acquire(t, b, key, owner, time.Minute)
	if _, err := b.ReadPartitionFenced(t.Context(), l.Fence, st, group, 1, broker.ReadPending); err != nil {
		t.Fatal(err) // creates the group
	}
	msgs, err := b.ReadPartitionFenced(t.Context(), l.Fence, st, group, 4, broker.ReadNew)
	if err != nil || !slices.Equal(msgIDs(msgs), pub[:4]) {
		t.Fatalf("read = %v, %v", msgIDs(msgs), err)
	}
	renewer := redisbroker.New(server.Client(t))
	var calls atomic.Int32
	redisbroker.SetBetweenTx(b, func() {
		if calls.Add(1) == 1 {
			if ok, err := renewer.RenewPartitionLease(context.Background(), l.Fence, time.Minute); err != nil || !ok {
				t.Errorf("renew = %v, %v", ok, err)
			}
		}
	})
	counter.reset()
	msgs, err = b.AckAndReadPartitionFenced(t.Context(), l.Fence, st, group, msgIDs(msgs), 4, broker.ReadNew)
	if err != nil || !slices.Equal(msgIDs(msgs), pub[4:8]) {
		t.Fatalf("ack and read after a renewal = %v, %v", msgIDs(msgs), err)
	}
	want := []string{"watch", "get", "multi", "xack", "xreadgroup", "exec", "watch", "get", "multi", "xack", "xreadgroup", "exec"}
	if cmds := counter.reset(); !slices.Equal(cmds, want) || calls.Load() != 2 {
		t.Fatalf("sent %v (seam ran %d times), want %v", cmds, calls.Load(), want)
	}
	if p := c.XPending(t.Context(), st, group).Val(); p.Count != 4 || p.Lower != pub[4] {
		t.Fatalf("pending = %+v, want the second batch only", p)
	}
}

// A lease key touched before every EXEC: after txAttempts refusals the
// call runs the script, which decides.
func TestFencedReadTransactionFallsBackToTheScript(t *testing.T) {
	server.FlushAll(t)
	c := server.Client(t)
	counter := &commandCounter{}
	c.AddHook(counter)
	b := newRedisBroker(c)
	st := layout.Stream(cat, key)
	pub := publish(t, b, key, "", 10)
	l := acquire(t, b, key, owner, time.Minute)
	if _, err := b.ReadPartitionFenced(t.Context(), l.Fence, st, group, 1, broker.ReadPending); err != nil {
		t.Fatal(err)
	}
	renewer := server.Client(t)
	redisbroker.SetBetweenTx(b, func() {
		if err := renewer.PExpire(context.Background(), l.LeaseKey, time.Minute).Err(); err != nil {
			t.Error(err)
		}
	})
	counter.reset()
	msgs, err := b.ReadPartitionFenced(t.Context(), l.Fence, st, group, 3, broker.ReadNew)
	if err != nil || !slices.Equal(msgIDs(msgs), pub[:3]) {
		t.Fatalf("read = %v, %v", msgIDs(msgs), err)
	}
	cmds := counter.reset()
	if n := count(cmds, "exec"); n != 3 || cmds[len(cmds)-1] != "evalsha" {
		t.Fatalf("sent %v, want 3 refused transactions then the script", cmds)
	}
}

func count(s []string, v string) int {
	n := 0
	for _, x := range s {
		if x == v {
			n++
		}
	}
	return n
}

// A lease that expires between the check and EXEC refuses EXEC (Redis
// counts the expiry of a watched key as a change, deleted or not yet),
// and the call fails with ErrLeaseLost, changing nothing.
func TestFencedReadTransactionLeaseExpiresBeforeExec(t *testing.T) {
	for _, observed := range []bool{true, false} {
		t.Run(fmt.Sprintf("observed=%v", observed), func(t *testing.T) {
			b, c := newBroker(t)
			st := layout.Stream(cat, key)
			publish(t, b, key, "", 10)
			l := acquire(t, b, key, owner, time.Minute)
			first, err := b.ReadPartitionFenced(t.Context(), l.Fence, st, group, 5, broker.ReadNew)
			if err != nil || len(first) != 5 {
				t.Fatal(len(first), err)
			}
			const ttl = 300 * time.Millisecond
			if err := c.PExpire(t.Context(), l.LeaseKey, ttl).Err(); err != nil {
				t.Fatal(err)
			}
			var before map[string]string
			redisbroker.SetBetweenTx(b, func() {
				redisbroker.SetBetweenTx(b, nil)
				if observed {
					// Wait until a client of its own sees the lease gone
					// (which deletes it if it was not yet).
					testenv.Eventually(t, 5*time.Second, "the lease to expire", func() (bool, string) {
						n, err := c.Exists(context.Background(), l.LeaseKey).Result()
						return err == nil && n == 0, fmt.Sprintf("EXISTS %d, err %v", n, err)
					})
				} else {
					// Nobody looks at the key: it may still be in the
					// keyspace, logically expired, when EXEC runs. The
					// sleep is the point here (no condition to wait on
					// without touching the key).
					time.Sleep(ttl + 100*time.Millisecond)
				}
				before = snapshot(t, c)
			})
			msgs, err := b.AckAndReadPartitionFenced(t.Context(), l.Fence, st, group, msgIDs(first), 5, broker.ReadNew)
			if !errors.Is(err, broker.ErrLeaseLost) || len(msgs) != 0 {
				t.Fatalf("read after expiry = %v, %v; want ErrLeaseLost", msgIDs(msgs), err)
			}
			wantUnchanged(t, c, before)
		})
	}
}

// An owner loops on ack-and-read while its own renewals touch the lease
// key in a tight loop, and another node takes the partition over at some
// point. The stale owner must never read or ack after the takeover: what
// it handled is an in-order prefix of the stream, every call after its
// first ErrLeaseLost fails too, its last batch stays pending, and the new
// owner, after reclaiming, gets exactly the rest, in order. Nothing is
// lost, nothing comes twice except the one batch the stale owner read and
// could not ack (at-least-once).
func TestFencedReadTransactionUnderConcurrentTakeover(t *testing.T) {
	for round := range 5 {
		t.Run(fmt.Sprint(round), func(t *testing.T) {
			b, c := newBroker(t)
			st := layout.Stream(cat, key)
			const total, batch = 2000, 7
			pipe := c.Pipeline()
			for i := range total {
				pipe.XAdd(t.Context(), &redis.XAddArgs{Stream: st, ID: fmt.Sprintf("%d-1", i+1), Values: []any{"data", fmt.Sprint(i)}})
			}
			if _, err := pipe.Exec(t.Context()); err != nil {
				t.Fatal(err)
			}
			l := acquire(t, b, key, owner, time.Minute)
			// Create the group (the first read of a group-less stream runs
			// the script).
			if _, err := b.ReadPartitionFenced(t.Context(), l.Fence, st, group, 1, broker.ReadPending); err != nil {
				t.Fatal(err)
			}

			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			var wg sync.WaitGroup
			var renewals atomic.Int64
			renewer := redisbroker.New(server.Client(t))
			wg.Add(1)
			go func() { // the owner's renewals, back to back
				defer wg.Done()
				for ctx.Err() == nil {
					if ok, err := renewer.RenewPartitionLease(ctx, l.Fence, time.Minute); err != nil || !ok {
						return
					}
					renewals.Add(1)
				}
			}()
			taken := make(chan broker.Lease, 1)
			taker := redisbroker.New(server.Client(t))
			takerClient := server.Client(t)
			wg.Add(1)
			go func() {
				defer wg.Done()
				time.Sleep(time.Duration(5+round*7) * time.Millisecond)
				takerClient.Del(ctx, l.LeaseKey)
				nl, ok, err := taker.AcquirePartitionLease(ctx, l.LeaseKey, layout.GenerationKey(group, key), "node-b", time.Minute)
				if err != nil || !ok {
					t.Errorf("take over = %v, %v", ok, err)
				}
				taken <- nl
			}()

			var handled, unacked []string
			lost := false
			for len(handled) < total {
				msgs, err := b.AckAndReadPartitionFenced(t.Context(), l.Fence, st, group, unacked, batch, broker.ReadNew)
				if errors.Is(err, broker.ErrLeaseLost) {
					lost = true
					break
				}
				if err != nil {
					t.Fatal(err)
				}
				unacked = unacked[:0]
				for _, m := range msgs {
					handled = append(handled, m.ID)
					unacked = append(unacked, m.ID)
				}
				if len(msgs) == 0 {
					break
				}
			}
			nl := <-taken
			cancel()
			wg.Wait()
			if lost {
				// Once lost, lost for good.
				for _, mode := range []broker.ReadMode{broker.ReadNew, broker.ReadPending, broker.ReadPendingThenNew} {
					if msgs, err := b.AckAndReadPartitionFenced(t.Context(), l.Fence, st, group, unacked, batch, mode); !errors.Is(err, broker.ErrLeaseLost) {
						t.Fatalf("stale call in mode %v after the loss = %v, %v", mode, msgIDs(msgs), err)
					}
				}
			}
			for i, id := range handled {
				if want := fmt.Sprintf("%d-1", i+1); id != want {
					t.Fatalf("the stale owner handled %s at position %d, want %s", id, i, want)
				}
			}
			p := c.XPending(t.Context(), st, group).Val()
			if int(p.Count) != len(unacked) || (len(unacked) > 0 && (p.Lower != unacked[0] || p.Consumers[l.Token] != int64(len(unacked)))) {
				t.Fatalf("pending = %+v, want the stale owner's unacked %v", p, unacked)
			}
			// The new owner takes what is left.
			if _, err := b.ReclaimPartitionPending(t.Context(), nl.Fence, st, group, 0, 100); err != nil {
				t.Fatal(err)
			}
			var rest []string
			mode := broker.ReadPending
			var ack []string
			for {
				msgs, err := b.AckAndReadPartitionFenced(t.Context(), nl.Fence, st, group, ack, 50, mode)
				if err != nil {
					t.Fatal(err)
				}
				if len(msgs) == 0 {
					if mode == broker.ReadPending {
						mode, ack = broker.ReadNew, nil
						continue
					}
					break
				}
				ack = msgIDs(msgs)
				rest = append(rest, ack...)
			}
			acked := len(handled) - len(unacked)
			if len(rest) != total-acked {
				t.Fatalf("new owner got %d entries, want %d (stale owner acked %d)", len(rest), total-acked, acked)
			}
			for i, id := range rest {
				if want := fmt.Sprintf("%d-1", acked+i+1); id != want {
					t.Fatalf("the new owner got %s at position %d, want %s", id, i, want)
				}
			}
			t.Logf("stale owner handled %d (acked %d) before losing the lease (lost=%v), %d renewals meanwhile", len(handled), acked, lost, renewals.Load())
		})
	}
}

// In the cluster layout the transaction's keys (the watched lease, the
// stream it acks and reads) share one slot, so it runs on one master.
func TestFencedReadTransactionKeysShareASlot(t *testing.T) {
	server.FlushAll(t)
	c := server.Client(t)
	rec := &txKeys{}
	c.AddHook(rec)
	l := broker.ClusterLayout
	b := redisbroker.New(c, redisbroker.WithLayout(l))
	for _, k := range []string{"a", "order-17", "x.y", "é€/ "} {
		if _, err := b.PublishPartitioned(t.Context(), cat, k, "", []byte("x")); err != nil {
			t.Fatal(err)
		}
		lease, ok, err := b.AcquirePartitionLease(t.Context(), l.LeaseKey(group, k), l.GenerationKey(group, k), owner, time.Minute)
		if err != nil || !ok {
			t.Fatal(ok, err)
		}
		st := l.Stream(cat, k)
		if _, err := b.ReadPartitionFenced(t.Context(), lease.Fence, st, group, 1, broker.ReadPending); err != nil {
			t.Fatal(err)
		}
		msgs, err := b.ReadPartitionFenced(t.Context(), lease.Fence, st, group, 1, broker.ReadNew)
		if err != nil || len(msgs) != 1 {
			t.Fatal(msgs, err)
		}
		if _, err := b.AckAndReadPartitionFenced(t.Context(), lease.Fence, st, group, msgIDs(msgs), 1, broker.ReadNew); err != nil {
			t.Fatal(err)
		}
	}
	keys := rec.take()
	if len(keys) < 3*4 {
		t.Fatalf("recorded %d keyed commands: %v", len(keys), keys)
	}
	var watched string
	for _, k := range keys {
		if k.cmd == "watch" {
			watched = k.key
			continue
		}
		if slot(k.key) != slot(watched) {
			t.Fatalf("%s %s (slot %d) under WATCH %s (slot %d)", k.cmd, k.key, slot(k.key), watched, slot(watched))
		}
	}
}

type txKey struct{ cmd, key string }

// txKeys records the key of every WATCH, GET, XACK and XREADGROUP sent in
// pipelines.
type txKeys struct {
	mu   sync.Mutex
	keys []txKey
}

func (h *txKeys) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (h *txKeys) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (h *txKeys) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.mu.Lock()
		for _, c := range cmds {
			args := c.Args()
			switch c.Name() {
			case "watch", "get", "xack":
				h.keys = append(h.keys, txKey{c.Name(), fmt.Sprint(args[1])})
			case "xreadgroup":
				h.keys = append(h.keys, txKey{c.Name(), fmt.Sprint(args[len(args)-2])})
			}
		}
		h.mu.Unlock()
		return next(ctx, cmds)
	}
}

func (h *txKeys) take() []txKey {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := h.keys
	h.keys = nil
	return out
}

// On a real 3-master cluster the transaction runs on the master of the
// partition's slot (no script), and a takeover between the check and
// EXEC is refused as on one node.
func TestClusterFencedReadTransaction(t *testing.T) {
	cl := sharedCluster(t)
	cl.FlushAll(t)
	cc := cl.Client(t)
	l := broker.ClusterLayout
	b := redisbroker.New(cc, redisbroker.WithLayout(l))
	ctx := t.Context()
	for i := range 6 { // keys on more than one master
		k := fmt.Sprintf("k%d", i)
		pub := make([]string, 6)
		for j := range pub {
			id, err := b.PublishPartitioned(ctx, cat, k, "", fmt.Appendf(nil, "%d", j))
			if err != nil {
				t.Fatal(err)
			}
			pub[j] = id
		}
		lease, ok, err := b.AcquirePartitionLease(ctx, l.LeaseKey(group, k), l.GenerationKey(group, k), owner, time.Minute)
		if err != nil || !ok {
			t.Fatal(ok, err)
		}
		st := l.Stream(cat, k)
		if _, err := b.ReadPartitionFenced(ctx, lease.Fence, st, group, 1, broker.ReadPending); err != nil {
			t.Fatal(err)
		}
		master, err := cc.MasterForKey(ctx, st)
		if err != nil {
			t.Fatal(err)
		}
		if err := master.ConfigResetStat(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		msgs, err := b.ReadPartitionFenced(ctx, lease.Fence, st, group, 3, broker.ReadNew)
		if err != nil || !slices.Equal(msgIDs(msgs), pub[:3]) {
			t.Fatalf("%s: read = %v, %v", k, msgIDs(msgs), err)
		}
		stats := master.Info(ctx, "commandstats").Val()
		if !strings.Contains(stats, "cmdstat_exec:") || strings.Contains(stats, "cmdstat_evalsha:") {
			t.Fatalf("%s: the read was not a transaction on the slot's master:\n%s", k, stats)
		}
		// The takeover between the check and EXEC.
		var before int64
		redisbroker.SetBetweenTx(b, func() {
			redisbroker.SetBetweenTx(b, nil)
			cc.Del(context.Background(), lease.LeaseKey)
			if _, ok, err := b.AcquirePartitionLease(context.Background(), lease.LeaseKey, l.GenerationKey(group, k), "node-b", time.Minute); err != nil || !ok {
				t.Errorf("take over = %v, %v", ok, err)
			}
			before = cc.XPending(context.Background(), st, group).Val().Count
		})
		_, err = b.AckAndReadPartitionFenced(ctx, lease.Fence, st, group, msgIDs(msgs), 3, broker.ReadNew)
		if !errors.Is(err, broker.ErrLeaseLost) {
			t.Fatalf("%s: stale ack and read = %v, want ErrLeaseLost", k, err)
		}
		if p := cc.XPending(ctx, st, group).Val(); p.Count != before || p.Count != 3 || p.Consumers[lease.Token] != 3 {
			t.Fatalf("%s: pending after the refused call = %+v, want the 3 unacked of %s", k, p, lease.Token)
		}
	}
}
