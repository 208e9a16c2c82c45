package redisbroker_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/protctl/protctl/pkg/broker"
	"github.com/protctl/protctl/pkg/broker/brokertest"
	"github.com/protctl/protctl/pkg/broker/redisbroker"
)

// TestConformance runs the suite on the Protean layout against one
// redis-server, with the replica cases (the server has no replica, so
// every WAIT of the Unreplicated broker times out).
func TestConformance(t *testing.T) {
	brokertest.Run(t, func(t *testing.T) brokertest.Target {
		b, c := newBroker(t)
		return brokertest.Target{Broker: b, Advance: time.Sleep, Faults: faults{c}, Unreplicated: unreplicated(c)}
	})
}

// unreplicated is a broker on c that waits for a replica c's server does
// not have.
func unreplicated(c redis.UniversalClient, opts ...redisbroker.Option) *redisbroker.Broker {
	r := redisbroker.Replicas{N: 1, Timeout: 20 * time.Millisecond}
	return redisbroker.New(c, append(opts, redisbroker.WithLeaseReplicas(r), redisbroker.WithPublishReplicas(r))...)
}

// TestConformanceScriptReads runs the suite on the Protean layout with
// every fenced read through its script (the path a Ring or an unusual
// outcome of the transaction takes), so that both ways of reading pass.
func TestConformanceScriptReads(t *testing.T) {
	brokertest.Run(t, func(t *testing.T) brokertest.Target {
		b, c := newBroker(t, redisbroker.WithScriptReads())
		return brokertest.Target{Broker: b, Advance: time.Sleep, Faults: faults{c}}
	})
}

// TestConformanceCluster runs the suite on the cluster layout against a
// real 3-master Redis Cluster (one per package test run, every master
// flushed before each case). Every script must keep to one slot here, or
// the cluster refuses it with CROSSSLOT; and the races of publish with
// reap and trim run across masters.
func TestConformanceCluster(t *testing.T) {
	cl := sharedCluster(t)
	brokertest.Run(t, func(t *testing.T) brokertest.Target {
		cl.FlushAll(t)
		c := cl.Client(t)
		b := redisbroker.New(c, redisbroker.WithLayout(broker.ClusterLayout))
		return brokertest.Target{Broker: b, Advance: time.Sleep, Faults: faults{c}, Unreplicated: unreplicated(c, redisbroker.WithLayout(broker.ClusterLayout))}
	})
}

// TestConformanceClusterLayoutOnOneNode runs the suite on the cluster
// layout against one redis-server: the layout is not tied to Cluster.
func TestConformanceClusterLayoutOnOneNode(t *testing.T) {
	brokertest.Run(t, func(t *testing.T) brokertest.Target {
		b, c := newBroker(t, redisbroker.WithLayout(broker.ClusterLayout))
		return brokertest.Target{Broker: b, Advance: time.Sleep, Faults: faults{c}, Unreplicated: unreplicated(c, redisbroker.WithLayout(broker.ClusterLayout))}
	})
}

// faults corrupts the server the way outside tools do, with plain
// commands.
type faults struct{ c redis.UniversalClient }

func (f faults) DeleteEntry(ctx context.Context, stream, id string) error {
	return f.c.XDel(ctx, stream, id).Err()
}

func (f faults) PutString(ctx context.Context, key, value string) error {
	ok, err := f.c.SetNX(ctx, key, value, 0).Result()
	if err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("faults: %s already exists", key)
	}
	return nil
}

func (f faults) Exists(ctx context.Context, key string) (bool, error) {
	n, err := f.c.Exists(ctx, key).Result()
	return n > 0, err
}

func (f faults) GetString(ctx context.Context, key string) (string, bool, error) {
	v, err := f.c.Get(ctx, key).Result()
	if errors.Is(err, redis.Nil) {
		return "", false, nil
	}
	return v, err == nil, err
}

func (f faults) CreateGroup(ctx context.Context, stream, group, id string) error {
	return f.c.XGroupCreateMkStream(ctx, stream, group, id).Err()
}

func (f faults) StreamLen(ctx context.Context, stream string) (int64, error) {
	return f.c.XLen(ctx, stream).Result()
}

func (f faults) StreamIDs(ctx context.Context, stream string) ([]string, error) {
	msgs, err := f.c.XRange(ctx, stream, "-", "+").Result()
	if err != nil {
		return nil, err
	}
	ids := make([]string, len(msgs))
	for i, m := range msgs {
		ids[i] = m.ID
	}
	return ids, nil
}

func (f faults) EntryFields(ctx context.Context, stream, id string) (map[string]string, bool, error) {
	msgs, err := f.c.XRange(ctx, stream, id, id).Result()
	if err != nil || len(msgs) == 0 {
		return nil, false, err
	}
	out := make(map[string]string, len(msgs[0].Values))
	for k, v := range msgs[0].Values {
		out[k] = fmt.Sprint(v)
	}
	return out, true, nil
}

func (f faults) Consumers(ctx context.Context, stream, group string) (map[string]int64, error) {
	out := map[string]int64{}
	cs, err := f.c.XInfoConsumers(ctx, stream, group).Result()
	if err != nil {
		if strings.HasPrefix(err.Error(), "NOGROUP") || strings.HasPrefix(err.Error(), "ERR no such key") {
			return out, nil
		}
		return nil, err
	}
	for _, c := range cs {
		out[c.Name] = c.Pending
	}
	return out, nil
}
