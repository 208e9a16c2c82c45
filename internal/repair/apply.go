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
	if err := r.checkRecord(ctx, p); err != nil {
		return "", err
	}
	a := Applied{Plan: p, StartedAt: r.cfg.now(), CommandLine: opts.CommandLine}
	a.Outcome, a.Err = r.applyItems(ctx, p, opts, &a.Attempted)
	a.FinishedAt = r.cfg.now()
	return a.Outcome, r.record(ctx, a)
}

// applyItems is Apply's loop; attempted counts the items it tried.
func (r *Repairer) applyItems(ctx context.Context, p *Plan, opts ApplyOptions, attempted *int) (Outcome, error) {
	var applied, conflict, refused int
	for i := range p.Items {
		it := &p.Items[i]
		if i > 0 && opts.Interval > 0 {
			t := time.NewTimer(opts.Interval)
			select {
			case <-ctx.Done():
				t.Stop()
				return outcome(applied, conflict, refused), ctx.Err()
			case <-t.C:
			}
		}
		if err := ctx.Err(); err != nil {
			return outcome(applied, conflict, refused), err
		}
		it.Detail = ""
		switch {
		case it.Result == ResultSkipped && !it.Allowed:
			// Nothing to do, decided by the plan.
		case !it.Allowed:
			it.Result, it.Detail = ResultRefused, it.Reason
		default:
			it.Result = ResultNone
			*attempted++
			var err error
			switch it.Action {
			case ActionReap:
				err = r.applyReap(ctx, it)
			case ActionRelease:
				err = r.applyRelease(ctx, it)
			case ActionTrim:
				err = r.applyTrim(ctx, it)
			case ActionDeadLetter:
				err = r.applyDeadLetter(ctx, it)
			case ActionRetry, ActionSkip:
				err = r.applyParked(ctx, it)
			case ActionPruneConsumer:
				err = r.applyPruneConsumer(ctx, it)
			}
			if err != nil {
				it.Result, it.Detail = ResultNone, "not applied: "+err.Error()
				return outcome(applied, conflict, refused), fmt.Errorf("repair: %s %s: %w", it.Action, it.Target, err)
			}
		}
		switch it.Result {
		case ResultApplied:
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
	return outcome(applied, conflict, refused), nil
}
