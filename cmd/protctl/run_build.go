package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	goruntime "runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/protctl/protctl/internal/admin"
	"github.com/protctl/protctl/internal/clierr"
	"github.com/protctl/protctl/internal/handlers"
	"github.com/protctl/protctl/internal/nodeconfig"
	"github.com/protctl/protctl/internal/redisconn"
	"github.com/protctl/protctl/pkg/broker"
	"github.com/protctl/protctl/pkg/broker/redisbroker"
	"github.com/protctl/protctl/pkg/runtime"
	"github.com/protctl/protctl/pkg/runtime/kafkasource"
	"github.com/protctl/protctl/pkg/runtime/partitioned"
	"github.com/protctl/protctl/pkg/runtime/redisstore"
	"github.com/protctl/protctl/pkg/runtime/topic"
)

// runningNode is a node assembled from its config: the runtime node, its
// clients and its admin endpoint.
type runningNode struct {
	cfg     *nodeconfig.Config
	log     *slog.Logger
	redis   redis.UniversalClient
	kafka   *kafkasource.Source
	node    *runtime.Node
	metrics *admin.Metrics
	ln      net.Listener
	admin   *admin.Server
	// closers stop the handlers that hold a process (process handlers),
	// after the node has stopped calling them.
	closers []func(context.Context) error
}

