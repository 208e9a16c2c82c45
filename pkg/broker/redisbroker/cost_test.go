package redisbroker_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
)

// serverCalls sums the calls of every command in INFO commandstats except
// the bookkeeping ones the test itself sends. Commands run inside scripts
// are counted too, so a script cannot hide its work.
func serverCalls(t *testing.T, c *redis.Client) int64 {
	t.Helper()
	info, err := c.Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	var total int64
	for _, line := range strings.Split(info, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || !strings.HasPrefix(name, "cmdstat_") {
			continue
		}
		switch strings.TrimPrefix(name, "cmdstat_") {
		case "info", "config|resetstat", "hello", "client|setinfo", "ping":
			continue
		}
		for _, kv := range strings.Split(rest, ",") {
			if v, ok := strings.CutPrefix(kv, "calls="); ok {
				n, _ := strconv.ParseInt(v, 10, 64)
				total += n
			}
		}
	}
	return total
}

// PartitionKeys reads the index and nothing else, so its cost must not
// grow with what else lives in the database (a keyspace scan would).
func TestPartitionKeysCostIsIndependentOfTheKeyspace(t *testing.T) {
	b, c := newBroker(t)
	ctx := context.Background()
	publish(t, b, "a", "", 1)
	publish(t, b, "b", "", 1)

	measure := func() (int64, int) {
		t.Helper()
		if err := c.ConfigResetStat(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		keys, err := b.PartitionKeys(ctx, cat)
		if err != nil {
			t.Fatal(err)
		}
		return serverCalls(t, c), len(keys)
	}
	small, n := measure()
	if n != 2 {
		t.Fatalf("keys = %d, want 2", n)
	}

	// 100,000 unrelated keys, some of them look like other categories.
	pipe := c.Pipeline()
	for i := 0; i < 100_000; i++ {
		pipe.Set(ctx, fmt.Sprintf("other::thing:%d", i), "x", 0)
		if i%5000 == 4999 {
			if _, err := pipe.Exec(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	if _, err := pipe.Exec(ctx); err != nil {
		t.Fatal(err)
	}
	if size := c.DBSize(ctx).Val(); size < 100_000 {
		t.Fatalf("dbsize = %d", size)
	}
	large, n := measure()
	if n != 2 {
		t.Fatalf("keys = %d, want 2", n)
	}
	if small != large || small != 1 {
		t.Fatalf("PartitionKeys cost %d server commands on a small db and %d with 100k unrelated keys; want 1 and 1", small, large)
	}
}
