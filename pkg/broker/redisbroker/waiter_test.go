package redisbroker_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/protctl/protctl/internal/testenv"
	"github.com/protctl/protctl/pkg/broker"
	"github.com/protctl/protctl/pkg/broker/redisbroker"
)

// blocked waits until the server has want blocked clients.
func blocked(t *testing.T, c *redis.Client, want string) {
	t.Helper()
	testenv.Eventually(t, 5*time.Second, want+" blocked clients", func() (bool, string) {
		got := blockedClients(t, c)
		return got == want, "blocked_clients:" + got
	})
}

// xreadCalls is how many XREADs each master of cl has run, by address
// (INFO commandstats): a cluster's wait polls instead of blocking, and a
// poll is an XREAD on every master that holds one of its streams.
func xreadCalls(t *testing.T, cl *testenv.Cluster) map[string]int64 {
	t.Helper()
	calls := map[string]int64{}
	for _, m := range cl.Masters {
		c := redis.NewClient(m.Options())
		info, err := c.Info(context.Background(), "commandstats").Result()
		_ = c.Close()
		if err != nil {
			t.Fatal(err)
		}
		calls[m.Addr] = 0
		for _, line := range strings.Split(info, "\r\n") {
			if v, ok := strings.CutPrefix(line, "cmdstat_xread:calls="); ok {
				n, _, _ := strings.Cut(v, ",")
				calls[m.Addr], err = strconv.ParseInt(n, 10, 64)
				if err != nil {
					t.Fatalf("%s: %q", m.Addr, line)
				}
			}
		}
	}
	return calls
}

// polled waits until every master of cl has run an XREAD since before
// (xreadCalls): a cluster's wait has issued its first poll.
func polled(t *testing.T, cl *testenv.Cluster, before map[string]int64) {
	t.Helper()
	testenv.Eventually(t, 10*time.Second, "the wait's first poll on every master", func() (bool, string) {
		now := xreadCalls(t, cl)
		for addr, n := range now {
			if n <= before[addr] {
				return false, fmt.Sprintf("XREAD calls %v, before %v", now, before)
			}
		}
		return true, ""
	})
}

// blockedClients reads INFO clients' blocked_clients.
func blockedClients(t *testing.T, c *redis.Client) string {
	t.Helper()
	info, err := c.Info(context.Background(), "clients").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(info, "\r\n") {
		if v, ok := strings.CutPrefix(line, "blocked_clients:"); ok {
			return v
		}
	}
	t.Fatal("no blocked_clients in INFO clients")
	return ""
}

