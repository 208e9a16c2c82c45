package inspect

import (
	"context"
	"errors"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/protctl/protctl/pkg/broker"
	"github.com/protctl/protctl/pkg/runtime"
	"github.com/protctl/protctl/pkg/runtime/ledger"
)

// ErrNotFound is returned by Partition when the key is neither in the
// category's index nor has a lane, and by GetParked's callers through the
// ledger's own sentinel (ledger.ErrNotParked). Test with errors.Is.
var ErrNotFound = errors.New("inspect: not found")

// Ledger is the part of the failure ledger the Inspector reads
// (ledger.Reader; redisstore.Store and memstore implement it).
type Ledger interface {
	// ListParked returns the entries of subscription ("" for all).
	ListParked(ctx context.Context, subscription string) ([]ledger.Parked, error)
	// GetParked returns the entry of (subscription, partition,
	// aggregate), ledger.ErrNotParked, or (partition "") an
	// *ledger.AmbiguousParkedError when the aggregate is parked on
	// several partitions.
	GetParked(ctx context.Context, subscription, partition, aggregate string) (ledger.Parked, error)
}

// Members lists a service's live nodes (runtime.Membership's reader).
type Members interface {
	// Members returns the live nodes of service, sorted by node id.
	Members(ctx context.Context, service string) ([]runtime.NodeStatus, error)
}

// Inspector reads snapshots. It is safe for concurrent use and holds no
// state beyond its configuration.
type Inspector struct {
	client redis.UniversalClient
	layout broker.Layout
	cfg    config
}

type config struct {
	backfill string
	ledger   Ledger
	members  Members
	pageSize int64
	chunk    int
	workers  int
}

// Option configures New.
type Option func(*config)

// WithBackfillSuffix names the backfill lane. Default
// broker.DefaultBackfillSuffix; "" means the default.
func WithBackfillSuffix(s string) Option { return func(c *config) { c.backfill = s } }

// WithLedger lets snapshots fill Group.Parked and enables Parked and
// ParkedEntry. Default: none (Parked is null, the ledger calls fail).
func WithLedger(l Ledger) Option { return func(c *config) { c.ledger = l } }

// WithMembers enables Nodes. Default: none.
func WithMembers(m Members) Option { return func(c *config) { c.members = m } }

// WithChunk sets how many partitions are read per pipelined round trip.
// Default 250; non-positive means the default.
func WithChunk(n int) Option { return func(c *config) { c.chunk = n } }

// WithConcurrency sets how many chunks Partitions reads at once (each on
// its own connection), so that decoding one overlaps the server's work
// on the next. Default 4; non-positive means the default.
func WithConcurrency(n int) Option { return func(c *config) { c.workers = n } }

func (c *config) validate() {
	if c.backfill == "" {
		c.backfill = broker.DefaultBackfillSuffix
	}
	if c.chunk <= 0 {
		c.chunk = 250
	}
	if c.workers <= 0 {
		c.workers = 4
	}
	if c.pageSize <= 0 {
		c.pageSize = 1000
	}
}

// New returns an Inspector over client with the given key layout. It does
// no I/O.
func New(client redis.UniversalClient, layout broker.Layout, opts ...Option) *Inspector {
	var cfg config
	for _, o := range opts {
		o(&cfg)
	}
	cfg.validate()
	return &Inspector{client: client, layout: layout, cfg: cfg}
}

// Layout returns the key layout the Inspector reads.
func (in *Inspector) Layout() broker.Layout { return in.layout }

// BackfillSuffix returns the backfill lane's suffix.
func (in *Inspector) BackfillSuffix() string { return in.cfg.backfill }

// PartitionOptions narrows and pages Partitions. The zero value lists
// every partition with every group.
type PartitionOptions struct {
	// Group, when set, keeps only that group in Partition.Groups (it is
	// listed even where it is not created: it would read from id 0).
	Group string
	// Filter, when set, drops the partitions it returns false for, before
	// Limit counts them.
	Filter func(*Partition) bool
	// Limit stops after that many partitions (in index order, which is
	// unspecified); 0 means no limit.
	Limit int
	// PageSize is the SSCAN COUNT hint; default 1000.
	PageSize int64
	// LaneGroups fills Lane.Groups (each group's position per lane).
	LaneGroups bool
	// Health fills Group.Health (status, lag in entries and seconds),
	// at the cost of one more pipelined round trip per chunk for the
	// groups with work waiting. Thresholds tune the status.
	Health     bool
	Thresholds Thresholds
}

