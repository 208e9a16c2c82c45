package redisbroker_test

import (
	"errors"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/redis/go-redis/v9"

	"github.com/protctl/protctl/pkg/broker"
	"github.com/protctl/protctl/pkg/broker/redisbroker"
)

// noMultiClient returns a client logged in as a user the server refuses
// MULTI (every other command allowed), removed when the test ends.
func noMultiClient(t *testing.T, admin *redis.Client) *redis.Client {
	t.Helper()
	if err := admin.Do(t.Context(), "ACL", "SETUSER", "nomulti", "reset", "on", ">pw", "~*", "&*", "+@all", "-multi").Err(); err != nil {
		t.Fatal(err)
	}
	// FIFO: the checks that every connection is in step go round them
	// all, not only the one last used.
	u := redis.NewClient(&redis.Options{Addr: server.Addr, Username: "nomulti", Password: "pw", PoolFIFO: true})
	t.Cleanup(func() {
		_ = u.Close()
		_ = admin.Do(t.Context(), "ACL", "DELUSER", "nomulti").Err()
	})
	return u
}

// A server that refuses MULTI (an ACL without +multi) runs at once the
// commands a client queues after it, outside the transaction and its
// WATCH: a fenced read as a transaction would read and ack unfenced, and
// leave the connection with replies nobody reads. Through a pinned reader
// and in a batch, with the lease taken over between the lease check and
// the read of any transaction that runs: a read either ran under its
// lease (no transaction ran) and returned its entries, or it was refused
// and changed nothing of its group; and the client's next calls get
// their own replies.
func TestFencedReadsWhereMultiIsRefused(t *testing.T) {
	for _, tc := range []struct {
		name  string
		reads int
	}{{"pinned reader", 1}, {"batch", 20}} {
		t.Run(tc.name, func(t *testing.T) {
			_, c := newBroker(t)
			u := noMultiClient(t, c)
			b := redisbroker.New(u, redisbroker.WithTxBatchMin(1))
			keys, ids, leases := txPartitions(t, b, c, tc.reads, 2)
			stolen := false
			redisbroker.SetBetweenTx(b, func() {
				stolen = true
				for _, k := range keys {
					if err := c.Set(t.Context(), layout.LeaseKey(group, k), "node-b:99", time.Minute).Err(); err != nil {
						t.Error(err)
					}
				}
			})
			before := make([]string, len(keys))
			for i, k := range keys {
				before[i] = groupState(t, c, k)
			}
			results := make([]broker.ReadResult, 0, len(keys))
			if tc.reads == 1 {
				ar, closeReader := b.PinnedReader()
				msgs, err := ar.AckAndReadPartitionFenced(t.Context(), leases[0].Fence, layout.Stream(cat, keys[0]), group, nil, 10, broker.ReadNew)
				results = append(results, broker.ReadResult{Messages: msgs, Err: err})
				if err := closeReader(t.Context()); err != nil {
					t.Fatal(err)
				}
			} else {
				results = b.AckAndReadPartitionsFenced(t.Context(), txReads(keys, leases, nil, 10))
			}
			for i, r := range results {
				switch {
				case stolen:
					if !errors.Is(r.Err, broker.ErrLeaseLost) {
						t.Errorf("%s: read under a lease taken over returned %v, %v; want ErrLeaseLost", keys[i], msgIDs(r.Messages), r.Err)
					}
					if after := groupState(t, c, keys[i]); after != before[i] {
						t.Errorf("%s: a read under a lease taken over changed its group: %s -> %s", keys[i], before[i], after)
					}
				case r.Err != nil || !cmp.Equal(msgIDs(r.Messages), ids[i]):
					t.Errorf("%s: read %v, %v; want %v", keys[i], msgIDs(r.Messages), r.Err, ids[i])
				}
			}
			// Every connection of the client is in step.
			if err := u.Set(t.Context(), "probe", "v", 0).Err(); err != nil {
				t.Fatal(err)
			}
			for range 2 * u.Options().PoolSize {
				if got, err := u.Get(t.Context(), "probe").Result(); err != nil || got != "v" {
					t.Fatalf("GET after the reads: %q, %v: a connection is out of step", got, err)
				}
			}
		})
	}
}

