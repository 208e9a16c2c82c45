package repair

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/protctl/protctl/internal/inspect"
	"github.com/protctl/protctl/pkg/broker/redisbroker"
)

// PruneConsumersRequest asks to delete a category's stale consumers:
// consumers of a group on a partition lane that hold no pending entries
// and are not the group's live lease (inspect.StaleConsumer), as fsck
// lists them.
type PruneConsumersRequest struct {
	Category string
	// Keys limits the plan to these partitions; empty means every
	// partition stream the scan finds (indexed or not).
	Keys []string
	// Group limits the plan to one group; empty means every group.
	Group string
	// Scan paces the keyspace scan (fsck's).
	Scan inspect.ScanOptions
}

// PlanPruneConsumers plans one prune-consumer item per stale consumer
// that fsck finds now (the same scan, the same rule), each allowed.
// Apply re-checks each one in the broker's script (DeleteEmptyConsumer):
// a consumer that gained pending entries since the plan, or became the
// live lease's consumer, is a conflict and is not deleted.
func (r *Repairer) PlanPruneConsumers(ctx context.Context, req PruneConsumersRequest) (*Plan, error) {
	const op = "plan prune-consumers"
	l := r.broker.Layout()
	if err := l.ValidateName(op, "category", req.Category); err != nil {
		return nil, err
	}
	if req.Group != "" {
		if err := l.ValidateName(op, "group", req.Group); err != nil {
			return nil, err
		}
	}
	for _, k := range req.Keys {
		if err := l.ValidateKey(k, r.cfg.backfill); err != nil {
			return nil, err
		}
	}
	// A category, key or group nothing records is a typo, not a plan
	// with nothing to prune.
	cat, err := r.requireCategory(ctx, req.Category)
	if err != nil {
		return nil, err
	}
	if len(req.Keys) > 0 {
		parts, err := r.inspect.PartitionsByKey(ctx, req.Category, req.Keys, inspect.PartitionOptions{})
		if err == nil {
			err = r.requirePartitions(ctx, req.Category, parts)
		}
		if err != nil {
			return nil, err
		}
	}
	rep, err := r.inspect.Fsck(ctx, req.Category, req.Scan)
	if err != nil {
		return nil, err
	}
	plan := r.newPlan()
	var stale []inspect.StaleConsumer
	keysOf := map[string][]string{} // group -> keys of its stale consumers
	for _, c := range rep.StaleConsumers {
		if (req.Group != "" && c.Group != req.Group) || (len(req.Keys) > 0 && !slices.Contains(req.Keys, c.Key)) {
			continue
		}
		stale = append(stale, c)
		if !slices.Contains(keysOf[c.Group], c.Key) {
			keysOf[c.Group] = append(keysOf[c.Group], c.Key)
		}
	}
	// The group's lease state on each partition, in the words of
	// partitions ls (a lease not held is released or expired by whether
	// work waits, which fsck does not read).
	groups := map[string]map[string]inspect.Group{}
	for g, keys := range keysOf {
		if groups[g], err = r.groupOn(ctx, req.Category, g, keys); err != nil {
			return nil, err
		}
	}
	for _, c := range stale {
		var zero int64
		idle := (time.Duration(c.IdleMs) * time.Millisecond).Round(time.Second)
		g := groups[c.Group][c.Key]
		state := g.LeaseState
		lease := "the lease is " + inspect.NotHeldText(state, g.Generation)
		if c.Lease != nil {
			lease, state = "the live lease is "+*c.Lease, inspect.LeaseHeld
		}
		plan.Items = append(plan.Items, Item{
			Action:       ActionPruneConsumer,
			Target:       Target{Category: c.Category, Key: c.Key, Group: c.Group, Stream: c.Stream, Consumer: c.Consumer},
			Precondition: Precondition{Lease: c.Lease, Generation: g.Generation, LeaseState: state, ConsumerPending: &zero},
			Allowed:      true,
			Reason:       fmt.Sprintf("no pending entries, idle %s, and %s: deleted if it still has none and is not the live lease's", idle, lease),
		})
	}
	if req.Group != "" && len(plan.Items) == 0 && !slices.Contains(cat.Groups, req.Group) {
		if err := r.requireCategoryGroup(ctx, req.Category, req.Group); err != nil {
			return nil, err
		}
	}
	return plan, nil
}

// requireCategoryGroup fails with an error wrapping inspect.ErrNotFound
// unless group is created on a lane of a partition of category, or
// registered for it (inspect.GroupReadsPartitions).
func (r *Repairer) requireCategoryGroup(ctx context.Context, category, group string) error {
	if reads, err := r.inspect.GroupReadsPartitions(ctx, category, group); err != nil || reads {
		return err
	}
	return fmt.Errorf("%w: group %q reads no partition of %q: not created on any lane, not registered", inspect.ErrNotFound, group, category)
}

// applyPruneConsumer deletes the consumer in the broker's script, which
// checks again, right before XGROUP DELCONSUMER, that it holds no pending
// entries and is not the live lease's consumer.
func (r *Repairer) applyPruneConsumer(ctx context.Context, it *Item) error {
	t := it.Target
	leaseKey := r.broker.Layout().LeaseKey(t.Group, t.Key)
	d, err := r.broker.DeleteEmptyConsumer(ctx, leaseKey, t.Stream, t.Group, t.Consumer)
	if err != nil {
		return err
	}
	switch d.Verdict {
	case redisbroker.ConsumerDeleted:
		it.Result, it.Detail = ResultApplied, "deleted consumer "+t.Consumer
	case redisbroker.ConsumerGone:
		it.Result, it.Detail = ResultSkipped, "the consumer is already gone"
	case redisbroker.ConsumerHasPending:
		it.Result, it.Detail = ResultConflict, fmt.Sprintf("the consumer has %d pending entries now, the plan saw none: kept", d.Pending)
	case redisbroker.ConsumerLeased:
		it.Result, it.Detail = ResultConflict, "the consumer is now the live lease's ("+t.Consumer+"): kept"
	default:
		return fmt.Errorf("repair: unexpected verdict %q", d.Verdict)
	}
	return nil
}

// ConsumerDeleter is the broker's fenced delete of one consumer
// (redisbroker.Broker implements it).
type ConsumerDeleter interface {
	DeleteEmptyConsumer(ctx context.Context, leaseKey, stream, group, consumer string) (redisbroker.ConsumerDeletion, error)
}

var _ ConsumerDeleter = (*redisbroker.Broker)(nil)
