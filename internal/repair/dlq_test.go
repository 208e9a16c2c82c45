package repair_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/protctl/protctl/internal/inspect"
	"github.com/protctl/protctl/internal/repair"
	"github.com/protctl/protctl/internal/testenv"
	"github.com/protctl/protctl/pkg/broker"
	"github.com/protctl/protctl/pkg/broker/redisbroker"
)

// In the cluster layout a partition's dead letters (C:{K}:dlq) are
// replayed to C:{K} with the key recorded in the index (a second step,
// the index being in another slot); a category's own C:dlq shares no slot
// with its destination and is refused. Both through a plan file.
func TestDLQReplayInTheClusterLayout(t *testing.T) {
	ctx := context.Background()
	srv := testenv.StartRedis(t)
	c := srv.Client(t)
	l := broker.ClusterLayout
	b := redisbroker.New(c, redisbroker.WithLayout(l))
	r := repair.New(c, b)
	const cat, key, group = "shop::order", "o-1", "app.P"
	if _, err := b.PublishPartitioned(ctx, cat, key, "", []byte(`{"n":1}`)); err != nil {
		t.Fatal(err)
	}
	lease, _, err := b.AcquirePartitionLease(ctx, l.LeaseKey(group, key), l.GenerationKey(group, key), "n", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	msgs, err := b.ReadPartitionFenced(ctx, lease.Fence, l.Stream(cat, key), group, 1, broker.ReadNew)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.DeadLetterPartitionFenced(ctx, lease.Fence, l.Stream(cat, key), group, msgs[0].ID, l.DLQStream(cat, key), "x"); err != nil {
		t.Fatal(err)
	}
	testenv.Protean(t, c).Category(cat).DeadLetter(testenv.ProteanDeadLetter{OriginalID: "1-0", Group: group})
	c.SRem(ctx, l.IndexKey(cat), key)

	p, err := r.PlanDLQ(ctx, repair.DLQRequest{Action: repair.ActionDLQReplay, Query: inspect.DeadLetterQuery{Category: cat}})
	if err != nil {
		t.Fatal(err)
	}
	p = roundTrip(t, p)
	if len(p.Items) != 2 {
		t.Fatalf("items %+v", p.Items)
	}
	catItem, partItem := p.Items[0], p.Items[1]
	if catItem.Allowed || !strings.Contains(catItem.Reason, "cluster layout") {
		t.Fatalf("the category's dead letter: %+v", catItem)
	}
	if !partItem.Allowed || partItem.Target.Stream != "shop::order:{o-1}:dlq" || partItem.Params.ReplayTo != "shop::order:{o-1}" || partItem.Params.ReplayKey != key {
		t.Fatalf("the partition's dead letter: %+v", partItem)
	}
	o, err := r.Apply(ctx, p, repair.ApplyOptions{})
	if err != nil || o != repair.OutcomePartial {
		t.Fatalf("apply = %s, %v", o, err)
	}
	if !c.SIsMember(ctx, l.IndexKey(cat), key).Val() || c.XLen(ctx, l.Stream(cat, key)).Val() != 2 || c.XLen(ctx, l.DLQStream(cat, key)).Val() != 0 {
		t.Fatal("the partition's dead letter was not replayed and recorded")
	}
}

// A plan's dlq items need what their apply uses.
func TestDLQPlanItemsAreValidated(t *testing.T) {
	base := func() repair.Plan {
		return repair.Plan{APIVersion: repair.APIVersion, Kind: repair.PlanKind, Layout: "protean", Items: []repair.Item{{
			Action: repair.ActionDLQReplay, Allowed: true,
			Target:       repair.Target{Category: "c", Stream: "c:k:dlq", ID: "1-0", Key: "k"},
			Params:       repair.Params{ReplayTo: "c:k", ReplayKey: "k"},
			Precondition: repair.Precondition{DeadLetter: &repair.DeadLetterState{Digest: "d"}},
		}}}
	}
	ok := base()
	b, _ := json.Marshal(ok)
	if _, err := repair.ParsePlan(b); err != nil {
		t.Fatalf("a valid plan: %v", err)
	}
	for name, mod := range map[string]func(*repair.Item){
		"no stream":       func(it *repair.Item) { it.Target.Stream = "" },
		"no id":           func(it *repair.Item) { it.Target.ID = "" },
		"no destination":  func(it *repair.Item) { it.Params.ReplayTo = "" },
		"no dead letter":  func(it *repair.Item) { it.Precondition.DeadLetter = nil },
		"purge, no entry": func(it *repair.Item) { it.Action = repair.ActionDLQPurge; it.Precondition.DeadLetter = nil },
	} {
		p := base()
		mod(&p.Items[0])
		b, _ := json.Marshal(p)
		if _, err := repair.ParsePlan(b); !errors.Is(err, repair.ErrInvalidPlan) {
			t.Errorf("%s: %v, want an invalid plan", name, err)
		}
	}
}
