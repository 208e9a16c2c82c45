package bench

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/protctl/protctl/internal/testenv"
	"github.com/protctl/protctl/pkg/broker/redisbroker"
	"github.com/protctl/protctl/pkg/runtime/hrw"
	"github.com/protctl/protctl/pkg/runtime/partitioned"
	"github.com/protctl/protctl/pkg/runtime/redisstore"
)

// BenchmarkRuntimeFailover measures how long the partitions of a node
// killed with SIGKILL stay unhandled: three node processes
// (pkg/runtime/internal/testnode) share 30 keys while a publisher appends
// to every key every 20ms; one node is killed, and the failover time is
// the longest, over the dead node's keys, from the kill to the first
// handler call of another node on the key. Target: at most lease TTL +
// renewal period. The TTL is PROTCTL_BENCH_FAILOVER_TTL (default 5s; the
// renewal period and heartbeat are TTL/5, membership TTL is TTL - TTL/5,
// as testnode sets them). Run it with -benchtime=1x.
func BenchmarkRuntimeFailover(b *testing.B) {
	ctx := context.Background()
	ttl := rtEnvDuration(b, "PROTCTL_BENCH_FAILOVER_TTL", 5*time.Second)
	renew := ttl / 5
	bin := filepath.Join(b.TempDir(), "testnode")
	if out, err := exec.Command("go", "build", "-o", bin, "github.com/protctl/protctl/pkg/runtime/internal/testnode").CombinedOutput(); err != nil {
		b.Fatalf("go build testnode: %v\n%s", err, out)
	}
	srv := testenv.StartRedis(b)
	admin := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer admin.Close()
	store := redisstore.New(admin)
	pub, err := partitioned.NewPublisher(redisbroker.New(admin))
	if err != nil {
		b.Fatal(err)
	}
	keys := make([]string, 30)
	for i := range keys {
		keys[i] = rtKey(i)
	}
	ids := []string{"node-1", "node-2", "node-3"}
	const victim = "node-2"
	var victimKeys []string
	for _, k := range keys {
		if hrw.Owner(k, ids) == victim {
			victimKeys = append(victimKeys, k)
		}
	}

	var worst time.Duration
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		if err := admin.FlushAll(ctx).Err(); err != nil {
			b.Fatal(err)
		}
		procs := map[string]*exec.Cmd{}
		logs := map[string]*bytes.Buffer{}
		for _, id := range ids {
			logs[id] = new(bytes.Buffer)
			cmd := exec.Command(bin, "-redis", srv.Addr, "-node", id, "-service", "shop", "-categories", rtCategory,
				"-ttl", ttl.String(), "-renew", renew.String(), "-hold", "1ms")
			cmd.Stdout, cmd.Stderr = logs[id], logs[id]
			cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
			if err := cmd.Start(); err != nil {
				b.Fatal(err)
			}
			procs[id] = cmd
		}
		stopAll := func() {
			for _, cmd := range procs {
				_ = cmd.Process.Signal(syscall.SIGTERM)
			}
			for _, cmd := range procs {
				_ = cmd.Wait()
			}
		}
		testenv.EventuallyEvery(b, time.Minute, 20*time.Millisecond, "three members", func() (bool, string) {
			m, err := store.Members(ctx, "shop")
			return err == nil && len(m) == 3, fmt.Sprintf("%d members, err %v", len(m), err)
		})
		stop := make(chan struct{})
		done := make(chan struct{})
		go func() {
			defer close(done)
			for seq := 1; ; seq++ {
				select {
				case <-stop:
					return
				default:
				}
				for _, k := range keys {
					if _, err := pub.Publish(ctx, rtCategory, k, []byte(`{"data":{"seq":`+strconv.Itoa(seq)+`}}`)); err != nil {
						b.Error(err)
						return
					}
				}
				time.Sleep(20 * time.Millisecond)
			}
		}()
		time.Sleep(2 * ttl) // steady state: every key owned and flowing
		b.StartTimer()
		killAt := time.Now()
		if err := procs[victim].Process.Kill(); err != nil {
			b.Fatal(err)
		}
		_ = procs[victim].Wait()
		delete(procs, victim)
		var failover time.Duration
		testenv.EventuallyEvery(b, 10*ttl, 20*time.Millisecond, "the victim's keys taken over", func() (bool, string) {
			failover = 0
			for _, k := range victimKeys {
				first := rtFirstCallAfter(b, admin, k, victim, killAt)
				if first.IsZero() {
					return false, k + " not handled since the kill"
				}
				failover = max(failover, first.Sub(killAt))
			}
			return true, ""
		})
		b.StopTimer()
		close(stop)
		<-done
		stopAll()
		worst = max(worst, failover)
		b.Logf("killed %s owning %d of %d keys: taken over after %s (bound %s)", victim, len(victimKeys), len(keys), failover.Round(time.Millisecond), ttl+renew)
	}
	b.ReportMetric(worst.Seconds(), "failover-s")
	b.ReportMetric((ttl + renew).Seconds(), "bound-s")
	b.ReportMetric(worst.Seconds()/(ttl+renew).Seconds(), "failover/bound")
}

// rtFirstCallAfter returns the start of the first handler call on key by a
// node other than exclude after t (zero if none yet), from testnode's log.
func rtFirstCallAfter(tb testing.TB, c *redis.Client, key, exclude string, t time.Time) time.Time {
	tb.Helper()
	raw, err := c.LRange(context.Background(), "testnode:log:"+key, 0, -1).Result()
	if err != nil {
		tb.Fatal(err)
	}
	for _, r := range raw {
		f := strings.Split(r, "|")
		if len(f) != 5 || f[0] == exclude {
			continue
		}
		ns, _ := strconv.ParseInt(f[3], 10, 64)
		if start := time.Unix(0, ns); start.After(t) {
			return start
		}
	}
	return time.Time{}
}
