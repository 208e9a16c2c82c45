package repair_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/protctl/protctl/internal/inspect"
	"github.com/protctl/protctl/internal/repair"
	"github.com/protctl/protctl/pkg/broker"
	"github.com/protctl/protctl/pkg/runtime/ledger"
	"github.com/protctl/protctl/pkg/runtime/source"
)

// bulkSub is the subscription the bulk tests park under.
const bulkSub = "app.BillingProjector"

// parkKey parks key's head of bulkSub as the runtime would, under a
// lease it sets, parked age ago with errText.
func parkKey(t *testing.T, e env, key, errText string, age time.Duration, attempts int) ledger.Parked {
	t.Helper()
	ctx := context.Background()
	now, err := e.c.Time(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	f := broker.Fence{LeaseKey: e.l.LeaseKey(bulkSub, key), Token: "node-a:1"}
	if err := e.c.Set(ctx, f.LeaseKey, f.Token, 0).Err(); err != nil {
		t.Fatal(err)
	}
	p := ledger.Parked{Subscription: bulkSub, Source: source.Redis, Aggregate: key, Category: "shop::bill",
		Partition: key, Position: "1700000000000-1", Error: errText, Attempts: attempts, ParkedAt: now.Add(-age),
		LastAttemptAt: now.Add(-age), Owner: "node-a", Generation: 1}
	if err := e.store.Park(ctx, f, p); err != nil {
		t.Fatal(err)
	}
	return p
}

func requestOf(t *testing.T, e env, key string) *ledger.Request {
	t.Helper()
	p, err := e.store.GetParked(context.Background(), bulkSub, "", key)
	if err != nil {
		t.Fatal(err)
	}
	return p.Request
}

// TestFilteredParkedPlanPinsItsSet: a filtered plan holds exactly the
// entries the filter matched when it was made, with their count; entries
// parked after it, matching or not, are left alone by its apply.
func TestFilteredParkedPlanPinsItsSet(t *testing.T) {
	e := setup(t)
	ctx := context.Background()
	for i := range 6 {
		parkKey(t, e, fmt.Sprintf("b-%d", i), "http POST http://billing: 503 Service Unavailable", time.Duration(i+1)*time.Hour, 3)
	}
	parkKey(t, e, "b-other", "validate: amount must be positive", 3*time.Hour, 3)
	parkKey(t, e, "b-young", "http POST http://billing: 503 Service Unavailable", time.Minute, 3)

	req := repair.ParkedRequest{Action: repair.ActionRetry, All: true, By: "alice", Max: 4, Filter: inspect.ParkedFilterSpec{
		Subscription: bulkSub, ErrorClass: "http POST http://billing", OlderThan: 30 * time.Minute}}
	p, err := e.r.PlanParked(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	sel := p.Selection
	if sel == nil || sel.Count != 4 || sel.Matched != 6 || sel.Max != 4 || len(p.Items) != 4 || p.ID == "" ||
		sel.Filter == nil || !strings.Contains(*sel.Filter, `--error-class 'http POST http://billing'`) || !strings.Contains(*sel.Filter, "--older-than 30m0s") {
		t.Fatalf("selection %+v, id %q, %d items", sel, p.ID, len(p.Items))
	}
	// Oldest first: --max keeps the four oldest.
	for i, it := range p.Items {
		if want := fmt.Sprintf("b-%d", 5-i); it.Target.Aggregate != want || !it.Allowed || it.Precondition.Parked.ParkedAt == nil {
			t.Fatalf("item %d: %+v, want %s allowed with its parkedAt", i, it, want)
		}
	}
	p = roundTrip(t, p)

	// Entries parked after the plan: one matching the filter, and one
	// matching but younger than the window.
	parkKey(t, e, "b-new", "http POST http://billing: 503 Service Unavailable", 2*time.Hour, 3)
	if o := apply(t, e, p); o != repair.OutcomeApplied {
		t.Fatalf("outcome %s: %s", o, p.Summary())
	}
	for _, key := range []string{"b-5", "b-4", "b-3", "b-2"} {
		if r := requestOf(t, e, key); r == nil || r.Action != ledger.ActionRetry || r.Token != p.ID || r.By != "alice" {
			t.Fatalf("%s: request %+v, want a retry with the plan's token", key, r)
		}
	}
	for _, key := range []string{"b-0", "b-1", "b-other", "b-young", "b-new"} {
		if r := requestOf(t, e, key); r != nil {
			t.Fatalf("%s, outside the plan, got request %+v", key, r)
		}
	}
}

// TestParkedApplyResumesWithoutRequestingTwice: an apply stopped half
// way is applied again from the same plan: the entries it requested are
// done, even those the owner has since resolved or parked again, and
// only the rest are requested.
func TestParkedApplyResumesWithoutRequestingTwice(t *testing.T) {
	e := setup(t)
	ctx := context.Background()
	keys := []string{"b-0", "b-1", "b-2", "b-3", "b-4"}
	for i, k := range keys {
		parkKey(t, e, k, "boom", time.Duration(len(keys)-i)*time.Minute, 3)
	}
	p, err := e.r.PlanParked(ctx, repair.ParkedRequest{Action: repair.ActionRetry, All: true, Filter: inspect.ParkedFilterSpec{Subscription: bulkSub}})
	if err != nil {
		t.Fatal(err)
	}
	saved := roundTrip(t, p)

	// The first run stops after three items (as if killed).
	stopCtx, stop := context.WithCancel(ctx)
	_, err = e.r.Apply(stopCtx, p, repair.ApplyOptions{OnItem: func(i int, _ repair.Item) {
		if i == 2 {
			stop()
		}
	}})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("interrupted apply: %v", err)
	}
	first := map[string]time.Time{}
	for _, k := range keys[:3] {
		r := requestOf(t, e, k)
		if r == nil || r.Token != p.ID {
			t.Fatalf("%s: request %+v after the first run", k, r)
		}
		first[k] = r.RequestedAt
	}
	if r := requestOf(t, e, keys[3]); r != nil {
		t.Fatalf("the interrupted run went on to %s: %+v", keys[3], r)
	}
	// Meanwhile the owner acts: b-0 succeeds (resolved), b-1 fails again
	// (parked again with more attempts).
	f0 := broker.Fence{LeaseKey: e.l.LeaseKey(bulkSub, "b-0"), Token: "node-a:1"}
	if err := e.store.Resolve(ctx, f0, bulkSub, "b-0"); err != nil {
		t.Fatal(err)
	}
	parkKey(t, e, "b-1", "boom", 0, 6)

	o, err := e.r.Apply(ctx, saved, repair.ApplyOptions{})
	if err != nil || o != repair.OutcomeApplied {
		t.Fatalf("resumed apply: %s %v: %s", o, err, saved.Summary())
	}
	want := []repair.Result{repair.ResultDone, repair.ResultDone, repair.ResultDone, repair.ResultApplied, repair.ResultApplied}
	for i, it := range saved.Items {
		if it.Result != want[i] {
			t.Fatalf("item %d (%s): %s (%s), want %s", i, it.Target.Aggregate, it.Result, it.Detail, want[i])
		}
	}
	if r := requestOf(t, e, "b-1"); r != nil {
		t.Fatalf("b-1, parked again after its retry, was requested again: %+v", r)
	}
	if r := requestOf(t, e, "b-2"); r == nil || !r.RequestedAt.Equal(first["b-2"]) {
		t.Fatalf("b-2's request %+v was replaced (first at %s)", r, first["b-2"])
	}
	// A third apply changes nothing and says so.
	o, err = e.r.Apply(ctx, saved, repair.ApplyOptions{})
	if err != nil || o != repair.OutcomeApplied || saved.Summary() != "5 done" {
		t.Fatalf("third apply: %s %v: %s", o, err, saved.Summary())
	}
}

// TestParkedApplyConflictsWhenTheEntryMoved: an entry that changed since
// the plan is a conflict and keeps what changed; the others apply (exit
// 7 for the whole).
func TestParkedApplyConflictsWhenTheEntryMoved(t *testing.T) {
	e := setup(t)
	ctx := context.Background()
	for _, k := range []string{"b-0", "b-1", "b-2", "b-3"} {
		parkKey(t, e, k, "boom", time.Hour, 3)
	}
	p, err := e.r.PlanParked(ctx, repair.ParkedRequest{Action: repair.ActionSkip, Reason: "refunded", All: true,
		Filter: inspect.ParkedFilterSpec{Subscription: bulkSub}})
	if err != nil {
		t.Fatal(err)
	}
	parkKey(t, e, "b-0", "boom", 0, 6) // retried and failed again
	if err := e.store.RequestRetry(ctx, bulkSub, "", "b-1", "bob"); err != nil {
		t.Fatal(err)
	}
	f2 := broker.Fence{LeaseKey: e.l.LeaseKey(bulkSub, "b-2"), Token: "node-a:1"}
	if err := e.store.Resolve(ctx, f2, bulkSub, "b-2"); err != nil {
		t.Fatal(err)
	}
	o := apply(t, e, p)
	if o != repair.OutcomePartial || o.ExitCode() != 7 {
		t.Fatalf("outcome %s, want partial: %s", o, p.Summary())
	}
	for i, want := range []repair.Result{repair.ResultConflict, repair.ResultConflict, repair.ResultConflict, repair.ResultApplied} {
		if p.Items[i].Result != want || (want == repair.ResultConflict && p.Items[i].Detail == "") {
			t.Fatalf("item %d: %s (%s), want %s with why", i, p.Items[i].Result, p.Items[i].Detail, want)
		}
	}
	if r := requestOf(t, e, "b-1"); r == nil || r.Action != ledger.ActionRetry || r.By != "bob" {
		t.Fatalf("b-1's retry by bob was overwritten: %+v", r)
	}
	if r := requestOf(t, e, "b-0"); r != nil {
		t.Fatalf("b-0, parked again, was requested: %+v", r)
	}
}

// TestApplyMaxBoundsARun: ApplyOptions.Max leaves the rest for a later
// run (partial); the next run skips the done part and goes on.
func TestApplyMaxBoundsARun(t *testing.T) {
	e := setup(t)
	ctx := context.Background()
	for _, k := range []string{"b-0", "b-1", "b-2", "b-3", "b-4"} {
		parkKey(t, e, k, "boom", time.Hour, 3)
	}
	p, err := e.r.PlanParked(ctx, repair.ParkedRequest{Action: repair.ActionRetry, All: true})
	if err != nil {
		t.Fatal(err)
	}
	o, err := e.r.Apply(ctx, p, repair.ApplyOptions{Max: 3})
	if err != nil || o != repair.OutcomePartial || p.Summary() != "3 applied, 2 not applied" {
		t.Fatalf("bounded run: %s %v: %s", o, err, p.Summary())
	}
	o, err = e.r.Apply(ctx, p, repair.ApplyOptions{Max: 3})
	if err != nil || o != repair.OutcomeApplied || p.Summary() != "2 applied, 3 done" {
		t.Fatalf("second bounded run: %s %v: %s", o, err, p.Summary())
	}
}

// TestParkedPlanRefusesBadFilters: bad filters and an unknown
// subscription fail before anything is planned.
func TestParkedPlanRefusesBadFilters(t *testing.T) {
	e := setup(t)
	ctx := context.Background()
	parkKey(t, e, "b-0", "boom", time.Hour, 3)
	plan := func(f inspect.ParkedFilterSpec) error {
		_, err := e.r.PlanParked(ctx, repair.ParkedRequest{Action: repair.ActionRetry, All: true, Filter: f})
		return err
	}
	if err := plan(inspect.ParkedFilterSpec{Error: "(("}); !errors.Is(err, inspect.ErrInvalidFilter) {
		t.Fatalf("bad regexp: %v", err)
	}
	err := plan(inspect.ParkedFilterSpec{Subscription: "app.BilingProjector"})
	var us *repair.UnknownSubscriptionError
	if !errors.As(err, &us) || !errors.Is(err, inspect.ErrNotFound) || len(us.Known) != 1 || us.Known[0] != bulkSub {
		t.Fatalf("unknown subscription: %v", err)
	}
	if r := requestOf(t, e, "b-0"); r != nil {
		t.Fatalf("a refused plan requested %+v", r)
	}
}

// A resumed apply whose items are all done by the earlier run or
// conflict now changed nothing this time, but the plan is partly applied
// (the earlier run's changes are in place): done counts as applied for
// the outcome, so it is partial (exit 7), not a conflict (5, "nothing
// was changed"), as docs/cli.md's exit codes say.
func TestResumedApplyWithDoneAndConflictIsPartial(t *testing.T) {
	e := setup(t)
	ctx := context.Background()
	for _, k := range []string{"b-0", "b-1", "b-2"} {
		parkKey(t, e, k, "boom", time.Hour, 3)
	}
	p, err := e.r.PlanParked(ctx, repair.ParkedRequest{Action: repair.ActionRetry, All: true, Filter: inspect.ParkedFilterSpec{Subscription: bulkSub}})
	if err != nil {
		t.Fatal(err)
	}
	saved := roundTrip(t, p)
	if o, err := e.r.Apply(ctx, p, repair.ApplyOptions{Max: 2}); err != nil || o != repair.OutcomePartial {
		t.Fatalf("first run: %s %v", o, err)
	}
	parkKey(t, e, "b-2", "boom", 0, 6) // moved since the plan
	o, err := e.r.Apply(ctx, saved, repair.ApplyOptions{})
	if err != nil || o != repair.OutcomePartial || o.ExitCode() != 7 || saved.Summary() != "2 done, 1 conflict" {
		t.Fatalf("resumed apply: %s (exit %d) %v: %s", o, o.ExitCode(), err, saved.Summary())
	}
}
