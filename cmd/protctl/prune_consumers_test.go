package main

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/protctl/protctl/internal/clierr"
	"github.com/protctl/protctl/pkg/broker"
)

// consumersOf returns group's consumers on stream with their pending counts.
func (e *opsEnv) consumersOf(stream, group string) map[string]int64 {
	e.t.Helper()
	cs, err := e.c.XInfoConsumers(context.Background(), stream, group).Result()
	if err != nil {
		e.t.Fatalf("XINFO CONSUMERS %s %s: %v", stream, group, err)
	}
	out := map[string]int64{}
	for _, c := range cs {
		out[c.Name] = c.Pending
	}
	return out
}

func (e *opsEnv) createConsumer(stream, group, name string) {
	e.t.Helper()
	if err := e.c.XGroupCreateConsumer(context.Background(), stream, group, name).Err(); err != nil {
		e.t.Fatal(err)
	}
}

// deliver appends an entry to stream and delivers it to consumer, as a
// Protean instance reading as that consumer would.
func (e *opsEnv) deliver(stream, group, consumer string) {
	e.t.Helper()
	ctx := context.Background()
	if err := e.c.XAdd(ctx, &redis.XAddArgs{Stream: stream, Values: []string{broker.DataField, "{}"}}).Err(); err != nil {
		e.t.Fatal(err)
	}
	if err := e.c.XReadGroup(ctx, &redis.XReadGroupArgs{Group: group, Consumer: consumer, Streams: []string{stream, ">"}, Count: 1, Block: -1}).Err(); err != nil {
		e.t.Fatal(err)
	}
}

type fsckDoc struct {
	StaleConsumers []struct {
		Key      string  `json:"key"`
		Stream   string  `json:"stream"`
		Group    string  `json:"group"`
		Consumer string  `json:"consumer"`
		IdleMs   int64   `json:"idleMs"`
		Lease    *string `json:"lease"`
	} `json:"staleConsumers"`
}

func (d fsckDoc) names() []string {
	var out []string
	for _, c := range d.StaleConsumers {
		out = append(out, c.Key+"/"+c.Consumer)
	}
	return out
}

