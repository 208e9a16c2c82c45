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

	"github.com/protctl/protctl/pkg/broker"
	"github.com/protctl/protctl/pkg/broker/redisbroker"
)

// txPartitions publishes m entries on each of n keys, creates the group on
// each stream (from 0) and takes each key's lease; it returns the keys,
// their entries and leases.
func txPartitions(t *testing.T, b *redisbroker.Broker, c *redis.Client, n, m int) ([]string, [][]string, []broker.Lease) {
	t.Helper()
	keys := make([]string, n)
	ids := make([][]string, n)
	leases := make([]broker.Lease, n)
	for i := range n {
		keys[i] = fmt.Sprintf("k-%02d", i)
		ids[i] = publish(t, b, keys[i], "", m)
		if err := c.XGroupCreate(t.Context(), layout.Stream(cat, keys[i]), group, "0").Err(); err != nil {
			t.Fatal(err)
		}
		leases[i] = acquire(t, b, keys[i], owner, time.Minute)
	}
	return keys, ids, leases
}

// txReads is one ReadNew of count entries per key, acking ack[i].
func txReads(keys []string, leases []broker.Lease, ack [][]string, count int64) []broker.FencedRead {
	reads := make([]broker.FencedRead, len(keys))
	for i, k := range keys {
		reads[i] = broker.FencedRead{Fence: leases[i].Fence, Stream: layout.Stream(cat, k), Group: group, Count: count, Mode: broker.ReadNew}
		if ack != nil {
			reads[i].Ack = ack[i]
		}
	}
	return reads
}

// groupState is what a partition's group holds: its pending ids and the
// id it last delivered.
func groupState(t *testing.T, c *redis.Client, k string) string {
	t.Helper()
	st := layout.Stream(cat, k)
	p, err := c.XPendingExt(t.Context(), &redis.XPendingExtArgs{Stream: st, Group: group, Start: "-", End: "+", Count: 100}).Result()
	if err != nil {
		t.Fatal(err)
	}
	gs, err := c.XInfoGroups(t.Context(), st).Result()
	if err != nil {
		t.Fatal(err)
	}
	var pending []string
	for _, e := range p {
		pending = append(pending, e.ID+"@"+e.Consumer)
	}
	return fmt.Sprintf("pending %v, last delivered %s", pending, gs[0].LastDeliveredID)
}

// A batch runs as one transaction, and each partition of it is fenced on
// its own: a lease taken by another node before the batch, or between
// its check and its EXEC, fails that partition's read with a lost lease
// and changes nothing of its group (no ack, nothing delivered), while
// the others read and ack.
// A batch larger than one transaction's bound (64) runs as several,
// each fenced the same way.
func TestBatchTxFencesEachPartition(t *testing.T) {
	for _, tc := range []struct {
		when      string
		n, stolen int
	}{
		{"before the batch", 20, 2},
		{"between the check and EXEC", 20, 2},
		{"before the batch", 140, 70},
		{"between the check and EXEC", 140, 70},
		{"between the check and EXEC", 140, 139},
	} {
		when, stolen := tc.when, tc.stolen
		t.Run(fmt.Sprintf("%s, %d of %d", when, stolen, tc.n), func(t *testing.T) {
			b, c := newBroker(t)
			keys, ids, leases := txPartitions(t, b, c, tc.n, 3)
			// The first entry of each read and pending: the batch acks it.
			first := b.AckAndReadPartitionsFenced(t.Context(), txReads(keys, leases, nil, 1))
			acks := make([][]string, len(keys))
			for i, r := range first {
				if r.Err != nil || !slices.Equal(msgIDs(r.Messages), ids[i][:1]) {
					t.Fatalf("%s: first read %v %v", keys[i], msgIDs(r.Messages), r.Err)
				}
				acks[i] = msgIDs(r.Messages)
			}
			steal := func() {
				lk := leases[stolen].Fence.LeaseKey
				if err := c.Set(t.Context(), lk, "other:99", time.Minute).Err(); err != nil {
					t.Error(err)
				}
			}
			var before string
			if when == "before the batch" {
				steal()
				before = groupState(t, c, keys[stolen])
			} else {
				before = groupState(t, c, keys[stolen])
				// Between the check and EXEC of the transaction that
				// holds it (64 partitions each, txBatchMax).
				calls := 0
				redisbroker.SetBetweenTx(b, func() {
					if calls == stolen/64 {
						steal()
					}
					calls++
				})
			}
			got := b.AckAndReadPartitionsFenced(t.Context(), txReads(keys, leases, acks, 10))
			redisbroker.SetBetweenTx(b, nil)
			for i, r := range got {
				if i == stolen {
					var lle *broker.LeaseLostError
					if !errors.As(r.Err, &lle) || lle.Stream != layout.Stream(cat, keys[i]) || len(r.Messages) != 0 {
						t.Fatalf("%s (stolen): %v, %v; want a lost lease", keys[i], msgIDs(r.Messages), r.Err)
					}
					continue
				}
				if r.Err != nil || !slices.Equal(msgIDs(r.Messages), ids[i][1:]) {
					t.Fatalf("%s: %v, %v; want %v", keys[i], msgIDs(r.Messages), r.Err, ids[i][1:])
				}
			}
			if after := groupState(t, c, keys[stolen]); after != before {
				t.Fatalf("the stolen partition's group changed: %s -> %s", before, after)
			}
			for i, k := range keys {
				if i == stolen {
					continue
				}
				want := fmt.Sprintf("pending [%s@%s %s@%s], last delivered %s", ids[i][1], leases[i].Fence.Token, ids[i][2], leases[i].Fence.Token, ids[i][2])
				if st := groupState(t, c, k); st != want {
					t.Fatalf("%s: %s, want %s (the first acked, the rest delivered once)", k, st, want)
				}
			}
		})
	}
}

