package inspect

import (
	"context"

	"github.com/protctl/protctl/pkg/runtime"
	"github.com/protctl/protctl/pkg/runtime/redisstore"
)

// Placement reads service's operator placement: node modes (cordoned,
// draining) and pins (docs/decisions/0046-drain-cordon-move.md). Keys
// of another type are a *broker.WrongTypeError.
func (in *Inspector) Placement(ctx context.Context, service string) (runtime.PlacementState, error) {
	return redisstore.New(in.client).ReadPlacement(ctx, service)
}

// NodeModeOf is the word a report shows for a node's mode: "active" with
// no mode stored; the stored mode; "drained" for a draining node that
// has read its mode (its status record says draining) and holds nothing.
func NodeModeOf(st runtime.PlacementState, n runtime.NodeStatus) string {
	rec, ok := st.Modes[n.Node]
	switch {
	case !ok:
		return string(runtime.ModeActive)
	case rec.Mode == runtime.ModeDraining && n.Mode == runtime.ModeDraining && len(n.Held) == 0:
		return "drained"
	}
	return string(rec.Mode)
}
