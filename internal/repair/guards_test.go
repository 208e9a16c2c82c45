package repair_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/protctl/protctl/internal/repair"
	"github.com/protctl/protctl/pkg/runtime/redisstore"
)

// A plan file can be edited: an item the plan refused, turned allowed by
// hand, is refused by Apply all the same, from what the item records
// (its parameters and the state it saw) and the state now, and nothing
// changes.
func TestApplyDerivesRefusalsAgainIgnoringAllowed(t *testing.T) {
	ctx := context.Background()
	e := setup(t)
	s := e.s
	coldLease := e.l.LeaseKey(s.Projector, s.Cold)
	e.c.Set(ctx, coldLease, "node-q:1", 0)
	e.c.Set(ctx, e.l.GenerationKey(s.Projector, s.Cold), 1, 0)
	freeCold := func() { e.c.Del(ctx, coldLease) }

	cases := []struct {
		name  string
		plan  func() (*repair.Plan, error)
		setup func()
		// unchanged checks that the refused item changed nothing.
		unchanged func(t *testing.T)
	}{
		{
			name: "release of a held lease without --force",
			plan: func() (*repair.Plan, error) {
				return e.r.PlanRelease(ctx, repair.ReleaseRequest{Category: s.Orders, Group: s.Projector, Key: s.Halted})
			},
			unchanged: func(t *testing.T) {
				if v := get(t, e.c, e.l.LeaseKey(s.Projector, s.Halted)); v != s.HaltedToken {
					t.Fatalf("lease %q", v)
				}
			},
		},
		{
			name: "skip-head of an entry delivered once without --force",
			plan: func() (*repair.Plan, error) {
				return e.r.PlanDeadLetter(ctx, repair.DeadLetterRequest{Category: s.Orders, Key: s.Backfill, Group: s.Projector})
			},
			unchanged: func(t *testing.T) {
				if ids := pendingIDs(t, e.c, e.l.LaneStream(s.Orders, s.Backfill, "backfill"), s.Projector); len(ids) != 1 {
					t.Fatalf("pending %v", ids)
				}
			},
		},
		{
			name: "reap of a partition whose lease is held without --force",
			plan: func() (*repair.Plan, error) {
				return e.r.PlanReap(ctx, repair.ReapRequest{Category: s.Orders, Keys: []string{s.Cold}})
			},
			unchanged: func(t *testing.T) {
				if e.c.Exists(ctx, e.l.Stream(s.Orders, s.Cold), coldLease).Val() != 2 {
					t.Fatal("the cold partition or its lease was deleted")
				}
			},
		},
		{
			name:  "seek to an id after the newest",
			setup: freeCold,
			plan: func() (*repair.Plan, error) {
				return e.r.PlanSeek(ctx, repair.SeekRequest{Category: s.Orders, Keys: []string{s.Cold}, Group: s.Projector,
					Target: repair.SeekTarget{Kind: repair.SeekToID, ID: strconv.FormatInt(time.Now().Add(-time.Hour).UnixMilli(), 10) + "-0"}})
			},
			unchanged: func(t *testing.T) {
				g, err := e.c.XInfoGroups(ctx, e.l.Stream(s.Orders, s.Cold)).Result()
				if err != nil || len(g) != 1 || !strings.HasPrefix(g[0].LastDeliveredID, strconv.FormatInt(s.ColdEntriesAt.UnixMilli(), 10)) {
					t.Fatalf("groups %+v, %v", g, err)
				}
			},
		},
		{
			name: "pin to a node that is not live",
			plan: func() (*repair.Plan, error) {
				return e.r.PlanPin(ctx, repair.PinRequest{Service: "shop", Scope: s.Projector, Partition: s.Halted, Node: "node-9",
					Category: s.Orders, Key: s.Halted})
			},
			unchanged: func(t *testing.T) {
				if n := e.c.HLen(ctx, redisstore.PinsKey("shop")).Val(); n != 0 {
					t.Fatalf("%d pins written", n)
				}
			},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if c.setup != nil {
				c.setup()
			}
			p, err := c.plan()
			it := one(t, p, err)
			if it.Allowed || it.Result != repair.ResultNone {
				t.Fatalf("the plan does not refuse the item: %+v", it)
			}
			p.Items[0].Allowed = true // the operator's edit
			p = roundTrip(t, p)
			o := apply(t, e, p)
			if o != repair.OutcomeRefused || p.Items[0].Result != repair.ResultRefused {
				t.Fatalf("outcome %s, item %+v", o, p.Items[0])
			}
			c.unchanged(t)
		})
	}
}
