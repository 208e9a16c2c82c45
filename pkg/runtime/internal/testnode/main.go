// Command testnode runs one node of the Redis partitioned runtime for the
// multi-process tests and benchmarks (kill a node with SIGKILL, measure
// failover). Its handler records every call in Redis, so that the test
// process can check order, loss and overlap across processes:
//
//	RPUSH testnode:log:<key> "<node>|<seq>|<generation>|<start ns>|<end ns>"
//
// It connects to one redis-server (-redis addr, the default) or to a Redis
// Cluster (-cluster addr1,addr2,...), and uses the Protean key layout
// unless -layout cluster says otherwise; a cluster needs the cluster
// layout, whose scripts keep every key in one slot.
//
// It exits on SIGTERM or SIGINT after a graceful stop.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/protctl/protctl/pkg/broker"
	"github.com/protctl/protctl/pkg/broker/redisbroker"
	"github.com/protctl/protctl/pkg/runtime"
	"github.com/protctl/protctl/pkg/runtime/partitioned"
	"github.com/protctl/protctl/pkg/runtime/redisstore"
)

// LogKey is where the handler records calls for key.
func LogKey(key string) string { return "testnode:log:" + key }

// config is the command line.
type config struct {
	addr       string
	cluster    []string
	layout     broker.Layout
	node       string
	service    string
	group      string
	categories []string
	ttl, renew time.Duration
	hold       time.Duration
	batch      int
	verbose    bool
}

func main() {
	cfg, err := parseFlags(os.Args[1:])
	if err == nil {
		err = run(cfg)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "testnode:", err)
		os.Exit(1)
	}
}

func parseFlags(args []string) (config, error) {
	var cfg config
	fs := flag.NewFlagSet("testnode", flag.ContinueOnError)
	fs.StringVar(&cfg.addr, "redis", "127.0.0.1:6379", "redis address (ignored with -cluster)")
	cluster := fs.String("cluster", "", "comma-separated addresses of a Redis Cluster's nodes (needs -layout cluster)")
	layout := fs.String("layout", "protean", `key layout: "protean" or "cluster"`)
	fs.StringVar(&cfg.node, "node", "", "node id")
	fs.StringVar(&cfg.service, "service", "shop", "service")
	fs.StringVar(&cfg.group, "group", "app.handlers.OrderProjector", "subscription (consumer group)")
	categories := fs.String("categories", "shop::order", "comma-separated categories")
	fs.DurationVar(&cfg.ttl, "ttl", 2*time.Second, "lease TTL")
	fs.DurationVar(&cfg.renew, "renew", 400*time.Millisecond, "renewal period (and heartbeat)")
	fs.DurationVar(&cfg.hold, "hold", time.Millisecond, "time spent in the handler per message")
	fs.IntVar(&cfg.batch, "batch", 20, "batch size")
	fs.BoolVar(&cfg.verbose, "v", false, "log to stderr")
	if err := fs.Parse(args); err != nil {
		return config{}, err
	}
	l, err := broker.ParseLayout(*layout)
	if err != nil {
		return config{}, err
	}
	cfg.layout = l
	if *cluster != "" {
		cfg.cluster = strings.Split(*cluster, ",")
		if !l.IsCluster() {
			// The Protean layout's scripts touch keys in several slots:
			// the cluster would refuse them with CROSSSLOT.
			return config{}, errors.New("-cluster needs -layout cluster")
		}
	}
	cfg.categories = strings.Split(*categories, ",")
	return cfg, nil
}

// client connects to the cluster when one is given, else to one server.
func (cfg config) client() redis.UniversalClient {
	if len(cfg.cluster) > 0 {
		return redis.NewClusterClient(&redis.ClusterOptions{Addrs: cfg.cluster})
	}
	return redis.NewClient(&redis.Options{Addr: cfg.addr})
}

func run(cfg config) error {
	client := cfg.client()
	defer client.Close()
	logger := slog.New(slog.DiscardHandler)
	if cfg.verbose {
		logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug})).With("node", cfg.node)
	}
	b := redisbroker.New(client, redisbroker.WithLayout(cfg.layout))
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
		if cfg.hold > 0 {
			time.Sleep(cfg.hold)
		}
		rec := fmt.Sprintf("%s|%d|%d|%d|%d", cfg.node, env.Data.Seq, m.Generation, start.UnixNano(), time.Now().UnixNano())
		if err := client.RPush(ctx, LogKey(m.Key), rec).Err(); err != nil {
			return runtime.Systemic(err)
		}
		return nil
	})
	sub, err := partitioned.New(partitioned.Config{
		Name:       cfg.group,
		Categories: cfg.categories,
		Handler:    handler,
		Broker:     b,
		Ledger:     store,
		LeaseTTL:   cfg.ttl,
		RenewEvery: cfg.renew,
		BatchSize:  cfg.batch,
	})
	if err != nil {
		return err
	}
	n, err := runtime.NewNode(runtime.NodeConfig{
		Service:        cfg.service,
		NodeID:         cfg.node,
		Membership:     store,
		HeartbeatEvery: cfg.renew,
		MemberTTL:      cfg.ttl - cfg.renew,
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
	fmt.Println("started", cfg.node, "layout", cfg.layout)
	<-ctx.Done()
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return n.Stop(sctx)
}
