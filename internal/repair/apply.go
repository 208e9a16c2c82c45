package repair

import (
	"context"
	"fmt"
	"time"
)

func (r *Repairer) apply(ctx context.Context, p *Plan, opts ApplyOptions) (Outcome, error) {
	if err := p.Validate(); err != nil {
		return "", err
	}
	if want := r.broker.Layout().String(); p.Layout != want {
		return "", fmt.Errorf("%w: the plan is for the %s layout, the broker uses %s", ErrInvalidPlan, p.Layout, want)
	}
	if opts.Max < 0 || opts.Interval < 0 {
		return "", fmt.Errorf("%w: negative Max or Interval", ErrInvalidPlan)
	}
	if err := r.checkRecord(ctx, p); err != nil {
		return "", err
	}
	a := Applied{Plan: p, StartedAt: r.cfg.now(), CommandLine: opts.CommandLine}
	startErr := r.recordStart(ctx, a)
	a.Outcome, a.Err = r.applyItems(ctx, p, opts, &a.Attempted)
	a.FinishedAt = r.cfg.now()
	return a.Outcome, r.record(ctx, a, startErr)
}

// applyItems is Apply's loop; attempted counts the items it tried.
//
// Pacing (opts.Interval) separates each change made from the next item
// tried: items found done by an earlier run, conflicts and refusals cost
// the owners nothing, so a resumed run skips over the done part of its
// plan at once. opts.Max counts the items tried that were not found done.
func (r *Repairer) applyItems(ctx context.Context, p *Plan, opts ApplyOptions, attempted *int) (Outcome, error) {
	var applied, conflict, refused, tried int
	paced := false // the last item tried made a change
	// batched holds the items a free-seek batch already carried out
	// (applySeekBatch), with their error: the loop books them in order.
	batched := map[int]error{}
	for i := range p.Items {
		it := &p.Items[i]
		if err := ctx.Err(); err != nil {
			return outcome(applied, conflict, refused, 0), err
		}
		berr, inBatch := batched[i]
		if !inBatch {
			it.Detail = ""
		}
		switch {
		case inBatch:
			*attempted++
			if berr != nil {
				it.Result, it.Detail = ResultNone, "not applied: "+berr.Error()
				return outcome(applied, conflict, refused, 0), fmt.Errorf("repair: %s %s: %w", it.Action, it.Target, berr)
			}
			tried++
		case it.Result == ResultSkipped && !it.Allowed:
			// Nothing to do, decided by the plan.
		case !it.Allowed:
			it.Result, it.Detail = ResultRefused, it.Reason
		case opts.Max > 0 && tried >= opts.Max:
			it.Result, it.Detail = ResultNone, fmt.Sprintf("left for a later run: this one was bounded to %d items", opts.Max)
		case opts.Interval == 0 && r.seekBatchable(it):
			// Unpaced free seeks run in pipelined batches: one round
			// trip per batch instead of several per partition.
			idx := []int{i}
			for j := i + 1; j < len(p.Items) && len(idx) < seekBatch && (opts.Max == 0 || tried+len(idx) < opts.Max); j++ {
				if !r.seekBatchable(&p.Items[j]) {
					break
				}
				idx = append(idx, j)
			}
			for k, err := range r.applySeekBatch(ctx, p, idx) {
				batched[idx[k]] = err
			}
			*attempted++
			if err := batched[i]; err != nil {
				it.Result, it.Detail = ResultNone, "not applied: "+err.Error()
				return outcome(applied, conflict, refused, 0), fmt.Errorf("repair: %s %s: %w", it.Action, it.Target, err)
			}
			tried++
		default:
			if paced && opts.Interval > 0 {
				t := time.NewTimer(opts.Interval)
				select {
				case <-ctx.Done():
					t.Stop()
					return outcome(applied, conflict, refused, 0), ctx.Err()
				case <-t.C:
				}
			}
			it.Result = ResultNone
			*attempted++
			// The plan's Allowed is not trusted (a plan file can be
			// edited): the guards are derived again first (guards.go).
			why, err := r.refusal(ctx, it)
			switch {
			case err != nil:
			case why != "":
				it.Result, it.Detail = ResultRefused, why
			default:
				err = r.applyItem(ctx, p.ID, it, opts.SeekWait)
			}
			if err != nil {
				it.Result, it.Detail = ResultNone, "not applied: "+err.Error()
				return outcome(applied, conflict, refused, 0), fmt.Errorf("repair: %s %s: %w", it.Action, it.Target, err)
			}
			if it.Result != ResultDone {
				tried++
			}
			paced = it.Result == ResultApplied
		}
		switch it.Result {
		case ResultApplied, ResultDone:
			applied++
		case ResultConflict:
			conflict++
		case ResultRefused:
			refused++
		}
		if opts.OnItem != nil {
			opts.OnItem(i, *it)
		}
	}
	left := 0
	for _, it := range p.Items {
		if it.Allowed && it.Result == ResultNone {
			left++
		}
	}
	return outcome(applied, conflict, refused, left), nil
}

// applyItem carries out one item the guards allow, by its action.
func (r *Repairer) applyItem(ctx context.Context, planID string, it *Item, wait time.Duration) error {
	switch it.Action {
	case ActionReap:
		return r.applyReap(ctx, it)
	case ActionRelease:
		return r.applyRelease(ctx, it)
	case ActionTrim:
		return r.applyTrim(ctx, it)
	case ActionDeadLetter:
		return r.applyDeadLetter(ctx, it)
	case ActionRetry, ActionSkip:
		return r.applyParked(ctx, planID, it)
	case ActionPruneConsumer:
		return r.applyPruneConsumer(ctx, it)
	case ActionDLQReplay:
		return r.applyDLQReplay(ctx, it)
	case ActionDLQPurge:
		return r.applyDLQPurge(ctx, it)
	case ActionTopicSeek:
		return r.applyTopicSeek(ctx, planID, it, wait)
	case ActionSeek:
		return r.applySeek(ctx, planID, it, wait)
	case ActionCordon, ActionDrain, ActionUncordon:
		return r.applyNodeMode(ctx, it)
	case ActionPin, ActionUnpin:
		return r.applyPin(ctx, it)
	case ActionPause, ActionResume:
		return r.applyPause(ctx, it)
	}
	return fmt.Errorf("%w: unknown action %q", ErrInvalidPlan, it.Action)
}
