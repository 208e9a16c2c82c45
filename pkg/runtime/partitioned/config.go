package partitioned

import (
	"errors"
	"fmt"
	"time"

	"github.com/protctl/protctl/pkg/broker"
	"github.com/protctl/protctl/pkg/runtime"
	"github.com/protctl/protctl/pkg/runtime/ledger"
	"github.com/protctl/protctl/pkg/runtime/pause"
)

// DefaultWorkers is Config.Workers when it is 0.
const DefaultWorkers = 16

// Config configures a Redis partitioned subscription (see
// New). The zero value of every optional field means its
// default, written in the field's comment.
type Config struct {
	// Name is the subscription's name; it is also the consumer group on
	// every partition stream and the G of G:K:__lease__. Required.
	Name string
	// Categories are read together: streams with the same partition key
	// in several categories form one unit under one lease (process-manager
	// style). At least one is required.
	Categories []string
	// Handler processes the messages. Required.
	Handler runtime.Handler
	// Broker is the partitioning contract. Required, with
	// broker.StreamPartitioning. Optional capabilities found by type
	// assertion: broker.EntryWaiter with StreamTailer (idle partitions
	// cost no commands), broker.PartitionWatcher (publishes wake idle
	// partitions at once), broker.AckReader (a batch's ack rides on the
	// next read) and BatchRenewer (one round trip renews every lease).
	Broker broker.PartitionedBroker
	// Ledger is the failure ledger parked partitions are recorded in.
	// Required.
	Ledger ledger.Ledger
	// Pauses holds operators' pauses (`protctl pause`); nil: nothing is
	// ever paused. See pause.go.
	Pauses pause.Store

	// BackfillSuffix names the low-priority lane. Default:
	// broker.DefaultBackfillSuffix.
	BackfillSuffix string

	// LeaseTTL is the lease's time to live. Default: 15s.
	LeaseTTL time.Duration
	// RenewEvery is the renewal period. Default: LeaseTTL/5.
	RenewEvery time.Duration
	// TrustWindow is how long after the start of its last successful
	// renewal a lease is trusted: past it, the partition stops (no new
	// handler call) even though Redis may not have expired the lease yet,
	// so that a node cut off from Redis stops before another can take
	// over. Default: LeaseTTL - RenewEvery. Must be below LeaseTTL.
	TrustWindow time.Duration

	// BatchSize is how many entries one fenced read returns (and one
	// fenced ack acknowledges). Default: 100.
	BatchSize int
	// Workers bounds how many partitions are being handled at once
	// across all keys (handler calls in flight), and how many read a
	// backlog on a connection of their own. With a broker that batches
	// (broker.BatchReader and broker.BatchAcquirer: both adapters of this
	// module), the partitions that a flow wakes are read together, a
	// round trip for many, without a slot (up to 16 x Workers of them
	// read ahead of their handlers); a partition that reads a full batch
	// keeps its slot and reads on, and with the Redis adapter (a
	// ReaderPinner) each worker slot keeps its connection between
	// partitions for that (at most half the client's pool is kept so;
	// the others take one per call). Keep Workers plus the blocking
	// waits' connections (up to two for the main lanes and two for the
	// backfill lanes, each per 8,192 idle lanes), the live path's (up to
	// 2) and a few (heartbeat, renewals) within the client's PoolSize
	// (go-redis: 10 x GOMAXPROCS by default). Up to Workers hot
	// partitions also wait with a blocking read on a connection each,
	// within the same half (docs/decisions/0054-blocking-reads.md).
	// Default: DefaultWorkers.
	Workers int
	// MaxPartitions caps the partitions this subscription takes per node
	// (HRW with a cap). Default: 0, no cap.
	MaxPartitions int

	// Retry governs aggregate failures (the default class): a message is
	// tried Retry.Attempts times, with jittered waits from Retry.Backoff
	// up to Retry.MaxBackoff between them, then its partition is parked.
	Retry runtime.RetryPolicy
	// SystemicBackoff is the shortest back-off after a systemic failure;
	// waits are jittered below a ceiling that doubles up to
	// SystemicMaxBackoff (see RetryPolicy). Defaults: 1s and 30s.
	SystemicBackoff    time.Duration
	SystemicMaxBackoff time.Duration

	// IdleAfter is how long a drained partition keeps its lease waiting
	// for more entries before it releases it and joins the watched set.
	// Default: RenewEvery.
	IdleAfter time.Duration
	// WaitTimeout bounds one blocking wait on the watched streams. While
	// every category's appends are announced (no blocking wait: see
	// announce.go), the whole watched set is checked every
	// max(WaitTimeout, 1ms per stream) instead (max(1s, 1ms per stream)
	// at most in the cluster layout). Default: 5s.
	WaitTimeout time.Duration
	// WaitShards splits the blocking wait on the main lanes into this many
	// waits, each over the partitions whose key hashes to it: an entry
	// returns (and costs a re-issue of) its shard's wait only, which names
	// a WaitShards-th of the streams. Each shard's wait holds a pooled
	// connection while it blocks (two while partitions drain: its fresh
	// tier), so the client's pool must hold them beside the workers'.
	// Only blocking waits are sharded: while appends are announced none
	// is issued (announce.go). Default: 1 (DefaultWaitShards).
	WaitShards int
	// WaitRestart is the shortest time between two restarts of the wait
	// on the partitions that joined the watched set since the wait on the
	// whole set was issued (the fresh tier: see Subscription's waitLoop);
	// a restart costs the server in proportion to those partitions only.
	// Default: 1ms.
	WaitRestart time.Duration
	// DiscoverEvery is the period of the scan of the categories' indexes
	// for new partition keys (publishes through PublishPartitioned are
	// seen at once without it). Default: 30s.
	DiscoverEvery time.Duration
	// DiscoverPollEvery is the period of the cheap check for keys any
	// publisher added to an index (one SCARD per category, with a broker
	// that counts: PartitionCounter); a change brings a scan forward. It
	// is 1s at least while the broker delivers append events
	// (AppendWatcher), which find new keys at once. Default: 50ms.
	DiscoverPollEvery time.Duration
	// LedgerPollEvery is the period of the re-read of the ledger's parked
	// entries (operator requests are also signalled). Default: 30s.
	LedgerPollEvery time.Duration
	// SweepEvery is how often an idle partition is read again when the
	// broker cannot wait on entries (no EntryWaiter or StreamTailer).
	// Default: 30s.
	SweepEvery time.Duration
	// ReapAfter retires partitions idle this long with the broker's
	// conservative reap (only when every group has read and acked
	// everything). Default: 0, never.
	ReapAfter time.Duration
}

