package repair_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/protctl/protctl/internal/repair"
	"github.com/protctl/protctl/pkg/broker/redisbroker"
	"github.com/protctl/protctl/pkg/runtime/redisstore"
)

// recorderFunc adapts a function to repair.Recorder.
type recorderFunc func(context.Context, repair.Applied) error

func (f recorderFunc) RecordApply(ctx context.Context, a repair.Applied) error { return f(ctx, a) }

// withRecorder is e's Repairer with rec installed.
func withRecorder(e env, rec repair.Recorder) *repair.Repairer {
	return repair.New(e.c, redisbroker.New(e.c), repair.WithLedger(redisstore.New(e.c)), repair.WithRecorder(rec))
}

// TestRecorderIsToldOfEveryApplyThatTriedSomething: the Recorder hook on
// Apply sees each apply that tried an item exactly once, with the items'
// results, and no apply that tried nothing.
func TestRecorderIsToldOfEveryApplyThatTriedSomething(t *testing.T) {
	e := setup(t)
	ctx := context.Background()
	var got []repair.Applied
	r := withRecorder(e, recorderFunc(func(_ context.Context, a repair.Applied) error {
		got = append(got, a)
		return nil
	}))

	t.Run("refused by the plan: nothing tried, not recorded", func(t *testing.T) {
		got = nil
		p, err := r.PlanRelease(ctx, repair.ReleaseRequest{Category: e.s.Orders, Group: e.s.Projector, Key: e.s.Halted})
		if err != nil {
			t.Fatal(err)
		}
		o, err := r.Apply(ctx, p, repair.ApplyOptions{})
		if err != nil || o != repair.OutcomeRefused {
			t.Fatalf("outcome %s, %v", o, err)
		}
		if len(got) != 0 {
			t.Fatalf("recorded %d applies that tried nothing", len(got))
		}
	})
	t.Run("applied: recorded once with the results", func(t *testing.T) {
		got = nil
		p, err := r.PlanRelease(ctx, repair.ReleaseRequest{Category: e.s.Orders, Group: e.s.Projector, Key: e.s.Halted, Force: true})
		if err != nil {
			t.Fatal(err)
		}
		o, err := r.Apply(ctx, p, repair.ApplyOptions{})
		if err != nil || o != repair.OutcomeApplied {
			t.Fatalf("outcome %s, %v", o, err)
		}
		if len(got) != 1 {
			t.Fatalf("recorded %d times, want 1", len(got))
		}
		a := got[0]
		if a.Outcome != repair.OutcomeApplied || a.Err != nil || a.Attempted != 1 || a.Plan.Items[0].Result != repair.ResultApplied {
			t.Fatalf("recorded %+v", a)
		}
		if a.StartedAt.IsZero() || a.FinishedAt.Before(a.StartedAt) {
			t.Fatalf("times %v %v", a.StartedAt, a.FinishedAt)
		}
	})
	t.Run("conflict: tried, so recorded", func(t *testing.T) {
		got = nil
		p, err := r.PlanReap(ctx, repair.ReapRequest{Category: e.s.Orders, Keys: []string{e.s.Cold}, MinIdle: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		// A publish after the plan moves the lane's newest entry.
		if err := e.c.XAdd(ctx, &redis.XAddArgs{Stream: e.l.Stream(e.s.Orders, e.s.Cold), Values: []any{"data", "{}"}}).Err(); err != nil {
			t.Fatal(err)
		}
		o, err := r.Apply(ctx, p, repair.ApplyOptions{})
		if err != nil || o != repair.OutcomeConflict {
			t.Fatalf("outcome %s, %v", o, err)
		}
		if len(got) != 1 || got[0].Plan.Items[0].Result != repair.ResultConflict {
			t.Fatalf("recorded %+v", got)
		}
	})
}

// TestRecorderFailureDoesNotHideTheResult: when the Recorder fails, Apply
// still applies, records each item's result in the plan and returns the
// outcome, with a *RecordError that says what failed and carries Apply's
// own error (none here).
func TestRecorderFailureDoesNotHideTheResult(t *testing.T) {
	e := setup(t)
	ctx := context.Background()
	boom := errors.New("stream unwritable")
	r := withRecorder(e, recorderFunc(func(context.Context, repair.Applied) error { return boom }))
	p, err := r.PlanRelease(ctx, repair.ReleaseRequest{Category: e.s.Orders, Group: e.s.Projector, Key: e.s.Halted, Force: true})
	if err != nil {
		t.Fatal(err)
	}
	o, err := r.Apply(ctx, p, repair.ApplyOptions{})
	var rerr *repair.RecordError
	if !errors.As(err, &rerr) || !errors.Is(err, repair.ErrNotRecorded) || !errors.Is(err, boom) || rerr.ApplyErr != nil {
		t.Fatalf("error %v, want a *RecordError around %v", err, boom)
	}
	if o != repair.OutcomeApplied || p.Items[0].Result != repair.ResultApplied {
		t.Fatalf("outcome %s, item %+v", o, p.Items[0])
	}
	if v, _ := e.c.Exists(ctx, e.l.LeaseKey(e.s.Projector, e.s.Halted)).Result(); v != 0 {
		t.Fatal("the lease was not released")
	}
}

// checkingRecorder is a repair.RecordChecker whose CheckRecord fails
// with err, counting the applies it is told of.
type checkingRecorder struct {
	err      error
	recorded int
}

func (c *checkingRecorder) RecordApply(context.Context, repair.Applied) error {
	c.recorded++
	return nil
}

func (c *checkingRecorder) CheckRecord(context.Context) error { return c.err }

// TestRecordCheckerStopsAnApplyBeforeItChangesAnything: a Recorder that
// can tell beforehand that it cannot record (repair.RecordChecker) stops
// Apply before its first item: an error wrapping ErrCannotRecord and its
// own, no item tried, the lease still held, nothing recorded. A plan
// with nothing to try is not checked.
func TestRecordCheckerStopsAnApplyBeforeItChangesAnything(t *testing.T) {
	e := setup(t)
	ctx := context.Background()
	boom := errors.New("the audit key holds a string")
	rec := &checkingRecorder{err: boom}
	r := withRecorder(e, rec)
	p, err := r.PlanRelease(ctx, repair.ReleaseRequest{Category: e.s.Orders, Group: e.s.Projector, Key: e.s.Halted, Force: true})
	if err != nil {
		t.Fatal(err)
	}
	o, err := r.Apply(ctx, p, repair.ApplyOptions{})
	if !errors.Is(err, repair.ErrCannotRecord) || !errors.Is(err, boom) || o != "" {
		t.Fatalf("outcome %q, error %v; want one wrapping ErrCannotRecord and %v", o, err, boom)
	}
	if p.Items[0].Result != repair.ResultNone || rec.recorded != 0 {
		t.Fatalf("item %+v, %d recorded", p.Items[0], rec.recorded)
	}
	if v, _ := e.c.Exists(ctx, e.l.LeaseKey(e.s.Projector, e.s.Halted)).Result(); v != 1 {
		t.Fatal("the lease was released though the apply could not be recorded")
	}

	refused, err := r.PlanRelease(ctx, repair.ReleaseRequest{Category: e.s.Orders, Group: e.s.Projector, Key: e.s.Halted})
	if err != nil {
		t.Fatal(err)
	}
	if o, err := r.Apply(ctx, refused, repair.ApplyOptions{}); err != nil || o != repair.OutcomeRefused {
		t.Fatalf("a plan with nothing to try: outcome %s, %v", o, err)
	}
}

// TestRecorderSeesAnApplyCancelledHalfWay: an apply interrupted after its
// first item is still recorded (the Recorder's context is detached from
// the cancellation), with the error that stopped it.
func TestRecorderSeesAnApplyCancelledHalfWay(t *testing.T) {
	e := setup(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var got []repair.Applied
	var recCtxErr error
	r := withRecorder(e, recorderFunc(func(rctx context.Context, a repair.Applied) error {
		got, recCtxErr = append(got, a), rctx.Err()
		return nil
	}))
	p, err := r.PlanRelease(ctx, repair.ReleaseRequest{Category: e.s.Orders, Group: e.s.Projector, Key: e.s.Halted, Force: true})
	if err != nil {
		t.Fatal(err)
	}
	// A second item, so that the interval comes between the two.
	p.Items = append(p.Items, p.Items[0])
	_, err = r.Apply(ctx, p, repair.ApplyOptions{Interval: time.Hour, OnItem: func(int, repair.Item) { cancel() }})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("error %v, want context.Canceled", err)
	}
	if len(got) != 1 || got[0].Attempted != 1 || !errors.Is(got[0].Err, context.Canceled) || recCtxErr != nil {
		t.Fatalf("recorded %+v (ctx err %v)", got, recCtxErr)
	}
}

// startRecorder records RecordStart and RecordApply calls in order.
type startRecorder struct {
	calls []string
	// requestsAtStart counts the ledger requests present at RecordStart.
	requestsAtStart int
	count           func() int
}

func (s *startRecorder) RecordApply(_ context.Context, a repair.Applied) error {
	s.calls = append(s.calls, "apply:"+string(a.Outcome))
	return nil
}

func (s *startRecorder) RecordStart(_ context.Context, a repair.Applied) error {
	s.calls = append(s.calls, "start")
	s.requestsAtStart = s.count()
	for _, it := range a.Plan.Items {
		if it.Result != repair.ResultNone && it.Result != repair.ResultSkipped {
			return errors.New("an item has a result of this apply at the start")
		}
	}
	return nil
}

// TestStartRecorderSeesBulkParkedAppliesFirst: a StartRecorder is told of
// a bulk apply of a parked plan before its first item changes anything,
// and not of a single-entry one, nor of a plan without an id.
func TestStartRecorderSeesBulkParkedAppliesFirst(t *testing.T) {
	e := setup(t)
	ctx := context.Background()
	for _, k := range []string{"b-0", "b-1", "b-2"} {
		parkKey(t, e, k, "boom", time.Hour, 3)
	}
	rec := &startRecorder{count: func() int {
		n := 0
		for _, k := range []string{"b-0", "b-1", "b-2"} {
			if requestOf(t, e, k) != nil {
				n++
			}
		}
		return n
	}}
	r := withRecorder(e, rec)

	p, err := r.PlanParked(ctx, repair.ParkedRequest{Action: repair.ActionRetry, Subscription: bulkSub, Aggregate: "b-0"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.Apply(ctx, p, repair.ApplyOptions{}); err != nil {
		t.Fatal(err)
	}
	p, err = r.PlanParked(ctx, repair.ParkedRequest{Action: repair.ActionRetry, All: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.Apply(ctx, p, repair.ApplyOptions{}); err != nil {
		t.Fatal(err)
	}
	p, err = r.PlanRelease(ctx, repair.ReleaseRequest{Category: e.s.Orders, Group: e.s.Projector, Key: e.s.Halted, Force: true})
	if err != nil {
		t.Fatal(err)
	}
	p.Items = append(p.Items, p.Items[0]) // two items, but no plan id
	if _, err := r.Apply(ctx, p, repair.ApplyOptions{}); err != nil {
		t.Fatal(err)
	}
	want := "apply:applied start apply:applied apply:partial"
	if got := strings.Join(rec.calls, " "); got != want {
		t.Fatalf("calls %q, want %q", got, want)
	}
	// The bulk plan's start came when only the single retry (b-0) was
	// recorded.
	if rec.requestsAtStart != 1 {
		t.Fatalf("%d requests recorded at the start, want 1", rec.requestsAtStart)
	}
}
