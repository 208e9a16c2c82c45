package redisbroker_test

import (
	"context"
	"crypto/sha1"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/protctl/protctl/pkg/broker"
	"github.com/protctl/protctl/pkg/broker/redisbroker"
)

// scriptKeys records the KEYS of every script call a client sends.
type scriptKeys struct {
	mu   sync.Mutex
	keys []scriptCall
}

type scriptCall struct {
	sha  string // the script's SHA1 (computed for an EVAL)
	keys []string
}

func (h *scriptKeys) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *scriptKeys) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.record(cmd)
		return next(ctx, cmd)
	}
}

// ProcessPipelineHook records the scripts of a pipeline (the live path's
// batches).
func (h *scriptKeys) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, cmd := range cmds {
			h.record(cmd)
		}
		return next(ctx, cmds)
	}
}

func (h *scriptKeys) record(cmd redis.Cmder) {
	args := cmd.Args()
	if name := cmd.Name(); (name == "evalsha" || name == "eval") && len(args) >= 3 {
		n, _ := strconv.Atoi(fmt.Sprint(args[2]))
		keys := make([]string, 0, n)
		for _, k := range args[3 : 3+n] {
			keys = append(keys, fmt.Sprint(k))
		}
		sha := fmt.Sprint(args[1])
		if name == "eval" {
			sha = fmt.Sprintf("%x", sha1.Sum([]byte(sha)))
		}
		h.mu.Lock()
		h.keys = append(h.keys, scriptCall{sha: sha, keys: keys})
		h.mu.Unlock()
	}
}

func (h *scriptKeys) take() []scriptCall {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := h.keys
	h.keys = nil
	return out
}

// slot is the adapter's own key slot function (the cluster wait groups
// streams by it); TestSlotFunction checks it against the specification's
// values and CLUSTER KEYSLOT, and the property test below relies on it.
var slot = redisbroker.KeySlot

func TestSlotFunction(t *testing.T) {
	// Values from the Redis Cluster specification and CLUSTER KEYSLOT.
	for key, want := range map[string]uint16{"123456789": 12739 % 16384, "foo": 12182, "{user1000}.following": slot("user1000")} {
		if got := slot(key); got != want {
			t.Fatalf("slot(%q) = %d, want %d", key, got, want)
		}
	}
	// And the server agrees on random keys, hash tags and edge cases
	// included ("{}" and "{" do not make a tag).
	cl := sharedCluster(t)
	c := cl.Client(t)
	seed := time.Now().UnixNano()
	rng := rand.New(rand.NewPCG(uint64(seed), 0))
	t.Logf("seed %d", seed)
	keys := []string{"", "{}", "{", "}", "a{}b", "a{b}c{d}", "{{a}}", "x{y", "cat:{k}:__lease__"}
	for i := 0; i < 300; i++ {
		keys = append(keys, randomString(rng, "abc:{}-_é/", 0, 12))
	}
	for _, k := range keys {
		want, err := c.ClusterKeySlot(t.Context(), k).Result()
		if err != nil {
			t.Fatal(err)
		}
		if got := slot(k); int64(got) != want {
			t.Fatalf("slot(%q) = %d, CLUSTER KEYSLOT says %d", k, got, want)
		}
	}
}

// randomString returns a string of n in [minLen, maxLen] characters
// drawn from alphabet.
func randomString(rng *rand.Rand, alphabet string, minLen, maxLen int) string {
	runes := []rune(alphabet)
	n := minLen + rng.IntN(maxLen-minLen+1)
	var sb strings.Builder
	for i := 0; i < n; i++ {
		sb.WriteRune(runes[rng.IntN(len(runes))])
	}
	return sb.String()
}

// TestEveryScriptUsesOneSlot is a property test: for random categories
// (with ':' in them), partition keys, groups and lanes, every script call
// of every operation in the cluster layout, publish, reap and trim
// included, passes KEYS that all map to one Redis Cluster slot (CRC16,
// with hash tags). It also checks that every script the cluster layout
// uses was exercised, and that the Protean layout's cross-slot scripts
// (publish.lua, reap.lua) never are.
func TestEveryScriptUsesOneSlot(t *testing.T) {
	server.FlushAll(t)
	c := server.Client(t)
	rec := &scriptKeys{}
	c.AddHook(rec)
	l := broker.ClusterLayout
	b := redisbroker.New(c, redisbroker.WithLayout(l))
	seed := time.Now().UnixNano()
	rng := rand.New(rand.NewPCG(uint64(seed), 1))
	t.Logf("seed %d", seed)
	const names = "abcxyz019:._-é€/ "
	shaSeen := map[string]bool{}
	for iter := 0; iter < 60; iter++ {
		// Each draw starts empty: a short random category may come up
		// twice, with another group registered the first time.
		server.FlushAll(t)
		category := randomString(rng, names, 1, 24)
		grp := randomString(rng, names, 1, 16)
		var k string
		for {
			k = randomString(rng, strings.ReplaceAll(names, ":", ""), 1, 20)
			if l.ValidateKey(k, "") == nil {
				break
			}
		}
		exercise(t, b, l, category, k, grp)
		for _, keys := range rec.take() {
			shaSeen[keys.sha] = true
			for _, key := range keys.keys[1:] {
				if slot(key) != slot(keys.keys[0]) {
					t.Fatalf("category %q key %q group %q: script keys %q span slots %d and %d", category, k, grp, keys.keys, slot(keys.keys[0]), slot(key))
				}
			}
		}
	}
	for name, s := range redisbroker.Scripts {
		protean := name == "publish" || name == "reap"
		switch {
		case protean && shaSeen[s.Hash()]:
			t.Errorf("the cluster layout sent the Protean layout's cross-slot %s script", name)
		case !protean && !shaSeen[s.Hash()]:
			t.Errorf("script %s was never exercised", name)
		}
	}
}