func (c *Config) validate() error {
	const op = "runtime: partitioned config"
	if c.Broker == nil {
		return fmt.Errorf("%s: Broker is required", op)
	}
	if !c.Broker.Capabilities().Has(broker.StreamPartitioning) {
		return fmt.Errorf("%s: broker lacks stream partitioning: %w", op, broker.ErrPartitioningUnsupported)
	}
	l := c.Broker.Layout()
	if err := l.ValidateName("new partitioned subscription", "name", c.Name); err != nil {
		return err
	}
	if len(c.Categories) == 0 {
		return fmt.Errorf("%s: at least one category is required", op)
	}
	seen := map[string]bool{}
	for _, cat := range c.Categories {
		if err := l.ValidateName("new partitioned subscription", "category", cat); err != nil {
			return err
		}
		if seen[cat] {
			return fmt.Errorf("%s: category %q listed twice", op, cat)
		}
		seen[cat] = true
	}
	if c.Handler == nil {
		return fmt.Errorf("%s: Handler is required", op)
	}
	if c.Ledger == nil {
		return fmt.Errorf("%s: Ledger is required", op)
	}
	if c.BackfillSuffix == "" {
		c.BackfillSuffix = broker.DefaultBackfillSuffix
	}
	for _, d := range []time.Duration{c.LeaseTTL, c.RenewEvery, c.TrustWindow, c.Retry.Backoff, c.Retry.MaxBackoff,
		c.SystemicBackoff, c.SystemicMaxBackoff, c.IdleAfter, c.WaitTimeout, c.WaitRestart, c.DiscoverEvery, c.DiscoverPollEvery,
		c.LedgerPollEvery, c.SweepEvery, c.ReapAfter} {
		if d < 0 {
			return errors.New(op + ": durations must not be negative")
		}
	}
	if c.BatchSize < 0 || c.Workers < 0 || c.MaxPartitions < 0 || c.Retry.Attempts < 0 || c.WaitShards < 0 {
		return errors.New(op + ": counts must not be negative")
	}
	def := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	def(&c.LeaseTTL, 15*time.Second)
	def(&c.RenewEvery, c.LeaseTTL/5)
	def(&c.TrustWindow, c.LeaseTTL-c.RenewEvery)
	if c.RenewEvery >= c.LeaseTTL {
		return fmt.Errorf("%s: RenewEvery %s must be below LeaseTTL %s", op, c.RenewEvery, c.LeaseTTL)
	}
	if c.TrustWindow >= c.LeaseTTL || c.TrustWindow <= c.RenewEvery {
		return fmt.Errorf("%s: TrustWindow %s must be between RenewEvery %s and LeaseTTL %s", op, c.TrustWindow, c.RenewEvery, c.LeaseTTL)
	}
	if c.BatchSize == 0 {
		c.BatchSize = 100
	}
	if c.Workers == 0 {
		c.Workers = DefaultWorkers
	}
	if c.WaitShards == 0 {
		c.WaitShards = DefaultWaitShards
	}
	if c.Retry.Attempts == 0 {
		c.Retry.Attempts = 3
	}
	def(&c.Retry.Backoff, 200*time.Millisecond)
	def(&c.Retry.MaxBackoff, 10*time.Second)
	def(&c.SystemicBackoff, time.Second)
	def(&c.SystemicMaxBackoff, 30*time.Second)
	def(&c.IdleAfter, c.RenewEvery)
	def(&c.WaitTimeout, 5*time.Second)
	def(&c.WaitRestart, time.Millisecond)
	def(&c.DiscoverEvery, 30*time.Second)
	def(&c.DiscoverPollEvery, 50*time.Millisecond)
	def(&c.LedgerPollEvery, 30*time.Second)
	def(&c.SweepEvery, 30*time.Second)
	return nil
}
