package redisbroker

import (
	"context"
	"errors"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/protctl/protctl/pkg/broker"
)

// Broker is the Redis Streams adapter of broker.PartitionedBroker and
// broker.PartitionWatcher. It is safe for concurrent use; it holds no
// state of its own beyond its configuration (and the PinLimit its pinned
// readers count against), so several Brokers (in one process or many) can
// share a server.
type Broker struct {
	client redis.UniversalClient
	cfg    config
	// multi says per client whether its server allows MULTI, on which
	// the fenced transactions rest (multi.go).
	multi multiStates
	// betweenTx, when a test sets it, runs between the two round trips
	// of a fenced transaction (fencedtx.go): after the lease was checked,
	// before EXEC.
	betweenTx func()
	// beforeWait, when a test sets it, runs in each of WaitForEntries'
	// XREAD goroutines before the XREAD is sent.
	beforeWait func()
	// beforeWaitRead, when a test sets it, runs in each
	// WaitAndReadPartitionsFenced call right before its pipeline is sent.
	beforeWaitRead func()
	// waitScripts says the scripts WaitAndReadPartitionsFenced runs
	// behind its wait are known loaded (waitread.go).
	waitScripts atomic.Bool
}

// The contract and every optional capability the adapter implements
// (pkg/broker: broker.go, batch.go, optional.go), checked at compile
// time so that a change of signature cannot silently turn one off.
var (
	_ broker.PartitionedBroker = (*Broker)(nil)
	_ broker.PartitionWatcher  = (*Broker)(nil)
	_ broker.EntryWaiter       = (*Broker)(nil)
	_ broker.EntryChecker      = (*Broker)(nil)
	_ broker.ConsumerReleaser  = (*Broker)(nil)
	_ broker.AckReader         = (*Broker)(nil)
	_ broker.BatchReader       = (*Broker)(nil)
	_ broker.BatchAcquirer     = (*Broker)(nil)
	_ broker.BatchReleaser     = (*Broker)(nil)
	_ broker.StreamTailer      = (*Broker)(nil)
	_ broker.BatchRenewer      = (*Broker)(nil)
	_ broker.PartitionCounter  = (*Broker)(nil)
	_ broker.AppendWatcher     = (*Broker)(nil)
	_ broker.ReaderPinner      = (*Broker)(nil)
	_ broker.PartitionSeeker   = (*Broker)(nil)
)

type config struct {
	layout         broker.Layout
	backfillSuffix string
	watchBuffer    int
	// scriptReads makes every fenced read run its script, never the
	// transaction (fencedtx.go); tests set it to cover the script path.
	scriptReads bool
	pins        *PinLimit
	// txBatchMin is the smallest batch of fenced reads that runs as one
	// transaction (WithTxBatchMin).
	txBatchMin int
	// leaseReplicas and publishReplicas are the replica acknowledgements
	// lease and publish writes wait for (replicas.go); replicaHook sees
	// every WAIT.
	leaseReplicas, publishReplicas Replicas
	replicaHook                    func(ReplicaWait)
}

// Option configures New.
type Option func(*config)

// WithLayout selects the key layout. Default: broker.ProteanLayout, the
// layout a Protean deployment writes, whose publish and reap scripts
// touch the index and the lanes together and so need a single node (or
// Sentinel). broker.ClusterLayout runs on Redis Cluster (and on a single
// node too): every script touches one slot, and publish, reap and trim
// order their steps across slots instead (see PublishPartitioned and
// ReapPartition).
func WithLayout(l broker.Layout) Option { return func(c *config) { c.layout = l } }

// WithBackfillSuffix names the backfill lane that partition keys are
// checked against on publish and record (a key must not equal it).
// Default: broker.DefaultBackfillSuffix; an empty suffix means the default.
func WithBackfillSuffix(suffix string) Option {
	return func(c *config) { c.backfillSuffix = suffix }
}

// WithWatchBuffer sets how many wake-up signals WatchPartitions (and
// names WatchAppends) buffer per watcher; one more ends the watch, which
// the caller re-establishes and follows with a re-read. Default: 1024; a
// non-positive n means the default.
func WithWatchBuffer(n int) Option { return func(c *config) { c.watchBuffer = n } }

// WithPinLimit makes the Broker's pinned readers (PinnedReader) count
// their connections against l, which other Brokers on the same client may
// share. Default: a PinLimit of the Broker's own, NewPinLimit(client).
// Several Brokers on one client must share one, or each would pin up to
// half of the pool and together all of it.
func WithPinLimit(l *PinLimit) Option { return func(c *config) { c.pins = l } }

