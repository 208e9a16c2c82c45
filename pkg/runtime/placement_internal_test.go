package runtime

import (
	"testing"

	"github.com/protctl/protctl/pkg/runtime/hrw"
)

// Placement narrows HRW: a pin to an eligible node wins; a pin to a node
// that is not eligible (dead, cordoned, draining) is ignored; a cordoned
// node keeps what it holds (Redis by group, Kafka by topic scope) and
// nothing else.
func TestPlacementOwner(t *testing.T) {
	live := []NodeStatus{
		{Node: "n1", Held: []HeldPartition{
			{Subscription: "g", Source: SourceRedis, Partition: "kept"},
			{Subscription: "s", Source: SourceKafka, Topic: "orders", Partition: "3"},
		}},
		{Node: "n2"}, {Node: "n3"}, {Node: "n4"},
	}
	st := PlacementState{
		Modes: map[string]NodeModeRecord{"n1": {Mode: ModeCordoned}, "n4": {Mode: ModeDraining}},
		Pins: []Pin{
			{Scope: "g", Partition: "pinned", Node: "n3"},
			{Scope: "g", Partition: "to-dead", Node: "gone"},
			{Scope: "g", Partition: "to-draining", Node: "n4"},
			{Scope: TopicScope("orders"), Partition: "5", Node: "n2"},
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
		{TopicScope("orders"), "3", "orders/3", "n1"},
		{TopicScope("orders"), "5", "orders/5", "n2"},
		{TopicScope("orders"), "6", "orders/6", hrw.Owner("orders/6", eligible)},
	} {
		if got := pl.Owner(tc.scope, tc.partition, tc.hrwKey, eligible); got != tc.want {
			t.Errorf("owner of %s/%s = %q, want %q", tc.scope, tc.partition, got, tc.want)
		}
	}
	var none *Placement
	if got := none.Owner("g", "kept", "kept", eligible); got != hrw.Owner("kept", eligible) {
		t.Errorf("nil placement: %q, want plain HRW", got)
	}
	if !pl.equal(buildPlacement(st, live, eligible)) || pl.equal(none) {
		t.Error("equal does not compare the overrides")
	}
	owners := map[string]string{"pinned": "n2", "kept": "n3", "free": "n2"}
	pl.Apply(owners, func(k string) (string, string) { return "g", k })
	if owners["pinned"] != "n3" || owners["kept"] != "n1" || owners["free"] != "n2" {
		t.Errorf("capped assignment after overrides: %v", owners)
	}
}
