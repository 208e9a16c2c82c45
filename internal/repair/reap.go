package repair

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/protctl/protctl/internal/inspect"
	"github.com/protctl/protctl/pkg/broker"
)

func (r *Repairer) newPlan() *Plan {
	return &Plan{APIVersion: APIVersion, Kind: PlanKind, Layout: r.broker.Layout().String(), CreatedAt: r.cfg.now(), Items: []Item{}}
}

func (r *Repairer) planReap(ctx context.Context, req ReapRequest) (*Plan, error) {
	const op = "plan reap"
	l := r.broker.Layout()
	if err := l.ValidateName(op, "category", req.Category); err != nil {
		return nil, err
	}
	if req.MinIdle < 0 {
		return nil, &broker.InvalidArgumentError{Op: op, Arg: "minIdle", Value: req.MinIdle.String(), Reason: "must not be negative"}
	}
	if !req.AllCold && len(req.Keys) == 0 {
		return nil, &broker.InvalidArgumentError{Op: op, Arg: "keys", Value: "[]", Reason: "name keys or ask for all cold partitions"}
	}
	cat, err := r.requireCategory(ctx, req.Category)
	if err != nil {
		return nil, err
	}
	now, err := r.inspect.ServerTime(ctx)
	if err != nil {
		return nil, err
	}
	plan := r.newPlan()
	var wrong error // the first partition with a key of the wrong type
	add := func(p inspect.Partition) {
		if err := p.Err(); errors.Is(err, broker.ErrWrongType) && wrong == nil {
			wrong = err
		}
		it := r.reapItem(p, cat.Groups, req.MinIdle, now, req.Force)
		if req.AllCold && !it.Allowed {
			return
		}
		plan.Items = append(plan.Items, it)
	}
	opts := inspect.PartitionOptions{LaneGroups: true}
	if req.AllCold {
		err = r.inspect.EachPartition(ctx, req.Category, opts, func(p inspect.Partition) error { add(p); return nil })
		slices.SortFunc(plan.Items, func(a, b Item) int { return compareStrings(a.Target.Key, b.Target.Key) })
	} else {
		for _, k := range req.Keys {
			if err := l.ValidateKey(k, r.cfg.backfill); err != nil {
				return nil, err
			}
		}
		var parts []inspect.Partition
		parts, err = r.inspect.PartitionsByKey(ctx, req.Category, req.Keys, opts)
		if err == nil {
			err = r.requirePartitions(ctx, req.Category, parts)
		}
		for _, p := range parts {
			add(p)
		}
	}
	if err == nil {
		err = wrong // a data problem, not a refusal: the plan is not made
	}
	if err != nil {
		return nil, err
	}
	return plan, nil
}

// groupOn reads group on each of keys of category as partitions ls does
// (only the keys it reads are in the map): its lease state in the
// listing's words (inspect.LeaseStateOf: released and expired tell
// whether work waits, which the lease keys alone cannot) and generation.
func (r *Repairer) groupOn(ctx context.Context, category, group string, keys []string) (map[string]inspect.Group, error) {
	out := make(map[string]inspect.Group, len(keys))
	if len(keys) == 0 {
		return out, nil
	}
	err := r.inspect.EachPartitionByKey(ctx, category, keys, inspect.PartitionOptions{Group: group}, func(p inspect.Partition) error {
		if g, ok := p.Group(group); ok {
			out[p.Key] = g
		}
		return nil
	})
	return out, err
}

// requireCategory reads category's summary, failing with an error
// wrapping inspect.ErrNotFound when nothing in Redis names it (no index,
// no group registry, no key C:*): a typo is not a plan with nothing to do.
func (r *Repairer) requireCategory(ctx context.Context, category string) (inspect.Category, error) {
	cat, err := r.inspect.CategoryInfo(ctx, category)
	if err != nil || cat.Partitions > 0 {
		return cat, err
	}
	known, err := r.inspect.CategoryKnown(ctx, category)
	if err != nil {
		return cat, err
	}
	if !known {
		l := r.broker.Layout()
		return cat, fmt.Errorf("%w: category %q not found: no index %s, no group registry, no key %s:*", inspect.ErrNotFound, category, l.IndexKey(category), category)
	}
	return cat, nil
}