// buildNode assembles the node of cfg. It dials nothing; it binds the
// admin endpoint's address (so that the node's status record carries the
// bound port).
func buildNode(cfg *nodeconfig.Config, log *slog.Logger, out io.Writer) (_ *runningNode, err error) {
	n := &runningNode{cfg: cfg, log: log, metrics: admin.NewMetrics()}
	defer func() {
		if err != nil {
			n.close()
		}
	}()
	layout, err := broker.ParseLayout(cfg.Redis.Layout)
	if err != nil {
		return nil, clierr.Usage.Wrap(err)
	}
	if n.redis, err = nodeRedisClient(cfg.Redis, layout, nodePoolSize(cfg)); err != nil {
		return nil, clierr.Usage.Wrap(err)
	}
	goRedisLog.Store(log)
	store := redisstore.New(n.redis)
	ttl, renew := cfg.Lease.TTL.D(), cfg.Lease.RenewEvery.D()
	// One Broker per subscription, all on one client: their pinned
	// readers count against one limit, half of the client's pool, so that
	// the subscriptions together leave the other half to renewals,
	// heartbeats and the ledger (docs/decisions/0023-fenced-read-transactions.md).
	pins := redisbroker.NewPinLimit(n.redis)
	// Every Broker of the node, on one client: the layout, the pin limit
	// and the replica acknowledgements of lease writes (lease.waitReplicas),
	// counted in protctl_replica_waits_total.
	brokerOpts := []redisbroker.Option{redisbroker.WithLayout(layout), redisbroker.WithPinLimit(pins)}
	if w := cfg.Lease.WaitReplicas; w > 0 {
		brokerOpts = append(brokerOpts,
			redisbroker.WithLeaseReplicas(redisbroker.Replicas{N: w, Timeout: cfg.Lease.WaitTimeout.D()}),
			redisbroker.WithReplicaHook(func(rw redisbroker.ReplicaWait) {
				n.metrics.ObserveReplicaWait(replicaOp(rw.Op), rw.Want, rw.Acked, rw.Elapsed, rw.Err)
			}))
	}

	if cfg.Kafka != nil {
		kopts := []kafkasource.Option{kafkasource.WithClientID(cfg.Kafka.ClientID), kafkasource.WithLogger(log.With("component", "kafka"))}
		if cfg.Kafka.TLS.On() {
			tc, err := cfg.Kafka.TLS.Config("")
			if err != nil {
				return nil, clierr.Usage.Errorf("kafka.tls: %w", err)
			}
			kopts = append(kopts, kafkasource.WithTLS(tc))
		}
		if s := cfg.Kafka.SASL; s != nil {
			kopts = append(kopts, kafkasource.WithSASL(s.Mechanism, s.Username, s.Password))
		}
		if n := cfg.Kafka.FetchMaxPartitionBytes; n > 0 {
			kopts = append(kopts, kafkasource.WithFetchMaxPartitionBytes(int32(n)))
		}
		if n.kafka, err = kafkasource.New(cfg.Kafka.Brokers, kopts...); err != nil {
			return nil, clierr.Usage.Errorf("kafka: %w", err)
		}
	}

	// One bound for every exec handler of the node: the commands share its
	// CPUs, whichever subscription runs them.
	slots := handlers.NewSlots(cfg.Handlers.ExecConcurrency, n.metrics.ObserveExecWait)
	n.metrics.SetExecQueue(func() admin.ExecQueue {
		st := slots.Stats()
		return admin.ExecQueue{Slots: st.Size, Running: st.Running, Waiting: st.Waiting}
	})

	var subs []runtime.Subscription
	topics := map[string]*topic.Config{}
	var topicOrder []string
	redisSubs := 0
	for _, sc := range cfg.Subscriptions {
		if sc.Redis != nil {
			redisSubs++
		}
	}
	for i, sc := range cfg.Subscriptions {
		// The handlers name the subscription in each line themselves
		// (from the message): a logger With it would repeat it.
		h, err := buildHandler(sc.Handler, slots, log, out)
		if err != nil {
			return nil, clierr.Usage.Errorf("subscriptions[%d].handler: %w", i, err)
		}
		if c, ok := h.(interface{ Close(context.Context) error }); ok {
			n.closers = append(n.closers, c.Close)
		}
		retry := runtime.RetryPolicy{Attempts: sc.Retry.Attempts, Backoff: sc.Retry.Backoff.D(), MaxBackoff: sc.Retry.MaxBackoff.D()}
		if sc.Redis != nil {
			b := timedRedisBroker{redisbroker.New(n.redis, append(brokerOpts, redisbroker.WithBackfillSuffix(sc.Redis.BackfillSuffix))...), n.metrics}
			p, err := partitioned.New(partitioned.Config{
				Name:           sc.Name,
				Categories:     sc.Redis.Categories,
				Handler:        h,
				Broker:         b,
				Ledger:         store,
				Pauses:         store,
				BackfillSuffix: sc.Redis.BackfillSuffix,
				LeaseTTL:       ttl,
				RenewEvery:     renew,
				BatchSize:      sc.MaxInFlight,
				Workers:        sc.Workers,
				MaxPartitions:  sc.MaxPartitions,
				Retry:          retry,
				ReapAfter:      sc.Redis.ReapAfter.D(),
				WaitShards:     nodeWaitShards(n.redis, redisSubs),
			})
			if err != nil {
				return nil, clierr.Usage.Errorf("subscriptions[%d]: %w", i, err)
			}
			subs = append(subs, p)
			continue
		}
		tc := topics[sc.Kafka.Topic]
		if tc == nil {
			agg, err := kafkasource.ParseAggregateFrom(sc.Kafka.Aggregate)
			if err != nil {
				return nil, clierr.Usage.Errorf("subscriptions[%d].kafka.aggregate: %w", i, err)
			}
			start := kafkasource.FromEarliest
			if sc.Kafka.StartFrom == "head" {
				start = kafkasource.FromHead
			}
			tc = &topic.Config{
				Topic:         sc.Kafka.Topic,
				Source:        topic.Kafka(n.kafka),
				Leases:        timedRedisBroker{redisbroker.New(n.redis, brokerOpts...), n.metrics},
				Checkpoints:   store,
				Ledger:        store,
				Pauses:        store,
				Aggregate:     agg,
				StartFrom:     start,
				LeaseTTL:      ttl,
				RenewEvery:    renew,
				MaxPartitions: sc.MaxPartitions,
				Lanes:         sc.Workers,
				MaxInFlight:   sc.MaxInFlight,
			}
			topics[sc.Kafka.Topic] = tc
			topicOrder = append(topicOrder, sc.Kafka.Topic)
		}
		tc.Subscriptions = append(tc.Subscriptions, topic.Subscription{Name: sc.Name, Handler: h, Retry: retry})
	}
	for _, name := range topicOrder {
		ts, err := topic.New(*topics[name])
		if err != nil {
			return nil, clierr.Usage.Errorf("kafka topic %s: %w", name, err)
		}
		subs = append(subs, ts)
	}

	adminAddr := ""
	if !cfg.Admin.Disabled {
		if n.ln, err = admin.Listen(cfg.Admin.Listen, cfg.Admin.Token); err != nil {
			return nil, adminListenError(cfg.Admin.Listen, err)
		}
		adminAddr = n.ln.Addr().String()
	}
	n.node, err = runtime.NewNode(runtime.NodeConfig{
		Service:        cfg.Service,
		NodeID:         cfg.Node,
		AdminAddr:      adminAddr,
		Membership:     store,
		HeartbeatEvery: renew,
		// A dead node leaves the membership after MemberTTL, and its
		// leases expire after ttl: keep the first no later than the
		// second so that its partitions move within ttl + renew.
		MemberTTL: ttl,
		Logger:    log,
		Observer:  n.metrics.Observer(nil),
	}, subs...)
	if err != nil {
		return nil, clierr.Usage.Wrap(err)
	}
	if n.ln != nil {
		n.admin, err = admin.New(admin.Config{
			Listener:     n.ln,
			Token:        cfg.Admin.Token,
			PublicProbes: cfg.Admin.PublicProbes,
			Node:         n.node,
			Metrics:      n.metrics,
			Lag:          n.lag,
			Logger:       log.With("component", "admin"),
		})
		if err != nil {
			return nil, clierr.Usage.Wrap(err)
		}
	}
	return n, nil
}