// A lease key touched between the check and EXEC (the owner's own
// renewal) refuses the whole transaction, which ran nothing: it is
// checked again, and after txAttempts refusals the scripts read. Either
// way every partition reads its entries once, in order.
func TestBatchTxRetriesAfterARenewal(t *testing.T) {
	for _, tc := range []struct{ renewals, proto int }{{1, 3}, {100, 3}, {1, 2}} {
		renewals := tc.renewals
		t.Run(fmt.Sprintf("%d renewals, RESP%d", renewals, tc.proto), func(t *testing.T) {
			c := protoClient(t, tc.proto)
			b := redisbroker.New(c)
			redisbroker.ProbeMulti(b, c) // the one-time MULTI check (multi.go), before the counting
			keys, ids, leases := txPartitions(t, b, c, 20, 2)
			sent := &commandCounter{}
			c.AddHook(sent)
			n := 0
			redisbroker.SetBetweenTx(b, func() {
				if n < renewals {
					n++
					// What a renewal does to the key (renew.lua's PEXPIRE),
					// without a script of its own in the count below.
					if err := c.PExpire(t.Context(), leases[n%len(leases)].Fence.LeaseKey, time.Minute).Err(); err != nil {
						t.Error(err)
					}
				}
			})
			got := b.AckAndReadPartitionsFenced(t.Context(), txReads(keys, leases, nil, 10))
			redisbroker.SetBetweenTx(b, nil)
			for i, r := range got {
				if r.Err != nil || !slices.Equal(msgIDs(r.Messages), ids[i]) {
					t.Fatalf("%s: %v, %v; want %v", keys[i], msgIDs(r.Messages), r.Err, ids[i])
				}
			}
			cmds := sent.reset()
			execs, scripts := 0, 0
			for _, name := range cmds {
				switch {
				case name == "exec":
					execs++
				case strings.HasPrefix(name, "eval"):
					scripts++
				}
			}
			switch {
			case renewals == 1 && (n != 1 || execs != 2 || scripts != 0):
				// Refused once, then run: no script.
				t.Fatalf("%d checks touched, %d EXEC, %d scripts; want 1, 2, 0: %v", n, execs, scripts, cmds)
			case renewals > 1 && (execs != 3 || scripts != len(keys)):
				// Refused txAttempts times, then the scripts.
				t.Fatalf("%d EXEC, %d scripts; want 3 and %d: %v", execs, scripts, len(keys), cmds)
			}
			// Delivered once: nothing is new any more.
			for i, r := range b.AckAndReadPartitionsFenced(t.Context(), txReads(keys, leases, nil, 10)) {
				if r.Err != nil || len(r.Messages) != 0 {
					t.Fatalf("%s read again: %v, %v", keys[i], msgIDs(r.Messages), r.Err)
				}
			}
		})
	}
}

// What the transaction cannot read it leaves to the script, which does
// what it always did: a group deleted under its owner is created from 0
// and read; a stream of the wrong type fails with the key named and
// changes nothing. The other partitions of the batch read as usual.
func TestBatchTxLeavesMissingGroupsAndWrongTypesToTheScript(t *testing.T) {
	b, c := newBroker(t)
	keys, ids, leases := txPartitions(t, b, c, 20, 2)
	const noGroup, wrongType = 1, 3
	if err := c.XGroupDestroy(t.Context(), layout.Stream(cat, keys[noGroup]), group).Err(); err != nil {
		t.Fatal(err)
	}
	bad := layout.Stream(cat, keys[wrongType])
	if err := c.Del(t.Context(), bad).Err(); err != nil {
		t.Fatal(err)
	}
	if err := c.HSet(t.Context(), bad, "f", "v").Err(); err != nil {
		t.Fatal(err)
	}
	got := b.AckAndReadPartitionsFenced(t.Context(), txReads(keys, leases, nil, 10))
	for i, r := range got {
		if i == wrongType {
			wantWrongType(t, keys[i], r.Err, bad, "stream")
			if v, err := c.HGetAll(t.Context(), bad).Result(); err != nil || len(v) != 1 || v["f"] != "v" {
				t.Fatalf("the hash changed: %v %v", v, err)
			}
			continue
		}
		if r.Err != nil || !slices.Equal(msgIDs(r.Messages), ids[i]) {
			t.Fatalf("%s: %v, %v; want %v", keys[i], msgIDs(r.Messages), r.Err, ids[i])
		}
	}
}

