// Command testnode runs one node of the Redis partitioned runtime for the
// multi-process tests and benchmarks (kill a node with SIGKILL, measure
// failover). Its handler records every call in Redis, so that the test
// process can check order, loss and overlap across processes:
//
//	RPUSH testnode:log:<key> "<node>|<seq>|<generation>|<start ns>|<end ns>"
//
// It exits on SIGTERM or SIGINT after a graceful stop.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/protctl/protctl/pkg/broker/redisbroker"
	"github.com/protctl/protctl/pkg/runtime"
	"github.com/protctl/protctl/pkg/runtime/redisstore"
)

// LogKey is where the handler records calls for key.
func LogKey(key string) string { return "testnode:log:" + key }

func main() {
	var (
		addr       = flag.String("redis", "127.0.0.1:6379", "redis address")
		node       = flag.String("node", "", "node id")
		service    = flag.String("service", "shop", "service")
		group      = flag.String("group", "app.handlers.OrderProjector", "subscription (consumer group)")
		categories = flag.String("categories", "shop::order", "comma-separated categories")
		ttl        = flag.Duration("ttl", 2*time.Second, "lease TTL")
		renew      = flag.Duration("renew", 400*time.Millisecond, "renewal period (and heartbeat)")
		hold       = flag.Duration("hold", time.Millisecond, "time spent in the handler per message")
		batch      = flag.Int("batch", 20, "batch size")
		verbose    = flag.Bool("v", false, "log to stderr")
	)
	flag.Parse()
	if err := run(*addr, *node, *service, *group, strings.Split(*categories, ","), *ttl, *renew, *hold, *batch, *verbose); err != nil {
		fmt.Fprintln(os.Stderr, "testnode:", err)
		os.Exit(1)
	}
}

func run(addr, node, service, group string, categories []string, ttl, renew, hold time.Duration, batch int, verbose bool) error {
	client := redis.NewClient(&redis.Options{Addr: addr})
	defer client.Close()
	logger := slog.New(slog.DiscardHandler)
	if verbose {
		logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug})).With("node", node)
	}
	b := redisbroker.New(client)
	store := redisstore.New(client)
	handler := runtime.HandlerFunc(func(ctx context.Context, m runtime.Message) error {
		start := time.Now()
		var env struct {
			Data struct {
				Seq int `json:"seq"`
			} `json:"data"`
		}
		if err := json.Unmarshal(m.Data, &env); err != nil {
			return fmt.Errorf("bad envelope: %w", err)
		}
		if hold > 0 {
			time.Sleep(hold)
		}
		rec := fmt.Sprintf("%s|%d|%d|%d|%d", node, env.Data.Seq, m.Generation, start.UnixNano(), time.Now().UnixNano())
		if err := client.RPush(ctx, LogKey(m.Key), rec).Err(); err != nil {
			return runtime.Systemic(err)
		}
		return nil
	})
	sub, err := runtime.NewPartitioned(runtime.PartitionedConfig{
		Name:       group,
		Categories: categories,
		Handler:    handler,
		Broker:     b,
		Ledger:     store,
		LeaseTTL:   ttl,
		RenewEvery: renew,
		BatchSize:  batch,
	})
	if err != nil {
		return err
	}
	n, err := runtime.NewNode(runtime.NodeConfig{
		Service:        service,
		NodeID:         node,
		Membership:     store,
		HeartbeatEvery: renew,
		MemberTTL:      ttl - renew,
		Logger:         logger,
	}, sub)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if err := n.Start(ctx); err != nil {
		return err
	}
	fmt.Println("started", node)
	<-ctx.Done()
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return n.Stop(sctx)
}
