package repair

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"

	"github.com/protctl/protctl/internal/inspect"
	"github.com/protctl/protctl/pkg/broker"
	"github.com/protctl/protctl/pkg/runtime"
	"github.com/protctl/protctl/pkg/runtime/placement"
	"github.com/protctl/protctl/pkg/runtime/redisstore"
)

// Node modes and pins (docs/decisions/0046-drain-cordon-move.md). Each
// item records the mode or pin record it saw, as stored; Apply changes it
// with redisstore's compare-and-set, which refuses (conflict, exit 5)
// when the record is no longer exactly that, and announces the change to
// the service's nodes.

// NodeModeRequest asks to cordon, drain or uncordon a node of a service.
type NodeModeRequest struct {
	Action  Action // ActionCordon, ActionDrain or ActionUncordon
	Service string
	Node    string
	Reason  string // recorded with the mode
	By      string // the operator, recorded with the mode
}

// PlanNodeMode plans one node's mode change. A node that is neither a
// live member nor has a mode stored is an error wrapping
// inspect.ErrNotFound (a typo); a node already in the mode asked for is
// skipped.
func (r *Repairer) PlanNodeMode(ctx context.Context, req NodeModeRequest) (*Plan, error) {
	const op = "plan node mode"
	want := map[Action]placement.Mode{ActionCordon: placement.Cordoned, ActionDrain: placement.Draining, ActionUncordon: placement.Active}
	mode, ok := want[req.Action]
	if !ok {
		return nil, &broker.InvalidArgumentError{Op: op, Arg: "action", Value: strconv.Quote(string(req.Action)), Reason: "want cordon, drain or uncordon"}
	}
	if req.Node == "" {
		return nil, &broker.InvalidArgumentError{Op: op, Arg: "node", Value: `""`, Reason: "must not be empty"}
	}
	st := redisstore.New(r.client)
	modes, _, err := st.RawPlacement(ctx, req.Service)
	if err != nil {
		return nil, err
	}
	live, err := r.isLive(ctx, st, req.Service, req.Node)
	if err != nil {
		return nil, err
	}
	raw, stored := modes[req.Node]
	if !live && !stored {
		return nil, fmt.Errorf("%w: node %q is not a live member of service %q and has no mode stored", inspect.ErrNotFound, req.Node, req.Service)
	}
	seen := PlacementState{Mode: string(placement.Active)}
	if stored {
		seen.Record = &raw
		var rec placement.ModeRecord
		if err := json.Unmarshal([]byte(raw), &rec); err != nil {
			return nil, fmt.Errorf("repair: %s: node %q's mode in %s is not JSON: %w", op, req.Node, redisstore.ModesKey(req.Service), err)
		}
		seen.Mode = string(rec.Mode)
	}
	it := Item{
		Action:       req.Action,
		Target:       Target{Service: req.Service, Node: req.Node},
		Params:       Params{Reason: req.Reason, By: req.By},
		Precondition: Precondition{Placement: &seen},
	}
	switch {
	case seen.Mode == string(mode):
		it.Result = ResultSkipped
		it.Reason = fmt.Sprintf("the node is already %s", mode)
	default:
		it.Allowed = true
		it.Reason = modeReason(mode, seen.Mode, live)
	}
	plan := r.newPlan()
	plan.Items = append(plan.Items, it)
	return plan, nil
}

func modeReason(to placement.Mode, from string, live bool) string {
	var s string
	switch to {
	case placement.Cordoned:
		s = "cordon: the node takes no new partitions and keeps those it holds"
	case placement.Draining:
		s = "drain: the node hands every partition off at its next batch boundary, takes none, and stays running"
	default:
		s = "uncordon: the node takes its share of partitions again"
	}
	s += " (now " + from + ")"
	if !live {
		s += "; the node is not live now: the mode applies when it joins"
	}
	return s
}

