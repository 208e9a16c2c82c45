// Package demo is protctl's embedded default: `protctl demo` runs the whole
// system in one process with no server. Three nodes of the runtime share
// the partitions of one category (each order key processed by exactly one
// node at a time, in order, under fenced leases); a publisher writes
// ordered events for a few hundred keys, with an occasional poison message
// that fails every attempt and ends up parked in the failure ledger.
//
// By default everything is in memory (pkg/broker/memorybroker and
// pkg/runtime/memstore). Given a Redis client, the same demo runs on it
// (redisbroker and redisstore), so that `protctl partitions ls demo::order`
// from another terminal shows it. Given Kafka brokers, every node also runs
// a topic subscription of the same events on a Kafka topic.
//
// The demo's handler checks what the runtime promises: each key's events
// arrive in sequence order (replays after a handover go back, never skip
// ahead); Stats counts any violation.
package demo

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/protctl/protctl/pkg/broker"
	"github.com/protctl/protctl/pkg/broker/memorybroker"
	"github.com/protctl/protctl/pkg/broker/redisbroker"
	"github.com/protctl/protctl/pkg/runtime"
	"github.com/protctl/protctl/pkg/runtime/ledger"
	"github.com/protctl/protctl/pkg/runtime/memstore"
	"github.com/protctl/protctl/pkg/runtime/partitioned"
	"github.com/protctl/protctl/pkg/runtime/redisstore"
)

// Names the demo uses.
const (
	Service           = "demo"
	Category          = "demo::order"
	Subscription      = "demo.OrderProjector"
	Topic             = "demo.orders"
	TopicSubscription = "demo.LedgerSync"
)

// Config configures New. The zero value is the in-memory demo with its
// defaults.
type Config struct {
	// Redis runs the demo on this server; nil runs it in memory. The demo
	// does not close it.
	Redis redis.UniversalClient
	// Layout is the Redis key layout (Redis only). Default: Protean's.
	Layout broker.Layout
	// Kafka, when set, also runs a topic subscription of the events on
	// these brokers (see StartKafka for an embedded one).
	Kafka []string
	// Nodes is the number of nodes. Default: 3.
	Nodes int
	// Keys is the number of order keys. Default: 300.
	Keys int
	// Rate is events published per second. Default: 300.
	Rate int
	// PoisonEvery makes one event in PoisonEvery a poison message (it
	// fails every attempt and parks its partition). Default: 500;
	// negative for none.
	PoisonEvery int
	// Work is the simulated work per event (the handler sleeps up to
	// twice as long). Default: 2ms.
	Work time.Duration
	// LeaseTTL and RenewEvery are the leases' timing. Defaults: 6s, 1s.
	LeaseTTL, RenewEvery time.Duration
	// Logger receives the runtime's logs. Default: discard.
	Logger *slog.Logger
}

