package main

import (
	"context"
	"testing"

	"github.com/protctl/protctl/internal/audit"
	"github.com/protctl/protctl/pkg/broker"
)

// The dashboard's dlq actions (E replay, X purge on a partition row) apply
// the CLI's plans: the dialog shows the equivalent command, the apply is
// audited as that command, and Redis ends as the command leaves it.
func TestTUIDLQActionsApplyTheCLIsPlans(t *testing.T) {
	ctx := context.Background()
	e := newOpsEnv(t)
	s := e.s
	dlq, stream := broker.ProteanLayout.DLQStream(s.Orders, s.Halted), broker.ProteanLayout.Stream(s.Orders, s.Halted)
	e.skipHead("poison")
	before := e.c.XLen(ctx, stream).Val()

	d := newDashboard(t, e)
	d.keys("/")
	d.typeText(s.Halted)
	d.keys("enter")
	d.keys("E")
	d.wantView("Replay the dead letters of shop::order/o-halted", "protctl dlq replay shop::order --key o-halted", "Apply 1 change?")
	d.keys("y")
	d.wantView("Result: 1 applied")
	d.keys("esc")
	if e.c.XLen(ctx, dlq).Val() != 0 || e.c.XLen(ctx, stream).Val() != before+1 {
		t.Fatalf("after the replay: %d dead letters, %d entries (%d before)", e.c.XLen(ctx, dlq).Val(), e.c.XLen(ctx, stream).Val(), before)
	}

	deadLetterNew(t, e.c, s.Orders, s.Halted, "other-group", 1)
	d.keys("X")
	d.wantView("Purge the dead letters of shop::order/o-halted", "protctl dlq purge shop::order --key o-halted", "Apply 1 change?")
	d.keys("y")
	d.wantView("Result: 1 applied")
	if n := e.c.XLen(ctx, dlq).Val(); n != 0 {
		t.Fatalf("%d dead letters after the purge", n)
	}
	entries, err := audit.List(ctx, e.c, audit.ListOptions{Limit: 10})
	if err != nil || len(entries) < 2 {
		t.Fatalf("audit entries %d: %v", len(entries), err)
	}
	if entries[0].CommandLine != "protctl dlq purge shop::order --key o-halted" || entries[1].CommandLine != "protctl dlq replay shop::order --key o-halted" {
		t.Fatalf("audited as %q and %q", entries[1].CommandLine, entries[0].CommandLine)
	}
}