// WithTxBatchMin sets the smallest batch of fenced reads
// (AckAndReadPartitionsFenced) that runs as one optimistic transaction on
// a single server instead of a pipeline of scripts: a third of the
// server's time per read, for a second round trip. Default: 16, where a
// light flow's small batches keep their one round trip; 1 makes every
// batch a transaction. A non-positive n means the default.
// docs/decisions/0023-fenced-read-transactions.md, "Batches".
func WithTxBatchMin(n int) Option { return func(c *config) { c.txBatchMin = n } }

func (c *config) validate(client redis.UniversalClient) {
	if c.pins == nil {
		c.pins = NewPinLimit(client)
	}
	if c.backfillSuffix == "" {
		c.backfillSuffix = broker.DefaultBackfillSuffix
	}
	if c.watchBuffer <= 0 {
		c.watchBuffer = 1024
	}
	if c.txBatchMin <= 0 {
		c.txBatchMin = txBatchMin
	}
}

// New returns a Broker over client. It does no I/O: the first call that
// needs the server dials it, and the scripts are loaded on first use.
//
// Every call is bounded by its context only when the client was built
// with ContextTimeoutEnabled; otherwise go-redis bounds each command by
// the client's ReadTimeout and WriteTimeout instead. A transport failure
// or timeout returns an error for which errors.Is(err,
// broker.ErrUnavailable) holds, with the cause still wrapped.
func New(client redis.UniversalClient, opts ...Option) *Broker {
	var cfg config
	for _, o := range opts {
		o(&cfg)
	}
	cfg.validate(client)
	return &Broker{client: client, cfg: cfg}
}

// Capabilities returns broker.StreamPartitioning: the whole partitioning
// contract.
func (b *Broker) Capabilities() broker.Capabilities { return broker.StreamPartitioning }

// Layout returns the key layout the broker uses.
func (b *Broker) Layout() broker.Layout { return b.cfg.layout }

// Append adds data as the data field of a new entry of stream (XADD *),
// and with WithPublishReplicas waits for the replicas.
func (b *Broker) Append(ctx context.Context, stream string, data []byte) (string, error) {
	const op = "append"
	if err := nonEmpty(op, "stream", stream); err != nil {
		return "", err
	}
	if w := waitSpec(op, b.cfg.publishReplicas); w != nil {
		return b.appendReplicated(ctx, stream, data, w)
	}
	id, err := b.client.XAdd(ctx, &redis.XAddArgs{Stream: stream, ID: "*", Values: []any{broker.DataField, data}}).Result()
	if err != nil {
		return "", mapErr(call{Op: op, Key: stream, Want: "stream"}, err)
	}
	return id, nil
}

// RecordPartition adds key to category's index (SADD). A single SADD is
// atomic and refuses a non-set key without changing it, so no script is
// needed.
//
// It is also the repair for the cluster layout's crash windows: a
// publisher that died between its append and its record, or a reaper
// that died between removing an index entry and putting it back, leaves a
// non-empty stream outside the index until the key's next publish;
// RecordPartition(category, key) puts it back at once, and recording a
// key whose streams are empty or missing is harmless (the next reap
// removes it).
func (b *Broker) RecordPartition(ctx context.Context, category, key string) error {
	const op = "record partition"
	if err := b.validCategory(op, category); err != nil {
		return err
	}
	if err := b.validKey(op, key, b.cfg.backfillSuffix); err != nil {
		return err
	}
	index := b.cfg.layout.IndexKey(category)
	if err := b.client.SAdd(ctx, index, key).Err(); err != nil {
		return mapErr(call{Op: op, Key: index, Want: "set"}, err)
	}
	return nil
}

// PartitionKeys returns the members of category's index in one SMEMBERS,
// whatever the index's size. Use ScanPartitionKeys for very large indexes.
func (b *Broker) PartitionKeys(ctx context.Context, category string) ([]string, error) {
	const op = "partition keys"
	if err := b.validCategory(op, category); err != nil {
		return nil, err
	}
	return b.members(ctx, op, b.cfg.layout.IndexKey(category))
}