// Partitions lists category's partitions from its index: every key's
// lanes, lengths, newest entry and groups with their leases. Order is
// the index's (unspecified); callers sort. An unknown category has no
// partitions (nil, nil).
//
// Each SSCAN page is read in pipelined chunks of WithChunk partitions:
// one round trip for the lanes and groups, one for the leases and
// generations of the groups found.
func (in *Inspector) Partitions(ctx context.Context, category string, opts PartitionOptions) ([]Partition, error) {
	// Size the list once: growing it by doubling would leave copies of
	// 100,000 partitions behind for the collector.
	n, err := in.client.SCard(ctx, in.layout.IndexKey(category)).Result()
	if err != nil {
		return nil, in.typed(ctx, wrapErr("list partitions", in.layout.IndexKey(category), "set", err))
	}
	if opts.Limit > 0 && int64(opts.Limit) < n {
		n = int64(opts.Limit)
	}
	out := make([]Partition, 0, n)
	err = in.EachPartition(ctx, category, opts, func(p Partition) error {
		out = append(out, p)
		return nil
	})
	return out, in.typed(ctx, err)
}

// EachPartition is Partitions without holding the list: fn is called
// once per partition, a chunk at a time, from the calling goroutine; an
// error from fn stops the walk and is returned.
func (in *Inspector) EachPartition(ctx context.Context, category string, opts PartitionOptions, fn func(Partition) error) error {
	return in.typed(ctx, in.eachPartition(ctx, category, opts, fn))
}

// PartitionsByKey reads the given keys of category (indexed or not) the
// way Partitions reads index entries, in the order given. Group and
// LaneGroups of opts apply; Filter, Limit and PageSize do not.
func (in *Inspector) PartitionsByKey(ctx context.Context, category string, keys []string, opts PartitionOptions) ([]Partition, error) {
	opts.Filter, opts.Limit = nil, 0
	out := make([]Partition, 0, len(keys))
	err := in.eachPartitionByKey(ctx, category, keys, opts, func(p Partition) error {
		out = append(out, p)
		return nil
	})
	if err != nil {
		return nil, in.typed(ctx, err)
	}
	return out, nil
}

// EachPartitionByKey is PartitionsByKey without holding the list, as
// EachPartition is to Partitions: fn is called once per partition, in
// the order of keys, from the calling goroutine, while the next chunks
// are read; Filter and Limit apply. It is how a long sorted listing is
// streamed: the category's groups and parked entries are read once,
// not once per batch of keys.
func (in *Inspector) EachPartitionByKey(ctx context.Context, category string, keys []string, opts PartitionOptions, fn func(Partition) error) error {
	return in.typed(ctx, in.eachPartitionByKey(ctx, category, keys, opts, fn))
}

// ExplainOptions tunes Partition. The zero value is the default.
type ExplainOptions struct {
	// PendingLimit caps PendingEntries per group and lane. Default 100.
	PendingLimit int64
	// PoisonDeliveries is the delivery count from which a pending head
	// is called a poison message. Default 3.
	PoisonDeliveries int64
	// StuckAfter is how long a head may stay pending before the group is
	// called stuck. Default 1m.
	StuckAfter time.Duration
	// Thresholds tune GroupDetail.Health's status.
	Thresholds Thresholds
}

// Partition explains one partition: its lanes, each group's head entry
// (decoded), pending list, lease and generation, and a verdict. It
// returns an error wrapping ErrNotFound when the key is neither indexed
// nor has a lane.
func (in *Inspector) Partition(ctx context.Context, category, key string, opts ExplainOptions) (PartitionDetail, error) {
	v, err := in.explain(ctx, category, key, opts)
	return v, in.typed(ctx, err)
}

// Categories finds every category by a paced SCAN for *:__partitions__
// sets, sorted by name, with their index sizes and registered groups.
func (in *Inspector) Categories(ctx context.Context, opts ScanOptions) ([]Category, error) {
	v, err := in.categories(ctx, opts)
	return v, in.typed(ctx, err)
}

// CategoryInfo reads one category's index size and registered groups;
// Partitions is 0 for an unknown category.
func (in *Inspector) CategoryInfo(ctx context.Context, category string) (Category, error) {
	v, err := in.categoryInfo(ctx, category)
	return v, in.typed(ctx, err)
}