// isLive reports whether node is a live member of service.
func (r *Repairer) isLive(ctx context.Context, st *redisstore.Store, service, node string) (bool, error) {
	members, err := st.Live(ctx, service)
	if err != nil {
		return false, err
	}
	return slices.ContainsFunc(members, func(m runtime.NodeStatus) bool { return m.Node == node }), nil
}

// applyNodeMode sets or clears the mode, fenced on the record seen.
func (r *Repairer) applyNodeMode(ctx context.Context, it *Item) error {
	pc := it.Precondition.Placement
	if pc == nil {
		return fmt.Errorf("%w: %s item without a planned placement", ErrInvalidPlan, it.Action)
	}
	var rec *placement.ModeRecord
	switch it.Action {
	case ActionCordon:
		rec = &placement.ModeRecord{Mode: placement.Cordoned}
	case ActionDrain:
		rec = &placement.ModeRecord{Mode: placement.Draining}
	}
	if rec != nil {
		rec.By, rec.Reason, rec.At = it.Params.By, it.Params.Reason, r.cfg.now().UTC()
	}
	err := redisstore.New(r.client).CASNodeMode(ctx, it.Target.Service, it.Target.Node, pc.Record, rec)
	if errors.Is(err, redisstore.ErrPlacementChanged) {
		it.Result, it.Detail = ResultConflict, "the node's mode changed since the plan ("+seenMode(pc)+")"
		return nil
	}
	if err != nil {
		return err
	}
	to := placement.Active
	if rec != nil {
		to = rec.Mode
	}
	it.Result, it.Detail = ResultApplied, fmt.Sprintf("%s -> %s", pc.Mode, to)
	return nil
}

func seenMode(pc *PlacementState) string {
	if pc.Record == nil {
		return "the plan saw none"
	}
	return "the plan saw " + pc.Mode
}

// PinRequest asks to pin a partition to a node (protctl partitions move,
// topics move) or to remove its pin.
type PinRequest struct {
	Unpin   bool
	Service string
	// Scope is the Redis subscription (consumer group) or
	// placement.TopicScope(topic); Partition the Redis key or the Kafka
	// partition number.
	Scope     string
	Partition string
	// Node is the pin's node (not for Unpin).
	Node string
	// Category and Key name a Redis partition, for the record.
	Category, Key string
	By            string
}

