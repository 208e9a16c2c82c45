package repair

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/protctl/protctl/internal/inspect"
	"github.com/protctl/protctl/pkg/broker"
	"github.com/protctl/protctl/pkg/runtime/pause"
	"github.com/protctl/protctl/pkg/runtime/redisstore"
)

// Operators' pauses (docs/decisions/0045-pause.md): a pause item records
// an entry in the subscription's pauses, a resume item removes one. Each
// is planned on the entry as seen (Precondition.Pause, "" for none) and
// applied in one script only while it is still that (else a conflict,
// exit 5). Pausing what is already paused by the same selector, or
// resuming what is not, has nothing to do (skipped, exit 0): a retried
// command converges instead of failing.

// Pause actions.
const (
	// ActionPause records an operator's pause entry.
	ActionPause Action = "pause"
	// ActionResume removes an operator's pause entry.
	ActionResume Action = "resume"
)

func init() {
	actions[ActionPause] = true
	actions[ActionResume] = true
}

// PauseRequest asks to pause or resume work of a Redis partitioned
// subscription (its consumer group), or, with Service and Topic, of a
// Kafka topic subscription: its entries are then in the scope of the
// topic's lease group ("<service>|topic:<topic>") and its keys are
// aggregates.
type PauseRequest struct {
	Subscription string
	// Service and Topic name a Kafka topic subscription's lease group;
	// both empty for a Redis partitioned subscription.
	Service, Topic string
	// Keys are partition keys, one selector each.
	Keys []string
	// Globs are path.Match patterns of keys, held back now and later.
	Globs []string
	// All selects the whole subscription.
	All bool
	// Resume removes the entries instead of recording them.
	Resume bool
	// Reason and By are recorded with a pause, for display.
	Reason, By string
}

// PlanPause plans one item per selector.
func (r *Repairer) PlanPause(ctx context.Context, req PauseRequest) (*Plan, error) {
	op, action := "plan pause", ActionPause
	if req.Resume {
		op, action = "plan resume", ActionResume
	}
	scope, err := r.pauseScope(ctx, op, req)
	if err != nil {
		return nil, err
	}
	var sels []pause.Selector
	if req.All {
		sels = append(sels, pause.All)
	}
	for _, k := range req.Keys {
		if k == "" {
			return nil, &broker.InvalidArgumentError{Op: op, Arg: "partition key", Value: `""`, Reason: "must not be empty"}
		}
		sels = append(sels, pause.Key(k))
	}
	for _, g := range req.Globs {
		s, err := pause.Parse("glob:" + g)
		if err != nil {
			return nil, &broker.InvalidArgumentError{Op: op, Arg: "--match", Value: fmt.Sprintf("%q", g), Reason: "not a glob pattern (path.Match syntax)"}
		}
		sels = append(sels, s)
	}
	if len(sels) == 0 {
		return nil, &broker.InvalidArgumentError{Op: op, Arg: "selection", Value: "none", Reason: "name partition keys, --match PATTERN or --all"}
	}
	store := redisstore.New(r.client)
	set, err := store.ReadPauses(ctx, scope, req.Subscription)
	if err != nil {
		return nil, err
	}
	plan := r.newPlan()
	seenSel := map[pause.Selector]bool{}
	for _, s := range sels {
		if seenSel[s] {
			continue
		}
		seenSel[s] = true
		raw, err := store.ReadPause(ctx, scope, req.Subscription, s)
		if err != nil {
			return nil, err
		}
		seen := string(raw)
		it := Item{
			Action:       action,
			Target:       Target{Subscription: req.Subscription, Service: req.Service, Topic: req.Topic, Selector: string(s)},
			Precondition: Precondition{Pause: &seen},
		}
		if !req.Resume {
			it.Params = Params{Reason: req.Reason, By: req.By}
		}
		switch {
		case !req.Resume && seen != "":
			it.Result = ResultSkipped
			it.Reason = "already paused: " + describePause(seen)
		case !req.Resume && req.Topic != "":
			it.Allowed = true
			it.Reason = fmt.Sprintf("pause %s of %s on topic %s (its records are held, not handled; its lag keeps counting)", s, req.Subscription, req.Topic)
		case !req.Resume:
			it.Allowed = true
			it.Reason = fmt.Sprintf("pause %s of %s (its owner holds it at a batch boundary, its lag keeps counting)", s, req.Subscription)
		case seen == "":
			it.Result = ResultSkipped
			it.Reason = "not paused by " + string(s) + ": nothing to resume" + stillPaused(set, s)
		default:
			it.Allowed = true
			it.Reason = fmt.Sprintf("resume %s of %s (%s)", s, req.Subscription, describePause(seen)) + stillPaused(set, s)
		}
		plan.Items = append(plan.Items, it)
	}
	return plan, nil
}