// CategoryKnown reports whether category exists or has existed: its
// index or group registry exists, or some key is named category:* (found
// by a paced SCAN stopping at the first). A category Protean or a node
// reaped to the last partition is known while any of these remain; a
// typo is not. Generation counters do not name their category and do not
// count.
func (in *Inspector) CategoryKnown(ctx context.Context, category string) (bool, error) {
	return in.categoryKnown(ctx, category)
}

// LeaseQuery selects leases. The zero value finds every lease and
// generation in the keyspace by a paced scan.
type LeaseQuery struct {
	// Categories, when set, enumerate (group, key) pairs from these
	// categories' indexes and groups (no keyspace scan); free leases are
	// listed too.
	Categories []string
	// Group keeps only that group.
	Group string
	// Key keeps only that partition key.
	Key string
	// Scan paces the keyspace scan used without Categories.
	Scan ScanOptions
}

// Leases lists leases with their state (held, expired, free), sorted by
// group then key. Without Categories it scans for *:__lease__ and
// *:__generation__ keys, so never-leased (free) partitions are not
// listed and Category is empty.
func (in *Inspector) Leases(ctx context.Context, q LeaseQuery) ([]Lease, error) {
	v, err := in.leases(ctx, q)
	return v, in.typed(ctx, err)
}

// Lease reads the lease of group on key.
func (in *Inspector) Lease(ctx context.Context, group, key string) (Lease, error) {
	v, err := in.lease(ctx, group, key)
	return v, in.typed(ctx, err)
}

// TrimInfo computes what a trim of stream to maxLen would remove, the
// safe floor and the group that pins it, in one read-only script, the
// way the broker's Trim decides. A non-positive maxLen is refused with
// broker.ErrInvalidArgument.
func (in *Inspector) TrimInfo(ctx context.Context, stream string, maxLen int64) (TrimInfo, error) {
	v, err := in.trimInfo(ctx, stream, maxLen)
	return v, in.typed(ctx, err)
}

// Fsck finds orphans of category: partition streams missing from the
// index (by a paced SCAN for category:*) and index entries without any
// lane; and the stale consumers of the partition streams it found
// (empty, and not the live lease's: StaleConsumer).
func (in *Inspector) Fsck(ctx context.Context, category string, opts ScanOptions) (FsckReport, error) {
	v, err := in.fsck(ctx, category, opts)
	return v, in.typed(ctx, err)
}

// Parked lists the failure ledger's entries of subscription ("" for
// all). It fails when the Inspector has no ledger.
func (in *Inspector) Parked(ctx context.Context, subscription string) ([]ledger.Parked, error) {
	if in.cfg.ledger == nil {
		return nil, errNoLedger
	}
	return in.cfg.ledger.ListParked(ctx, subscription)
}

// ParkedEntry reads one ledger entry; ledger.ErrNotParked when missing.
// partition "" names the aggregate's only entry: an
// *ledger.AmbiguousParkedError when it is parked on several partitions.
func (in *Inspector) ParkedEntry(ctx context.Context, subscription, partition, aggregate string) (ledger.Parked, error) {
	if in.cfg.ledger == nil {
		return ledger.Parked{}, errNoLedger
	}
	return in.cfg.ledger.GetParked(ctx, subscription, partition, aggregate)
}

// Nodes lists service's live nodes from their status records. It fails
// when the Inspector has no Members.
func (in *Inspector) Nodes(ctx context.Context, service string) ([]runtime.NodeStatus, error) {
	if in.cfg.members == nil {
		return nil, errNoMembers
	}
	nodes, err := in.cfg.members.Members(ctx, service)
	if err != nil {
		return nil, err
	}
	return nodes, in.statusRecordTypes(ctx, service, nodes)
}

// ReadEntry reads one entry of stream and decodes it (Missing when the
// id is not in the stream).
func (in *Inspector) ReadEntry(ctx context.Context, stream, id string) (Entry, error) {
	v, err := in.readEntry(ctx, stream, id)
	return v, in.typed(ctx, err)
}

// ServerTime reads the server's clock (TIME).
func (in *Inspector) ServerTime(ctx context.Context) (time.Time, error) {
	return in.serverTime(ctx)
}

var (
	errNoLedger  = errors.New("inspect: no failure ledger configured")
	errNoMembers = errors.New("inspect: no membership store configured")
)
