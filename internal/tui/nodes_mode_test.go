package tui

import (
	"testing"

	"github.com/protctl/protctl/pkg/runtime"
	"github.com/protctl/protctl/pkg/runtime/placement"
)

// The nodes view says when an operator cordoned or drained a node, and
// that a draining node is drained once it holds nothing.
func TestNodeStateShowsTheMode(t *testing.T) {
	held := []runtime.HeldPartition{{Subscription: "g", Partition: "o-1"}}
	for _, tc := range []struct {
		name string
		n    runtime.NodeStatus
		want string
	}{
		{"active", runtime.NodeStatus{JoinState: runtime.JoinJoined, Held: held}, "joined"},
		{"cordoned", runtime.NodeStatus{JoinState: runtime.JoinJoined, Mode: placement.Cordoned, Held: held}, "joined, cordoned"},
		{"draining", runtime.NodeStatus{JoinState: runtime.JoinJoined, Mode: placement.Draining, Held: held}, "joined, draining"},
		{"drained", runtime.NodeStatus{JoinState: runtime.JoinJoined, Mode: placement.Draining}, "joined, drained"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := nodeStateText(&tc.n); got != tc.want {
				t.Fatalf("state %q, want %q", got, tc.want)
			}
			rows := nodeRows([]runtime.NodeStatus{tc.n}, tc.n.LastSeen)
			if tc.n.Mode != "" && rows[0].tone != toneWarn {
				t.Fatalf("a %s node's row is not toned as a warning", tc.n.Mode)
			}
		})
	}
}
