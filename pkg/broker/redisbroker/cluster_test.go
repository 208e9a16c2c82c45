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

	"github.com/protctl/protctl/pkg/broker"
	"github.com/protctl/protctl/pkg/broker/redisbroker"
)

// stepHook runs a function before or after the n-th command of a name a
// client sends, so that a test can put another client's work at an exact
// point of a multi-step operation, and records the commands.
type stepHook struct {
	mu     sync.Mutex
	counts map[string]int
	before map[string]func()
	after  map[string]func()
	fail   map[string]error
	seen   []string
	// scriptKeys is the first key of each EVALSHA, in order.
	scriptKeys []string
}

func newStepHook() *stepHook {
	return &stepHook{counts: map[string]int{}, before: map[string]func(){}, after: map[string]func(){}, fail: map[string]error{}}
}

func (h *stepHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *stepHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		name := cmd.Name()
		if name == "hello" || name == "client" || name == "cluster" || name == "command" {
			return next(ctx, cmd)
		}
		h.mu.Lock()
		h.counts[name]++
		step := fmt.Sprintf("%s#%d", name, h.counts[name])
		h.seen = append(h.seen, step)
		if name == "evalsha" && len(cmd.Args()) > 3 {
			h.scriptKeys = append(h.scriptKeys, fmt.Sprint(cmd.Args()[3]))
		}
		before, after, fail := h.before[step], h.after[step], h.fail[step]
		h.mu.Unlock()
		if before != nil {
			before()
		}
		if fail != nil {
			cmd.SetErr(fail)
			return fail
		}
		err := next(ctx, cmd)
		if after != nil {
			after()
		}
		return err
	}
}

func (h *stepHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func (h *stepHook) steps() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.seen)
}

