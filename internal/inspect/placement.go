package inspect

import (
	"context"

	"github.com/protctl/protctl/pkg/runtime"
	"github.com/protctl/protctl/pkg/runtime/placement"
	"github.com/protctl/protctl/pkg/runtime/redisstore"
)

// Placement reads service's operator placement: node modes (cordoned,
// draining) and pins (docs/decisions/0046-drain-cordon-move.md). Keys
// of another type are a *broker.WrongTypeError.
func (in *Inspector) Placement(ctx context.Context, service string) (placement.State, error) {
	return redisstore.New(in.client).ReadPlacement(ctx, service)
}

// NodeModeOf is the word a report shows for a node's mode: "active" with
// no mode stored; the stored mode; "drained" for a draining node that
// has read its mode (its status record says draining) and holds nothing.
func NodeModeOf(st placement.State, n runtime.NodeStatus) string {
	rec, ok := st.Modes[n.Node]
	switch {
	case !ok:
		return string(placement.Active)
	case rec.Mode == placement.Draining && n.Mode == placement.Draining && len(n.Held) == 0:
		return "drained"
	}
	return string(rec.Mode)
}