// exercise calls every operation of the contract that runs a script, on
// one partition, so that each script runs at least once, the reap both
// refused and through to its delete.
func exercise(t *testing.T, b *redisbroker.Broker, l broker.Layout, category, k, grp string) {
	t.Helper()
	ctx := t.Context()
	must := func(what string, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("category %q key %q group %q: %s: %v", category, k, grp, what, err)
		}
	}
	must("register", b.RegisterGroup(ctx, category, grp))
	_, err := b.PublishPartitioned(ctx, category, k, "", []byte("a"))
	must("publish", err)
	_, err = b.PublishPartitioned(ctx, category, k, broker.DefaultBackfillSuffix, []byte("b"))
	must("publish backfill", err)
	must("record", b.RecordPartition(ctx, category, k))
	res, err := b.ReapPartition(ctx, category, k, 0, "")
	must("reap", err)
	if res.Reaped {
		t.Fatal("reaped a partition with unread entries")
	}
	lease, ok, err := b.AcquirePartitionLease(ctx, l.LeaseKey(grp, k), l.GenerationKey(grp, k), owner, time.Minute)
	must("acquire", err)
	if !ok {
		t.Fatal("lease not free")
	}
	_, err = b.AcquirePartitionLeaseAt(ctx, l.LeaseKey(grp, k), l.GenerationKey(grp, k), owner, time.Minute, nil)
	must("acquire at", err)
	f := lease.Fence
	_, err = b.RenewPartitionLease(ctx, f, time.Minute)
	must("renew", err)
	main, bf := l.Stream(category, k), l.LaneStream(category, k, broker.DefaultBackfillSuffix)
	msgs, err := b.ReadPartitionFenced(ctx, f, main, grp, 10, broker.ReadPendingThenNew)
	must("read", err)
	_, err = b.ReclaimPartitionPending(ctx, f, main, grp, 0, 10)
	must("reclaim", err)
	_, err = b.AckPartitionFenced(ctx, f, main, grp, msgIDs(msgs)...)
	must("ack", err)
	bmsgs, err := b.AckAndReadPartitionFenced(ctx, f, bf, grp, nil, 10, broker.ReadPendingThenNew)
	must("ack and read", err)
	dlq := l.DLQStream(category, k)
	dlqID, err := b.DeadLetterPartitionFenced(ctx, f, bf, grp, bmsgs[0].ID, dlq, "x")
	must("dead-letter", err)
	digest := rawDigest(t, server.Client(t), dlq, dlqID)
	v, _, err := b.ReplayDeadLetter(ctx, redisbroker.DeadLetterReplay{DLQStream: dlq, ID: dlqID, Digest: digest,
		Stream: main, Category: category, Key: k, Fields: [][2]string{{broker.DataField, "r"}}})
	must("replay dead letter", err)
	if v != redisbroker.ReplayDone {
		t.Fatalf("replay: %s", v)
	}
	d, err := b.DeleteDeadLetter(ctx, dlq, dlqID, digest)
	must("delete dead letter", err)
	if d != redisbroker.DeleteGone {
		t.Fatalf("delete of a replayed dead letter: %s", d)
	}
	_, err = b.Trim(ctx, main, 1)
	must("trim", err)
	_, err = b.ReleasePartitionLease(ctx, f)
	must("release", err)
	// The live path's batches: an acquisition that reads, and an
	// ack-and-read.
	g := b.AcquirePartitionLeases(ctx, []broker.LeaseRequest{{
		LeaseKey: l.LeaseKey(grp, k), GenerationKey: l.GenerationKey(grp, k), Owner: owner, TTL: time.Minute,
		Tails: []string{main, bf}, ReadAtGeneration: lease.Generation + 1, Group: grp, Read: []string{main}, Count: 10,
	}})[0]
	must("batch acquire", g.Err)
	if !g.Acquired || len(g.Read) != 1 {
		t.Fatalf("batch acquire: %+v", g)
	}
	r := b.AckAndReadPartitionsFenced(ctx, []broker.FencedRead{{Fence: g.Lease.Fence, Stream: main, Group: grp,
		Ack: msgIDs(g.Read[0].Messages), Count: 10, Mode: broker.ReadNew}})[0]
	must("batch ack and read", r.Err)
	_, err = b.ReleasePartitionLease(ctx, g.Lease.Fence)
	must("release", err)
	res, err = b.ReapPartition(ctx, category, k, 0, "")
	must("reap", err)
	if !res.Reaped {
		t.Fatalf("category %q key %q group %q: a drained partition was not reaped: %s", category, k, grp, res.Reason)
	}
}
