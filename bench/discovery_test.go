package bench

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/protctl/protctl/internal/testenv"
	"github.com/protctl/protctl/pkg/broker"
	"github.com/protctl/protctl/pkg/runtime"
	"github.com/protctl/protctl/pkg/runtime/redisstore"
)

// BenchmarkDiscoveryCost measures what finding the keys other publishers
// add costs Redis (issue 17 item 2): the commands per second the server
// runs (INFO commandstats over a window) while new keys arrive, written
// as Protean writes them (SADD C:__partitions__ K, XADD C:K), for an index
// of PROTCTL_BENCH_DISCOVERY_KEYS keys (default 10000; e.g.
// 10000,1000000) and new keys at PROTCTL_BENCH_DISCOVERY_RATES per second
// (default 100,1000) for PROTCTL_BENCH_DISCOVERY_WINDOW (default 10s),
// with client tracking (a default server: redisbroker.WatchAppends), with
// the index poll (a server whose default user may not turn tracking on,
// and that publishes no keyspace events) and with keyspace events
// (tracking refused, notify-keyspace-events Et):
// PROTCTL_BENCH_DISCOVERY_MODES (default tracking,poll,events).
//
// The keys of the index have no stream (only the index is large). So
// that the node holds at most 10,000 of them, as one of a service's nodes
// would, the service has ceil(keys/10,000) members: the node and others
// that only heartbeat (once, with a long TTL, before the clock); the node
// takes its share of the index (rendezvous hashing) and of the new keys.
// A first window with no new key gives the idle cost. Reported per index
// size, mode and rate: the server's commands per second in all and those
// of discovery alone (SCARD, SSCAN, SMISMEMBER, CONFIG GET), less the
// publisher's own (its SADD and XADD) and the measuring INFO, and the
// latency of the new keys the node handled. An index of 1,000,000 keys is
// written with SADD in batches of 10,000 members (about 10 s here) and
// the node's first scan takes a few seconds.
//
//	go test -run '^$' -bench BenchmarkDiscoveryCost -benchtime 1x -timeout 60m ./bench/
//	PROTCTL_BENCH_DISCOVERY_KEYS=10000,1000000 go test -run '^$' -bench BenchmarkDiscoveryCost -benchtime 1x -timeout 60m ./bench/
func BenchmarkDiscoveryCost(b *testing.B) {
	window := rtEnvDuration(b, "PROTCTL_BENCH_DISCOVERY_WINDOW", 10*time.Second)
	var sizes, rates []int
	for _, f := range strings.Split(envOr("PROTCTL_BENCH_DISCOVERY_KEYS", "10000"), ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n <= 0 {
			b.Fatalf("PROTCTL_BENCH_DISCOVERY_KEYS: %q is not a positive count", f)
		}
		sizes = append(sizes, n)
	}
	for _, f := range strings.Split(envOr("PROTCTL_BENCH_DISCOVERY_RATES", "100,1000"), ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n <= 0 {
			b.Fatalf("PROTCTL_BENCH_DISCOVERY_RATES: %q is not a positive rate", f)
		}
		rates = append(rates, n)
	}
	modes := strings.Split(envOr("PROTCTL_BENCH_DISCOVERY_MODES", "tracking,poll,events"), ",")
	for _, mode := range modes {
		if mode != "tracking" && mode != "poll" && mode != "events" {
			b.Fatalf("PROTCTL_BENCH_DISCOVERY_MODES: %q is none of tracking, poll, events", mode)
		}
		for _, size := range sizes {
			b.Run(fmt.Sprintf("%s/%d", mode, size), func(b *testing.B) {
				for i := 0; i < b.N; i++ {
					discoveryRun(b, mode, size, rates, window)
				}
			})
		}
	}
}

