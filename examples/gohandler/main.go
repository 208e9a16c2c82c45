// Command gohandler is a Go service that embeds protctl's runtime with a
// handler written in Go: the same ordered, fenced consumer that
// `protctl run node` runs from a config file, registered in code.
//
// It consumes the partitions of shop::order as the consumer group
// app.handlers.OrderProjector, sharing them with every other process of
// the service "shop" (run it twice and the keys are split between the
// two; kill one and the other takes its keys over within the lease TTL).
// Each order's events arrive one at a time and in order.
//
//	go run ./examples/gohandler -redis redis://127.0.0.1:6379/0
//	protctl publish shop::order o-1 --yes --data '{"data":{"amount":5}}'
//
// SIGTERM or SIGINT stops it gracefully: in-flight messages finish and are
// acknowledged, leases are released and the node leaves the service.
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
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/protctl/protctl/pkg/broker/redisbroker"
	"github.com/protctl/protctl/pkg/runtime"
	"github.com/protctl/protctl/pkg/runtime/partitioned"
	"github.com/protctl/protctl/pkg/runtime/redisstore"
)

func main() {
	redisURL := flag.String("redis", "redis://127.0.0.1:6379/0", "Redis URL")
	node := flag.String("node", "", "node id (default: hostname-pid)")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if err := run(ctx, *redisURL, *node); err != nil {
		fmt.Fprintln(os.Stderr, "gohandler:", err)
		os.Exit(1)
	}
}

// orderEvent is the data of the envelopes this service handles.
type orderEvent struct {
	Amount int `json:"amount"`
}

// project is the Go handler. It is called with at most one message at a
// time per order (partition key), in order, and concurrently across
// orders. Returning an error retries the message and finally parks the
// order; runtime.Systemic(err) backs off instead (a dependency is down).
func project(ctx context.Context, m runtime.Message) error {
	var env struct {
		Data orderEvent `json:"data"`
	}
	if err := json.Unmarshal(m.Data, &env); err != nil {
		return fmt.Errorf("not an order envelope: %w", err) // parked after the retries
	}
	fmt.Printf("order %s: amount %d (entry %s, generation %d, attempt %d)\n",
		m.Key, env.Data.Amount, m.Position, m.Generation, m.Attempt)
	return nil
}

func run(ctx context.Context, redisURL, nodeID string) error {
	opts, err := redis.ParseURL(redisURL)
	if err != nil {
		return err
	}
	client := redis.NewClient(opts)
	defer client.Close()
	store := redisstore.New(client) // the failure ledger and the membership

	sub, err := partitioned.New(partitioned.Config{
		Name:       "app.handlers.OrderProjector",
		Categories: []string{"shop::order"},
		Handler:    runtime.HandlerFunc(project),
		Broker:     redisbroker.New(client),
		Ledger:     store,
		LeaseTTL:   15 * time.Second,
		Retry:      runtime.RetryPolicy{Attempts: 3, Backoff: 200 * time.Millisecond},
	})
	if err != nil {
		return err
	}
	node, err := runtime.NewNode(runtime.NodeConfig{
		Service:    "shop",
		NodeID:     nodeID,
		Membership: store,
		Logger:     slog.New(slog.NewTextHandler(os.Stderr, nil)),
	}, sub)
	if err != nil {
		return err
	}
	if err := node.Start(ctx); err != nil {
		return err
	}
	fmt.Fprintln(os.Stderr, "gohandler: running as", node.NodeID())
	<-ctx.Done()

	stopCtx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := node.Stop(stopCtx); err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	fmt.Fprintln(os.Stderr, "gohandler: stopped")
	return nil
}
