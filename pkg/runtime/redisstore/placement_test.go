package redisstore_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/protctl/protctl/pkg/broker"
	"github.com/protctl/protctl/pkg/runtime/placement"
	"github.com/protctl/protctl/pkg/runtime/redisstore"
)

// A mode and a pin are set only while the stored value is what the
// caller saw; a stale expectation changes nothing; every change is
// announced on the placement channel.
func TestPlacementCompareAndSet(t *testing.T) {
	s, c := newStore(t)
	ctx := context.Background()
	signals, err := s.WatchPlacement(ctx, svc)
	if err != nil {
		t.Fatal(err)
	}
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	if err := s.CASNodeMode(ctx, svc, "node-1", nil, &placement.ModeRecord{Mode: placement.Cordoned, By: "alice", At: at}); err != nil {
		t.Fatal(err)
	}
	<-signals
	modes, _, err := s.RawPlacement(ctx, svc)
	if err != nil {
		t.Fatal(err)
	}
	seen := modes["node-1"]
	// Expecting none while one is stored: refused, nothing changed.
	before := snapshot(t, c)
	err = s.CASNodeMode(ctx, svc, "node-1", nil, &placement.ModeRecord{Mode: placement.Draining, At: at})
	if !errors.Is(err, redisstore.ErrPlacementChanged) {
		t.Fatalf("CAS over an unexpected record: %v, want ErrPlacementChanged", err)
	}
	if diff := cmp.Diff(before, snapshot(t, c)); diff != "" {
		t.Fatalf("a refused CAS changed keys (-before +after):\n%s", diff)
	}
	if err := s.CASNodeMode(ctx, svc, "node-1", &seen, &placement.ModeRecord{Mode: placement.Draining, At: at}); err != nil {
		t.Fatal(err)
	}
	<-signals
	// The record seen first is stale now.
	if err := s.CASNodeMode(ctx, svc, "node-1", &seen, nil); !errors.Is(err, redisstore.ErrPlacementChanged) {
		t.Fatalf("uncordon on a stale record: %v, want ErrPlacementChanged", err)
	}
	if err := s.CASPin(ctx, svc, "projector", "o:1", nil, &placement.Pin{Node: "node-2", At: at}); err != nil {
		t.Fatal(err)
	}
	<-signals
	got, err := s.ReadPlacement(ctx, svc)
	if err != nil {
		t.Fatal(err)
	}
	want := placement.State{
		Modes: map[string]placement.ModeRecord{"node-1": {Node: "node-1", Mode: placement.Draining, At: at}},
		Pins:  []placement.Pin{{Scope: "projector", Partition: "o:1", Node: "node-2", At: at}},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("placement (-want +got):\n%s", diff)
	}
	_, pins, err := s.RawPlacement(ctx, svc)
	if err != nil {
		t.Fatal(err)
	}
	field := redisstore.PinField("projector", "o:1")
	if scope, part, ok := redisstore.ParsePinField(field); !ok || scope != "projector" || part != "o:1" {
		t.Fatalf("ParsePinField(%q) = %q, %q, %v", field, scope, part, ok)
	}
	pin := pins[field]
	if err := s.CASPin(ctx, svc, "projector", "o:1", &pin, nil); err != nil {
		t.Fatal(err)
	}
	modes, pins, err = s.RawPlacement(ctx, svc)
	if err != nil || len(pins) != 0 || len(modes) != 1 {
		t.Fatalf("after unpin: modes %v pins %v err %v", modes, pins, err)
	}
}

// Bad input names the argument; a key of another type is a wrong-type
// error; neither changes anything.
func TestPlacementBadInput(t *testing.T) {
	s, c := newStore(t)
	ctx := context.Background()
	var inv *broker.InvalidArgumentError
	if err := s.CASNodeMode(ctx, svc, "node-1", nil, &placement.ModeRecord{Mode: "asleep"}); !errors.As(err, &inv) || inv.Arg != "mode" {
		t.Fatalf("bad mode: %v", err)
	}
	if err := s.CASPin(ctx, svc, "", "o-1", nil, &placement.Pin{Node: "n"}); !errors.As(err, &inv) || inv.Arg != "scope" {
		t.Fatalf("empty scope: %v", err)
	}
	if err := c.Set(ctx, redisstore.ModesKey(svc), "x", 0).Err(); err != nil {
		t.Fatal(err)
	}
	var wt *broker.WrongTypeError
	if err := s.CASNodeMode(ctx, svc, "node-1", nil, &placement.ModeRecord{Mode: placement.Cordoned}); !errors.As(err, &wt) {
		t.Fatalf("modes key of another type: %v, want a WrongTypeError", err)
	}
	if _, err := s.ReadPlacement(ctx, svc); !errors.As(err, &wt) {
		t.Fatalf("read with a modes key of another type: %v, want a WrongTypeError", err)
	}
	if v, _ := c.Get(ctx, redisstore.ModesKey(svc)).Result(); v != "x" {
		t.Fatalf("the key of another type was changed: %q", v)
	}
}

// A record that does not decode is skipped and reported, naming its key
// and field; the good records beside it are still read. Review finding H4.
func TestPlacementSkipsUndecodableRecords(t *testing.T) {
	s, c := newStore(t)
	ctx := context.Background()
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	if err := s.CASNodeMode(ctx, svc, "node-1", nil, &placement.ModeRecord{Mode: placement.Cordoned, At: at}); err != nil {
		t.Fatal(err)
	}
	if err := c.HSet(ctx, redisstore.ModesKey(svc), "node-2", "{bad").Err(); err != nil {
		t.Fatal(err)
	}
	if err := c.HSet(ctx, redisstore.PinsKey(svc), redisstore.PinField("g", "k"), `{"at": "yesterday"}`).Err(); err != nil {
		t.Fatal(err)
	}
	got, err := s.ReadPlacement(ctx, svc)
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Modes) != 1 || got.Modes["node-1"].Mode != placement.Cordoned || len(got.Pins) != 0 {
		t.Fatalf("placement with bad records: %+v", got)
	}
	if len(got.Skipped) != 2 {
		t.Fatalf("skipped %v, want the bad mode and the bad pin", got.Skipped)
	}
	for i, want := range []string{`"node-2"`, redisstore.PinsKey(svc)} {
		if !strings.Contains(got.Skipped[i].Error(), want) {
			t.Errorf("skipped[%d] = %v, want it to name %s", i, got.Skipped[i], want)
		}
	}
}
