package runtime

import (
	"context"
	"slices"
)

// nodePlacement is the Node's view of operator placement (node modes and
// pins, docs/decisions/0046-drain-cordon-move.md). Guarded by Node.mu.
type nodePlacement struct {
	mode NodeMode   // this node's, as last read
	pl   *Placement // the engines' snapshot
}

// Placement returns the operator placement the node's subscriptions
// decide ownership with (PlacementHost). nil until the first read, and
// always nil when the Membership stores none.
func (n *Node) Placement() *Placement {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.place.pl
}

// Mode is this node's operator mode as last read from the store
// (ModeActive when none is stored or the store keeps none).
func (n *Node) Mode() NodeMode {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.place.mode == "" {
		return ModeActive
	}
	return n.place.mode
}

// statusMode is Mode for the status record: "" when active, so that a
// node without operator state writes the record it always did.
func (n *Node) statusMode() NodeMode {
	if m := n.Mode(); m != ModeActive {
		return m
	}
	return ""
}

var _ PlacementHost = nodeHost{}

// placementReader returns the membership's placement capability, nil
// when it has none.
func (n *Node) placementReader() PlacementReader {
	pr, _ := n.cfg.Membership.(PlacementReader)
	return pr
}

// readPlacement filters the member ids heartbeat computed by the stored
// node modes (a cordoned or draining node takes no HRW share, this node
// included) and builds the engines' snapshot. ok is false when the read
// failed: the caller keeps what it had, so that a node never takes a
// share it was told to give up because one read failed.
func (n *Node) readPlacement(ctx context.Context, live []NodeStatus, ids []string) (out []string, pl *Placement, mode NodeMode, ok bool) {
	pr := n.placementReader()
	if pr == nil {
		return ids, nil, ModeActive, true
	}
	st, err := pr.ReadPlacement(ctx, n.cfg.Service)
	if err != nil {
		n.hbError("placement", err)
		return nil, nil, "", false
	}
	out = slices.DeleteFunc(slices.Clone(ids), func(id string) bool {
		m := st.Modes[id].Mode
		return m == ModeCordoned || m == ModeDraining
	})
	mode = ModeActive
	if r, ok := st.Modes[n.cfg.NodeID]; ok {
		mode = r.Mode
	}
	return out, buildPlacement(st, live, out), mode, true
}

// watchPlacement pokes the heartbeat loop (which re-reads the placement)
// at each change signal, until ctx ends. A lost signal costs at most one
// heartbeat period; a failed subscription is retried on the heartbeat.
func (n *Node) watchPlacement(ctx context.Context) {
	defer n.wg.Done()
	pr := n.placementReader()
	if pr == nil {
		return
	}
	for ctx.Err() == nil {
		if ch, err := pr.WatchPlacement(ctx, n.cfg.Service); err == nil {
			for range ch {
				n.poke()
			}
		}
		// Failed or cut off: subscribe again after a heartbeat period
		// (the heartbeat re-reads meanwhile).
		t := n.cfg.Clock.NewTimer(n.cfg.HeartbeatEvery)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C():
		}
	}
}
