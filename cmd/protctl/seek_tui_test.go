package main

import (
	"context"
	"testing"

	"github.com/protctl/protctl/internal/audit"
	"github.com/protctl/protctl/pkg/broker"
)

// The dashboard's seek (W on a partition row, then the target) applies
// the CLI's plan: the dialog shows the equivalent command, the apply is
// audited as that command, and the group ends where the command leaves it.
func TestTUISeekAppliesTheCLIsPlan(t *testing.T) {
	ctx := context.Background()
	e := newOpsEnv(t)
	s := e.s
	stream := broker.ProteanLayout.Stream(s.Orders, s.Cold)

	d := newDashboard(t, e)
	d.keys("/")
	d.typeText(s.Cold)
	d.keys("enter")
	d.keys("W")
	d.typeText("earliest")
	d.keys("enter")
	want := "protctl partitions seek shop::order o-cold --group app.OrderProjector --to earliest"
	d.wantView("Seek app.OrderProjector on shop::order/o-cold to earliest", want, "Apply 1 change?")
	d.keys("y")
	d.wantView("Result: 1 applied")
	for _, g := range e.c.XInfoGroups(ctx, stream).Val() {
		if g.Name == s.Projector && g.LastDeliveredID != "0-0" {
			t.Fatalf("after the seek the group is at %s, want 0-0", g.LastDeliveredID)
		}
	}
	entries, err := audit.List(ctx, e.c, audit.ListOptions{Limit: 1})
	if err != nil || len(entries) != 1 || entries[0].CommandLine != want {
		t.Fatalf("audit %+v: %v, want the command %q", entries, err, want)
	}
}