// PlanPin plans a pin or its removal. A pin to a node that is not a live
// member, or that is cordoned or draining, is refused: it would be
// ignored (ownership falls back to HRW while its node is not a live,
// active member). Removing a pin that does not exist is skipped. A Redis
// partition's pin (Category set) needs a known category, partition and
// group (Scope), or fails with an error wrapping inspect.ErrNotFound.
func (r *Repairer) PlanPin(ctx context.Context, req PinRequest) (*Plan, error) {
	const op = "plan pin"
	for _, a := range []struct{ name, v string }{{"scope", req.Scope}, {"partition", req.Partition}} {
		if a.v == "" {
			return nil, &broker.InvalidArgumentError{Op: op, Arg: a.name, Value: `""`, Reason: "must not be empty"}
		}
	}
	if !req.Unpin && req.Node == "" {
		return nil, &broker.InvalidArgumentError{Op: op, Arg: "node", Value: `""`, Reason: "must not be empty"}
	}
	st := redisstore.New(r.client)
	modes, pins, err := st.RawPlacement(ctx, req.Service)
	if err != nil {
		return nil, err
	}
	seen := PlacementState{}
	if raw, ok := pins[redisstore.PinField(req.Scope, req.Partition)]; ok {
		seen.Record = &raw
		var p placement.Pin
		if err := json.Unmarshal([]byte(raw), &p); err != nil {
			return nil, fmt.Errorf("repair: %s: the pin of %s/%s in %s is not JSON: %w", op, req.Scope, req.Partition, redisstore.PinsKey(req.Service), err)
		}
		seen.Node = p.Node
	}
	// A Redis partition's pin is a field of the service's pins hash that
	// nothing else checks: a typo in the category, key or group would be
	// written as a pin no node ever reads. Removing a stored pin needs no
	// such check (the partition may have been reaped since).
	if req.Category != "" && (!req.Unpin || seen.Record == nil) {
		if _, err := r.requirePartitionGroup(ctx, req.Category, req.Key, req.Scope); err != nil {
			return nil, err
		}
	}
	it := Item{
		Action:       ActionPin,
		Target:       Target{Service: req.Service, Scope: req.Scope, Partition: req.Partition, Node: req.Node, Category: req.Category, Key: req.Key},
		Params:       Params{By: req.By},
		Precondition: Precondition{Placement: &seen},
	}
	if req.Unpin {
		it.Action = ActionUnpin
		it.Target.Node = ""
		if seen.Record == nil {
			it.Result, it.Reason = ResultSkipped, "the partition is not pinned: nothing to remove"
		} else {
			it.Allowed, it.Reason = true, "remove the pin to "+seen.Node+": ownership goes back to HRW"
		}
		plan := r.newPlan()
		plan.Items = append(plan.Items, it)
		return plan, nil
	}
	live, err := r.isLive(ctx, st, req.Service, req.Node)
	if err != nil {
		return nil, err
	}
	var mode placement.Mode
	if raw, ok := modes[req.Node]; ok {
		var rec placement.ModeRecord
		if json.Unmarshal([]byte(raw), &rec) == nil {
			mode = rec.Mode
		}
	}
	switch {
	case !live:
		it.Reason = fmt.Sprintf("node %q is not a live member of service %q: a pin to it would be ignored", req.Node, req.Service)
	case mode == placement.Cordoned || mode == placement.Draining:
		it.Reason = fmt.Sprintf("node %q is %s: it takes no partitions; uncordon it first", req.Node, mode)
	case seen.Node == req.Node:
		it.Result, it.Reason = ResultSkipped, "the partition is already pinned to "+req.Node
	default:
		it.Allowed = true
		it.Reason = "pin to " + req.Node + ": its owner hands it off at its next batch boundary and " + req.Node + " takes it"
		if seen.Record != nil {
			it.Reason += " (replaces the pin to " + seen.Node + ")"
		}
	}
	plan := r.newPlan()
	plan.Items = append(plan.Items, it)
	return plan, nil
}

// applyPin sets or removes the pin, fenced on the pin seen.
func (r *Repairer) applyPin(ctx context.Context, it *Item) error {
	pc := it.Precondition.Placement
	if pc == nil {
		return fmt.Errorf("%w: %s item without a planned placement", ErrInvalidPlan, it.Action)
	}
	if it.Action == ActionPin {
		if gone, err := r.partitionGone(ctx, Target{Category: it.Target.Category, Key: it.Target.Key, Group: it.Target.Scope}); err != nil || gone != "" {
			if err == nil {
				it.Result, it.Detail = ResultConflict, gone
			}
			return err
		}
	}
	var pin *placement.Pin
	if it.Action == ActionPin {
		pin = &placement.Pin{Node: it.Target.Node, By: it.Params.By, At: r.cfg.now().UTC()}
	}
	err := redisstore.New(r.client).CASPin(ctx, it.Target.Service, it.Target.Scope, it.Target.Partition, pc.Record, pin)
	if errors.Is(err, redisstore.ErrPlacementChanged) {
		was := "the plan saw none"
		if pc.Record != nil {
			was = "the plan saw a pin to " + pc.Node
		}
		it.Result, it.Detail = ResultConflict, "the pin changed since the plan ("+was+")"
		return nil
	}
	if err != nil {
		return err
	}
	if pin == nil {
		it.Result, it.Detail = ResultApplied, "unpinned from "+pc.Node
	} else {
		it.Result, it.Detail = ResultApplied, "pinned to "+pin.Node
	}
	return nil
}