func discoveryRun(b *testing.B, mode string, size int, rates []int, window time.Duration) {
	ctx := context.Background()
	var opts []testenv.RedisOption
	// noTracking: a default user that may not turn client tracking on.
	noTracking := []string{"--user", "default", "on", "nopass", "~*", "&*", "+@all", "-client|tracking"}
	switch mode {
	case "poll":
		opts = append(opts, testenv.WithArgs(noTracking...))
	case "events":
		opts = append(opts, testenv.WithArgs(append(noTracking, "--notify-keyspace-events", "Et")...))
	}
	srv := testenv.StartRedis(b, opts...)
	admin := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer admin.Close()
	const category = "disc::order"
	l := broker.ProteanLayout
	load0 := loadAverage()
	started := time.Now()
	for from := 0; from < size; from += 10000 {
		members := make([]any, 0, 10000)
		for k := from; k < min(size, from+10000); k++ {
			members = append(members, "i"+strconv.Itoa(k))
		}
		if err := admin.SAdd(ctx, l.IndexKey(category), members...).Err(); err != nil {
			b.Fatal(err)
		}
	}
	b.Logf("%s, %d keys: index written in %s", mode, size, time.Since(started).Round(time.Millisecond))
	members := (size + 9999) / 10000
	store := redisstore.New(admin)
	for m := 1; m < members; m++ {
		st := runtime.NodeStatus{Service: rtService, Node: fmt.Sprintf("member-%03d", m)}
		if err := store.Heartbeat(ctx, st, time.Hour); err != nil {
			b.Fatal(err)
		}
	}

	// The new keys' latency: the publish time is in the envelope.
	var cur atomic.Pointer[latRecorder]
	h := runtime.HandlerFunc(func(_ context.Context, m runtime.Message) error {
		if r := cur.Load(); r != nil {
			r.record(m.Data)
		}
		return nil
	})
	started = time.Now()
	n, sub, calls, c := rtNode(b, srv.Addr, "node-0", category, h, nil, nil)
	defer rtStop(b, n, c, 2*time.Minute)
	testenv.EventuallyEvery(b, 15*time.Minute, 200*time.Millisecond, "the node's share of the index idle", func() (bool, string) {
		st := sub.Status()
		a := st.Counters[runtime.CounterAssigned]
		return a > 0 && len(st.Held) == 0 && st.Counters[runtime.CounterWatched] == a,
			fmt.Sprintf("%d assigned, %d held, %d watched", a, len(st.Held), st.Counters[runtime.CounterWatched])
	})
	assigned := sub.Status().Counters[runtime.CounterAssigned]
	b.Logf("%s, %d keys: the node (one of %d members) took its %d keys in %s", mode, size, members, assigned, time.Since(started).Round(time.Millisecond))
	// Let the last restart of the waits and a scan pass.
	time.Sleep(sub.Config().WaitTimeout + sub.Config().RenewEvery)

	pub := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer pub.Close()
	next := 0
	for _, rate := range append([]int{0}, rates...) {
		events := int(float64(rate) * window.Seconds())
		keys := make([]string, events)
		for i := range keys {
			keys[i] = "n" + strconv.Itoa(next)
			next++
		}
		rec := newLatRecorder("runtime", max(events, 1))
		cur.Store(rec)
		before := rtCommandStats(ctx, b, admin)
		sent := calls.n.Load()
		cpu0 := rtProcessCPU()
		start := time.Now()
		published := 0.0
		if rate > 0 {
			took := latPublish(ctx, b, pub, category, keys, rate)
			published = float64(events) / took.Seconds()
		} else {
			time.Sleep(window)
		}
		elapsed := time.Since(start)
		after := rtCommandStats(ctx, b, admin)
		cpu := rtProcessCPU() - cpu0
		sent = calls.n.Load() - sent
		diff, total, detail := rtDiff(before, after)
		total -= diff["info"] + diff["sadd"] + diff["xadd"] // the measuring INFO, the publisher's
		var disc int64
		for _, cmd := range []string{"scard", "sscan", "smismember", "config|get"} {
			disc += diff[cmd]
		}
		perSec := float64(total) / elapsed.Seconds()
		discPerSec := float64(disc) / elapsed.Seconds()
		// Wait (bounded) for the node's share of the new keys.
		time.Sleep(2 * time.Second)
		res := latResultOf(rec)
		handled := events - res.missing
		b.ReportMetric(perSec, fmt.Sprintf("cmds/s@%d", rate))
		b.ReportMetric(discPerSec, fmt.Sprintf("discovery-cmds/s@%d", rate))
		lat := "no new keys"
		if rate > 0 {
			lat = fmt.Sprintf("new keys published at %.0f/s, %d handled by this node (its share): %s", published, handled,
				strings.TrimSuffix(res.String(), fmt.Sprintf(" (%d not handled)", res.missing)))
		}
		b.Logf("%s, %d indexed keys, new keys at %d/s: %.1f commands/s (discovery %.1f/s), node client %.1f calls/s, node process CPU %.0f%%; %s; by command: %s",
			mode, size, rate, perSec, discPerSec, float64(sent)/elapsed.Seconds(), 100*cpu.Seconds()/elapsed.Seconds(), lat, detail)
	}
	cur.Store(nil)
	if st := sub.Status(); st.Counters[runtime.CounterUntrusted] != 0 || st.Counters[runtime.CounterLeaseLost] != 0 {
		b.Errorf("leases lost during the run: %v", st.Counters)
	}
	b.Logf("%s, %d keys: load average %s -> %s", mode, size, load0, loadAverage())
}
