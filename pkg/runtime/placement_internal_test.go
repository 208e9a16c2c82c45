package runtime

import (
	"context"
	"errors"
	"fmt"
	"slices"
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

// heldFails is a Membership whose Held answers from lists, or fails
// while err is set (a timeout, a corrupt record).
type heldFails struct {
	Membership
	lists map[string][]HeldPartition
	err   error
	asked [][]string
}

func (m *heldFails) Held(_ context.Context, _ string, nodes []string) (map[string][]HeldPartition, error) {
	m.asked = append(m.asked, slices.Clone(nodes))
	if m.err != nil {
		return nil, m.err
	}
	out := map[string][]HeldPartition{}
	for _, n := range nodes {
		if l, ok := m.lists[n]; ok {
			out[n] = l
		}
	}
	return out, nil
}

// A cordoned node keeps what it holds from its own list, whatever the
// store answers: a failed read of the held partitions must not make a
// cordon a drain (decision 0051). The other cordoned nodes' lists are
// read only when there are any, and the last ones read stay in force
// while reads fail.
func TestReadKeptSurvivesAFailedRead(t *testing.T) {
	mine := []HeldPartition{{Subscription: "g", Source: source.Redis, Partition: "mine"}}
	theirs := []HeldPartition{{Subscription: "g", Source: source.Redis, Partition: "theirs"}}
	m := &heldFails{lists: map[string][]HeldPartition{"n2": theirs}}
	n, err := NewNode(NodeConfig{Service: "shop", NodeID: "n1", Membership: m})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	live := []NodeStatus{{Node: "n1"}, {Node: "n2"}, {Node: "n3"}}
	eligible := []string{"n3"}
	owner := func(pl *placement.Snapshot, p, asking string, holds bool) string {
		return pl.Owner("g", p, p, eligible, asking, holds)
	}

	// Only n1 cordoned: nothing is read, n1 keeps its own.
	st := placement.State{Modes: map[string]placement.ModeRecord{"n1": {Mode: placement.Cordoned}}}
	pl := buildPlacement(st, n.readKept(ctx, st, live, mine), eligible)
	if len(m.asked) != 0 {
		t.Fatalf("held partitions read for %v with no other node cordoned", m.asked)
	}
	if got := owner(pl, "mine", "n1", true); got != "n1" {
		t.Fatalf("cordoned n1 holding mine: owner %q, want n1", got)
	}

	// n2 cordoned too: its list is read, for n2 only.
	st.Modes["n2"] = placement.ModeRecord{Mode: placement.Cordoned}
	pl = buildPlacement(st, n.readKept(ctx, st, live, mine), eligible)
	if len(m.asked) != 1 || !slices.Equal(m.asked[0], []string{"n2"}) {
		t.Fatalf("held partitions read for %v, want [[n2]]", m.asked)
	}
	if got := owner(pl, "theirs", "n3", false); got != "n2" {
		t.Fatalf("n2's kept partition: owner %q, want n2", got)
	}

	// The read fails: n1 still keeps its own, n2 what was read last.
	m.err = errors.New("i/o timeout")
	pl = buildPlacement(st, n.readKept(ctx, st, live, mine), eligible)
	if got := owner(pl, "mine", "n1", true); got != "n1" {
		t.Fatalf("after a failed read, cordoned n1 holding mine: owner %q, want n1", got)
	}
	if got := owner(pl, "theirs", "n3", false); got != "n2" {
		t.Fatalf("after a failed read, n2's kept partition: owner %q, want n2", got)
	}

	// n1 missing from live (its record raced its expiry): still its own.
	pl = buildPlacement(st, n.readKept(ctx, st, live[1:], mine), eligible)
	if got := owner(pl, "mine", "n1", true); got != "n1" {
		t.Fatalf("n1 not in live: owner %q, want n1", got)
	}
}
