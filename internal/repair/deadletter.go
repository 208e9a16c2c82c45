package repair

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/protctl/protctl/internal/inspect"
	"github.com/protctl/protctl/pkg/broker"
	"github.com/protctl/protctl/pkg/broker/redisbroker"
)

// DefaultDeadLetterReason is recorded when DeadLetterRequest.Reason is
// empty.
const DefaultDeadLetterReason = "dead-lettered by an operator with protctl"

func (r *Repairer) planDeadLetter(ctx context.Context, req DeadLetterRequest) (*Plan, error) {
	const op = "plan dead-letter"
	l := r.broker.Layout()
	if err := l.ValidateName(op, "category", req.Category); err != nil {
		return nil, err
	}
	if err := l.ValidateName(op, "group", req.Group); err != nil {
		return nil, err
	}
	if req.Key == "" {
		return nil, &broker.InvalidArgumentError{Op: op, Arg: "partition key", Value: `""`, Reason: "must not be empty"}
	}
	if req.ID != "" {
		// A malformed id is the caller's mistake, not an entry that is
		// not pending.
		if _, err := broker.ParseStreamID(req.ID); err != nil {
			return nil, &broker.InvalidArgumentError{Op: op, Arg: "id", Value: strconv.Quote(req.ID), Reason: "want a stream id <ms>-<seq>"}
		}
	}
	if req.MinDeliveries <= 0 {
		req.MinDeliveries = 2
	}
	if req.Reason == "" {
		req.Reason = DefaultDeadLetterReason
	}
	d, err := r.inspect.Partition(ctx, req.Category, req.Key, inspect.ExplainOptions{PendingLimit: 1000})
	if err != nil {
		return nil, err
	}
	var g *inspect.GroupDetail
	for i := range d.Groups {
		if d.Groups[i].Name == req.Group {
			g = &d.Groups[i]
		}
	}
	if g == nil {
		return nil, fmt.Errorf("%w: group %q does not read partition %q of %q (not on its lanes, not registered for the category)", inspect.ErrNotFound, req.Group, req.Key, req.Category)
	}
	it := Item{
		Action: ActionDeadLetter,
		Target: Target{Category: req.Category, Key: req.Key, Group: req.Group, Stream: d.Stream, ID: req.ID},
		Params: Params{Force: req.Force, MinDeliveries: req.MinDeliveries, Reason: req.Reason, DLQStream: l.DLQStream(req.Category, req.Key)},
	}
	plan := r.newPlan()
	defer func() { plan.Items = append(plan.Items, it) }()

	if g.Lease != nil {
		it.Precondition.Lease = &g.Lease.Token
	}
	it.Precondition.Generation = g.Generation
	it.Precondition.LeaseState = g.LeaseState
	var pend *inspect.PendingEntry
	for i, p := range g.PendingEntries {
		if req.ID == "" || p.ID == req.ID {
			pend = &g.PendingEntries[i]
			break
		}
	}
	if pend == nil {
		if req.ID == "" {
			it.Result, it.Reason = ResultSkipped, fmt.Sprintf("nothing is pending for group %q: no head to dead-letter (%s)", req.Group, g.Verdict.Reason)
		} else {
			it.Reason = fmt.Sprintf("entry %s is not pending for group %q (only pending entries are dead-lettered)", req.ID, req.Group)
		}
		return plan, nil
	}
	it.Target.ID, it.Target.Stream = pend.ID, pend.Stream
	it.Precondition.Pending = pend
	it.Precondition.LastEntryID = d.LastEntryID
	fence := fmt.Sprintf("fenced on the lease %s", orNone(it.Precondition.Lease))
	if it.Precondition.Lease == nil {
		fence = fmt.Sprintf("no lease is held: apply takes an operator lease as %s for the move", r.cfg.operator)
	}
	switch {
	case pend.Deliveries < req.MinDeliveries && !req.Force:
		it.Reason = fmt.Sprintf("entry %s has been delivered %d times (fewer than %d): its owner may be handling it; use --force",
			pend.ID, pend.Deliveries, req.MinDeliveries)
	default:
		it.Allowed = true
		it.Reason = fmt.Sprintf("move entry %s (delivered %d times, pending to %s) to %s and ack it; %s",
			pend.ID, pend.Deliveries, pend.Consumer, it.Params.DLQStream, fence)
	}
	return plan, nil
}

