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
	lease, err := r.inspect.Lease(ctx, req.Group, req.Key)
	if err != nil {
		return nil, err
	}
	it := Item{
		Action: ActionRelease,
		Target: Target{Category: req.Category, Group: req.Group, Key: req.Key},
		Params: Params{Force: req.Force},
		Precondition: Precondition{
			Lease:      lease.Token,
			Generation: lease.Counter,
		},
	}
	switch {
	case lease.State == inspect.LeaseUnheld && lease.Counter != nil:
		// Read by key alone: released and expired look the same here.
		it.Result = ResultSkipped
		it.Reason = fmt.Sprintf("the lease is not held (it expired or was released at generation %d): nothing to release", *lease.Counter)
	case lease.State != inspect.LeaseHeld:
		it.Result = ResultSkipped
		it.Reason = "the lease is not held (" + string(lease.State) + "): nothing to release"
	case !req.Force:
		it.Reason = fmt.Sprintf("the lease is held by %s (%s); releasing takes the partition from its owner: use force", *lease.Token, ttlText(lease.TTLMs))
	default:
		it.Allowed = true
		it.Reason = fmt.Sprintf("release the lease %s (%s) if it is still held by that token", *lease.Token, ttlText(lease.TTLMs))
	}
	plan := r.newPlan()
	plan.Items = append(plan.Items, it)
	return plan, nil
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
	f := broker.Fence{LeaseKey: r.broker.Layout().LeaseKey(it.Target.Group, it.Target.Key), Token: *it.Precondition.Lease}
	ok, err := r.broker.ReleasePartitionLease(ctx, f)
	if err != nil {
		return err
	}
	if !ok {
		it.Result, it.Detail = ResultConflict, r.leaseMoved(ctx, it.Target.Group, it.Target.Key, f.Token)
		return nil
	}
	it.Result, it.Detail = ResultApplied, "released "+f.Token
	return nil
}

// leaseMoved describes the lease now, for a conflict's detail.
func (r *Repairer) leaseMoved(ctx context.Context, group, key, planned string) string {
	now, err := r.inspect.Lease(ctx, group, key)
	switch {
	case err != nil:
		return fmt.Sprintf("the lease is no longer %s", planned)
	case now.Token != nil:
		return fmt.Sprintf("the lease is now %s, the plan saw %s", *now.Token, planned)
	}
	return fmt.Sprintf("the lease is now %s, the plan saw %s", now.State, planned)
}

var errNoLedger = errors.New("repair: no failure ledger configured")
