package main

import (
	"context"
	"testing"

	"github.com/protctl/protctl/internal/audit"
	"github.com/protctl/protctl/pkg/broker"
	"github.com/protctl/protctl/pkg/runtime/redisstore"
)

// TestTUIParkedRetryIsThePinnedPlan: the dashboard's retry (Y in the
// parked view) builds the CLI's pinned plan: an entry parked again between
// the plan and the confirmation is a conflict and keeps its state; planned
// again, the request is recorded with the plan's id, which the audit entry
// names.
func TestTUIParkedRetryIsThePinnedPlan(t *testing.T) {
	e := newOpsEnv(t)
	p := e.park()
	store := redisstore.New(e.c)
	d := newDashboard(t, e)
	d.keys(":")
	d.typeText("parked")
	d.keys("enter")
	d.wantView("o-halted", "handler: amount must be positive")

	d.keys("Y")
	d.wantView("protctl parked retry app.OrderProjector o-halted", "Apply 1 change?")
	// The owner retries it meanwhile, and it fails again: parked anew.
	p.Attempts = 6
	f := broker.Fence{LeaseKey: broker.ProteanLayout.LeaseKey(e.s.Projector, e.s.Halted), Token: e.s.HaltedToken}
	if err := store.Park(context.Background(), f, p); err != nil {
		t.Fatal(err)
	}
	d.keys("y")
	d.wantView("Result: 1 conflict")
	if got, _ := store.GetParked(context.Background(), e.s.Projector, "", e.s.Halted); got.Request != nil {
		t.Fatalf("the conflicting retry recorded %+v", got.Request)
	}
	d.keys("esc")

	d.keys("Y")
	d.wantView("Apply 1 change?")
	d.keys("y")
	d.wantView("Result: 1 applied")
	got, err := store.GetParked(context.Background(), e.s.Projector, "", e.s.Halted)
	if err != nil || got.Request == nil || got.Request.Token == "" {
		t.Fatalf("the dashboard's retry: %+v %v, want a request with its plan's id", got.Request, err)
	}
	entries, err := audit.List(context.Background(), e.c, audit.ListOptions{Limit: 1})
	if err != nil || len(entries) != 1 || entries[0].PlanID != got.Request.Token {
		t.Fatalf("the audit entry names plan %q, the request %q (%v)", entries[0].PlanID, got.Request.Token, err)
	}
}