// adminListenError says what to change when the admin endpoint cannot
// listen: the setting (admin.listen, which may not be in the file at all
// when the default is taken by another node on the host) and the ways out.
// A taken port is a config error (exit 2): the fix is in the file.
func adminListenError(listen string, err error) error {
	if errors.Is(err, admin.ErrTokenRequired) {
		return clierr.Usage.Errorf("admin.tokenFile: a token is required when admin.listen (%s) is not a loopback address: set %s or admin.tokenFile", listen, nodeconfig.EnvAdminToken)
	}
	setting := "admin.listen " + listen
	if listen == nodeconfig.DefaultAdminListen {
		setting = "admin.listen (default " + listen + ")"
	}
	host, port, _ := net.SplitHostPort(listen)
	next := "7071"
	if p, perr := strconv.Atoi(port); perr == nil && p > 0 && p < 65535 {
		next = strconv.Itoa(p + 1)
	}
	var cause error = err
	var op *net.OpError
	if errors.As(err, &op) {
		cause = op.Err
		var se *os.SyscallError
		if errors.As(cause, &se) {
			cause = se.Err
		}
	}
	if errors.Is(err, syscall.EADDRINUSE) {
		return clierr.Usage.Errorf("%s: the address is already in use (another node on this host?): give each node its own admin.listen, e.g. %q, or %q for a free port (published in the node's status record), or set admin.disabled: true",
			setting, net.JoinHostPort(host, next), net.JoinHostPort(host, "0"))
	}
	return clierr.Usage.Errorf("%s: cannot listen: %v: set admin.listen to an address of this host, or admin.disabled: true", setting, cause)
}

func (n *runningNode) startAdmin() error {
	if n.admin == nil {
		return nil
	}
	return n.admin.Start()
}

func (n *runningNode) adminAddr() string {
	if n.ln == nil {
		return ""
	}
	return n.ln.Addr().String()
}

func (n *runningNode) stopAdmin(ctx context.Context) {
	if n.admin != nil {
		_ = n.admin.Shutdown(ctx)
	}
}

