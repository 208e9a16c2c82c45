package main

import (
	"context"
	"strings"
	"testing"

	"github.com/protctl/protctl/internal/clierr"
	"github.com/protctl/protctl/internal/testenv"
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

// TestPublishWaitsForReplicas: with --wait-replicas the publish returns
// once the replica holds the entry; a server without enough replicas
// makes it exit 3 naming the entry (which is on the primary) and the
// flag to change; bad values are usage errors that publish nothing.
func TestPublishWaitsForReplicas(t *testing.T) {
	ctx := context.Background()
	l := broker.ProteanLayout
	env := `{"data":{"amount":5},"metadata":{"headers":{"id":"e-1","type":"OrderPlaced"}}}`
	primary := testenv.StartRedis(t)
	replica := testenv.StartReplica(t, primary)
	cl := newCLI(t)
	cl.env["PROTCTL_REDIS"] = primary.URL()
	r := cl.run("publish", "shop::order", "o-1", "--data", env, "--yes", "--wait-replicas", "1", "--wait-timeout", "10s", "-o", "json")
	r.wantCode(t, 0)
	var doc struct {
		ID string `json:"id"`
	}
	decode(t, r.stdout, &doc)
	if got, err := replica.Client(t).XRange(ctx, l.Stream("shop::order", "o-1"), doc.ID, doc.ID).Result(); err != nil || len(got) != 1 {
		t.Fatalf("the replica holds %v (%v) once publish returned, want entry %s", got, err, doc.ID)
	}

	r = cl.run("publish", "shop::order", "o-1", "--data", env, "--yes", "--wait-replicas", "2", "--wait-timeout", "100ms")
	r.wantCode(t, clierr.ExitUnavailable)
	for _, want := range []string{"acknowledged by 1 of 2 replicas within 100ms", "--wait-timeout", "may be lost in a failover"} {
		if !strings.Contains(r.stderr, want) {
			t.Errorf("stderr %q lacks %q", r.stderr, want)
		}
	}
	if n, _ := primary.Client(t).XLen(ctx, l.Stream("shop::order", "o-1")).Result(); n != 2 {
		t.Fatalf("stream has %d entries, want the unacknowledged one on the primary too", n)
	}

	for _, bad := range [][]string{{"--wait-replicas", "-1"}, {"--wait-timeout", "1s"}, {"--wait-replicas", "1", "--wait-timeout", "0s"}} {
		args := append([]string{"publish", "shop::order", "o-1", "--data", env, "--yes"}, bad...)
		r := cl.run(args...)
		r.wantCode(t, clierr.ExitUsage)
		if !strings.Contains(r.stderr, "--wait-") {
			t.Errorf("%v: stderr %q names no flag", bad, r.stderr)
		}
	}
	if n, _ := primary.Client(t).XLen(ctx, l.Stream("shop::order", "o-1")).Result(); n != 2 {
		t.Fatalf("stream has %d entries after usage errors, want 2", n)
	}
}
