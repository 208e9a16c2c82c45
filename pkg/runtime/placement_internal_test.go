package runtime

import (
	"fmt"
	"testing"

	"github.com/protctl/protctl/pkg/runtime/hrw"
	"github.com/protctl/protctl/pkg/runtime/placement"
	"github.com/protctl/protctl/pkg/runtime/source"
)

// placement.Snapshot narrows HRW: a pin to an eligible node wins; a pin to a node
// that is not eligible (dead, cordoned, draining) is ignored; a cordoned
// node keeps what it holds (Redis by group, Kafka by topic scope) and
// nothing else.
func TestPlacementOwner(t *testing.T) {
	live := []NodeStatus{
		{Node: "n1", Held: []HeldPartition{
			{Subscription: "g", Source: source.Redis, Partition: "kept"},
			{Subscription: "s", Source: source.Kafka, Topic: "orders", Partition: "3"},
		}},
		{Node: "n2"}, {Node: "n3"}, {Node: "n4"},
	}
	st := placement.State{
		Modes: map[string]placement.ModeRecord{"n1": {Mode: placement.Cordoned}, "n4": {Mode: placement.Draining}},
		Pins: []placement.Pin{
			{Scope: "g", Partition: "pinned", Node: "n3"},
			{Scope: "g", Partition: "to-dead", Node: "gone"},
			{Scope: "g", Partition: "to-draining", Node: "n4"},
			{Scope: placement.TopicScope("orders"), Partition: "5", Node: "n2"},
		},
	}
	eligible := []string{"n2", "n3"}
	pl := buildPlacement(st, live, eligible)
	for _, tc := range []struct {
		scope, partition, hrwKey, want string
	}{
		{"g", "pinned", "pinned", "n3"},
		{"g", "to-dead", "to-dead", hrw.Owner("to-dead", eligible)},
		{"g", "to-draining", "to-draining", hrw.Owner("to-draining", eligible)},
		{"g", "kept", "kept", "n1"},
		{"other", "kept", "kept", hrw.Owner("kept", eligible)},
		{placement.TopicScope("orders"), "3", "orders/3", "n1"},
		{placement.TopicScope("orders"), "5", "orders/5", "n2"},
		{placement.TopicScope("orders"), "6", "orders/6", hrw.Owner("orders/6", eligible)},
	} {
		if got := pl.Owner(tc.scope, tc.partition, tc.hrwKey, eligible, "n2", false); got != tc.want {
			t.Errorf("owner of %s/%s = %q, want %q", tc.scope, tc.partition, got, tc.want)
		}
	}
	var none *placement.Snapshot
	if got := none.Owner("g", "kept", "kept", eligible, "n1", true); got != hrw.Owner("kept", eligible) {
		t.Errorf("nil placement: %q, want plain HRW", got)
	}
	if !pl.Equal(buildPlacement(st, live, eligible)) || pl.Equal(none) {
		t.Error("equal does not compare the overrides")
	}
	parts := []placement.Part{{Key: "pinned", Scope: "g", Partition: "pinned"}, {Key: "kept", Scope: "g", Partition: "kept"}, {Key: "free", Scope: "g", Partition: "free"}}
	owners := pl.Assign(parts, eligible, 10, "n2")
	if owners["pinned"] != "n3" || owners["kept"] != "n1" || owners["free"] != hrw.Owner("free", eligible) {
		t.Errorf("capped assignment with overrides: %v", owners)
	}
	// The cordoned node itself keeps only what it holds now: once the
	// lease is released, it does not take the partition back.
	if got := pl.Owner("g", "kept", "kept", eligible, "n1", true); got != "n1" {
		t.Errorf("cordoned node holding its kept partition: owner %q, want n1", got)
	}
	if got := pl.Owner("g", "kept", "kept", eligible, "n1", false); got == "n1" {
		t.Errorf("cordoned node that released its kept partition still owns it")
	}
	parts[1].Holds = false
	if got := pl.Assign(parts, eligible, 10, "n1")["kept"]; got == "n1" {
		t.Errorf("capped: cordoned node that released its kept partition still owns it")
	}
}

// Pins and kept partitions count against MaxPartitions: a node never
// gets more than the cap, the overrides that do not fit go by the capped
// HRW assignment, and the others' room is unchanged.
func TestPlacementRespectsCap(t *testing.T) {
	const capN = 2
	var parts []placement.Part
	var pins []placement.Pin
	var held []HeldPartition
	for i := range 12 {
		k := fmt.Sprintf("k%02d", i)
		parts = append(parts, placement.Part{Key: k, Scope: "g", Partition: k})
		switch {
		case i < 4:
			pins = append(pins, placement.Pin{Scope: "g", Partition: k, Node: "n2"})
		case i < 7:
			held = append(held, HeldPartition{Subscription: "g", Source: source.Redis, Partition: k})
		}
	}
	live := []NodeStatus{{Node: "n1", Held: held}, {Node: "n2"}, {Node: "n3"}, {Node: "n4"}}
	st := placement.State{Modes: map[string]placement.ModeRecord{"n1": {Mode: placement.Cordoned}}, Pins: pins}
	members := []string{"n2", "n3", "n4"}
	pl := buildPlacement(st, live, members)
	owners := pl.Assign(parts, members, capN, "n3")
	count := map[string]int{}
	for _, n := range owners {
		count[n]++
	}
	for n, c := range count {
		if c > capN {
			t.Errorf("%s owns %d partitions, over the cap %d: %v", n, c, capN, owners)
		}
	}
	// n2 is full with two of its four pins, in key order; n1 keeps two
	// of its three.
	if owners["k00"] != "n2" || owners["k01"] != "n2" || owners["k04"] != "n1" || owners["k05"] != "n1" {
		t.Errorf("overrides within the cap not applied: %v", owners)
	}
	// 2 pinned + 2 kept + n3 and n4 full: 8 owned, the 4 lowest left out.
	if len(owners) != 4*capN {
		t.Errorf("%d partitions owned, want %d: %v", len(owners), 4*capN, owners)
	}
}
