package repair

import (
	"context"
	"errors"
	"fmt"

	"github.com/protctl/protctl/pkg/broker"
	"github.com/protctl/protctl/pkg/runtime"
)

func (r *Repairer) planParked(ctx context.Context, req ParkedRequest) (*Plan, error) {
	const op = "plan parked"
	if r.cfg.ledger == nil {
		return nil, errNoLedger
	}
	if req.Action != ActionRetry && req.Action != ActionSkip {
		return nil, &broker.InvalidArgumentError{Op: op, Arg: "action", Value: fmt.Sprintf("%q", req.Action), Reason: `want "retry" or "skip"`}
	}
	if req.Action == ActionSkip && req.Reason == "" {
		return nil, &broker.InvalidArgumentError{Op: op, Arg: "reason", Value: `""`, Reason: "a skip needs a reason"}
	}
	var entries []runtime.Parked
	if req.All {
		list, err := r.cfg.ledger.ListParked(ctx, req.Subscription)
		if err != nil {
			return nil, err
		}
		for _, p := range list {
			if (req.Aggregate == "" || p.Aggregate == req.Aggregate) && (req.Partition == "" || p.Partition == req.Partition) {
				entries = append(entries, p)
			}
		}
		if req.Max > 0 && len(entries) > req.Max {
			entries = entries[:req.Max]
		}
	} else {
		if req.Subscription == "" || req.Aggregate == "" {
			return nil, &broker.InvalidArgumentError{Op: op, Arg: "subscription and aggregate", Value: `""`, Reason: "name one entry or ask for all"}
		}
		p, err := r.cfg.ledger.GetParked(ctx, req.Subscription, req.Partition, req.Aggregate)
		if err != nil {
			return nil, err
		}
		entries = []runtime.Parked{p}
	}
	plan := r.newPlan()
	for _, p := range entries {
		plan.Items = append(plan.Items, parkedItem(req, p))
	}
	return plan, nil
}

func parkedItem(req ParkedRequest, p runtime.Parked) Item {
	it := Item{
		Action: req.Action,
		Target: Target{Subscription: p.Subscription, Aggregate: p.Aggregate, Category: p.Category, Key: redisKey(p), Partition: kafkaPartition(p)},
		Params: Params{Reason: req.Reason, By: req.By},
		Precondition: Precondition{Parked: &ParkedState{
			Status: string(p.Status), Position: p.Position, Attempts: p.Attempts, Generation: p.Generation,
		}},
	}
	switch {
	case req.Action == ActionRetry && p.Status == runtime.StatusUnrecoverable:
		it.Reason = fmt.Sprintf("the records at %s are no longer retained: only a skip resolves it", p.Position)
	case p.Request != nil && p.Request.Action == runtime.Action(req.Action):
		it.Result = ResultSkipped
		it.Reason = fmt.Sprintf("a %s was already requested at %s", req.Action, p.Request.RequestedAt.UTC().Format("2006-01-02T15:04:05Z"))
	case req.Action == ActionRetry:
		it.Allowed = true
		it.Reason = fmt.Sprintf("ask the owner to handle %s again from %s (%d attempts so far)", p.Aggregate, p.Position, p.Attempts)
	default:
		it.Allowed = true
		it.Reason = fmt.Sprintf("ask the owner to skip the record at %s of %s", p.Position, p.Aggregate)
	}
	return it
}

func kafkaPartition(p runtime.Parked) string {
	if p.Source == runtime.SourceKafka {
		return p.Partition
	}
	return ""
}

func redisKey(p runtime.Parked) string {
	if p.Source == runtime.SourceRedis {
		return p.Partition
	}
	return ""
}

// applyParked re-reads the entry, then records the request in the
// ledger; the owner acts on it under its own fence.
func (r *Repairer) applyParked(ctx context.Context, it *Item) error {
	if r.cfg.ledger == nil {
		return errNoLedger
	}
	t, planned := it.Target, it.Precondition.Parked
	if planned == nil {
		return fmt.Errorf("%w: %s item without a planned ledger entry", ErrInvalidPlan, it.Action)
	}
	now, err := r.cfg.ledger.GetParked(ctx, t.Subscription, t.Partition, t.Aggregate)
	if errors.Is(err, runtime.ErrNotParked) {
		it.Result, it.Detail = ResultConflict, "the entry was resolved since the plan"
		return nil
	}
	if err != nil {
		return err
	}
	if now.Position != planned.Position {
		it.Result, it.Detail = ResultConflict, fmt.Sprintf("the entry is now parked at %s, the plan saw %s", now.Position, planned.Position)
		return nil
	}
	if it.Action == ActionRetry {
		err = r.cfg.ledger.RequestRetry(ctx, t.Subscription, t.Partition, t.Aggregate, it.Params.By)
	} else {
		err = r.cfg.ledger.RequestSkip(ctx, t.Subscription, t.Partition, t.Aggregate, it.Params.Reason, it.Params.By)
	}
	switch {
	case errors.Is(err, runtime.ErrNotParked):
		it.Result, it.Detail = ResultConflict, "the entry was resolved since the plan"
	case errors.Is(err, runtime.ErrUnrecoverable):
		it.Result, it.Detail = ResultRefused, "the entry became unrecoverable: only a skip resolves it"
	case err != nil:
		return err
	default:
		it.Result, it.Detail = ResultApplied, fmt.Sprintf("%s requested; the partition's owner acts on it", it.Action)
	}
	return nil
}
