package testenv

import (
	"context"
	"fmt"
	"testing"
	"time"
)

// The cluster has three masters on loopback ports (never 6379), each
// serving a share of the slots, and a cluster client reaches all of them.
func TestClusterServesEverySlotFromThreeMasters(t *testing.T) {
	c := StartCluster(t)
	if len(c.Masters) != 3 {
		t.Fatalf("%d masters, want 3", len(c.Masters))
	}
	cc := c.Client(t)
	ctx := context.Background()
	owners := map[string]int{}
	for i := 0; i < 300; i++ {
		k := fmt.Sprintf("key-%d", i)
		if err := cc.Set(ctx, k, k, 0).Err(); err != nil {
			t.Fatal(err)
		}
		n, err := cc.MasterForKey(ctx, k)
		if err != nil {
			t.Fatal(err)
		}
		owners[n.Options().Addr]++
	}
	for _, m := range c.Masters {
		if m.Port == 6379 {
			t.Fatal("a cluster node uses 6379")
		}
		if owners[m.Addr] == 0 {
			t.Fatalf("master %s holds none of 300 keys: %v", m.Addr, owners)
		}
	}
	// A script whose keys share a hash tag runs; one whose keys do not is
	// refused, which is what the redisbroker cluster layout relies on.
	if err := cc.Eval(ctx, "return redis.call('SET', KEYS[1], '1') and redis.call('SET', KEYS[2], '2')", []string{"a{t}", "b{t}"}).Err(); err != nil {
		t.Fatalf("same-slot script: %v", err)
	}
	if err := cc.Eval(ctx, "return redis.call('SET', KEYS[1], '1') and redis.call('SET', KEYS[2], '2')", []string{"a{x}", "b{y}"}).Err(); err == nil {
		t.Fatal("a cross-slot script ran")
	}
	c.FlushAll(t)
	if n, err := cc.DBSize(ctx).Result(); err != nil || n != 0 {
		t.Fatalf("dbsize after FlushAll = %d, %v", n, err)
	}
}

// A restarted master comes back on its port with its slots; with
// appendonly on and appendfsync always, everything it acknowledged before
// the SIGKILL is there. (With the default appendfsync everysec Redis may
// acknowledge a write up to two seconds before it reaches the file while
// a background fsync runs, and a SIGKILL loses it: this test caught that.)
func TestClusterRestartMasterKeepsSlotsAndAppendOnlyData(t *testing.T) {
	c := StartCluster(t, WithClusterArgs("--appendonly", "yes", "--appendfsync", "always"))
	cc := c.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var onVictim []string
	for i := 0; len(onVictim) < 50; i++ {
		k := fmt.Sprintf("key-%d", i)
		if err := cc.Set(ctx, k, k, 0).Err(); err != nil {
			t.Fatal(err)
		}
		if n, _ := cc.MasterForKey(ctx, k); n.Options().Addr == c.Masters[1].Addr {
			onVictim = append(onVictim, k)
		}
	}
	port := c.Masters[1].Port
	if err := c.RestartMaster(ctx, 1); err != nil {
		t.Fatal(err)
	}
	if c.Masters[1].Port != port {
		t.Fatalf("restarted on port %d, want %d", c.Masters[1].Port, port)
	}
	for _, k := range onVictim {
		// The client may first hit a stale connection to the killed
		// process; go-redis retries on a fresh one.
		v, err := cc.Get(ctx, k).Result()
		if err != nil || v != k {
			t.Fatalf("after the restart %s = %q, %v", k, v, err)
		}
	}
	if err := c.RestartMaster(ctx, 7); err == nil {
		t.Fatal("restart of a master that does not exist succeeded")
	}
}