// MULTI refused after the broker found it allowed (the ACL changed while
// the node ran): the transaction's commands run at once, which nothing
// can stop, but no entry is lost and no connection is left out of step:
// the call fails (whether it read is unknown, as with a lost reply), the
// entries it may have read stay pending for the lease's reads, the
// client's next calls get their own replies, and its fenced reads run
// the scripts from then on.
func TestFencedReadsWhenMultiIsRevoked(t *testing.T) {
	for _, tc := range []struct {
		name  string
		reads int
		read  func(t *testing.T, b *redisbroker.Broker, keys []string, leases []broker.Lease, mode broker.ReadMode) []broker.ReadResult
	}{
		{"single", 1, func(t *testing.T, b *redisbroker.Broker, keys []string, leases []broker.Lease, mode broker.ReadMode) []broker.ReadResult {
			msgs, err := b.ReadPartitionFenced(t.Context(), leases[0].Fence, layout.Stream(cat, keys[0]), group, 10, mode)
			return []broker.ReadResult{{Messages: msgs, Err: err}}
		}},
		{"pinned reader", 1, func(t *testing.T, b *redisbroker.Broker, keys []string, leases []broker.Lease, mode broker.ReadMode) []broker.ReadResult {
			ar, closeReader := b.PinnedReader()
			defer func() { _ = closeReader(t.Context()) }()
			msgs, err := ar.AckAndReadPartitionFenced(t.Context(), leases[0].Fence, layout.Stream(cat, keys[0]), group, nil, 10, mode)
			return []broker.ReadResult{{Messages: msgs, Err: err}}
		}},
		{"batch", 20, func(t *testing.T, b *redisbroker.Broker, keys []string, leases []broker.Lease, mode broker.ReadMode) []broker.ReadResult {
			reads := txReads(keys, leases, nil, 10)
			for i := range reads {
				reads[i].Mode = mode
			}
			return b.AckAndReadPartitionsFenced(t.Context(), reads)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, c := newBroker(t)
			u := noMultiClient(t, c)
			// Allowed at first: the broker's first transaction finds
			// MULTI allowed.
			if err := c.Do(t.Context(), "ACL", "SETUSER", "nomulti", "+multi").Err(); err != nil {
				t.Fatal(err)
			}
			b := redisbroker.New(u, redisbroker.WithTxBatchMin(1))
			keys, ids, leases := txPartitions(t, b, c, tc.reads+1, 2)
			sent := &commandCounter{}
			u.AddHook(sent)
			// The extra partition's read runs the first transaction.
			if r := tc.read(t, b, keys[tc.reads:], leases[tc.reads:], broker.ReadNew); r[0].Err != nil || !cmp.Equal(msgIDs(r[0].Messages), ids[tc.reads]) {
				t.Fatalf("read before the ACL changed: %v, %v", msgIDs(r[0].Messages), r[0].Err)
			}
			// A transaction watches the lease; the scripts do not (the
			// one-time check's MULTI and EXEC do not tell).
			if cmds := sent.reset(); !slices.Contains(cmds, "watch") {
				t.Fatalf("sent %v before the ACL changed; want a transaction", cmds)
			}
			if err := c.Do(t.Context(), "ACL", "SETUSER", "nomulti", "-multi").Err(); err != nil {
				t.Fatal(err)
			}
			keys, ids, leases = keys[:tc.reads], ids[:tc.reads], leases[:tc.reads]
			first := tc.read(t, b, keys, leases, broker.ReadNew)
			// In step: every connection answers its own calls.
			if err := u.Set(t.Context(), "probe", "v", 0).Err(); err != nil {
				t.Fatal(err)
			}
			for range 2 * u.Options().PoolSize {
				if got, err := u.Get(t.Context(), "probe").Result(); err != nil || got != "v" {
					t.Fatalf("GET after MULTI was refused: %q, %v: a connection is out of step", got, err)
				}
			}
			sent.reset()
			// Nothing lost: what the refused call did not return is
			// pending for the lease (read again from the start).
			pending := tc.read(t, b, keys, leases, broker.ReadPending)
			for i, k := range keys {
				got := msgIDs(first[i].Messages)
				if first[i].Err != nil {
					got = nil
				}
				if pending[i].Err != nil {
					t.Fatalf("%s: pending read after the refusal: %v", k, pending[i].Err)
				}
				if len(got) == 0 {
					got = msgIDs(pending[i].Messages)
				}
				if !cmp.Equal(got, ids[i]) {
					t.Errorf("%s: read %v (%v), then pending %v; want %v", k, msgIDs(first[i].Messages), first[i].Err, msgIDs(pending[i].Messages), ids[i])
				}
			}
			if cmds := sent.reset(); slices.Contains(cmds, "watch") || slices.Contains(cmds, "multi") || slices.Contains(cmds, "exec") {
				t.Errorf("sent %v after MULTI was refused; want the scripts only", cmds)
			}
		})
	}
}

