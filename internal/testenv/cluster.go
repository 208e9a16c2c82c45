package testenv

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Cluster is a real Redis Cluster of masters (no replicas) started for
// tests: one redis-server per master in cluster mode, each on its own free
// loopback port, with its own cluster bus port and its own directory
// (which holds its nodes.conf, so a restarted master keeps its identity
// and its slots).
type Cluster struct {
	// Masters are the cluster's nodes; master i owns the i-th equal share
	// of the 16384 slots.
	Masters []*Redis
}

// ClusterOption configures StartCluster and NewCluster.
type ClusterOption func(*clusterConfig)

type clusterConfig struct {
	masters int
	args    []string
}

// WithMasters sets the number of masters. Default: 3.
func WithMasters(n int) ClusterOption { return func(c *clusterConfig) { c.masters = n } }

// WithClusterArgs passes extra redis-server arguments to every master,
// e.g. "--appendonly", "yes", "--appendfsync", "always" for a test that
// restarts a master and needs everything it acknowledged to survive.
func WithClusterArgs(args ...string) ClusterOption {
	return func(c *clusterConfig) { c.args = append(c.args, args...) }
}

// clusterNodeTimeout is cluster-node-timeout: short, so that a test that
// kills a master sees the cluster notice it quickly.
const clusterNodeTimeout = 1000 * time.Millisecond

// clusterReadyTimeout bounds how long forming the cluster, or its
// recovery after a restart, may take.
const clusterReadyTimeout = 30 * time.Second

// StartCluster starts a cluster for t (3 masters unless WithMasters says
// otherwise) and stops it at cleanup. It fails the test with the install
// command when redis-server is missing.
func StartCluster(t testing.TB, opts ...ClusterOption) *Cluster {
	t.Helper()
	c, err := NewCluster(t.TempDir(), opts...)
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	t.Cleanup(c.Stop)
	return c
}

// NewCluster starts a cluster with its files under dir (one sub-directory
// per master) and returns once every master reports cluster_state:ok. Use
// it from TestMain to share one cluster per package; call Stop when done.
func NewCluster(dir string, opts ...ClusterOption) (*Cluster, error) {
	if _, err := exec.LookPath("redis-server"); err != nil {
		return nil, errors.New(InstallHint)
	}
	cfg := clusterConfig{masters: 3}
	for _, o := range opts {
		o(&cfg)
	}
	if cfg.masters < 1 {
		return nil, fmt.Errorf("testenv: a cluster needs at least one master, not %d", cfg.masters)
	}
	c := &Cluster{}
	for i := 0; i < cfg.masters; i++ {
		nodeDir := filepath.Join(dir, "node"+strconv.Itoa(i))
		if err := os.MkdirAll(nodeDir, 0o755); err != nil {
			c.Stop()
			return nil, err
		}
		r, err := startClusterNode(nodeDir, cfg.args)
		if err != nil {
			c.Stop()
			return nil, err
		}
		c.Masters = append(c.Masters, r)
	}
	ctx, cancel := context.WithTimeout(context.Background(), clusterReadyTimeout)
	defer cancel()
	if err := c.form(ctx); err != nil {
		c.Stop()
		return nil, err
	}
	if err := c.WaitReady(ctx); err != nil {
		c.Stop()
		return nil, err
	}
	return c, nil
}

// startClusterNode starts one master on a free port with a free cluster bus
// port (cluster-port, so that port+10000 need not be free or even exist),
// retrying with other ports when one was taken in the meantime.
func startClusterNode(dir string, extra []string) (*Redis, error) {
	var lastErr error
	for attempt := 0; attempt < 5; attempt++ {
		port, err := FreePort()
		if err != nil {
			return nil, err
		}
		bus, err := FreePort()
		if err != nil {
			return nil, err
		}
		if bus == port {
			continue
		}
		args := []string{
			"--cluster-enabled", "yes",
			"--cluster-config-file", filepath.Join(dir, "nodes.conf"),
			"--cluster-port", strconv.Itoa(bus),
			"--cluster-node-timeout", strconv.FormatInt(clusterNodeTimeout.Milliseconds(), 10),
		}
		args = append(args, extra...)
		r := &Redis{Addr: "127.0.0.1:" + strconv.Itoa(port), Port: port, dir: dir, args: args}
		if lastErr = r.start(); lastErr == nil {
			return r, nil
		}
	}
	return nil, fmt.Errorf("start a cluster node: %w", lastErr)
}