// pauseScope validates the request's subscription and returns its scope:
// "" for a Redis partitioned subscription, the lease group for a Kafka
// topic subscription. An unknown subscription (no consumer group of the
// name; no checkpoint of it on the topic) wraps inspect.ErrNotFound.
func (r *Repairer) pauseScope(ctx context.Context, op string, req PauseRequest) (string, error) {
	if req.Service == "" && req.Topic == "" {
		if err := r.broker.Layout().ValidateName(op, "subscription", req.Subscription); err != nil {
			return "", err
		}
		known, err := r.inspect.GroupKnown(ctx, req.Subscription)
		if err != nil {
			return "", err
		}
		if !known {
			return "", fmt.Errorf("%w: subscription %q: no consumer group of that name has leased or registered on any category", inspect.ErrNotFound, req.Subscription)
		}
		return "", nil
	}
	switch {
	case req.Service == "":
		return "", &broker.InvalidArgumentError{Op: op, Arg: "--service", Value: `""`, Reason: "required with --topic"}
	case req.Topic == "":
		return "", &broker.InvalidArgumentError{Op: op, Arg: "--topic", Value: `""`, Reason: "required with --service"}
	case req.Subscription == "":
		return "", &broker.InvalidArgumentError{Op: op, Arg: "subscription", Value: `""`, Reason: "must not be empty"}
	}
	g := redisstore.TopicLeaseGroup(req.Service, req.Topic)
	if err := g.Validate(); err != nil {
		return "", err
	}
	key := g.CheckpointsKey(req.Subscription)
	n, err := r.client.Exists(ctx, key).Result()
	if err != nil {
		return "", fmt.Errorf("repair: %s: read %s: %w", op, key, err)
	}
	if n == 0 {
		return "", fmt.Errorf("%w: subscription %q of topic %q (service %q): it has saved no checkpoint on the topic", inspect.ErrNotFound, req.Subscription, req.Topic, req.Service)
	}
	return g.String(), nil
}

// itemPauseScope is a planned item's scope (see pauseScope).
func itemPauseScope(it *Item) string {
	if it.Target.Topic == "" {
		return ""
	}
	return redisstore.TopicLeaseGroup(it.Target.Service, it.Target.Topic).String()
}

// describePause says who paused, when and why, from a stored entry.
func describePause(raw string) string {
	var p pause.Entry
	if err := json.Unmarshal([]byte(raw), &p); err != nil {
		return "an unreadable entry"
	}
	s := "paused"
	if p.By != "" {
		s += " by " + p.By
	}
	if !p.At.IsZero() {
		s += " at " + p.At.UTC().Format("2006-01-02T15:04:05Z")
	}
	if p.Reason != "" {
		s += ": " + p.Reason
	}
	return s
}

// stillPaused warns when the key of a key selector stays paused by
// another entry after sel is removed.
func stillPaused(set pause.Set, sel pause.Selector) string {
	key, ok := keyOf(sel)
	if !ok {
		return ""
	}
	var rest pause.Set
	for _, p := range set {
		if p.Selector != sel {
			rest = append(rest, p)
		}
	}
	if p, paused := rest.Paused(key); paused {
		return fmt.Sprintf("; %q stays paused by %s", key, p.Selector)
	}
	return ""
}

func keyOf(sel pause.Selector) (string, bool) {
	const pre = "key:"
	if len(sel) > len(pre) && string(sel[:len(pre)]) == pre {
		return string(sel[len(pre):]), true
	}
	return "", false
}

// applyPause records or removes the entry while it is as planned.
func (r *Repairer) applyPause(ctx context.Context, it *Item) error {
	if it.Precondition.Pause == nil {
		return fmt.Errorf("%w: %s item without a planned precondition.pause", ErrInvalidPlan, it.Action)
	}
	sel, err := pause.Parse(it.Target.Selector)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrInvalidPlan, err)
	}
	store := redisstore.New(r.client)
	seen := redisstore.RawPause(*it.Precondition.Pause)
	var now redisstore.RawPause
	if it.Action == ActionPause {
		_, err = store.SetPause(ctx, itemPauseScope(it), it.Target.Subscription, sel, seen, it.Params.By, it.Params.Reason)
	} else {
		now, err = store.RemovePause(ctx, itemPauseScope(it), it.Target.Subscription, sel, seen)
	}
	if errors.Is(err, redisstore.ErrPauseChanged) {
		it.Result, it.Detail = ResultConflict, "the pause entry changed since the plan read it"
		return nil
	}
	if err != nil {
		return err
	}
	if it.Action == ActionPause {
		it.Result, it.Detail = ResultApplied, "paused "+string(sel)
	} else {
		it.Result, it.Detail = ResultApplied, "resumed "+string(sel)+" ("+describePause(string(now))+")"
	}
	return nil
}