// The one-time check that the server allows MULTI decides only on an
// answer: a client whose login is refused gets none (every command of
// the pipeline without a reply or an error), and is checked again later
// rather than taken for allowed; a server that allows MULTI and refuses
// EXEC is refused, and the check's connection is not left inside a
// transaction.
func TestMultiCheckDecidesOnAnAnswerOnly(t *testing.T) {
	_, c := newBroker(t)
	u := noMultiClient(t, c)
	if err := c.Do(t.Context(), "ACL", "SETUSER", "nomulti", "+multi", "-exec").Err(); err != nil {
		t.Fatal(err)
	}
	b := redisbroker.New(u)
	if redisbroker.ProbeMulti(b, u) {
		t.Fatal("a server that refuses EXEC was taken to allow transactions")
	}
	// The check ran on the pipeline pool: pipelines go round it.
	for range 2 * u.Options().PoolSize {
		var set *redis.StatusCmd
		if _, err := u.Pipelined(t.Context(), func(p redis.Pipeliner) error {
			set = p.Set(t.Context(), "probe", "v", 0)
			return nil
		}); err != nil || set.Val() != "OK" {
			t.Fatalf("SET after the check: %q, %v: a connection is inside a transaction", set.Val(), err)
		}
	}
	bad := redis.NewClient(&redis.Options{Addr: server.Addr, Username: "nomulti", Password: "wrong", MaxRetries: -1})
	t.Cleanup(func() { _ = bad.Close() })
	bb := redisbroker.New(bad)
	if redisbroker.ProbeMulti(bb, bad) {
		t.Fatal("a client whose login is refused was taken to allow transactions")
	}
	// Asked again once the login works (after the retry delay).
	if err := c.Do(t.Context(), "ACL", "SETUSER", "nomulti", ">wrong", "+exec").Err(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for !redisbroker.ProbeMulti(bb, bad) {
		if time.Now().After(deadline) {
			t.Fatal("never checked again after a check that got no answer")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// The MULTI check's answer is kept per client, weakly: a Cluster
// replaces its node clients as its topology changes, and an answer goes
// with its client instead of staying for every node the Cluster ever had.
func TestMultiCheckForgetsAClientThatIsGone(t *testing.T) {
	b, _ := newBroker(t)
	before := redisbroker.MultiChecked(b)
	func() {
		gone := redis.NewClient(&redis.Options{Addr: server.Addr})
		defer gone.Close()
		if !redisbroker.ProbeMulti(b, gone) {
			t.Fatal("the default user was refused MULTI")
		}
	}()
	if got := redisbroker.MultiChecked(b); got != before+1 {
		t.Fatalf("%d answers kept after a check, want %d", got, before+1)
	}
	for range 100 {
		runtime.GC()
		if redisbroker.MultiChecked(b) == before {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("%d answers kept after the client was gone, want %d", redisbroker.MultiChecked(b), before)
}
