package redisbroker_test

import (
	"context"
	"errors"
	"net"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/protctl/protctl/internal/testenv"
	"github.com/protctl/protctl/pkg/broker"
	"github.com/protctl/protctl/pkg/broker/redisbroker"
)

// unreachableBroker returns a broker whose client dials a loopback port
// nothing listens on.
func unreachableBroker(t *testing.T) *redisbroker.Broker {
	t.Helper()
	port, err := testenv.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:" + strconv.Itoa(port), MaxRetries: -1, DialerRetries: 1, DialTimeout: time.Second})
	t.Cleanup(func() { _ = c.Close() })
	return redisbroker.New(c)
}

// partitionedCalls calls every I/O method of the contract with valid
// arguments.
func partitionedCalls(b *redisbroker.Broker) map[string]func(ctx context.Context) error {
	f := broker.Fence{LeaseKey: layout.LeaseKey(group, key), Token: "node-a:1"}
	st := layout.Stream(cat, key)
	return map[string]func(ctx context.Context) error{
		"Append":           func(ctx context.Context) error { _, err := b.Append(ctx, cat, []byte("x")); return err },
		"RecordPartition":  func(ctx context.Context) error { return b.RecordPartition(ctx, cat, key) },
		"PartitionKeys":    func(ctx context.Context) error { _, err := b.PartitionKeys(ctx, cat); return err },
		"RegisterGroup":    func(ctx context.Context) error { return b.RegisterGroup(ctx, cat, group) },
		"RegisteredGroups": func(ctx context.Context) error { _, err := b.RegisteredGroups(ctx, cat); return err },
		"ScanPartitionKeys": func(ctx context.Context) error {
			_, _, err := b.ScanPartitionKeys(ctx, cat, 0, 10)
			return err
		},
		"AcquirePartitionLease": func(ctx context.Context) error {
			_, _, err := b.AcquirePartitionLease(ctx, f.LeaseKey, layout.GenerationKey(group, key), owner, time.Second)
			return err
		},
		"RenewPartitionLease":   func(ctx context.Context) error { _, err := b.RenewPartitionLease(ctx, f, time.Second); return err },
		"ReleasePartitionLease": func(ctx context.Context) error { _, err := b.ReleasePartitionLease(ctx, f); return err },
		"ReadPartitionFenced": func(ctx context.Context) error {
			_, err := b.ReadPartitionFenced(ctx, f, st, group, 10, broker.ReadPendingThenNew)
			return err
		},
		"AckPartitionFenced": func(ctx context.Context) error {
			_, err := b.AckPartitionFenced(ctx, f, st, group, "1-1")
			return err
		},
		"ReclaimPartitionPending": func(ctx context.Context) error {
			_, err := b.ReclaimPartitionPending(ctx, f, st, group, 0, 10)
			return err
		},
		"DeadLetterPartitionFenced": func(ctx context.Context) error {
			_, err := b.DeadLetterPartitionFenced(ctx, f, st, group, "1-1", layout.DLQStream(cat, key), "r")
			return err
		},
		"ReapPartition": func(ctx context.Context) error { _, err := b.ReapPartition(ctx, cat, key, 0, ""); return err },
		"Trim":          func(ctx context.Context) error { _, err := b.Trim(ctx, st, 10); return err },
		"PublishPartitioned": func(ctx context.Context) error {
			_, err := b.PublishPartitioned(ctx, cat, key, "", []byte("x"))
			return err
		},
		"WatchPartitions": func(ctx context.Context) error { _, err := b.WatchPartitions(ctx, cat); return err },
	}
}

func TestUnreachableServerIsUnavailable(t *testing.T) {
	b := unreachableBroker(t)
	for name, call := range partitionedCalls(b) {
		t.Run(name, func(t *testing.T) {
			err := call(t.Context())
			if !errors.Is(err, broker.ErrUnavailable) {
				t.Fatalf("err = %v, want ErrUnavailable", err)
			}
			// The cause stays reachable: a refused dial.
			var ne net.Error
			if !errors.Is(err, syscall.ECONNREFUSED) && !errors.As(err, &ne) {
				t.Fatalf("err = %v does not carry the transport cause", err)
			}
		})
	}
}

func TestPausedServerTimesOutAsUnavailable(t *testing.T) {
	// A server of its own: pausing the shared one would stall other tests.
	r := testenv.StartRedis(t)
	// ContextTimeoutEnabled: without it go-redis bounds a call by its
	// ReadTimeout, not by the context's deadline.
	c := redis.NewClient(&redis.Options{Addr: r.Addr, MaxRetries: -1, ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = c.Close() })
	b := redisbroker.New(c)
	if err := b.RecordPartition(t.Context(), cat, key); err != nil {
		t.Fatal(err)
	}
	if err := r.Pause(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = r.Resume() }()
	ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
	defer cancel()
	_, err := b.PublishPartitioned(ctx, cat, key, "", []byte("x"))
	if !errors.Is(err, broker.ErrUnavailable) {
		t.Fatalf("publish to a paused server = %v, want ErrUnavailable", err)
	}
	var ne net.Error
	if !errors.Is(err, context.DeadlineExceeded) && !(errors.As(err, &ne) && ne.Timeout()) {
		t.Fatalf("publish to a paused server = %v, want the timeout as cause", err)
	}
}
