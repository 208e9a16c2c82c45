package redisbroker_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/protctl/protctl/pkg/broker"
	"github.com/protctl/protctl/pkg/broker/redisbroker"
)

// scriptKeys records the KEYS of every script call a client sends.
type scriptKeys struct {
	mu   sync.Mutex
	keys [][]string
}

func (h *scriptKeys) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *scriptKeys) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		args := cmd.Args()
		if name := cmd.Name(); (name == "evalsha" || name == "eval") && len(args) >= 3 {
			n, _ := strconv.Atoi(fmt.Sprint(args[2]))
			keys := make([]string, 0, n)
			for _, k := range args[3 : 3+n] {
				keys = append(keys, fmt.Sprint(k))
			}
			h.mu.Lock()
			h.keys = append(h.keys, keys)
			h.mu.Unlock()
		}
		return next(ctx, cmd)
	}
}

func (h *scriptKeys) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func (h *scriptKeys) take() [][]string {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := h.keys
	h.keys = nil
	return out
}

// slot is Redis Cluster's key slot: CRC16 (XMODEM) of the key, or of its
// hash tag, modulo 16384.
func slot(key string) uint16 {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			key = key[i+1 : i+1+j]
		}
	}
	var crc uint16
	for i := 0; i < len(key); i++ {
		crc ^= uint16(key[i]) << 8
		for b := 0; b < 8; b++ {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc % 16384
}

func TestSlotFunction(t *testing.T) {
	// Values from the Redis Cluster specification and CLUSTER KEYSLOT.
	for key, want := range map[string]uint16{"123456789": 12739 % 16384, "foo": 12182, "{user1000}.following": slot("user1000")} {
		if got := slot(key); got != want {
			t.Fatalf("slot(%q) = %d, want %d", key, got, want)
		}
	}
}

// TestPerPartitionScriptsUseOneSlot proves that, in the cluster layout,
// every script that works on one partition (leases, fenced read, ack,
// reclaim, dead-letter) only touches keys of one Cluster slot. Publish,
// reap and trim also touch category-wide keys (index, group registry);
// their cluster form is not implemented yet.
func TestPerPartitionScriptsUseOneSlot(t *testing.T) {
	server.FlushAll(t)
	c := server.Client(t)
	rec := &scriptKeys{}
	c.AddHook(rec)
	l := broker.ClusterLayout
	b := redisbroker.New(c, redisbroker.WithLayout(l))
	ctx := t.Context()
	st := l.Stream(cat, key)
	if _, err := b.Append(ctx, st, []byte("x")); err != nil {
		t.Fatal(err)
	}
	lease, ok, err := b.AcquirePartitionLease(ctx, l.LeaseKey(group, key), l.GenerationKey(group, key), owner, time.Minute)
	if err != nil || !ok {
		t.Fatal(ok, err)
	}
	msgs, err := b.ReadPartitionFenced(ctx, lease.Fence, st, group, 10, broker.ReadPendingThenNew)
	if err != nil || len(msgs) != 1 {
		t.Fatal(len(msgs), err)
	}
	calls := []func() error{
		func() error { _, err := b.RenewPartitionLease(ctx, lease.Fence, time.Minute); return err },
		func() error { _, err := b.AckPartitionFenced(ctx, lease.Fence, st, group, msgs[0].ID); return err },
		func() error { _, err := b.ReclaimPartitionPending(ctx, lease.Fence, st, group, 0, 10); return err },
		func() error {
			_, err := b.DeadLetterPartitionFenced(ctx, lease.Fence, st, group, msgs[0].ID, l.DLQStream(cat, key), "x")
			return err
		},
		func() error { _, err := b.ReleasePartitionLease(ctx, lease.Fence); return err },
	}
	for _, call := range calls {
		if err := call(); err != nil {
			t.Fatal(err)
		}
	}
	all := rec.take()
	if len(all) < 7 {
		t.Fatalf("recorded %d script calls, want at least 7", len(all))
	}
	for _, keys := range all {
		for _, k := range keys[1:] {
			if slot(k) != slot(keys[0]) {
				t.Fatalf("script keys %v span slots %d and %d", keys, slot(keys[0]), slot(k))
			}
		}
	}
}