// form assigns master i the i-th share of the slots and introduces every
// master to the first (CLUSTER MEET with the bus port); gossip does the
// rest.
func (c *Cluster) form(ctx context.Context) error {
	n := len(c.Masters)
	for i, m := range c.Masters {
		lo, hi := i*16384/n, (i+1)*16384/n-1
		err := withNode(m, func(nc *redis.Client) error {
			// Distinct config epochs spare the cluster the collision
			// handling that would otherwise settle them.
			if err := nc.Do(ctx, "CLUSTER", "SET-CONFIG-EPOCH", i+1).Err(); err != nil {
				return err
			}
			return nc.Do(ctx, "CLUSTER", "ADDSLOTSRANGE", lo, hi).Err()
		})
		if err != nil {
			return fmt.Errorf("testenv: assign slots %d-%d to %s: %w", lo, hi, m.Addr, err)
		}
	}
	first := c.Masters[0]
	for _, m := range c.Masters[1:] {
		bus, err := busPort(m)
		if err != nil {
			return err
		}
		err = withNode(first, func(nc *redis.Client) error {
			return nc.Do(ctx, "CLUSTER", "MEET", "127.0.0.1", m.Port, bus).Err()
		})
		if err != nil {
			return fmt.Errorf("testenv: cluster meet %s: %w", m.Addr, err)
		}
	}
	return nil
}

func busPort(r *Redis) (int, error) {
	for i := 0; i+1 < len(r.args); i++ {
		if r.args[i] == "--cluster-port" {
			return strconv.Atoi(r.args[i+1])
		}
	}
	return 0, fmt.Errorf("testenv: %s has no cluster port", r.Addr)
}

func withNode(r *Redis, f func(*redis.Client) error) error {
	nc := redis.NewClient(&redis.Options{Addr: r.Addr, MaxRetries: -1})
	defer nc.Close()
	return f(nc)
}

// WaitReady waits until every master reports cluster_state:ok, knows every
// other master, and sees all 16384 slots served, or ctx ends.
func (c *Cluster) WaitReady(ctx context.Context) error {
	var last string
	for {
		ok := true
		for _, m := range c.Masters {
			state, err := clusterInfo(ctx, m)
			if err != nil {
				ok, last = false, err.Error()
				break
			}
			if state["cluster_state"] != "ok" || state["cluster_known_nodes"] != strconv.Itoa(len(c.Masters)) || state["cluster_slots_ok"] != "16384" {
				ok, last = false, fmt.Sprintf("%s: state %s, %s nodes known, %s slots ok", m.Addr, state["cluster_state"], state["cluster_known_nodes"], state["cluster_slots_ok"])
				break
			}
		}
		if ok {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("testenv: cluster not ready: %s: %w", last, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func clusterInfo(ctx context.Context, r *Redis) (map[string]string, error) {
	var info string
	err := withNode(r, func(nc *redis.Client) error {
		short, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		var err error
		info, err = nc.ClusterInfo(short).Result()
		return err
	})
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, line := range strings.Split(info, "\n") {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), ":"); ok {
			out[k] = v
		}
	}
	return out, nil
}

// Addrs are the masters' addresses.
func (c *Cluster) Addrs() []string {
	out := make([]string, len(c.Masters))
	for i, m := range c.Masters {
		out[i] = m.Addr
	}
	return out
}

// NewClient returns a cluster client for the cluster; opts may be nil.
// Addrs is always set to the masters. The caller closes it.
func (c *Cluster) NewClient(opts *redis.ClusterOptions) *redis.ClusterClient {
	var o redis.ClusterOptions
	if opts != nil {
		o = *opts
	}
	o.Addrs = c.Addrs()
	return redis.NewClusterClient(&o)
}

// Client returns a new cluster client, closed at t's cleanup.
func (c *Cluster) Client(t testing.TB) *redis.ClusterClient {
	t.Helper()
	cc := c.NewClient(nil)
	t.Cleanup(func() { _ = cc.Close() })
	return cc
}

// FlushAll empties every master, failing t on error.
func (c *Cluster) FlushAll(t testing.TB) {
	t.Helper()
	for _, m := range c.Masters {
		if err := withNode(m, func(nc *redis.Client) error { return nc.FlushAll(context.Background()).Err() }); err != nil {
			t.Fatalf("testenv: flushall on %s: %v", m.Addr, err)
		}
	}
}

// RestartMaster kills master i (SIGKILL) and starts it again on the same
// port and directory, so it comes back with its nodes.conf (identity and
// slots) and whatever its persistence settings kept: nothing by default.
// With WithClusterArgs("--appendonly", "yes", "--appendfsync", "always")
// it keeps every write it acknowledged; with appendonly and the default
// appendfsync everysec, Redis may acknowledge a write up to two seconds
// before writing it to the file (while a background fsync runs), so a
// SIGKILL can lose the last writes. It returns once the cluster is ready
// again.
func (c *Cluster) RestartMaster(ctx context.Context, i int) error {
	if i < 0 || i >= len(c.Masters) {
		return fmt.Errorf("testenv: no master %d in a cluster of %d", i, len(c.Masters))
	}
	if err := c.Masters[i].Restart(); err != nil {
		return err
	}
	return c.WaitReady(ctx)
}

// Stop kills every master; safe to call twice.
func (c *Cluster) Stop() {
	for _, m := range c.Masters {
		m.Stop()
	}
}