// requirePartitions fails with an error wrapping inspect.ErrNotFound for
// the first of parts that is neither in category's index nor has a lane:
// a key that was never there (a typo) is not a reap that applies.
func (r *Repairer) requirePartitions(ctx context.Context, category string, parts []inspect.Partition) error {
	var bare []any
	for _, p := range parts {
		if !slices.ContainsFunc(p.Lanes, func(l inspect.Lane) bool { return l.Exists }) && p.Err() == nil {
			bare = append(bare, p.Key)
		}
	}
	if len(bare) == 0 {
		return nil
	}
	index := r.broker.Layout().IndexKey(category)
	in, err := r.client.SMIsMember(ctx, index, bare...).Result()
	if err != nil {
		return fmt.Errorf("repair: read %s: %w", index, err)
	}
	for i, ok := range in {
		if !ok {
			return fmt.Errorf("%w: category %q has no partition %q (not in %s, no stream)", inspect.ErrNotFound, category, bare[i], index)
		}
	}
	return nil
}

// requirePartitionGroup fails with an error wrapping inspect.ErrNotFound
// unless category is known (requireCategory), key is one of its
// partitions (in its index or with a lane: requirePartitions) and, when
// group is not empty, group reads it: created on a lane, registered for
// the category, or with a lease or generation counter on it. It is the
// check every command naming a partition and a group makes before it
// plans, so that a typo exits NOT_FOUND with nothing written, instead of
// acting on keys that only look alike (G:K:__lease__ names no category).
//
// It returns the group as the partition's listing reads it (its lease
// state in partitions ls's words among the rest).
func (r *Repairer) requirePartitionGroup(ctx context.Context, category, key, group string) (inspect.Group, error) {
	l := r.broker.Layout()
	if err := l.ValidateName("plan", "category", category); err != nil {
		return inspect.Group{}, err
	}
	if err := l.ValidateKey(key, r.cfg.backfill); err != nil {
		return inspect.Group{}, err
	}
	if _, err := r.requireCategory(ctx, category); err != nil {
		return inspect.Group{}, err
	}
	parts, err := r.inspect.PartitionsByKey(ctx, category, []string{key}, inspect.PartitionOptions{Group: group})
	if err != nil {
		return inspect.Group{}, err
	}
	if len(parts) != 1 {
		return inspect.Group{}, fmt.Errorf("%w: category %q has no partition %q", inspect.ErrNotFound, category, key)
	}
	if err := parts[0].Err(); errors.Is(err, broker.ErrWrongType) {
		return inspect.Group{}, err
	}
	if err := r.requirePartitions(ctx, category, parts); err != nil {
		return inspect.Group{}, err
	}
	if group == "" {
		return inspect.Group{}, nil
	}
	if g, ok := parts[0].Group(group); ok && (g.Created || g.Registered || g.Lease != nil || g.Generation != nil) {
		return g, nil
	}
	return inspect.Group{}, fmt.Errorf("%w: group %q has never leased or read partition %q of %q (no lease or generation key, not on its lanes, not registered)",
		inspect.ErrNotFound, group, key, category)
}