func (n *runningNode) close() {
	// After the node's drain: a process handler's child gets its stdin
	// closed and is waited for (up to its process.stopTimeout), then
	// killed.
	for _, c := range n.closers {
		if err := c(context.Background()); err != nil {
			n.log.Warn("stopping a handler", "err", err)
		}
	}
	if n.ln != nil && n.admin == nil {
		_ = n.ln.Close()
	}
	if n.kafka != nil {
		n.kafka.Close()
	}
	if n.redis != nil {
		_ = n.redis.Close()
	}
}

func buildHandler(h nodeconfig.Handler, slots *handlers.Slots, log *slog.Logger, out io.Writer) (runtime.Handler, error) {
	switch {
	case h.Exec != nil:
		return handlers.NewExec(handlers.ExecConfig{
			Command: h.Exec.Command, Dir: h.Exec.Dir, Env: h.Exec.Env, Timeout: h.Exec.Timeout.D(), Slots: slots, Logger: log,
		})
	case h.HTTP != nil:
		return handlers.NewHTTP(handlers.HTTPConfig{URL: h.HTTP.URL, Timeout: h.HTTP.Timeout.D(), Headers: h.HTTP.Headers})
	case h.Log != nil:
		return handlers.NewLog(out, h.Log.Payload), nil
	case h.Process != nil:
		return handlers.NewProcess(handlers.ProcessConfig{
			Command: h.Process.Command, Dir: h.Process.Dir, Env: h.Process.Env, Timeout: h.Process.Timeout.D(),
			MaxInFlight: h.Process.MaxInFlight, StopTimeout: h.Process.StopTimeout.D(), Logger: log,
		})
	}
	return nil, errors.New("exactly one of exec, http, log, process is required")
}

// nodePoolSize is the connection pool of the node's Redis client when
// redis.url sets none (pool_size): go-redis's default (10 per CPU), or
// more when the subscriptions need it. Half of the pool may be pinned
// (redisbroker.NewPinLimit), and the subscriptions' workers use that half:
// a connection per worker slot reading a backlog, and one per hot
// partition waiting with a blocking read (up to workers of each,
// docs/decisions/0054-blocking-reads.md). The other half must hold, for
// each Redis subscription, its blocking waits on idle partitions (two
// tiers over each shard of the main lanes, runWaitShards of them, and two
// over the backfill lanes), its live path's round trips (two) and a spare,
// and for the node its renewals, heartbeats, ledger reads, discovery and
// lag reads. A pool too small for them makes calls wait for a connection
// (PoolTimeout), renewals included.
func nodePoolSize(cfg *nodeconfig.Config) int {
	subs, pins := 0, 0
	for _, sc := range cfg.Subscriptions {
		if sc.Redis != nil {
			subs++
			w := sc.Workers
			if w == 0 {
				w = partitioned.DefaultWorkers
			}
			pins += 2 * w
		}
	}
	return max(10*goruntime.GOMAXPROCS(0), 2*max(waitConns(runWaitShards)*subs+16, pins))
}

// runWaitShards is the WaitShards of run node's Redis subscriptions when
// its pool holds them (nodeWaitShards): an entry re-issues a quarter of
// the main lanes' wait (docs/decisions/0031-new-key-discovery.md).
const runWaitShards = 4

// waitConns is what one Redis subscription holds of the pool besides its
// workers' pins: two tiers of waits per main-lane shard and over the
// backfill lanes, the live path's two round trips and a spare.
func waitConns(shards int) int { return 2*shards + 2 + 2 + 1 }

// nodeWaitShards is the WaitShards of the node's Redis subscriptions:
// runWaitShards when the client's pool holds their waits beside the half
// that workers may pin (the pool nodePoolSize sizes), else 1, so that a
// smaller pool_size set in redis.url does not starve renewals. On a
// Cluster the waits poll and hold no connection: the shards cost nothing.
func nodeWaitShards(c redis.UniversalClient, subs int) int {
	cl, ok := c.(*redis.Client)
	if !ok || subs == 0 {
		return runWaitShards
	}
	if cl.Options().PoolSize/2 >= waitConns(runWaitShards)*subs+16 {
		return runWaitShards
	}
	return 1
}

