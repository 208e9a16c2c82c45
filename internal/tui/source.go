package tui

import (
	"context"
	"fmt"
	"time"

	"github.com/protctl/protctl/internal/inspect"
	"github.com/protctl/protctl/internal/repair"
	"github.com/protctl/protctl/pkg/runtime"
	"github.com/protctl/protctl/pkg/runtime/ledger"
)

// RedisOptions configures NewRedisBackend. The zero value watches every
// category found by a scan, no service's nodes and no topics.
type RedisOptions struct {
	// Categories are listed first (the context's categories, or those
	// named on the command line).
	Categories []string
	// Scan, when set, also finds every other category by the paced
	// keyspace scan `partitions ls` uses (inspect.Categories); it runs at
	// every refresh of the partitions view.
	Scan bool
	// Services are the services whose live nodes the nodes view lists.
	Services []string
	// PageSize is how many partitions a page holds (the SSCAN COUNT hint
	// and the size of the pages the view receives). Default 1000.
	PageSize int
	// Topics reads the Kafka lease groups for the topics view; nil means
	// the backend has no Kafka reader (the view says so).
	Topics func(ctx context.Context) ([]TopicPartition, error)
	// Kafka hands the Kafka reader a topic seek plans with (offsets by
	// time, earliest and head), as `topics seek` does; nil means the
	// topic seek action fails with ErrUnsupported. It is called from
	// tea.Cmds and must be safe for concurrent use.
	Kafka func(ctx context.Context) (repair.TopicOffsets, error)
}

// RedisBackend is the production Source and Actions: it reads through an
// inspect.Inspector and plans and applies through a repair.Repairer,
// exactly as the CLI's commands do, so the dashboard shows what
// `partitions ls` shows and acts as `partitions release` acts.
type RedisBackend struct {
	ins  *inspect.Inspector
	rep  *repair.Repairer
	opts RedisOptions
}

var (
	_ Source  = (*RedisBackend)(nil)
	_ Actions = (*RedisBackend)(nil)
)

// NewRedisBackend adapts ins and rep. rep may be nil: then every action
// fails with ErrReadOnly. It does no I/O.
func NewRedisBackend(ins *inspect.Inspector, rep *repair.Repairer, opts RedisOptions) *RedisBackend {
	if opts.PageSize <= 0 {
		opts.PageSize = 1000
	}
	return &RedisBackend{ins: ins, rep: rep, opts: opts}
}

// Categories returns the configured categories, then (with Scan) the
// others the scan finds, sorted by name.
func (b *RedisBackend) Categories(ctx context.Context) ([]string, error) {
	seen := map[string]bool{}
	out := make([]string, 0, len(b.opts.Categories))
	for _, c := range b.opts.Categories {
		if !seen[c] {
			seen[c] = true
			out = append(out, c)
		}
	}
	if !b.opts.Scan {
		return out, nil
	}
	found, err := b.ins.Categories(ctx, inspect.ScanOptions{})
	if err != nil {
		return out, err
	}
	for _, c := range found {
		if !seen[c.Name] {
			seen[c.Name] = true
			out = append(out, c.Name)
		}
	}
	return out, nil
}

// Partitions walks category's index with inspect.EachPartition (SSCAN
// pages read in pipelined chunks) and hands the view pages of PageSize.
func (b *RedisBackend) Partitions(ctx context.Context, category string, page func([]inspect.Partition) error) error {
	buf := make([]inspect.Partition, 0, b.opts.PageSize)
	err := b.ins.EachPartition(ctx, category, inspect.PartitionOptions{PageSize: int64(b.opts.PageSize), Health: true}, func(p inspect.Partition) error {
		buf = append(buf, p)
		if len(buf) < b.opts.PageSize {
			return nil
		}
		full := buf
		buf = make([]inspect.Partition, 0, b.opts.PageSize)
		return page(full)
	})
	if err != nil {
		return err
	}
	if len(buf) > 0 {
		return page(buf)
	}
	return nil
}

// Explain is inspect's Partition with the CLI's defaults.
func (b *RedisBackend) Explain(ctx context.Context, category, key string) (inspect.PartitionDetail, error) {
	return b.ins.Partition(ctx, category, key, inspect.ExplainOptions{})
}

// Leases enumerates the leases of the categories' partitions (free ones
// included), as `leases ls --category C...` does; with no category known
// it falls back to the keyspace scan of `leases ls`.
func (b *RedisBackend) Leases(ctx context.Context) ([]inspect.Lease, error) {
	cats, err := b.Categories(ctx)
	if err != nil {
		return nil, err
	}
	return b.ins.Leases(ctx, inspect.LeaseQuery{Categories: cats})
}