func (c *Config) defaults() error {
	if c.Nodes == 0 {
		c.Nodes = 3
	}
	if c.Keys == 0 {
		c.Keys = 300
	}
	if c.Rate == 0 {
		c.Rate = 300
	}
	if c.PoisonEvery == 0 {
		c.PoisonEvery = 500
	}
	if c.Work == 0 {
		c.Work = 2 * time.Millisecond
	}
	if c.LeaseTTL == 0 {
		c.LeaseTTL = 6 * time.Second
	}
	if c.RenewEvery == 0 {
		c.RenewEvery = time.Second
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Nodes < 1 || c.Keys < 1 || c.Rate < 1 || c.Work < 0 {
		return errors.New("demo: nodes, keys and rate must be positive")
	}
	return nil
}

// Demo is a running demo. New does no I/O; Start starts the nodes and the
// publisher; Stop stops them (the nodes gracefully).
type Demo struct {
	cfg   Config
	runID string

	mem        *memorybroker.Broker // nil on Redis
	brk        broker.PartitionedBroker
	ledger     ledger.Ledger
	members    runtime.Membership
	reader     ledger.Reader
	leases     leaseReader
	leaseTTL   ttlReader
	checkpoint runtime.Checkpoints
	pub        *partitioned.Publisher
	kafka      *kafkaSide // nil without Kafka

	nodes []*runtime.Node
	redis *tracker
	topic *tracker

	startedAt time.Time
	published atomic.Int64
	poison    atomic.Int64
	seqs      []int // next seq per key (publisher goroutine only)

	cancel  context.CancelFunc
	pubDone chan struct{}
	stopped sync.Once
	stopErr error
}

// leaseReader reads a lease's value: memorybroker's Faults or Redis.
type leaseReader func(ctx context.Context, key string) (string, bool, error)

// ttlReader reads a lease's time left: false when missing or no expiry.
type ttlReader func(ctx context.Context, key string) (time.Duration, bool, error)

// New builds a demo. It does no I/O.
func New(cfg Config) (*Demo, error) {
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	d := &Demo{
		cfg:   cfg,
		runID: strconv.FormatInt(time.Now().UnixNano(), 36),
		seqs:  make([]int, cfg.Keys),
		redis: newTracker(),
		topic: newTracker(),
	}
	if cfg.Redis == nil {
		d.mem = memorybroker.New()
		store := memstore.New(d.mem.Faults())
		d.brk, d.ledger, d.members, d.reader, d.checkpoint = d.mem, store, store, store, store
		faults := d.mem.Faults()
		d.leases = faults.GetString
		d.leaseTTL = faults.TTL
	} else {
		store := redisstore.New(cfg.Redis)
		d.brk = redisbroker.New(cfg.Redis, redisbroker.WithLayout(cfg.Layout))
		d.ledger, d.members, d.reader, d.checkpoint = store, store, store, store
		c := cfg.Redis
		d.leases = func(ctx context.Context, key string) (string, bool, error) {
			v, err := c.Get(ctx, key).Result()
			if errors.Is(err, redis.Nil) {
				return "", false, nil
			}
			return v, err == nil, err
		}
		d.leaseTTL = func(ctx context.Context, key string) (time.Duration, bool, error) {
			ttl, err := c.PTTL(ctx, key).Result()
			return ttl, err == nil && ttl >= 0, err
		}
	}
	pub, err := partitioned.NewPublisher(d.brk)
	if err != nil {
		return nil, err
	}
	d.pub = pub
	if len(cfg.Kafka) > 0 {
		if d.kafka, err = newKafkaSide(cfg.Kafka, cfg.Logger); err != nil {
			return nil, err
		}
	}
	for i := range cfg.Nodes {
		id := fmt.Sprintf("node-%d", i+1)
		subs := []runtime.Subscription{}
		p, err := partitioned.New(partitioned.Config{
			Name:       Subscription,
			Categories: []string{Category},
			Handler:    d.handler(d.redis, id),
			Broker:     d.brk,
			Ledger:     d.ledger,
			LeaseTTL:   cfg.LeaseTTL,
			RenewEvery: cfg.RenewEvery,
			Retry:      runtime.RetryPolicy{Attempts: 3, Backoff: 50 * time.Millisecond},
		})
		if err != nil {
			return nil, err
		}
		subs = append(subs, p)
		if d.kafka != nil {
			ts, err := d.kafka.subscriptions(d, id)
			if err != nil {
				return nil, err
			}
			subs = append(subs, ts)
		}
		n, err := runtime.NewNode(runtime.NodeConfig{
			Service:        Service,
			NodeID:         id,
			Membership:     d.members,
			HeartbeatEvery: cfg.RenewEvery,
			MemberTTL:      cfg.LeaseTTL,
			Logger:         cfg.Logger.With("node", id),
		}, subs...)
		if err != nil {
			return nil, err
		}
		d.nodes = append(d.nodes, n)
	}
	return d, nil
}

// InMemory reports whether the demo runs on the in-memory broker.
func (d *Demo) InMemory() bool { return d.mem != nil }

// Start starts the nodes and the publisher and returns at once.
func (d *Demo) Start(ctx context.Context) error {
	d.startedAt = time.Now()
	for _, n := range d.nodes {
		if err := n.Start(ctx); err != nil {
			return err
		}
	}
	pctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	d.cancel = cancel
	d.pubDone = make(chan struct{})
	go d.publish(pctx)
	return nil
}

// Stop stops the publisher, then the nodes (gracefully, in parallel),
// bounded by ctx. It is idempotent.
func (d *Demo) Stop(ctx context.Context) error {
	d.stopped.Do(func() {
		if d.cancel != nil {
			d.cancel()
			<-d.pubDone
		}
		errs := make([]error, len(d.nodes))
		var wg sync.WaitGroup
		for i, n := range d.nodes {
			wg.Add(1)
			go func() {
				defer wg.Done()
				errs[i] = n.Stop(ctx)
			}()
		}
		wg.Wait()
		if d.kafka != nil {
			d.kafka.close()
		}
		d.stopErr = errors.Join(errs...)
	})
	return d.stopErr
}

// event is the data of the demo's envelopes.
type event struct {
	Run    string `json:"run"`
	Order  string `json:"order"`
	Seq    int    `json:"seq"`
	Amount int    `json:"amount"`
	Poison bool   `json:"poison,omitempty"`
}

func keyName(i int) string { return fmt.Sprintf("o-%04d", i+1) }

// publish writes Rate events per second, each to a random key with that
// key's next sequence number, until ctx ends.
func (d *Demo) publish(ctx context.Context) {
	defer close(d.pubDone)
	const tick = 20 * time.Millisecond
	perTick := float64(d.cfg.Rate) * tick.Seconds()
	t := time.NewTicker(tick)
	defer t.Stop()
	var owed float64
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		owed += perTick
		for ; owed >= 1; owed-- {
			k := rand.IntN(d.cfg.Keys)
			d.seqs[k]++
			ev := event{Run: d.runID, Order: keyName(k), Seq: d.seqs[k], Amount: 1 + rand.IntN(500)}
			if d.cfg.PoisonEvery > 0 && rand.IntN(d.cfg.PoisonEvery) == 0 {
				ev.Poison = true
			}
			typ := "OrderChanged"
			if ev.Seq == 1 {
				typ = "OrderPlaced"
			}
			env, _ := json.Marshal(map[string]any{
				"data": ev,
				"metadata": map[string]any{"headers": map[string]any{
					"id": d.runID + "-" + ev.Order + "-" + strconv.Itoa(ev.Seq), "type": "demo." + typ,
					"time": time.Now().UTC().Format(time.RFC3339Nano), "stream": Category + "-" + ev.Order,
				}},
			})
			if _, err := d.pub.Publish(ctx, Category, ev.Order, env); err != nil {
				if ctx.Err() != nil {
					return
				}
				d.cfg.Logger.Warn("demo: publish failed", "err", err)
				d.seqs[k]--
				continue
			}
			if d.kafka != nil {
				d.kafka.produce(ctx, ev.Order, env)
			}
			d.published.Add(1)
			if ev.Poison {
				d.poison.Add(1)
			}
		}
	}
}