// ScanPartitionKeys pages through category's index with SSCAN.
func (b *Broker) ScanPartitionKeys(ctx context.Context, category string, cursor uint64, count int64) ([]string, uint64, error) {
	const op = "scan partition keys"
	if err := b.validCategory(op, category); err != nil {
		return nil, 0, err
	}
	if err := positive(op, "count", count); err != nil {
		return nil, 0, err
	}
	index := b.cfg.layout.IndexKey(category)
	keys, next, err := b.client.SScan(ctx, index, cursor, "", count).Result()
	if err != nil {
		return nil, 0, mapErr(call{Op: op, Key: index, Want: "set"}, err)
	}
	if len(keys) == 0 {
		keys = nil
	}
	return keys, next, nil
}

// RegisterGroup adds group to category's group registry (SADD), which
// ReapPartition consults.
func (b *Broker) RegisterGroup(ctx context.Context, category, group string) error {
	const op = "register group"
	if err := b.validCategory(op, category); err != nil {
		return err
	}
	if err := b.cfg.layout.ValidateName(op, "group", group); err != nil {
		return err
	}
	key := b.cfg.layout.GroupsKey(category)
	if err := b.client.SAdd(ctx, key, group).Err(); err != nil {
		return mapErr(call{Op: op, Key: key, Want: "set"}, err)
	}
	return nil
}

// RegisteredGroups returns category's group registry (SMEMBERS).
func (b *Broker) RegisteredGroups(ctx context.Context, category string) ([]string, error) {
	const op = "registered groups"
	if err := b.validCategory(op, category); err != nil {
		return nil, err
	}
	return b.members(ctx, op, b.cfg.layout.GroupsKey(category))
}

func (b *Broker) members(ctx context.Context, op, key string) ([]string, error) {
	m, err := b.client.SMembers(ctx, key).Result()
	if err != nil {
		return nil, mapErr(call{Op: op, Key: key, Want: "set"}, err)
	}
	if len(m) == 0 {
		return nil, nil
	}
	return m, nil
}

// Argument checks. They run before any I/O, so bad input never reaches
// the server.

func (b *Broker) validCategory(op, category string) error {
	return b.cfg.layout.ValidateName(op, "category", category)
}

// validKey checks a partition key as Protean does on publish, naming op
// (the layout names its own operation otherwise).
func (b *Broker) validKey(op, key, backfillSuffix string) error {
	err := b.cfg.layout.ValidateKey(key, backfillSuffix)
	var ia *broker.InvalidArgumentError
	if errors.As(err, &ia) {
		cp := *ia
		cp.Op = op
		return &cp
	}
	return err
}

func nonEmpty(op, arg, v string) error {
	if v == "" {
		return &broker.InvalidArgumentError{Op: op, Arg: arg, Value: `""`, Reason: "must not be empty"}
	}
	return nil
}

func positive(op, arg string, v int64) error {
	if v <= 0 {
		return &broker.InvalidArgumentError{Op: op, Arg: arg, Value: strconv.FormatInt(v, 10), Reason: "must be positive"}
	}
	return nil
}

func validFence(op string, f broker.Fence) error {
	if err := nonEmpty(op, "lease key", f.LeaseKey); err != nil {
		return err
	}
	return nonEmpty(op, "fence token", f.Token)
}

// ttlMillis converts a lease TTL to the whole milliseconds PX and PEXPIRE
// take, rounding up so that a positive TTL never becomes 0.
func ttlMillis(op string, ttl time.Duration) (int64, error) {
	if ttl <= 0 {
		return 0, &broker.InvalidArgumentError{Op: op, Arg: "ttl", Value: ttl.String(), Reason: "must be positive"}
	}
	return (int64(ttl) + int64(time.Millisecond) - 1) / int64(time.Millisecond), nil
}

// idleMillis converts a minimum idle time to milliseconds; zero is
// allowed. It rounds up: waiting a fraction of a millisecond longer is the
// conservative side for both reclaim and reap.
func idleMillis(op string, d time.Duration) (int64, error) {
	if d < 0 {
		return 0, &broker.InvalidArgumentError{Op: op, Arg: "minIdle", Value: d.String(), Reason: "must not be negative"}
	}
	return (int64(d) + int64(time.Millisecond) - 1) / int64(time.Millisecond), nil
}

func validID(op, id string) error {
	if _, err := broker.ParseStreamID(id); err != nil {
		return &broker.InvalidArgumentError{Op: op, Arg: "id", Value: strconv.Quote(id), Reason: `want "<ms>-<seq>"`}
	}
	return nil
}
