package main

import (
	goruntime "runtime"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/protctl/protctl/internal/nodeconfig"
	"github.com/protctl/protctl/pkg/broker"
)

// The node's Redis pool holds what its subscriptions need besides the
// half that may be pinned (per Redis subscription, two blocking waits per
// shard of the main lanes and two over the backfill lanes, the live
// path's two round trips and a spare: 13 with 4 shards), and its pinned
// half holds a backlog reader and a hot partition's blocking read per
// worker (16 by default), unless redis.url sets pool_size, which wins.
func TestRunNodePoolSize(t *testing.T) {
	cfg := &nodeconfig.Config{Subscriptions: []nodeconfig.Subscription{
		{Redis: &nodeconfig.RedisSource{}}, {Redis: &nodeconfig.RedisSource{}}, {Kafka: &nodeconfig.KafkaSource{}},
	}}
	want := max(10*goruntime.GOMAXPROCS(0), 2*max(13*2+16, 2*16*2))
	if got := nodePoolSize(cfg); got != want {
		t.Fatalf("pool for two Redis subscriptions = %d, want %d", got, want)
	}
	few := &nodeconfig.Config{Subscriptions: []nodeconfig.Subscription{{Redis: &nodeconfig.RedisSource{}, Workers: 2}}}
	if got, want := nodePoolSize(few), max(10*goruntime.GOMAXPROCS(0), 2*(13+16)); got != want {
		t.Fatalf("pool for one Redis subscription of 2 workers = %d, want %d", got, want)
	}
	// The waits are sharded when the pool holds them, not when redis.url
	// sets a smaller pool_size.
	for _, tc := range []struct{ pool, want int }{{want, 4}, {20, 1}} {
		c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", PoolSize: tc.pool})
		if got := nodeWaitShards(c, 2); got != tc.want {
			t.Errorf("wait shards with a pool of %d = %d, want %d", tc.pool, got, tc.want)
		}
		_ = c.Close()
	}
	for _, tc := range []struct {
		url  string
		want int
	}{{"redis://127.0.0.1:1/0", 60}, {"redis://127.0.0.1:1/0?pool_size=7", 7}} {
		c, err := nodeRedisClient(nodeconfig.Redis{URL: tc.url}, broker.ProteanLayout, 60)
		if err != nil {
			t.Fatal(err)
		}
		if got := c.(*redis.Client).Options().PoolSize; got != tc.want {
			t.Errorf("%s: pool %d, want %d", tc.url, got, tc.want)
		}
		_ = c.Close()
	}
}