// ErrPoison is the failure of a poison message.
var ErrPoison = errors.New("poison message: this order event cannot be projected")

// handler is the demo's handler on node id: it checks per-key order,
// simulates some work, and fails on poison messages (an aggregate failure:
// retried, then parked).
func (d *Demo) handler(t *tracker, node string) runtime.Handler {
	return runtime.HandlerFunc(func(ctx context.Context, m runtime.Message) error {
		var env struct {
			Data event `json:"data"`
		}
		if err := json.Unmarshal(m.Data, &env); err != nil {
			return fmt.Errorf("demo: bad envelope: %w", err)
		}
		ev := env.Data
		if ev.Run != d.runID {
			return nil // left over from an earlier run on the same Redis
		}
		if d.cfg.Work > 0 {
			select {
			case <-time.After(d.cfg.Work/2 + rand.N(d.cfg.Work*3/2)):
			case <-ctx.Done():
				return runtime.Systemic(ctx.Err())
			}
		}
		if ev.Poison {
			t.failed(ev.Order, ev.Seq)
			return fmt.Errorf("%w (order %s, seq %d)", ErrPoison, ev.Order, ev.Seq)
		}
		t.handled(node, ev.Order, ev.Seq)
		return nil
	})
}

// tracker follows each key's handling for the order check and the stats.
type tracker struct {
	mu         sync.Mutex
	last       map[string]int          // highest seq handled per key
	poisoned   map[string]map[int]bool // seqs that failed as poison
	byNode     map[string]int64
	processed  int64
	failures   int64
	replays    int64
	violations int64
	skipped    int64 // seqs passed over because an operator skipped a poison head
}

func newTracker() *tracker {
	return &tracker{last: map[string]int{}, poisoned: map[string]map[int]bool{}, byNode: map[string]int64{}}
}

func (t *tracker) failed(key string, seq int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.failures++
	if t.poisoned[key] == nil {
		t.poisoned[key] = map[int]bool{}
	}
	t.poisoned[key][seq] = true
}

func (t *tracker) handled(node, key string, seq int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.processed++
	t.byNode[node]++
	last := t.last[key]
	switch {
	case seq <= last:
		t.replays++ // at least once: handled again after a handover
		return
	case seq > last+1:
		// Only poison events (skipped by an operator) may be passed over.
		for s := last + 1; s < seq; s++ {
			if !t.poisoned[key][s] {
				t.violations++
				break
			}
			t.skipped++
		}
	}
	t.last[key] = seq
}

// handledOnce is the number of events handled at least once.
func (t *tracker) handledOnce() int64 {
	var n int64
	for _, s := range t.last {
		n += int64(s)
	}
	return n - t.skipped
}