// applyDeadLetter re-checks that the entry is still pending for the
// group, then dead-letters it fenced on the planned lease, or on a
// short operator lease when the plan saw none (see doc.go).
func (r *Repairer) applyDeadLetter(ctx context.Context, it *Item) error {
	t, pc := it.Target, it.Precondition
	if pc.Pending == nil {
		return fmt.Errorf("%w: dead-letter item without a planned pending entry", ErrInvalidPlan)
	}
	l := r.broker.Layout()
	leaseKey, genKey := l.LeaseKey(t.Group, t.Key), l.GenerationKey(t.Group, t.Key)

	pend, err := r.client.XPendingExt(ctx, &redis.XPendingExtArgs{Stream: t.Stream, Group: t.Group, Start: t.ID, End: t.ID, Count: 1}).Result()
	if err != nil && !isNoGroup(err) {
		return err
	}
	if len(pend) == 0 || pend[0].RetryCount < pc.Pending.Deliveries {
		it.Result, it.Detail = ResultConflict, fmt.Sprintf("entry %s is no longer pending for group %q as planned", t.ID, t.Group)
		return nil
	}
	// The plan's guard, derived again from its parameters and the count
	// now (guards.go): an edited plan file's allowed is not a --force.
	if min := minDeliveries(it.Params); pend[0].RetryCount < min && !it.Params.Force {
		it.Result, it.Detail = ResultRefused, fmt.Sprintf("entry %s has been delivered %d times (fewer than %d): its owner may be handling it; plan it with --force",
			t.ID, pend[0].RetryCount, min)
		return nil
	}

	var f broker.Fence
	if pc.Lease != nil {
		f = broker.Fence{LeaseKey: leaseKey, Token: *pc.Lease}
	} else {
		lease, moved, err := r.operatorLease(ctx, leaseKey, genKey, pc.Generation)
		if err != nil {
			return err
		}
		if moved != "" {
			it.Result, it.Detail = ResultConflict, moved+": nothing was changed"
			return nil
		}
		// Always give the operator lease back, whatever happens next.
		defer func() { _, _ = r.broker.ReleasePartitionLease(context.WithoutCancel(ctx), lease.Fence) }()
		f = lease.Fence
	}
	id, err := r.broker.DeadLetterPartitionFenced(ctx, f, t.Stream, t.Group, t.ID, it.Params.DLQStream, it.Params.Reason)
	if errors.Is(err, broker.ErrLeaseLost) {
		it.Result, it.Detail = ResultConflict, r.leaseMoved(ctx, t.Category, t.Group, t.Key, f.Token)
		return nil
	}
	if err != nil {
		return err
	}
	it.Result = ResultApplied
	it.Detail = fmt.Sprintf("moved %s to %s as %s and acked it, fenced on %s", t.ID, it.Params.DLQStream, id, f.Token)
	return nil
}

// minDeliveries is a dead-letter item's guard, the default for a plan
// that does not record it.
func minDeliveries(p Params) int64 {
	if p.MinDeliveries > 0 {
		return p.MinDeliveries
	}
	return 2
}

// leaseAtAcquirer is the optional capability of a Broker to take a free
// lease only at the generation a plan saw (redisbroker.Broker's
// AcquirePartitionLeaseAt), found by type assertion.
type leaseAtAcquirer interface {
	AcquirePartitionLeaseAt(ctx context.Context, leaseKey, generationKey, owner string, ttl time.Duration, generation *int64) (redisbroker.LeaseAt, error)
}

var _ leaseAtAcquirer = (*redisbroker.Broker)(nil)

// operatorLease takes the short operator lease on a partition the plan
// saw free at generation planned (nil: never leased), or returns why not
// (a conflict's detail) having changed nothing: the check and the take
// are one atomic step (acquireat.lua), so a partition leased since the
// plan leaves its counter as it found it. A conflict that bumped the
// counter would hand the next owner a generation nobody held, and the
// plan's "nothing was changed" would not be true.
//
// A broker without that step is checked first and then acquired: two
// steps, so a lease taken between them still bumps the counter (the
// generation check after the acquire keeps it a conflict).
func (r *Repairer) operatorLease(ctx context.Context, leaseKey, genKey string, planned *int64) (broker.Lease, string, error) {
	if a, ok := r.broker.(leaseAtAcquirer); ok {
		got, err := a.AcquirePartitionLeaseAt(ctx, leaseKey, genKey, r.cfg.operator, r.cfg.leaseTTL, planned)
		switch {
		case err != nil:
			return broker.Lease{}, "", err
		case got.Held != "":
			return broker.Lease{}, fmt.Sprintf("the lease is now %s, the plan saw none", got.Held), nil
		case got.Moved:
			return broker.Lease{}, fmt.Sprintf("the partition was leased since the plan (generation %s, the plan saw %s)", genText(got.Now), genText(planned)), nil
		}
		return got.Lease, "", nil
	}
	lease, ok, err := r.broker.AcquirePartitionLease(ctx, leaseKey, genKey, r.cfg.operator, r.cfg.leaseTTL)
	if err != nil {
		return broker.Lease{}, "", err
	}
	if !ok {
		now, _ := r.client.Get(ctx, leaseKey).Result()
		return broker.Lease{}, fmt.Sprintf("the lease is now %s, the plan saw none", now), nil
	}
	if lease.Generation != derefInt(planned)+1 {
		_, _ = r.broker.ReleasePartitionLease(context.WithoutCancel(ctx), lease.Fence)
		return broker.Lease{}, fmt.Sprintf("the partition was leased since the plan (generation %d, the plan saw %s)", lease.Generation-1, genText(planned)), nil
	}
	return lease, "", nil
}

func isNoGroup(err error) bool {
	var rerr redis.Error
	return errors.As(err, &rerr) && len(rerr.Error()) >= 7 && rerr.Error()[:7] == "NOGROUP"
}