// clusterBrokers flushes the package's cluster and returns a broker for
// the test's own use, one whose client carries hook (the reaper), and the
// raw cluster client.
func clusterBrokers(t *testing.T, hook *stepHook) (*redisbroker.Broker, *redisbroker.Broker, *redis.ClusterClient) {
	t.Helper()
	cl := sharedCluster(t)
	cl.FlushAll(t)
	c := cl.Client(t)
	hooked := cl.Client(t)
	opt := redisbroker.WithLayout(broker.ClusterLayout)
	b := redisbroker.New(c, opt)
	// Load every script on every master, so that no NOSCRIPT retry
	// shifts the hook's step numbers.
	err := c.ForEachMaster(t.Context(), func(ctx context.Context, m *redis.Client) error {
		for _, s := range redisbroker.Scripts {
			if err := s.Load(ctx, m).Err(); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	cl.FlushAll(t)
	hooked.AddHook(hook)
	return b, redisbroker.New(hooked, opt), c
}

// clusterColdPartition publishes one entry to key, registers group and drains
// it, so that a reap with minIdle 0 would delete the partition.
func clusterColdPartition(t *testing.T, b *redisbroker.Broker) {
	t.Helper()
	l := broker.ClusterLayout
	if err := b.RegisterGroup(t.Context(), cat, group); err != nil {
		t.Fatal(err)
	}
	if _, err := b.PublishPartitioned(t.Context(), cat, key, "", []byte("old")); err != nil {
		t.Fatal(err)
	}
	lease, ok, err := b.AcquirePartitionLease(t.Context(), l.LeaseKey(group, key), l.GenerationKey(group, key), owner, time.Minute)
	if err != nil || !ok {
		t.Fatal(ok, err)
	}
	msgs, err := b.AckAndReadPartitionFenced(t.Context(), lease.Fence, l.Stream(cat, key), group, nil, 10, broker.ReadPendingThenNew)
	if err != nil || len(msgs) != 1 {
		t.Fatal(len(msgs), err)
	}
	if _, err := b.AckAndReadPartitionFenced(t.Context(), lease.Fence, l.Stream(cat, key), group, msgIDs(msgs), 10, broker.ReadPendingThenNew); err != nil {
		t.Fatal(err)
	}
	if _, err := b.ReleasePartitionLease(t.Context(), lease.Fence); err != nil {
		t.Fatal(err)
	}
}

// TestClusterPublishAppendsThenRecords pins the order the interleaving
// argument rests on: the append (on the partition's slot) comes before
// the record (on the index's slot), after a read-only type check.
func TestClusterPublishAppendsThenRecords(t *testing.T) {
	hook := newStepHook()
	_, pub, _ := clusterBrokers(t, hook)
	l := broker.ClusterLayout
	if _, err := pub.PublishPartitioned(t.Context(), cat, key, "", []byte("x")); err != nil {
		t.Fatal(err)
	}
	if got := hook.steps(); !slices.Equal(got, []string{"type#1", "evalsha#1", "evalsha#2"}) {
		t.Fatalf("publish sent %v, want TYPE, then two scripts", got)
	}
	hook.mu.Lock()
	defer hook.mu.Unlock()
	if want := []string{l.Stream(cat, key), l.IndexKey(cat)}; !slices.Equal(hook.scriptKeys, want) {
		t.Fatalf("publish's scripts ran on %v, want the append on the lane, then the record on the index %v", hook.scriptKeys, want)
	}
}

// TestClusterReapPublishInterleavings puts a publish's two steps (the
// append, here b.Append on the lane, and the record, RecordPartition) at
// each point of a cluster reap's sequence (SMEMBERS registry, check
// script, SREM index, delete script, SADD back) and checks invariant 4
// once both are done: a non-empty lane is in the index. It also checks
// that nothing published is lost: the delete script never removes the
// racing entry.
func TestClusterReapPublishInterleavings(t *testing.T) {
	l := broker.ClusterLayout
	st := l.Stream(cat, key)
	type point struct{ when, step string } // when: "before" or "after"
	tests := []struct {
		name        string
		appendAt    point // zero: after the reap
		recordAt    point // zero: after the reap
		wantReaped  bool
		wantEntries int64
		wantSteps   []string
	}{
		{
			name:     "append before the check: the reap stops at the check, the index untouched",
			appendAt: point{"before", "evalsha#1"}, recordAt: point{"after", "evalsha#1"},
			wantReaped: false, wantEntries: 2,
			wantSteps: []string{"smembers#1", "evalsha#1"},
		},
		{
			name:     "append and record between the check and the SREM: the delete refuses, the key is put back",
			appendAt: point{"before", "srem#1"}, recordAt: point{"before", "srem#1"},
			wantReaped: false, wantEntries: 2,
			wantSteps: []string{"smembers#1", "evalsha#1", "srem#1", "evalsha#2", "sadd#1"},
		},
		{
			name:     "append and record between the SREM and the delete: the delete refuses, the key is put back",
			appendAt: point{"before", "evalsha#2"}, recordAt: point{"before", "evalsha#2"},
			wantReaped: false, wantEntries: 2,
			wantSteps: []string{"smembers#1", "evalsha#1", "srem#1", "evalsha#2", "sadd#1"},
		},
		{
			name:     "append before the SREM, record between the SREM and the delete",
			appendAt: point{"before", "srem#1"}, recordAt: point{"before", "evalsha#2"},
			wantReaped: false, wantEntries: 2,
			wantSteps: []string{"smembers#1", "evalsha#1", "srem#1", "evalsha#2", "sadd#1"},
		},
		{
			name:       "append before the delete, record after the reap",
			appendAt:   point{"before", "evalsha#2"},
			wantReaped: false, wantEntries: 2,
			wantSteps: []string{"smembers#1", "evalsha#1", "srem#1", "evalsha#2", "sadd#1"},
		},
		{
			name:       "append after the delete, record after the reap: the stream comes back and so does the key",
			appendAt:   point{"after", "evalsha#2"},
			wantReaped: true, wantEntries: 1,
			wantSteps: []string{"smembers#1", "evalsha#1", "srem#1", "evalsha#2"},
		},
		{
			name:     "append and record after the delete",
			appendAt: point{"after", "evalsha#2"}, recordAt: point{"after", "evalsha#2"},
			wantReaped: true, wantEntries: 1,
			wantSteps: []string{"smembers#1", "evalsha#1", "srem#1", "evalsha#2"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			hook := newStepHook()
			b, reaper, c := clusterBrokers(t, hook)
			clusterColdPartition(t, b)
			var appended, recorded atomic.Bool
			appendEntry := func() {
				if _, err := b.Append(context.Background(), st, []byte("new")); err != nil {
					t.Error(err)
				}
				appended.Store(true)
			}
			record := func() {
				if err := b.RecordPartition(context.Background(), cat, key); err != nil {
					t.Error(err)
				}
				recorded.Store(true)
			}
			at := func(p point, f func()) {
				switch p.when {
				case "before":
					prev := hook.before[p.step]
					hook.before[p.step] = func() {
						if prev != nil {
							prev()
						}
						f()
					}
				case "after":
					prev := hook.after[p.step]
					hook.after[p.step] = func() {
						if prev != nil {
							prev()
						}
						f()
					}
				}
			}
			if tt.appendAt.when != "" {
				at(tt.appendAt, appendEntry)
			}
			if tt.recordAt.when != "" {
				// The record always follows the append (publish's order).
				at(tt.recordAt, func() {
					if !appended.Load() {
						t.Error("the table puts the record before the append")
					}
					record()
				})
			}
			res, err := reaper.ReapPartition(t.Context(), cat, key, 0, "")
			if err != nil {
				t.Fatal(err)
			}
			if !appended.Load() {
				appendEntry()
			}
			if !recorded.Load() {
				record()
			}
			if res.Reaped != tt.wantReaped {
				t.Fatalf("reaped = %v (%s), want %v", res.Reaped, res.Reason, tt.wantReaped)
			}
			if got := hook.steps(); !slices.Equal(got, tt.wantSteps) {
				t.Fatalf("the reap sent %v, want %v", got, tt.wantSteps)
			}
			n, err := c.XLen(t.Context(), st).Result()
			if err != nil || n != tt.wantEntries {
				t.Fatalf("lane length = %d, %v; want %d", n, err, tt.wantEntries)
			}
			if last := c.XRevRangeN(t.Context(), st, "+", "-", 1).Val(); len(last) != 1 || last[0].Values["data"] != "new" {
				t.Fatalf("the racing entry is gone: %v", last)
			}
			if in, err := c.SIsMember(t.Context(), l.IndexKey(cat), key).Result(); err != nil || !in {
				t.Fatalf("non-empty %s is not in the index (%v)", st, err)
			}
		})
	}
}

// A reaper that dies between removing the index entry and putting it
// back (here: its SADD fails) leaves a live partition out of the index;
// the error says so, and RecordPartition repairs it.
func TestClusterReapThatCannotRestoreTheIndexSaysSoAndRecordRepairs(t *testing.T) {
	hook := newStepHook()
	b, reaper, c := clusterBrokers(t, hook)
	clusterColdPartition(t, b)
	l := broker.ClusterLayout
	st := l.Stream(cat, key)
	hook.before["evalsha#2"] = func() {
		if _, err := b.Append(context.Background(), st, []byte("new")); err != nil {
			t.Error(err)
		}
	}
	hook.fail["sadd#1"] = errors.New("connection reset by peer (simulated)")
	_, err := reaper.ReapPartition(t.Context(), cat, key, 0, "")
	if err == nil || !strings.Contains(err.Error(), "RecordPartition") {
		t.Fatalf("reap whose restore failed: err = %v, want one naming the repair", err)
	}
	if in := c.SIsMember(t.Context(), l.IndexKey(cat), key).Val(); in {
		t.Fatal("the simulated failure did not leave the key out")
	}
	if err := b.RecordPartition(t.Context(), cat, key); err != nil {
		t.Fatal(err)
	}
	if in := c.SIsMember(t.Context(), l.IndexKey(cat), key).Val(); !in || c.XLen(t.Context(), st).Val() != 2 {
		t.Fatal("RecordPartition did not repair the index")
	}
}

// Publishers and a reaper race on the cluster with one fast group, so
// that partitions do go cold and reaps do succeed, many times: no entry
// is lost or delivered out of order, and no non-empty lane is left out
// of the index (invariants 3 and 4 across masters).
func TestClusterPublishersRacingSuccessfulReaps(t *testing.T) {
	cl := sharedCluster(t)
	cl.FlushAll(t)
	c := cl.Client(t)
	l := broker.ClusterLayout
	b := redisbroker.New(c, redisbroker.WithLayout(l))
	ctx := t.Context()
	if err := b.RegisterGroup(ctx, cat, group); err != nil {
		t.Fatal(err)
	}
	keys := []string{"k0", "k1", "k2", "k3", "k4", "k5"}
	const perKey = 40
	var mu sync.Mutex
	published := map[string][]string{}
	received := map[string][]string{}
	var reaped atomic.Int64
	done := make(chan struct{})
	var wg sync.WaitGroup
	for _, k := range keys {
		wg.Add(1)
		go func() { // one publisher per key keeps the per-key order known
			defer wg.Done()
			for i := 0; i < perKey; i++ {
				id, err := b.PublishPartitioned(ctx, cat, k, "", fmt.Appendf(nil, "%d", i))
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				published[k] = append(published[k], id)
				mu.Unlock()
				time.Sleep(time.Duration(i%3) * time.Millisecond)
			}
		}()
	}
	fences := map[string]broker.Fence{}
	for _, k := range keys {
		lease, ok, err := b.AcquirePartitionLease(ctx, l.LeaseKey(group, k), l.GenerationKey(group, k), owner, time.Minute)
		if err != nil || !ok {
			t.Fatal(ok, err)
		}
		fences[k] = lease.Fence
	}
	consume := func() int {
		n := 0
		for _, k := range keys {
			var handled []string
			for {
				msgs, err := b.AckAndReadPartitionFenced(ctx, fences[k], l.Stream(cat, k), group, handled, 100, broker.ReadPendingThenNew)
				if err != nil {
					t.Error(err)
					return n
				}
				if len(msgs) == 0 {
					break
				}
				handled = msgIDs(msgs)
				mu.Lock()
				received[k] = append(received[k], handled...)
				mu.Unlock()
				n += len(msgs)
			}
		}
		return n
	}
	var bg sync.WaitGroup
	bg.Add(2)
	go func() {
		defer bg.Done()
		for {
			select {
			case <-done:
				return
			default:
			}
			consume()
		}
	}()
	go func() {
		defer bg.Done()
		for {
			select {
			case <-done:
				return
			default:
			}
			for _, k := range keys {
				res, err := b.ReapPartition(ctx, cat, k, 0, "")
				if err != nil {
					t.Error(err)
					return
				}
				if res.Reaped {
					reaped.Add(1)
				}
			}
		}
	}()
	wg.Wait()
	close(done)
	bg.Wait()
	if t.Failed() {
		return
	}
	for consume() > 0 {
	}
	index, err := b.PartitionKeys(ctx, cat)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		if !slices.Equal(received[k], published[k]) {
			t.Fatalf("%s: received %d entries %v, published %d %v", k, len(received[k]), received[k], len(published[k]), published[k])
		}
		if c.XLen(ctx, l.Stream(cat, k)).Val() > 0 && !slices.Contains(index, k) {
			t.Fatalf("non-empty lane of %s is not in the index %v", k, index)
		}
	}
	if reaped.Load() == 0 {
		t.Fatal("no reap succeeded: the race never reached the delete")
	}
	t.Logf("%d reaps succeeded while %d entries were published", reaped.Load(), len(keys)*perKey)
}

// On a cluster the wake signal (PUBLISH in record.lua, on the index's
// master) reaches a watcher subscribed through any master, for keys on
// every master, and only once the key is in the index.
func TestClusterWatchPartitionsSeesPublishesOnEveryMaster(t *testing.T) {
	cl := sharedCluster(t)
	cl.FlushAll(t)
	c := cl.Client(t)
	l := broker.ClusterLayout
	b := redisbroker.New(c, redisbroker.WithLayout(l))
	// A category of its own: wake-ups of earlier tests' publishes may
	// still be crossing the cluster bus.
	const cat = "watch::cluster"
	ctx, cancel := context.WithCancel(t.Context())
	wake, err := b.WatchPartitions(ctx, cat)
	if err != nil {
		t.Fatal(err)
	}
	// Keys until every master holds at least one partition.
	masters := map[string]bool{}
	var keys []string
	for i := 0; len(masters) < len(cl.Masters); i++ {
		k := fmt.Sprintf("w%d", i)
		n, err := c.MasterForKey(t.Context(), l.Stream(cat, k))
		if err != nil {
			t.Fatal(err)
		}
		masters[n.Options().Addr] = true
		keys = append(keys, k)
	}
	for _, k := range keys {
		if _, err := b.PublishPartitioned(t.Context(), cat, k, "", []byte("x")); err != nil {
			t.Fatal(err)
		}
	}
	got := map[string]bool{}
	timeout := time.After(10 * time.Second)
	for len(got) < len(keys) {
		select {
		case k := <-wake:
			got[k] = true
			if in := c.SIsMember(t.Context(), l.IndexKey(cat), k).Val(); !in {
				t.Fatalf("woken for %s before it was in the index", k)
			}
		case <-timeout:
			t.Fatalf("woken for %d of %d keys: %v", len(got), len(keys), got)
		}
	}
	cancel()
	for range wake {
	}
	wantNoWatchGoroutines(t)
}