// Parked lists every subscription's ledger entries.
func (b *RedisBackend) Parked(ctx context.Context) ([]ledger.Parked, error) {
	return b.ins.Parked(ctx, "")
}

// NodeServices are RedisOptions.Services (ServiceLister).
func (b *RedisBackend) NodeServices() []string { return b.opts.Services }

// Nodes lists the live nodes of every configured service.
func (b *RedisBackend) Nodes(ctx context.Context) ([]runtime.NodeStatus, error) {
	var out []runtime.NodeStatus
	for _, s := range b.opts.Services {
		nodes, err := b.ins.Nodes(ctx, s)
		if err != nil {
			return out, fmt.Errorf("nodes of service %s: %w", s, err)
		}
		out = append(out, nodes...)
	}
	return out, nil
}

// Topics calls RedisOptions.Topics.
func (b *RedisBackend) Topics(ctx context.Context) ([]TopicPartition, error) {
	if b.opts.Topics == nil {
		return nil, fmt.Errorf("%w: no Kafka lease-group reader configured", ErrUnsupported)
	}
	return b.opts.Topics(ctx)
}

// Plan builds the plan the CLI command of req.CommandLine builds.
func (b *RedisBackend) Plan(ctx context.Context, req ActionRequest) (*repair.Plan, error) {
	if b.rep == nil {
		return nil, ErrReadOnly
	}
	if err := req.Validate(); err != nil {
		return nil, err
	}
	switch req.Action {
	case repair.ActionReap:
		return b.rep.PlanReap(ctx, repair.ReapRequest{Category: req.Category, Keys: []string{req.Key}, MinIdle: req.MinIdle})
	case repair.ActionRelease:
		return b.rep.PlanRelease(ctx, repair.ReleaseRequest{Category: req.Category, Group: req.Group, Key: req.Key, Force: req.Force})
	case repair.ActionTrim:
		return b.rep.PlanTrim(ctx, repair.TrimRequest{Stream: req.Stream, MaxLen: req.MaxLen})
	case repair.ActionDeadLetter:
		return b.rep.PlanDeadLetter(ctx, repair.DeadLetterRequest{Category: req.Category, Key: req.Key, Group: req.Group, Reason: req.Reason})
	case repair.ActionDLQReplay, repair.ActionDLQPurge:
		return b.rep.PlanDLQ(ctx, repair.DLQRequest{Action: req.Action, Query: inspect.DeadLetterQuery{Category: req.Category, Key: keyGlob(req.Key)}})
	case repair.ActionSeek:
		to, err := repair.ParseSeekTo(req.SeekTo, time.Now())
		if err != nil {
			return nil, err
		}
		return b.rep.PlanSeek(ctx, repair.SeekRequest{Category: req.Category, Keys: []string{req.Key}, Group: req.Group, Target: to, By: req.By})
	case repair.ActionTopicSeek:
		return b.planTopicSeek(ctx, req)
	case repair.ActionRetry, repair.ActionSkip:
		return b.rep.PlanParked(ctx, repair.ParkedRequest{
			Action: req.Action, Subscription: req.Subscription, Aggregate: req.Aggregate,
			Partition: req.Partition, Reason: req.Reason, By: req.By,
		})
	}
	return nil, fmt.Errorf("tui: unknown action %q", req.Action)
}

// planTopicSeek is `topics seek TOPIC --service S --subscription SUB
// --partition N --to WHERE`'s plan.
func (b *RedisBackend) planTopicSeek(ctx context.Context, req ActionRequest) (*repair.Plan, error) {
	if b.opts.Kafka == nil {
		return nil, fmt.Errorf("%w: no Kafka reader configured for topic seek", ErrUnsupported)
	}
	to, err := repair.ParseTopicSeekTo("--to", req.SeekTo, time.Now())
	if err != nil {
		return nil, err
	}
	part, err := req.topicPartition()
	if err != nil {
		return nil, err
	}
	k, err := b.opts.Kafka(ctx)
	if err != nil {
		return nil, err
	}
	return b.rep.PlanTopicSeek(ctx, repair.TopicSeekRequest{
		Service: req.Service, Topic: req.Topic, Subscription: req.Subscription,
		Partitions: []int32{part}, To: to, By: req.By, Kafka: k,
	})
}

// Apply applies p with the Repairer (each item's precondition re-checked
// atomically in Redis).
func (b *RedisBackend) Apply(ctx context.Context, p *repair.Plan, cmdline string) (repair.Outcome, error) {
	if b.rep == nil {
		return "", ErrReadOnly
	}
	return b.rep.Apply(ctx, p, repair.ApplyOptions{CommandLine: cmdline})
}
