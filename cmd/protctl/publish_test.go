package main

import (
	"context"
	"testing"

	"github.com/protctl/protctl/internal/clierr"
	"github.com/protctl/protctl/pkg/broker"
)

// TestPublishAppendsAndIndexes: publish appends the envelope from --data
// or stdin to the main or backfill lane and records the key in the index;
// a terminal on stdin without --data is a usage error.
func TestPublishAppendsAndIndexes(t *testing.T) {
	e := newOpsEnv(t)
	ctx := context.Background()
	l := broker.ProteanLayout
	env := `{"data":{"amount":5},"metadata":{"headers":{"id":"e-1","type":"OrderPlaced"}}}`

	r := e.run("publish", e.s.Orders, "o-new", "--data", env, "--yes", "-o", "json")
	r.wantCode(t, 0)
	goldenJSON(t, "publish", r.stdout)
	var doc struct {
		ID     string `json:"id"`
		Stream string `json:"stream"`
	}
	decode(t, r.stdout, &doc)
	msgs, err := e.c.XRange(ctx, l.Stream(e.s.Orders, "o-new"), "-", "+").Result()
	if err != nil || len(msgs) != 1 || msgs[0].ID != doc.ID || msgs[0].Values[broker.DataField] != env {
		t.Fatalf("stream %v %v, want the envelope as %s", msgs, err, doc.ID)
	}
	if ok, _ := e.c.SIsMember(ctx, l.IndexKey(e.s.Orders), "o-new").Result(); !ok {
		t.Fatal("o-new is not indexed")
	}

	cl := e.cli(false)
	cl.stdin = env
	cl.run("publish", e.s.Orders, "o-new", "--backfill", "--yes").wantCode(t, 0)
	if n, _ := e.c.XLen(ctx, l.LaneStream(e.s.Orders, "o-new", broker.DefaultBackfillSuffix)).Result(); n != 1 {
		t.Fatalf("backfill lane has %d entries", n)
	}

	e.cli(true).run("publish", e.s.Orders, "o-new", "--yes").wantCode(t, clierr.ExitUsage)
	e.run("publish", e.s.Orders, "bad:key", "--data", env, "--yes").wantCode(t, clierr.ExitUsage)
}
