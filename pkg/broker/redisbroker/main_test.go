package redisbroker_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/protctl/protctl/internal/testenv"
	"github.com/protctl/protctl/pkg/broker"
	"github.com/protctl/protctl/pkg/broker/redisbroker"
)

// server is the package's redis-server; tests run one at a time and
// start from an empty database (see newBroker).
var server *testenv.Redis

// clusterDir holds the package's Redis Cluster, started on first use by
// sharedCluster (one per package test run) and stopped by TestMain.
var (
	clusterDir  string
	clusterOnce sync.Once
	clusterEnv  *testenv.Cluster
	clusterErr  error
)

// sharedCluster returns the package's 3-master cluster, starting it on
// first use.
func sharedCluster(t *testing.T) *testenv.Cluster {
	t.Helper()
	clusterOnce.Do(func() {
		clusterEnv, clusterErr = testenv.NewCluster(clusterDir)
	})
	if clusterErr != nil {
		t.Fatalf("start the cluster: %v", clusterErr)
	}
	return clusterEnv
}

func TestMain(m *testing.M) {
	os.Exit(testenv.WithRedis("redisbroker-test-", func(r *testenv.Redis, dir string) int {
		server, clusterDir = r, dir+"/cluster"
		defer func() {
			if clusterEnv != nil {
				clusterEnv.Stop()
			}
		}()
		return m.Run()
	}))
}

// newBroker empties the server and returns a broker and a raw client on it.
func newBroker(t *testing.T, opts ...redisbroker.Option) (*redisbroker.Broker, *redis.Client) {
	t.Helper()
	server.FlushAll(t)
	c := server.Client(t)
	return redisbroker.New(c, opts...), c
}

const (
	cat   = "shop::order"
	key   = "o-1"
	group = "app.handlers.Projector"
	owner = "node-a"
)

var layout = broker.ProteanLayout

// snapshot returns every key of the database with its type and DUMP
// serialization (which covers a stream's groups and pending lists), so
// that a test can prove a refused call changed nothing.
func snapshot(t *testing.T, c *redis.Client) map[string]string {
	t.Helper()
	keys, err := c.Keys(t.Context(), "*").Result()
	if err != nil {
		t.Fatal(err)
	}
	snap := make(map[string]string, len(keys))
	for _, k := range keys {
		typ, err := c.Type(t.Context(), k).Result()
		if err != nil {
			t.Fatal(err)
		}
		dump, err := c.Dump(t.Context(), k).Result()
		if err != nil {
			t.Fatal(err)
		}
		snap[k] = typ + ":" + dump
	}
	return snap
}

func wantUnchanged(t *testing.T, c *redis.Client, before map[string]string) {
	t.Helper()
	after := snapshot(t, c)
	if !maps.Equal(before, after) {
		t.Fatalf("the database changed:\nbefore %d keys %v\nafter  %d keys %v", len(before), slices.Sorted(maps.Keys(before)), len(after), slices.Sorted(maps.Keys(after)))
	}
}

func wantWrongType(t *testing.T, what string, err error, key, want string) {
	t.Helper()
	var wte *broker.WrongTypeError
	if !errors.As(err, &wte) || !errors.Is(err, broker.ErrWrongType) {
		t.Fatalf("%s: err = %v, want a *broker.WrongTypeError", what, err)
	}
	if wte.Key != key || wte.Want != want {
		t.Fatalf("%s: wrong-type error names key %q want %q; expected key %q want %q", what, wte.Key, wte.Want, key, want)
	}
}

func wantInvalid(t *testing.T, what string, err error, arg string) {
	t.Helper()
	var ia *broker.InvalidArgumentError
	if !errors.As(err, &ia) || !errors.Is(err, broker.ErrInvalidArgument) {
		t.Fatalf("%s: err = %v, want a *broker.InvalidArgumentError", what, err)
	}
	if ia.Arg != arg {
		t.Fatalf("%s: invalid argument %q, want %q (%v)", what, ia.Arg, arg, err)
	}
}

func acquire(t *testing.T, b *redisbroker.Broker, k, o string, ttl time.Duration) broker.Lease {
	t.Helper()
	l, ok, err := b.AcquirePartitionLease(t.Context(), layout.LeaseKey(group, k), layout.GenerationKey(group, k), o, ttl)
	if err != nil || !ok {
		t.Fatalf("acquire %s by %s = %v, %v", k, o, ok, err)
	}
	return l
}

func publish(t *testing.T, b *redisbroker.Broker, k, lane string, n int) []string {
	t.Helper()
	ids := make([]string, n)
	for i := range ids {
		id, err := b.PublishPartitioned(t.Context(), cat, k, lane, fmt.Appendf(nil, `{"n":%d}`, i))
		if err != nil {
			t.Fatalf("publish: %v", err)
		}
		ids[i] = id
	}
	return ids
}

func msgIDs(msgs []broker.Message) []string {
	out := make([]string, len(msgs))
	for i, m := range msgs {
		out[i] = m.ID
	}
	return out
}

// commandCounter counts the commands a client sends, to prove how many
// round trips a call costs.
type commandCounter struct {
	mu   sync.Mutex
	cmds []string
}

func (h *commandCounter) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *commandCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		// A new connection's handshake (HELLO, CLIENT SETINFO) passes
		// through the hook too; it is not part of the call.
		if name := cmd.Name(); name != "hello" && name != "client" {
			h.mu.Lock()
			h.cmds = append(h.cmds, name)
			h.mu.Unlock()
		}
		return next(ctx, cmd)
	}
}

func (h *commandCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.mu.Lock()
		for _, c := range cmds {
			if name := c.Name(); name != "hello" && name != "client" {
				h.cmds = append(h.cmds, name)
			}
		}
		h.mu.Unlock()
		return next(ctx, cmds)
	}
}

func (h *commandCounter) reset() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := h.cmds
	h.cmds = nil
	return out
}

func newRedisBroker(c redis.UniversalClient) *redisbroker.Broker { return redisbroker.New(c) }

func errorsAs(err error, target any) bool { return errors.As(err, target) }