// nodeRedisClient builds the client of the node's Redis section
// (redisconn.New): a cluster client for the cluster layout (or addr=
// seeds), a failover client that follows the primary for a
// redis+sentinel:// URL, else a single server's. Timeouts are go-redis's
// defaults: the runtime bounds its own calls. The pool holds pool
// connections (per master on a cluster) unless the URL sets pool_size.
func nodeRedisClient(r nodeconfig.Redis, layout broker.Layout, pool int) (redis.UniversalClient, error) {
	c, err := redisconn.New(redisconn.Config{
		URL: r.URL, Cluster: layout.IsCluster(),
		Username: r.Username, Password: r.Password, TLS: r.TLS,
		SentinelUsername: r.Sentinel.Username, SentinelPassword: r.Sentinel.Password,
		ClientName: "protctl-node", PoolSize: pool,
	})
	switch {
	case errors.Is(err, redisconn.ErrInvalidURL), errors.Is(err, redisconn.ErrClusterSentinel):
		return nil, fmt.Errorf("redis.url: %w", err)
	case err != nil:
		return nil, fmt.Errorf("redis.tls: %w", err)
	}
	return c, nil
}

// replicaOp is the op label of protctl_replica_waits_total for a
// redisbroker.ReplicaWait's Op: its first word ("acquire lease" is
// "acquire").
func replicaOp(op string) string {
	if i := strings.IndexByte(op, ' '); i > 0 {
		return op[:i]
	}
	return op
}

// timedRedisBroker times lease renewals for the
// protctl_lease_renew_duration_seconds histogram. It embeds the broker,
// so every optional capability the runtime finds by type assertion stays
// visible.
type timedRedisBroker struct {
	*redisbroker.Broker
	m *admin.Metrics
}

// The wrapper keeps every optional capability of the Redis adapter (the
// runtime warns at start about any it lacks).
var (
	_ broker.EntryWaiter      = timedRedisBroker{}
	_ broker.EntryChecker     = timedRedisBroker{}
	_ broker.StreamTailer     = timedRedisBroker{}
	_ broker.PartitionWatcher = timedRedisBroker{}
	_ broker.AckReader        = timedRedisBroker{}
	_ broker.BatchReader      = timedRedisBroker{}
	_ broker.BatchAcquirer    = timedRedisBroker{}
	_ broker.BatchReleaser    = timedRedisBroker{}
	_ broker.BatchRenewer     = timedRedisBroker{}
	_ broker.PartitionCounter = timedRedisBroker{}
	_ broker.AppendWatcher    = timedRedisBroker{}
	_ broker.ReaderPinner     = timedRedisBroker{}
	_ broker.PartitionSeeker  = timedRedisBroker{}
)

func (b timedRedisBroker) RenewPartitionLease(ctx context.Context, f broker.Fence, ttl time.Duration) (bool, error) {
	start := time.Now()
	ok, err := b.Broker.RenewPartitionLease(ctx, f, ttl)
	b.m.ObserveRenew(time.Since(start), err)
	return ok, err
}

// RenewPartitionLeases is broker.BatchRenewer: every lease in one round
// trip.
func (b timedRedisBroker) RenewPartitionLeases(ctx context.Context, fences []broker.Fence, ttl time.Duration) ([]bool, error) {
	start := time.Now()
	ok, err := b.Broker.RenewPartitionLeases(ctx, fences, ttl)
	b.m.ObserveRenew(time.Since(start), err)
	return ok, err
}

var (
	_ broker.BatchRenewer = timedRedisBroker{}
	// The live path (pkg/runtime, docs/decisions/0035-live-reads.md) needs
	// both; the embedded Broker's methods give them.
	_ broker.BatchReader   = timedRedisBroker{}
	_ broker.BatchAcquirer = timedRedisBroker{}
)

