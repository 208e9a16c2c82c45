package repair

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/protctl/protctl/internal/inspect"
	"github.com/protctl/protctl/pkg/broker"
)

func (r *Repairer) planRelease(ctx context.Context, req ReleaseRequest) (*Plan, error) {
	const op = "plan release"
	l := r.broker.Layout()
	if err := l.ValidateName(op, "group", req.Group); err != nil {
		return nil, err
	}
	if req.Key == "" {
		return nil, &broker.InvalidArgumentError{Op: op, Arg: "partition key", Value: `""`, Reason: "must not be empty"}
	}
	// The lease key names the group and the key, not the category: an
	// unchecked category (a typo) would release the lease of another
	// category's partition of the same key.
	var state inspect.LeaseState // as partitions ls says it; "" without a category
	if req.Category != "" {
		g, err := r.requirePartitionGroup(ctx, req.Category, req.Key, req.Group)
		if err != nil {
			return nil, err
		}
		state = g.LeaseState
	}
	lease, err := r.inspect.Lease(ctx, req.Group, req.Key)
	if err != nil {
		return nil, err
	}
	if req.Category == "" && lease.Token == nil && lease.Counter == nil {
		if err := r.requireGroup(ctx, req.Category, req.Group, req.Key); err != nil {
			return nil, err
		}
	}
	if lease.Token != nil {
		state = inspect.LeaseHeld
	}
	it := Item{
		Action: ActionRelease,
		Target: Target{Category: req.Category, Group: req.Group, Key: req.Key},
		Params: Params{Force: req.Force},
		Precondition: Precondition{
			Lease:      lease.Token,
			Generation: lease.Counter,
			LeaseState: state,
		},
	}
	switch {
	case lease.Token == nil:
		it.Result = ResultSkipped
		it.Reason = "the lease is " + inspect.NotHeldText(state, lease.Counter) + ": nothing to release"
	case !req.Force:
		it.Reason = "the lease " + heldText(*lease.Token, lease.TTLMs) + "; releasing takes the partition from its owner: use --force"
	default:
		it.Allowed = true
		it.Reason = fmt.Sprintf("release the lease %s (%s) if it is still held by that token", *lease.Token, ttlText(lease.TTLMs))
	}
	plan := r.newPlan()
	plan.Items = append(plan.Items, it)
	return plan, nil
}

// heldText says who holds a lease and for how long, the same way in every
// plan that a held lease refuses without --force (release, reap).
func heldText(token string, ttlMs *int64) string {
	return fmt.Sprintf("is held by %s (%s)", token, ttlText(ttlMs))
}

// requireGroup fails with an error wrapping inspect.ErrNotFound unless
// group reads partition key of category (it is on a lane, or registered
// for the category) — what a lease never taken leaves to tell a real
// group from a typo.
func (r *Repairer) requireGroup(ctx context.Context, category, group, key string) error {
	d, err := r.inspect.Partition(ctx, category, key, inspect.ExplainOptions{PendingLimit: 1})
	if err != nil {
		return err
	}
	for _, g := range d.Groups {
		if g.Name == group && (g.Created || g.Registered) {
			return nil
		}
	}
	return fmt.Errorf("%w: group %q has never leased or read partition %q of %q (no lease or generation key, not on its lanes, not registered)", inspect.ErrNotFound, group, key, category)
}

func ttlText(ms *int64) string {
	if ms == nil {
		return "no expiry"
	}
	return (time.Duration(*ms) * time.Millisecond).Round(time.Millisecond).String() + " left"
}

// applyRelease releases the lease fenced on the token seen in the plan.
func (r *Repairer) applyRelease(ctx context.Context, it *Item) error {
	if it.Precondition.Lease == nil {
		return fmt.Errorf("%w: release item without a planned lease", ErrInvalidPlan)
	}
	if gone, err := r.partitionGone(ctx, it.Target); err != nil || gone != "" {
		if err == nil {
			it.Result, it.Detail = ResultConflict, gone
		}
		return err
	}
	f := broker.Fence{LeaseKey: r.broker.Layout().LeaseKey(it.Target.Group, it.Target.Key), Token: *it.Precondition.Lease}
	ok, err := r.broker.ReleasePartitionLease(ctx, f)
	if err != nil {
		return err
	}
	if !ok {
		it.Result, it.Detail = ResultConflict, r.leaseMoved(ctx, it.Target.Category, it.Target.Group, it.Target.Key, f.Token)
		return nil
	}
	it.Result, it.Detail = ResultApplied, "released "+f.Token
	return nil
}

// partitionGone re-checks, at apply, that t's category, partition and group
// are still known (requirePartitionGroup): it returns what is gone, for a
// conflict's detail, or "" when everything is there (or t names no
// category: a plan made by the library without one). The plan checked it
// too, but a plan file may be old, or edited.
func (r *Repairer) partitionGone(ctx context.Context, t Target) (string, error) {
	if t.Category == "" {
		return "", nil
	}
	_, err := r.requirePartitionGroup(ctx, t.Category, t.Key, t.Group)
	var invalid *broker.InvalidArgumentError
	switch {
	case err == nil:
		return "", nil
	case errors.Is(err, inspect.ErrNotFound), errors.As(err, &invalid):
		return err.Error() + ": nothing was changed", nil
	}
	return "", err
}

// leaseMoved describes the lease now, for a conflict's detail, in the
// words of partitions ls when category is known.
func (r *Repairer) leaseMoved(ctx context.Context, category, group, key, planned string) string {
	now, err := r.inspect.Lease(ctx, group, key)
	switch {
	case err != nil:
		return fmt.Sprintf("the lease is no longer %s", planned)
	case now.Token != nil:
		return fmt.Sprintf("the lease is now %s, the plan saw %s", *now.Token, planned)
	}
	var state inspect.LeaseState
	if category != "" {
		if gs, err := r.groupOn(ctx, category, group, []string{key}); err == nil {
			state = gs[key].LeaseState
		}
	}
	return fmt.Sprintf("the lease is now %s, the plan saw %s", inspect.NotHeldText(state, now.Counter), planned)
}

var errNoLedger = errors.New("repair: no failure ledger configured")