func compareStrings(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// reapItem evaluates the broker's reap rules (redisbroker/reap.lua) on a
// snapshot, lane by lane in the script's order, so that the plan names the
// same blocker the script would.
//
// A group's lease that is held (its key exists: a live owner, even one
// with nothing to do) refuses the item unless force is set, with the
// release's wording; with force the item names the lease it takes. Every
// group's lease is recorded, held or free, so that the apply reaps only
// while each still holds what the plan saw.
func (r *Repairer) reapItem(p inspect.Partition, registered []string, minIdle time.Duration, now time.Time, force bool) Item {
	it := Item{
		Action: ActionReap,
		Target: Target{Category: p.Category, Key: p.Key},
		Params: Params{MinIdleMs: minIdle.Milliseconds(), BackfillSuffix: r.cfg.backfill, Force: force},
	}
	it.Precondition.LastEntryID = p.LastEntryID
	it.Precondition.Lanes = lanesState(p)
	it.Precondition.Leases = []GroupLease{}
	var held []string
	for _, g := range p.Groups {
		gl := GroupLease{Group: g.Name}
		if g.Lease != nil {
			gl.Lease = ptr(g.Lease.Token)
			held = append(held, fmt.Sprintf("the lease of group %q %s", g.Name, heldText(g.Lease.Token, g.Lease.TTLMs)))
		}
		it.Precondition.Leases = append(it.Precondition.Leases, gl)
	}
	it.Allowed, it.Reason = reapVerdict(p, registered, minIdle, now)
	if !it.Allowed || len(held) == 0 {
		return it
	}
	if !force {
		it.Allowed = false
		it.Reason = strings.Join(held, "; ") + "; reaping takes the partition from its owner: use --force"
		return it
	}
	it.Reason += "; and delete " + strings.Join(held, ", ") + " if it still holds that value"
	return it
}

func ptr[T any](v T) *T { return &v }

func lanesState(p inspect.Partition) []LaneState {
	out := make([]LaneState, 0, len(p.Lanes))
	for _, l := range p.Lanes {
		ls := LaneState{Stream: l.Stream, Exists: l.Exists, Length: l.Length, LastEntryID: l.LastEntryID, Groups: []inspect.GroupPosition{}}
		for _, g := range l.Groups {
			ls.Groups = append(ls.Groups, inspect.GroupPosition{Name: g.Name, LastDeliveredID: g.LastDeliveredID, Pending: g.Pending, Floor: g.LastDeliveredID})
		}
		out = append(out, ls)
	}
	return out
}

func reapVerdict(p inspect.Partition, registered []string, minIdle time.Duration, now time.Time) (bool, string) {
	if p.Error != "" {
		return false, p.Error
	}
	any := false
	for _, l := range p.Lanes {
		if !l.Exists {
			continue
		}
		any = true
		if l.Length > 0 && len(l.Groups) == 0 {
			return false, fmt.Sprintf("%q has %d entries but no consumer group", l.Stream, l.Length)
		}
		present := map[string]bool{}
		for _, g := range l.Groups {
			present[g.Name] = true
			if g.Pending > 0 {
				return false, fmt.Sprintf("group %q has %d pending entries on %q", g.Name, g.Pending, l.Stream)
			}
			if l.LastEntryID != nil && (g.Lag == nil || *g.Lag > 0) {
				return false, fmt.Sprintf("group %q has been delivered up to %s of %q, whose last entry is %s (lagging)",
					g.Name, g.LastDeliveredID, l.Stream, *l.LastEntryID)
			}
		}
		if l.Length > 0 {
			for _, name := range registered {
				if !present[name] {
					return false, fmt.Sprintf("registered group %q has never read %q", name, l.Stream)
				}
			}
		}
		if l.LastEntryID != nil {
			if ms, err := broker.ParseStreamID(*l.LastEntryID); err == nil {
				age := now.Sub(time.UnixMilli(int64(ms.Ms)))
				if age < minIdle {
					return false, fmt.Sprintf("the newest entry of %q is %s old, younger than minIdle %s", l.Stream, age.Round(time.Millisecond), minIdle)
				}
			}
		}
	}
	if !any {
		return true, "no stream: only the index entry is removed"
	}
	return true, fmt.Sprintf("every group has read and acked all %d entries and the newest is older than %s", p.Length, minIdle)
}

// applyReap checks that no lane got a new entry (or lost its stream)
// since the plan, then lets ReapPartition re-check everything and delete
// in one script.
func (r *Repairer) applyReap(ctx context.Context, it *Item) error {
	parts, err := r.inspect.PartitionsByKey(ctx, it.Target.Category, []string{it.Target.Key}, inspect.PartitionOptions{})
	if err != nil {
		return err
	}
	now := lanesState(parts[0])
	if moved := lanesMoved(it.Precondition.Lanes, now); moved != "" {
		it.Result, it.Detail = ResultConflict, moved
		return nil
	}
	res, err := r.reapFenced(ctx, it, parts[0])
	if errors.Is(err, errNoLeaseReaper) {
		it.Result, it.Detail = ResultRefused, err.Error()
		return nil
	}
	if err != nil {
		return err
	}
	if !res.Reaped {
		it.Result, it.Detail = ResultConflict, "state moved since the plan: "+res.Reason
		return nil
	}
	it.Result, it.Detail = ResultApplied, "removed from the index and deleted its lanes"
	if slices.ContainsFunc(it.Precondition.Leases, func(gl GroupLease) bool { return gl.Lease != nil }) {
		it.Detail += " and the leases it saw"
	}
	return nil
}

// reapFenced reaps it's partition only while every group's lease holds
// what the plan saw (Precondition.Leases; a plan without them, made by an
// older protctl, is taken to have seen every lease of now free), through
// the broker's LeaseReaper. A broker without that capability can reap
// only a partition whose leases were all free, and cannot check even
// that atomically, so it is refused a partition with a held lease.
func (r *Repairer) reapFenced(ctx context.Context, it *Item, now inspect.Partition) (broker.ReapResult, error) {
	seen := make([]broker.SeenLease, 0, len(it.Precondition.Leases))
	anyHeld := false
	if it.Precondition.Leases == nil {
		for _, g := range now.Groups {
			seen = append(seen, broker.SeenLease{Group: g.Name})
		}
	}
	for _, gl := range it.Precondition.Leases {
		seen = append(seen, broker.SeenLease{Group: gl.Group, Token: str(gl.Lease)})
		anyHeld = anyHeld || gl.Lease != nil
	}
	minIdle := time.Duration(it.Params.MinIdleMs) * time.Millisecond
	if lr, ok := r.broker.(broker.LeaseReaper); ok {
		return lr.ReapPartitionLeases(ctx, it.Target.Category, it.Target.Key, minIdle, it.Params.BackfillSuffix, seen)
	}
	if anyHeld {
		return broker.ReapResult{}, errNoLeaseReaper
	}
	return r.broker.ReapPartition(ctx, it.Target.Category, it.Target.Key, minIdle, it.Params.BackfillSuffix)
}

var errNoLeaseReaper = errors.New("this broker cannot reap a partition fenced on its leases (broker.LeaseReaper)")

// lanesMoved describes how lanes changed from planned to now ("" when
// they did not): a lane created or deleted, or a new newest entry.
func lanesMoved(planned, now []LaneState) string {
	find := func(ls []LaneState, stream string) (LaneState, bool) {
		for _, l := range ls {
			if l.Stream == stream {
				return l, true
			}
		}
		return LaneState{}, false
	}
	for _, p := range planned {
		n, ok := find(now, p.Stream)
		if !ok || n.Exists != p.Exists {
			return fmt.Sprintf("lane %q was created or deleted since the plan", p.Stream)
		}
		if str(p.LastEntryID) != str(n.LastEntryID) {
			return fmt.Sprintf("the newest entry of %q is %s, the plan saw %s", p.Stream, orNone(n.LastEntryID), orNone(p.LastEntryID))
		}
	}
	for _, n := range now {
		if _, ok := find(planned, n.Stream); !ok && n.Exists {
			return fmt.Sprintf("lane %q was created since the plan", n.Stream)
		}
	}
	return ""
}

func str(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}

func orNone(p *string) string {
	if p == nil {
		return "none"
	}
	return *p
}