// lag reads, for /metrics, how far each subscription is behind on the
// partitions this node is given: Redis, the entries of each assigned
// partition's lanes not yet delivered to the group (XINFO GROUPS lag,
// Redis 7+), in one pipeline; Kafka, head minus checkpoint of each held
// partition. A subscription whose lag cannot be read is left out, never
// reported as 0 (docs/node-config.md): one whose Redis reads fail, a
// topic's subscriptions when not running (before they joined, nothing held
// says nothing about the topic; unavailable, their brokers do not answer)
// or when the watermarks or checkpoints cannot be read, and every one
// while the node's heartbeats fail (Redis unreachable).
func (n *runningNode) lag(ctx context.Context) (map[string]int64, error) {
	out := map[string]int64{}
	if err := n.node.StoreErr(); err != nil {
		return out, err
	}
	layout, _ := broker.ParseLayout(n.cfg.Redis.Layout)
	type probe struct {
		sub string
		cmd *redis.XInfoGroupsCmd
	}
	var probes []probe
	pipe := n.redis.Pipeline()
	store := redisstore.New(n.redis)
	var firstErr error
	keep := func(err error) {
		if firstErr == nil {
			firstErr = err
		}
	}
	for _, s := range n.node.Subscriptions() {
		switch sub := s.(type) {
		case *partitioned.Subscription:
			c := sub.Config()
			out[sub.Name()] = 0
			for _, key := range sub.Assigned() {
				for _, cat := range c.Categories {
					for _, stream := range []string{layout.Stream(cat, key), layout.LaneStream(cat, key, c.BackfillSuffix)} {
						probes = append(probes, probe{sub.Name(), pipe.XInfoGroups(ctx, stream)})
					}
				}
			}
		case *topic.Consumer:
			// Only a running topic (joined, its brokers answering) has a
			// lag: holding nothing before the join says nothing about the
			// topic, and in an outage the watermarks read are stale.
			if st := sub.Status().State; st != runtime.StateRunning {
				keep(fmt.Errorf("topic %s: %s", sub.Topic(), st))
				continue
			}
			held := sub.Held()
			parts := make([]int32, 0, len(held))
			for p := range held {
				parts = append(parts, p)
			}
			c := sub.Config()
			var marks map[int32]kafkasource.Watermarks
			if len(parts) > 0 {
				var err error
				if marks, err = n.kafka.Watermarks(ctx, sub.Topic(), parts...); err != nil {
					keep(err)
					continue
				}
			}
			for _, ts := range c.Subscriptions {
				next, err := store.LoadAll(ctx, redisstore.TopicLeaseGroup(n.cfg.Service, sub.Topic()).String(), ts.Name)
				if err != nil {
					keep(err)
					continue
				}
				out[ts.Name] = 0
				for _, p := range parts {
					from, ok := next[p]
					if !ok {
						from = marks[p].Earliest
					}
					if d := marks[p].Head - from; d > 0 {
						out[ts.Name] += d
					}
				}
			}
		}
	}
	if len(probes) > 0 {
		cmds, err := pipe.Exec(ctx) // each command carries its own error, but for a refused login
		if err := redisconn.ExecErr(cmds, err); err != nil {
			keep(err)
			for _, p := range probes {
				delete(out, p.sub)
			}
			probes = nil
		}
		for _, p := range probes {
			groups, err := p.cmd.Result()
			if err != nil {
				// A lane that does not exist yet (no backfill) is empty;
				// anything else leaves the subscription's lag unknown.
				if !strings.HasPrefix(err.Error(), "ERR no such key") {
					keep(err)
					delete(out, p.sub)
				}
				continue
			}
			if _, known := out[p.sub]; !known {
				continue
			}
			for _, g := range groups {
				if g.Name == p.sub && g.Lag > 0 {
					out[p.sub] += g.Lag
				}
			}
		}
	}
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	return out, firstErr
}