func TestWaitForEntries(t *testing.T) {
	b, c := newBroker(t)
	ctx := context.Background()
	a := cat + ":a"
	id, err := b.Append(ctx, a, []byte("1"))
	if err != nil {
		t.Fatal(err)
	}

	// An entry after the given id: at once. A missing stream is empty.
	got, err := b.WaitForEntries(ctx, map[string]string{a: "0-0", cat + ":missing": "0-0"}, time.Second)
	if err != nil || !slices.Equal(got, []string{a}) {
		t.Fatalf("WaitForEntries = %v, %v; want [%s]", got, err, a)
	}
	// Nothing after id: nil at the timeout.
	got, err = b.WaitForEntries(ctx, map[string]string{a: id}, 50*time.Millisecond)
	if err != nil || got != nil {
		t.Fatalf("WaitForEntries past the last entry = %v, %v; want nil", got, err)
	}
	// An append wakes the wait.
	done := make(chan []string, 1)
	go func() {
		got, err := b.WaitForEntries(ctx, map[string]string{a: id, cat + ":b": "0-0"}, 10*time.Second)
		if err != nil {
			t.Error(err)
		}
		done <- got
	}()
	blocked(t, c, "1") // the append then wakes the wait, not a fresh read
	if _, err := b.Append(ctx, cat+":b", []byte("x")); err != nil {
		t.Fatal(err)
	}
	select {
	case got := <-done:
		if !slices.Equal(got, []string{cat + ":b"}) {
			t.Fatalf("woken for %v, want [%s:b]", got, cat)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("append did not wake the wait")
	}
	if v := blockedClients(t, c); v != "0" {
		t.Errorf("blocked clients after return = %s", v)
	}
}

func TestWaitForEntriesCancelLeavesNothingBlocked(t *testing.T) {
	b, c := newBroker(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := b.WaitForEntries(ctx, map[string]string{cat + ":a": "0-0"}, 0)
		done <- err
	}()
	blocked(t, c, "1")
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("cancelled wait = %v, want context.Canceled", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("cancel did not end the wait")
	}
	if v := blockedClients(t, c); v != "0" {
		t.Errorf("blocked clients after cancel = %s, want 0", v)
	}
}

// More streams than one XREAD carries: the chunks wait in parallel, and
// an entry in one wakes the others.
func TestWaitForEntriesChunks(t *testing.T) {
	b, c := newBroker(t)
	ctx := context.Background()
	after := map[string]string{}
	for i := 0; i < 9000; i++ {
		after[fmt.Sprintf("%s:k%05d", cat, i)] = "0-0"
	}
	done := make(chan []string, 1)
	go func() {
		got, err := b.WaitForEntries(ctx, after, 10*time.Second)
		if err != nil {
			t.Error(err)
		}
		done <- got
	}()
	blocked(t, c, "2") // two chunks
	last := fmt.Sprintf("%s:k%05d", cat, 8999)
	if _, err := b.Append(ctx, last, []byte("x")); err != nil {
		t.Fatal(err)
	}
	select {
	case got := <-done:
		if !slices.Equal(got, []string{last}) {
			t.Fatalf("woken for %v", got)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("append did not wake the wait")
	}
	if v := blockedClients(t, c); v != "0" {
		t.Errorf("blocked clients after return = %s", v)
	}
}

func TestWaitForEntriesBadInput(t *testing.T) {
	b, c := newBroker(t)
	ctx := context.Background()
	for name, after := range map[string]map[string]string{
		"empty":     {},
		"no stream": {"": "0-0"},
		"bad id":    {"s": "x"},
	} {
		if _, err := b.WaitForEntries(ctx, after, time.Millisecond); !errors.Is(err, broker.ErrInvalidArgument) {
			t.Errorf("%s: %v, want ErrInvalidArgument", name, err)
		}
	}
	if _, err := b.WaitForEntries(ctx, map[string]string{"s": "0-0"}, -1); !errors.Is(err, broker.ErrInvalidArgument) {
		t.Errorf("negative timeout: %v", err)
	}
	if err := c.Set(ctx, "str", "x", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := b.WaitForEntries(ctx, map[string]string{"str": "0-0"}, time.Millisecond); !errors.Is(err, broker.ErrWrongType) {
		t.Errorf("string key: %v, want ErrWrongType", err)
	}
}

func TestLastEntryIDs(t *testing.T) {
	b, c := newBroker(t)
	ctx := context.Background()
	a := cat + ":a"
	if _, err := b.Append(ctx, a, []byte("1")); err != nil {
		t.Fatal(err)
	}
	last, err := b.Append(ctx, a, []byte("2"))
	if err != nil {
		t.Fatal(err)
	}
	got, err := b.LastEntryIDs(ctx, []string{a, cat + ":missing"})
	if err != nil {
		t.Fatal(err)
	}
	if got[a] != last || got[cat+":missing"] != "0-0" || len(got) != 2 {
		t.Errorf("LastEntryIDs = %v, want %s and 0-0", got, last)
	}
	if err := c.Set(ctx, "str", "x", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := b.LastEntryIDs(ctx, []string{a, "str"}); !errors.Is(err, broker.ErrWrongType) {
		t.Errorf("string key: %v, want ErrWrongType", err)
	}
	if _, err := b.LastEntryIDs(ctx, []string{""}); !errors.Is(err, broker.ErrInvalidArgument) {
		t.Errorf("empty stream name: %v", err)
	}
}

func TestRenewPartitionLeases(t *testing.T) {
	b, c := newBroker(t)
	ctx := context.Background()
	var fences []broker.Fence
	for _, k := range []string{"a", "b", "c"} {
		l, ok, err := b.AcquirePartitionLease(ctx, layout.LeaseKey(group, k), layout.GenerationKey(group, k), owner, time.Second)
		if err != nil || !ok {
			t.Fatal(ok, err)
		}
		fences = append(fences, l.Fence)
	}
	// b's lease is lost (released), c's token is stale.
	if _, err := b.ReleasePartitionLease(ctx, fences[1]); err != nil {
		t.Fatal(err)
	}
	stale := fences[2]
	stale.Token = owner + ":99"
	fences[2] = stale
	// A flushed script cache is reloaded.
	if err := c.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	oks, err := b.RenewPartitionLeases(ctx, fences, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(oks, []bool{true, false, false}) {
		t.Errorf("renewed %v, want [true false false]", oks)
	}
	if ttl := c.PTTL(ctx, layout.LeaseKey(group, "a")).Val(); ttl < 30*time.Second {
		t.Errorf("a's TTL after renewal = %s", ttl)
	}
	if ttl := c.PTTL(ctx, layout.LeaseKey(group, "c")).Val(); ttl > time.Second {
		t.Errorf("stale token renewed c: TTL %s", ttl)
	}
	if _, err := b.RenewPartitionLeases(ctx, []broker.Fence{{LeaseKey: "x"}}, time.Second); !errors.Is(err, broker.ErrInvalidArgument) {
		t.Errorf("empty token: %v", err)
	}
	if _, err := b.RenewPartitionLeases(ctx, fences, 0); !errors.Is(err, broker.ErrInvalidArgument) {
		t.Errorf("zero ttl: %v", err)
	}
}

// On a real 3-master cluster, one wait spans partitions of many slots on
// every master (a blocking XREAD there fails with CROSSSLOT): it times
// out with nil while nothing comes, an append to an idle partition on
// each master wakes it within the poll period, cancelling ends it at
// once, and a key of the wrong type is reported.
func TestClusterWaitForEntriesSpansSlots(t *testing.T) {
	cl := sharedCluster(t)
	cl.FlushAll(t)
	c := cl.Client(t)
	l := broker.ClusterLayout
	b := redisbroker.New(c, redisbroker.WithLayout(l))
	ctx := t.Context()

	// 64 partitions (both lanes of each), plus untagged streams, until
	// every master holds one; onMaster is a partition per master.
	after := map[string]string{"plain:a": "0-0", "plain:b": "0-0"}
	onMaster := map[string]string{}
	for i := 0; i < 64 || len(onMaster) < len(cl.Masters); i++ {
		k := fmt.Sprintf("w%d", i)
		s := l.Stream(cat, k)
		after[s] = "0-0"
		after[l.LaneStream(cat, k, broker.DefaultBackfillSuffix)] = "0-0"
		m, err := c.MasterForKey(ctx, s)
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := onMaster[m.Options().Addr]; !ok {
			onMaster[m.Options().Addr] = s
		}
	}

	got, err := b.WaitForEntries(ctx, after, 100*time.Millisecond)
	if err != nil || got != nil {
		t.Fatalf("WaitForEntries with nothing appended = %v, %v; want nil, nil", got, err)
	}
	for addr, s := range onMaster {
		type res struct {
			got []string
			err error
		}
		done := make(chan res, 1)
		before := xreadCalls(t, cl)
		go func() {
			got, err := b.WaitForEntries(ctx, after, 20*time.Second)
			done <- res{got, err}
		}()
		polled(t, cl, before) // the wait is idle: only its next poll can see the append
		appended := time.Now()
		id, err := b.Append(ctx, s, []byte("x"))
		if err != nil {
			t.Fatal(err)
		}
		select {
		case r := <-done:
			if r.err != nil || !slices.Equal(r.got, []string{s}) {
				t.Fatalf("append to %s on %s: woken with %v, %v; want [%s]", s, addr, r.got, r.err, s)
			}
			t.Logf("append to %s on master %s noticed after %s", s, addr, time.Since(appended).Round(time.Millisecond))
		case <-time.After(10 * time.Second):
			t.Fatalf("append to %s on %s did not wake the wait", s, addr)
		}
		after[s] = id
	}

	cctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	before := xreadCalls(t, cl)
	go func() {
		_, err := b.WaitForEntries(cctx, after, 0)
		done <- err
	}()
	polled(t, cl, before) // cancel a wait that is waiting, not one not started
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("cancelled wait = %v, want context.Canceled", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("cancel did not end the wait")
	}

	if err := c.Set(ctx, "str", "x", 0).Err(); err != nil {
		t.Fatal(err)
	}
	after["str"] = "0-0"
	if _, err := b.WaitForEntries(ctx, after, time.Millisecond); !errors.Is(err, broker.ErrWrongType) {
		t.Errorf("a string key among the streams: %v, want ErrWrongType", err)
	}
}

// A cancelled wait ends even when its nudge is lost. Here the XREAD is
// held back until the nudge was sent, and the nudge stream is deleted in
// between, as its 10s expiry does when an XREAD reaches the server that
// late (a goroutine, a pool or a server slow under load): the XREAD then
// blocks on a stream that no nudge will touch again. The call nudges again
// until every XREAD returned; before, it waited for the XREAD's timeout
// (an hour here), and so did a node's wait loop, which waits for a
// cancelled wait to return (TestRedisNoEntryStranded's Stop hung so).
func TestWaitForEntriesLostNudge(t *testing.T) {
	b, c := newBroker(t)
	held, release := make(chan struct{}), make(chan struct{})
	redisbroker.SetBeforeWait(b, func() {
		close(held)
		<-release
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := b.WaitForEntries(ctx, map[string]string{cat + ":a": "0-0"}, time.Hour)
		done <- err
	}()
	<-held
	cancel()
	// The nudge lands, and goes, before the XREAD is sent.
	var nudge string
	testenv.Eventually(t, 5*time.Second, "a nudge", func() (bool, string) {
		keys, err := c.Keys(context.Background(), "__protctl__:wait:*").Result()
		if err != nil {
			t.Fatal(err)
		}
		if len(keys) > 0 {
			nudge = keys[0]
		}
		return nudge != "", "no nudge stream"
	})
	if err := c.Del(context.Background(), nudge).Err(); err != nil {
		t.Fatal(err)
	}
	close(release)
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("cancelled wait = %v, want context.Canceled", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the cancelled wait is still blocked: its XREAD missed the only nudge")
	}
	if v := blockedClients(t, c); v != "0" {
		t.Errorf("blocked clients after cancel = %s, want 0", v)
	}
}

// EntriesAfter is WaitForEntries that never waits: it names the streams
// with entries after their ids at once, registers no blocked client, and
// refuses what WaitForEntries refuses.
func TestEntriesAfter(t *testing.T) {
	b, c := newBroker(t)
	ctx := context.Background()
	a, bs := cat+":a", cat+":b"
	id, err := b.Append(ctx, a, []byte("1"))
	if err != nil {
		t.Fatal(err)
	}
	got, err := b.EntriesAfter(ctx, map[string]string{a: "0-0", bs: "0-0", cat + ":missing": "0-0"})
	if err != nil || !slices.Equal(got, []string{a}) {
		t.Fatalf("EntriesAfter = %v, %v; want [%s]", got, err, a)
	}
	got, err = b.EntriesAfter(ctx, map[string]string{a: id, bs: "0-0"})
	if err != nil || got != nil {
		t.Fatalf("EntriesAfter past the last entry = %v, %v; want nil", got, err)
	}
	if v := blockedClients(t, c); v != "0" {
		t.Fatalf("blocked clients after a check: %s, want 0", v)
	}
	// More streams than one XREAD names: every chunk is read.
	after := map[string]string{}
	for i := range 2*8192 + 10 {
		after[fmt.Sprintf("%s:s%05d", cat, i)] = "0-0"
	}
	last := fmt.Sprintf("%s:s%05d", cat, 2*8192+9)
	if _, err := b.Append(ctx, last, []byte("x")); err != nil {
		t.Fatal(err)
	}
	after[a] = "0-0"
	got, err = b.EntriesAfter(ctx, after)
	if err != nil || !slices.Equal(got, []string{a, last}) {
		t.Fatalf("EntriesAfter over %d streams = %v, %v; want [%s %s]", len(after), got, err, a, last)
	}
	for name, after := range map[string]map[string]string{
		"empty":     {},
		"no stream": {"": "0-0"},
		"bad id":    {"s": "x"},
	} {
		if _, err := b.EntriesAfter(ctx, after); !errors.Is(err, broker.ErrInvalidArgument) {
			t.Errorf("%s: %v, want ErrInvalidArgument", name, err)
		}
	}
	if err := c.Set(ctx, "str", "x", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := b.EntriesAfter(ctx, map[string]string{"str": "0-0"}); !errors.Is(err, broker.ErrWrongType) {
		t.Errorf("string key: %v, want ErrWrongType", err)
	}
}

// On a Redis Cluster a check reads every slot's streams, on every master.
func TestClusterEntriesAfterSpansSlots(t *testing.T) {
	cl := sharedCluster(t)
	cl.FlushAll(t)
	c := cl.Client(t)
	l := broker.ClusterLayout
	b := redisbroker.New(c, redisbroker.WithLayout(l))
	ctx := t.Context()
	after := map[string]string{}
	var want []string
	for i := range 64 {
		s := l.Stream(cat, fmt.Sprintf("w%d", i))
		after[s] = "0-0"
		if i%7 == 0 {
			if _, err := b.Append(ctx, s, []byte("x")); err != nil {
				t.Fatal(err)
			}
			want = append(want, s)
		}
	}
	slices.Sort(want)
	got, err := b.EntriesAfter(ctx, after)
	if err != nil || !slices.Equal(got, want) {
		t.Fatalf("EntriesAfter = %v, %v; want %v", got, err, want)
	}
}
