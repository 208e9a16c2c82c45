package repair

import (
	"context"
	"fmt"
	"slices"

	"github.com/protctl/protctl/internal/inspect"
)

func (r *Repairer) planTrim(ctx context.Context, req TrimRequest) (*Plan, error) {
	ti, err := r.inspect.TrimInfo(ctx, req.Stream, req.MaxLen)
	if err != nil {
		return nil, err
	}
	it := Item{
		Action:       ActionTrim,
		Target:       Target{Stream: req.Stream},
		Params:       Params{MaxLen: req.MaxLen},
		Precondition: Precondition{LastEntryID: ti.LastEntryID, Trim: &ti},
	}
	switch {
	case !ti.Exists:
		return nil, fmt.Errorf("%w: stream %q does not exist", inspect.ErrNotFound, req.Stream)
	case ti.Removes == 0:
		it.Result, it.Reason = ResultSkipped, "nothing to remove: "+ti.Reason
	default:
		it.Allowed, it.Reason = true, ti.Reason
	}
	if ti.Floor != nil && it.Reason != "" && ti.PinnedBy != nil {
		it.Reason += fmt.Sprintf(" (floor %s pinned by group %q)", *ti.Floor, *ti.PinnedBy)
	}
	plan := r.newPlan()
	plan.Items = append(plan.Items, it)
	return plan, nil
}

// applyTrim checks that the stream still exists with the groups the plan
// saw, then lets the broker's Trim recompute the floor and trim in one
// script.
func (r *Repairer) applyTrim(ctx context.Context, it *Item) error {
	planned := it.Precondition.Trim
	if planned == nil {
		return fmt.Errorf("%w: trim item without a planned trim", ErrInvalidPlan)
	}
	now, err := r.inspect.TrimInfo(ctx, it.Target.Stream, it.Params.MaxLen)
	if err != nil {
		return err
	}
	switch {
	case !now.Exists:
		it.Result, it.Detail = ResultConflict, "the stream was deleted since the plan"
		return nil
	case !slices.Equal(groupNames(planned.Groups), groupNames(now.Groups)):
		it.Result, it.Detail = ResultConflict, fmt.Sprintf("the stream's groups are now %v, the plan saw %v", groupNames(now.Groups), groupNames(planned.Groups))
		return nil
	case !slices.Equal(planned.MissingGroups, now.MissingGroups):
		it.Result, it.Detail = ResultConflict, fmt.Sprintf("registered groups not on the stream are now %v, the plan saw %v", now.MissingGroups, planned.MissingGroups)
		return nil
	}
	n, err := r.broker.Trim(ctx, it.Target.Stream, it.Params.MaxLen)
	if err != nil {
		return err
	}
	if n == 0 {
		// Nothing left to remove (an earlier apply, or groups that
		// have not advanced): a no-op is skipped, not applied.
		it.Result, it.Detail = ResultSkipped, fmt.Sprintf("nothing to remove now (the plan expected %d)", planned.Removes)
		return nil
	}
	it.Result, it.Detail = ResultApplied, fmt.Sprintf("removed %d entries (the plan expected %d)", n, planned.Removes)
	return nil
}

func groupNames(gs []inspect.GroupPosition) []string {
	out := make([]string, len(gs))
	for i, g := range gs {
		out[i] = g.Name
	}
	slices.Sort(out)
	return out
}