// A transaction whose EXEC ran but whose reply was lost is not sent
// again, nor replaced by the scripts: every read of it fails
// (unavailable), and each partition's first entry was delivered once,
// the second is still new. (TestBatchReplyLostIsNotResent is the
// scripts'.)
func TestBatchTxReplyLostIsNotResent(t *testing.T) {
	_, admin := newBroker(t)
	ctx := t.Context()
	o := server.Options()
	o.MaxRetries = 3 // go-redis's default, as `run node` builds its client
	c := redis.NewClient(o)
	t.Cleanup(func() { _ = c.Close() })
	b := redisbroker.New(c)
	keys, ids, leases := txPartitions(t, b, admin, 20, 2)
	// The output buffer limit is set once the check passed: the EXEC runs
	// and the server closes the connection instead of replying.
	redisbroker.SetBetweenTx(b, func() {
		if err := admin.ConfigSet(ctx, "client-output-buffer-limit", "normal 1 1 0").Err(); err != nil {
			t.Error(err)
		}
	})
	got := b.AckAndReadPartitionsFenced(ctx, txReads(keys, leases, nil, 1))
	redisbroker.SetBetweenTx(b, nil)
	if err := admin.ConfigSet(ctx, "client-output-buffer-limit", "normal 0 0 0").Err(); err != nil {
		t.Fatal(err)
	}
	for i, r := range got {
		if !errors.Is(r.Err, broker.ErrUnavailable) {
			t.Fatalf("%s: read whose reply was lost: %v, %v; want ErrUnavailable", keys[i], msgIDs(r.Messages), r.Err)
		}
	}
	for i, k := range keys {
		want := fmt.Sprintf("pending [%s@%s], last delivered %s", ids[i][0], leases[i].Fence.Token, ids[i][0])
		if st := groupState(t, admin, k); st != want {
			t.Fatalf("%s after the lost reply: %s, want %s (read twice?)", k, st, want)
		}
	}
}

// A transaction the server refuses to queue (here every write is refused
// for memory, so XREADGROUP is, and EXEC aborts) ran nothing, and its
// queued commands hold no reply: each read is left to its script, which
// the server runs (a script is not refused for memory before it writes)
// and which reads as it always did.
func TestBatchTxLeavesARefusedTransactionToTheScripts(t *testing.T) {
	b, c := newBroker(t)
	keys, ids, leases := txPartitions(t, b, c, 20, 2)
	sent := &commandCounter{}
	c.AddHook(sent)
	t.Cleanup(func() { resetMaxMemory() })
	if err := c.ConfigSet(t.Context(), "maxmemory", "1").Err(); err != nil {
		t.Fatal(err)
	}
	got := b.AckAndReadPartitionsFenced(t.Context(), txReads(keys, leases, nil, 10))
	if err := c.ConfigSet(t.Context(), "maxmemory", "0").Err(); err != nil {
		t.Fatal(err)
	}
	if cmds := sent.reset(); !slices.Contains(cmds, "exec") || !slices.Contains(cmds, "evalsha") {
		t.Fatalf("sent %v; want the transaction, then the scripts", cmds)
	}
	for i, r := range got {
		if r.Err != nil || !slices.Equal(msgIDs(r.Messages), ids[i]) {
			t.Fatalf("%s: %v, %v; want %v", keys[i], msgIDs(r.Messages), r.Err, ids[i])
		}
	}
}

// No lease of the batch is its token (all taken by another node): every
// read fails with a lost lease, and the connection goes back to the pool
// watching nothing.
func TestBatchTxLeavesNoWatchOnThePool(t *testing.T) {
	b, c := newBroker(t)
	keys, _, leases := txPartitions(t, b, c, 20, 2)
	for i := range leases {
		if err := c.Set(t.Context(), leases[i].Fence.LeaseKey, "other:99", time.Minute).Err(); err != nil {
			t.Fatal(err)
		}
	}
	for i, r := range b.AckAndReadPartitionsFenced(t.Context(), txReads(keys, leases, nil, 1)) {
		var lle *broker.LeaseLostError
		if !errors.As(r.Err, &lle) {
			t.Fatalf("%s: %v, want a lost lease", keys[i], r.Err)
		}
	}
	for i := range leases {
		wantNoWatchLeft(t, c, leases[i].Fence.LeaseKey)
	}
}