// The runbook for consumers that piled up (issue 16 item 5): fsck lists
// the stale consumers of a Protean-style deployment (earlier generations
// of a held partition, the consumer of an expired lease, a reader Protean
// named otherwise), prune-consumers plans exactly those, and applying
// deletes only the empty ones: the one that gained a pending entry since
// the plan and the one that became the live lease's consumer are kept
// and reported as conflicts (exit 7, partial); fsck then lists none of
// the deleted ones.
func TestPruneConsumersRunbook(t *testing.T) {
	e := newOpsEnv(t)
	s := e.s
	l := broker.ProteanLayout
	healthy, lagging := l.Stream(s.Orders, s.Healthy), l.Stream(s.Orders, s.Lagging)
	e.createConsumer(healthy, s.Projector, "node-a:1")
	e.createConsumer(healthy, s.Projector, "node-a:2")
	e.createConsumer(lagging, s.Projector, "node-x:3")

	r := e.run("partitions", "fsck", s.Orders, "-o", "json")
	r.wantCode(t, 0)
	var d fsckDoc
	decode(t, r.stdout, &d)
	want := []string{"o-cold/fixture-consumer", "o-healthy/node-a:1", "o-healthy/node-a:2", "o-lagging/node-c:2", "o-lagging/node-x:3"}
	if !slices.Equal(d.names(), want) {
		t.Fatalf("fsck stale consumers %v, want %v", d.names(), want)
	}
	if c := d.StaleConsumers[1]; c.Group != s.Projector || c.Stream != healthy || c.Lease == nil || *c.Lease != s.HealthyToken {
		t.Fatalf("stale consumer %+v: want group, stream and the live lease %s", c, s.HealthyToken)
	}
	r = e.run("partitions", "fsck", s.Orders)
	r.wantCode(t, 0)
	for _, w := range []string{"Stale consumers", "node-a:1", "fixture-consumer", s.HealthyToken} {
		if !strings.Contains(r.stdout, w) {
			t.Fatalf("fsck table lacks %q:\n%s", w, r.stdout)
		}
	}

	before := e.digest()
	plan := savePlan(t, e, "partitions", "prune-consumers", s.Orders)
	if e.digest() != before {
		t.Fatal("a dry run changed Redis")
	}
	// Between the plan and the apply: node-c:2 gets an entry (a Protean
	// instance still reading as it), and node-x acquires generation 3.
	e.deliver(lagging, s.Projector, "node-c:2")
	if err := e.c.Set(context.Background(), l.LeaseKey(s.Projector, s.Lagging), "node-x:3", 0).Err(); err != nil {
		t.Fatal(err)
	}

	r = e.run("apply", "-f", plan, "--yes", "-o", "json")
	r.wantCode(t, clierr.ExitPartial)
	var p plannedDoc
	decode(t, r.stdout, &p)
	got := map[string]string{}
	for _, it := range p.Items {
		if it.Action != "prune-consumer" {
			t.Fatalf("item %+v", it)
		}
		got[it.Target["key"]+"/"+it.Target["consumer"]] = it.result()
	}
	wantResults := map[string]string{
		"o-cold/fixture-consumer": "applied", "o-healthy/node-a:1": "applied", "o-healthy/node-a:2": "applied",
		"o-lagging/node-c:2": "conflict", "o-lagging/node-x:3": "conflict",
	}
	if len(got) != len(wantResults) {
		t.Fatalf("results %v, want %v", got, wantResults)
	}
	for k, v := range wantResults {
		if got[k] != v {
			t.Fatalf("results %v, want %v", got, wantResults)
		}
	}
	if cs := e.consumersOf(healthy, s.Projector); len(cs) != 1 || cs[s.HealthyToken] != 0 {
		t.Fatalf("healthy consumers %v, want only the live %s", cs, s.HealthyToken)
	}
	if cs := e.consumersOf(lagging, s.Projector); len(cs) != 2 || cs["node-c:2"] != 1 {
		t.Fatalf("lagging consumers %v, want node-c:2 with its entry and node-x:3 kept", cs)
	}
	if cs := e.consumersOf(l.Stream(s.Orders, s.Cold), s.Projector); len(cs) != 0 {
		t.Fatalf("cold consumers %v, want none", cs)
	}
	r = e.run("partitions", "fsck", s.Orders, "-o", "json")
	r.wantCode(t, 0)
	decode(t, r.stdout, &d)
	if len(d.StaleConsumers) != 0 {
		t.Fatalf("fsck after the prune lists %v", d.names())
	}
}

// A plan of one stale consumer that gained a pending entry since: exit 5
// (the stale-plan code), the consumer and its entry kept, nothing changed.
// Applied when nothing moved, the same plan deletes it.
func TestPruneConsumersRefusesConsumerThatGainedPending(t *testing.T) {
	for _, moved := range []bool{true, false} {
		name := "nothing moved"
		if moved {
			name = "gained a pending entry"
		}
		t.Run(name, func(t *testing.T) {
			e := newOpsEnv(t)
			s := e.s
			lagging := broker.ProteanLayout.Stream(s.Orders, s.Lagging)
			plan := savePlan(t, e, "partitions", "prune-consumers", s.Orders, s.Lagging, "--group", s.Projector)
			if !moved {
				r := e.run("apply", "-f", plan, "--yes", "-o", "json")
				r.wantCode(t, 0)
				if cs := e.consumersOf(lagging, s.Projector); len(cs) != 0 {
					t.Fatalf("consumers %v after the prune, want none", cs)
				}
				return
			}
			e.deliver(lagging, s.Projector, "node-c:2")
			before := e.digest()
			r := e.run("apply", "-f", plan, "--yes", "-o", "json")
			r.wantCode(t, clierr.ExitConflict)
			var p plannedDoc
			decode(t, r.stdout, &p)
			if len(p.Items) != 1 || p.Items[0].result() != "conflict" || !strings.Contains(p.Items[0].Detail, "1 pending") {
				t.Fatalf("items %+v", p.Items)
			}
			if e.digest() != before {
				t.Fatal("a conflicting prune changed Redis")
			}
			if cs := e.consumersOf(lagging, s.Projector); cs["node-c:2"] != 1 {
				t.Fatalf("consumers %v, want node-c:2 kept with its entry", cs)
			}
		})
	}
}
