package repair_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/protctl/protctl/internal/inspect"
	"github.com/protctl/protctl/internal/repair"
)

// The prune plan is fsck's list narrowed by keys and group; applied, it
// deletes the consumers still empty and keeps, as conflicts, the one that
// gained a pending entry and the one that became the live lease's.
func TestPruneConsumersPlanAndApply(t *testing.T) {
	ctx := context.Background()
	e := setup(t)
	s := e.s
	healthy, lagging := e.l.Stream(s.Orders, s.Healthy), e.l.Stream(s.Orders, s.Lagging)
	for _, c := range []struct{ stream, name string }{{healthy, "node-a:1"}, {healthy, "node-a:2"}, {lagging, "node-x:3"}} {
		if err := e.c.XGroupCreateConsumer(ctx, c.stream, s.Projector, c.name).Err(); err != nil {
			t.Fatal(err)
		}
	}
	scan := inspect.ScanOptions{Pause: -1}

	p, err := e.r.PlanPruneConsumers(ctx, repair.PruneConsumersRequest{Category: s.Orders, Keys: []string{s.Healthy}, Scan: scan})
	if err != nil || len(p.Items) != 2 {
		t.Fatalf("plan of %s = %+v, %v; want node-a:1 and node-a:2", s.Healthy, p, err)
	}
	// A group, key or category nothing records is a typo, not an empty plan.
	for _, req := range []repair.PruneConsumersRequest{
		{Category: s.Orders, Group: "other", Scan: scan},
		{Category: s.Orders, Keys: []string{"o-nosuch"}, Scan: scan},
		{Category: "nosuch::cat", Scan: scan},
	} {
		if p, err := e.r.PlanPruneConsumers(ctx, req); !errors.Is(err, inspect.ErrNotFound) {
			t.Fatalf("plan of %+v = %+v, %v; want inspect.ErrNotFound", req, p, err)
		}
	}

	p, err = e.r.PlanPruneConsumers(ctx, repair.PruneConsumersRequest{Category: s.Orders, Scan: scan})
	if err != nil {
		t.Fatal(err)
	}
	p = roundTrip(t, p)
	// Moves between plan and apply.
	if err := e.c.XAdd(ctx, &redis.XAddArgs{Stream: lagging, Values: []string{"data", "{}"}}).Err(); err != nil {
		t.Fatal(err)
	}
	if err := e.c.XReadGroup(ctx, &redis.XReadGroupArgs{Group: s.Projector, Consumer: "node-c:2", Streams: []string{lagging, ">"}, Count: 1, Block: -1}).Err(); err != nil {
		t.Fatal(err)
	}
	if err := e.c.Set(ctx, e.l.LeaseKey(s.Projector, s.Lagging), "node-x:3", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if err := e.c.XGroupDelConsumer(ctx, e.l.Stream(s.Orders, s.Cold), s.Projector, "fixture-consumer").Err(); err != nil {
		t.Fatal(err)
	}
	if o := apply(t, e, p); o != repair.OutcomePartial || o.ExitCode() != 7 {
		t.Fatalf("outcome %s", o)
	}
	got := map[string]repair.Result{}
	for _, it := range p.Items {
		got[it.Target.Key+"/"+it.Target.Consumer] = it.Result
		if it.Result == repair.ResultConflict && !strings.Contains(it.Detail, "kept") {
			t.Fatalf("conflict detail %q", it.Detail)
		}
	}
	want := map[string]repair.Result{
		"o-cold/fixture-consumer": repair.ResultSkipped, // gone already
		"o-healthy/node-a:1":      repair.ResultApplied, "o-healthy/node-a:2": repair.ResultApplied,
		"o-lagging/node-c:2": repair.ResultConflict, "o-lagging/node-x:3": repair.ResultConflict,
	}
	if len(got) != len(want) {
		t.Fatalf("results %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Fatalf("results %v, want %v", got, want)
		}
	}

	// A hand-edited plan without the consumer is refused whole.
	bad := `{"apiVersion":"protctl.dev/v1","kind":"Plan","layout":"protean","createdAt":"2026-01-01T00:00:00Z","items":[{"action":"prune-consumer","target":{"category":"c","key":"k","group":"g","stream":"c:k"},"precondition":{"lease":null,"generation":null,"lastEntryId":null},"params":{},"allowed":true,"reason":"","result":null}]}`
	if _, err := repair.ParsePlan([]byte(bad)); !errors.Is(err, repair.ErrInvalidPlan) || !strings.Contains(err.Error(), "target.consumer") {
		t.Fatalf("ParsePlan of an item without a consumer = %v", err)
	}
}