// A batch that gets no connection (the pool is exhausted and its timeout
// passes) fails every read as unavailable after its first check, not
// once per transaction of the batch: each would wait out the pool
// again, and the live path's every worker with them.
func TestBatchTxWithoutAConnectionFailsAtOnce(t *testing.T) {
	_, admin := newBroker(t)
	o := server.Options()
	o.PoolSize = 1
	o.PoolTimeout = 100 * time.Millisecond
	o.MaxRetries = 3
	c := redis.NewClient(o)
	t.Cleanup(func() { _ = c.Close() })
	b := redisbroker.New(c)
	redisbroker.ProbeMulti(b, c) // the one-time MULTI check (multi.go), before the counting
	keys, _, leases := txPartitions(t, b, admin, 140, 2)
	hold := c.Conn()
	if err := hold.Ping(t.Context()).Err(); err != nil {
		t.Fatal(err)
	}
	defer hold.Close()
	sent := &commandCounter{}
	c.AddHook(sent)
	for i, r := range b.AckAndReadPartitionsFenced(t.Context(), txReads(keys, leases, nil, 1)) {
		if !errors.Is(r.Err, broker.ErrUnavailable) {
			t.Fatalf("%s: %v, want unavailable", keys[i], r.Err)
		}
	}
	if cmds := sent.reset(); !slices.Equal(cmds, []string{"watch", "mget"}) {
		t.Fatalf("sent %v; want one check (watch, mget) and nothing else", cmds)
	}
}

// The same for one fenced read's transaction (fencedtx.go): refused at
// queue time, it leaves the read to the script.
func TestFencedTxLeavesARefusedTransactionToTheScript(t *testing.T) {
	b, c := newBroker(t)
	keys, ids, leases := txPartitions(t, b, c, 1, 2)
	sent := &commandCounter{}
	c.AddHook(sent)
	t.Cleanup(func() { resetMaxMemory() })
	if err := c.ConfigSet(t.Context(), "maxmemory", "1").Err(); err != nil {
		t.Fatal(err)
	}
	msgs, err := b.ReadPartitionFenced(t.Context(), leases[0].Fence, layout.Stream(cat, keys[0]), group, 10, broker.ReadNew)
	if cerr := c.ConfigSet(t.Context(), "maxmemory", "0").Err(); cerr != nil {
		t.Fatal(cerr)
	}
	if cmds := sent.reset(); !slices.Contains(cmds, "exec") || !slices.Contains(cmds, "evalsha") {
		t.Fatalf("sent %v; want the transaction, then the script", cmds)
	}
	if err != nil || !slices.Equal(msgIDs(msgs), ids[0]) {
		t.Fatalf("read %v, %v; want %v", msgIDs(msgs), err, ids[0])
	}
}

// Batches under 16 reads run the scripts (one round trip) unless
// WithTxBatchMin lowers the bound; a non-positive bound is the default.
func TestTxBatchMin(t *testing.T) {
	for _, tc := range []struct {
		opts  []redisbroker.Option
		reads int
		want  string
	}{
		{nil, 15, "evalsha"},
		{nil, 16, "exec"},
		{[]redisbroker.Option{redisbroker.WithTxBatchMin(1)}, 1, "exec"},
		{[]redisbroker.Option{redisbroker.WithTxBatchMin(0)}, 15, "evalsha"},
	} {
		t.Run(fmt.Sprintf("%d reads, %d options", tc.reads, len(tc.opts)), func(t *testing.T) {
			b, c := newBroker(t, tc.opts...)
			keys, ids, leases := txPartitions(t, b, c, tc.reads, 1)
			sent := &commandCounter{}
			c.AddHook(sent)
			for i, r := range b.AckAndReadPartitionsFenced(t.Context(), txReads(keys, leases, nil, 10)) {
				if r.Err != nil || !slices.Equal(msgIDs(r.Messages), ids[i]) {
					t.Fatalf("%s: %v, %v", keys[i], msgIDs(r.Messages), r.Err)
				}
			}
			other := map[string]string{"exec": "evalsha", "evalsha": "exec"}[tc.want]
			if cmds := sent.reset(); !slices.Contains(cmds, tc.want) || slices.Contains(cmds, other) {
				t.Fatalf("sent %v; want %s and no %s", cmds, tc.want, other)
			}
		})
	}
}

// resetMaxMemory lifts the memory limit a test set on the shared server,
// whether or not the test got to it.
func resetMaxMemory() {
	c := redis.NewClient(server.Options())
	defer c.Close()
	_ = c.ConfigSet(context.Background(), "maxmemory", "0").Err()
}
