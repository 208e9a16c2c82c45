package repair

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"
)

// Recorder is told of every Apply that tried at least one item, so that
// no caller (CLI command, dashboard, a saved plan) can apply a change
// without leaving a trace: the hook sits on Apply itself, not on the
// commands (internal/audit implements it over a Redis stream).
//
// RecordApply is called once per such Apply, after its last item, with
// the plan holding every item's Result and Detail. It is not called for
// an Apply that tried nothing: an invalid plan, a plan of another layout,
// a plan whose items were all refused or skipped by the plan itself, or a
// context cancelled before the first item. Its ctx is Apply's, detached
// from cancellation and bounded by RecordTimeout, so an apply interrupted
// half way is still recorded. It must not modify the plan.
type Recorder interface {
	RecordApply(ctx context.Context, a Applied) error
}

// RecordChecker is a Recorder that can tell, before Apply changes
// anything, that RecordApply would certainly fail: a store of the wrong
// kind where the record goes (an audit stream key holding another Redis
// type). Apply calls CheckRecord before its first item when some item is
// to be tried, and on an error refuses the whole plan, changing nothing,
// so that no repair is made that cannot be recorded. A failure that only
// RecordApply meets (Redis gone half way) is still a *RecordError.
// CheckRecord must not write.
type RecordChecker interface {
	Recorder
	CheckRecord(ctx context.Context) error
}

// ErrCannotRecord is wrapped by Apply's error when a RecordChecker said
// the apply could not be recorded; nothing was changed.
var ErrCannotRecord = errors.New("repair: the apply cannot be recorded, nothing was changed")

// checkRecord asks a RecordChecker, when the Recorder is one, whether the
// apply of p could be recorded: only when some item is to be tried.
func (r *Repairer) checkRecord(ctx context.Context, p *Plan) error {
	rc, ok := r.cfg.recorder.(RecordChecker)
	if !ok || !slices.ContainsFunc(p.Items, func(it Item) bool { return it.Allowed }) {
		return nil
	}
	if err := rc.CheckRecord(ctx); err != nil {
		return fmt.Errorf("%w: %w", ErrCannotRecord, err)
	}
	return nil
}

// Applied is what a Recorder is told about one Apply.
type Applied struct {
	// Plan holds the items with their results.
	Plan *Plan
	// Outcome sums up the results of the items tried.
	Outcome Outcome
	// Err is Apply's own error when it stopped before the last item
	// (transport failure, cancelled context); nil when it went through.
	Err error
	// Attempted counts the items whose change was tried.
	Attempted int
	// StartedAt and FinishedAt bracket the apply (WithNow's clock).
	StartedAt, FinishedAt time.Time
	// CommandLine is ApplyOptions.CommandLine: the command the apply
	// stands for, "" when it is the process's own invocation.
	CommandLine string
}

// StartRecorder is an optional capability of a Recorder (found by type
// assertion): RecordStart is called once before the first item of an
// Apply of a resumable plan (one with an ID: parked retry and skip) that
// has more than one item to try (a bulk apply, which may run long, paced;
// a single item is done or not, and its resumption says which), with the
// plan as it stands (results not yet set),
// so that an apply killed before it could record its end (SIGKILL, a
// machine lost) still leaves a trace; the entry of the apply that
// resumes it names the same plan ID, and its items read done for what
// the killed one changed. Its ctx is as RecordApply's. A failure does
// not stop the apply: it is returned with RecordApply's, in the
// *RecordError.
type StartRecorder interface {
	RecordStart(ctx context.Context, a Applied) error
}

// RecordTimeout bounds a Recorder's call.
const RecordTimeout = 5 * time.Second

// WithRecorder sets the Recorder told of every Apply that tried something
// (see Recorder). Default: none.
func WithRecorder(rec Recorder) Option { return func(c *config) { c.recorder = rec } }

// ErrNotRecorded is wrapped by the *RecordError Apply returns when its
// Recorder failed.
var ErrNotRecorded = errors.New("repair: the apply was not recorded")

// RecordError is returned by Apply when the items were applied (their
// results are in the plan and the Outcome is valid) but the Recorder
// failed. It does not mean the apply failed: a caller reports Err as a
// warning and goes on with ApplyErr, Apply's own error (nil when it went
// through every item). The failure is returned rather than logged so
// that no caller can miss it; one that does not look for it still fails
// loudly instead of hiding a missing audit record.
type RecordError struct {
	// Err is the Recorder's error.
	Err error
	// ApplyErr is the error Apply would have returned without a Recorder.
	ApplyErr error
}

func (e *RecordError) Error() string {
	msg := fmt.Sprintf("%s: %v", ErrNotRecorded, e.Err)
	if e.ApplyErr != nil {
		msg = e.ApplyErr.Error() + "; " + msg
	}
	return msg
}

// Unwrap returns ErrNotRecorded, the Recorder's error and Apply's own.
func (e *RecordError) Unwrap() []error {
	errs := []error{ErrNotRecorded, e.Err}
	if e.ApplyErr != nil {
		errs = append(errs, e.ApplyErr)
	}
	return errs
}

// recordStart tells a StartRecorder that an apply of a resumable plan
// is about to try its items; it returns the recorder's error.
func (r *Repairer) recordStart(ctx context.Context, a Applied) error {
	sr, ok := r.cfg.recorder.(StartRecorder)
	if !ok || a.Plan.ID == "" {
		return nil
	}
	tries := 0
	for _, it := range a.Plan.Items {
		if it.Allowed && it.Result != ResultSkipped {
			tries++
		}
	}
	if tries < 2 {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), RecordTimeout)
	defer cancel()
	return sr.RecordStart(ctx, a)
}

// record tells the Recorder of an apply that tried something, and turns
// its failure, or startErr (recordStart's), into a *RecordError around
// applyErr.
func (r *Repairer) record(ctx context.Context, a Applied, startErr error) error {
	var err error
	if r.cfg.recorder != nil && a.Attempted > 0 {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), RecordTimeout)
		defer cancel()
		err = r.cfg.recorder.RecordApply(ctx, a)
	}
	if err = errors.Join(startErr, err); err != nil {
		return &RecordError{Err: err, ApplyErr: a.Err}
	}
	return a.Err
}
