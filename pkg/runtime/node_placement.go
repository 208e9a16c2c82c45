package runtime

import (
	"context"
	"errors"
	"slices"

	"github.com/protctl/protctl/pkg/runtime/placement"
	"github.com/protctl/protctl/pkg/runtime/source"
)

// nodePlacement is the Node's view of operator placement (node modes and
// pins, docs/decisions/0046-drain-cordon-move.md). Guarded by Node.mu.
type nodePlacement struct {
	mode placement.Mode      // this node's, as last read
	pl   *placement.Snapshot // the engines' snapshot
	// placement is the last placement read successfully (what the node
	// goes on applying while reads fail) and the read's last failure;
	// skipped the last read's undecodable fields, joined. Failures and
	// skipped fields are logged at Warn only when they change, not at
	// every heartbeat.
	placement lastRead[placement.State]
	skipped   string
	// kept are the other cordoned nodes' held partitions as last read.
	kept lastRead[map[string][]HeldPartition]
}

// lastRead is the last value a read the heartbeat repeats returned, kept
// in force while the read fails, and its last failure, so that a read
// failing the same way every period is logged once, and the first
// success after it once. Guarded by Node.mu.
type lastRead[T any] struct {
	v   T
	err error
}

// update records a read's outcome (err nil: v was read) and returns the
// value in force, and whether err is a new failure (none before, or
// another error) or a recovery.
func (r *lastRead[T]) update(v T, err error) (in T, failed, recovered bool) {
	failed = err != nil && (r.err == nil || r.err.Error() != err.Error())
	recovered = err == nil && r.err != nil
	r.err = err
	if err == nil {
		r.v = v
	}
	return r.v, failed, recovered
}

// readOutcome logs what lastRead.update found about the read of what
// (Warn, Info) and reports a failure to the Observer under op.
func (n *Node) readOutcome(op, what string, err error, failed, recovered bool) {
	switch {
	case failed:
		n.cfg.Logger.Warn(what+" unreadable, keeping the last read", "err", err)
	case recovered:
		n.cfg.Logger.Info(what + " readable again")
	}
	if err != nil && !errors.Is(err, context.Canceled) {
		n.cfg.Observer.error(ErrorEvent{Op: op, Err: err})
	}
}

// Placement returns the operator placement the node's subscriptions
// decide ownership with (placement.Host). nil until the first read, and
// always nil when the Membership stores none.
func (n *Node) Placement() *placement.Snapshot {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.place.pl
}

// Mode is this node's operator mode as last read from the store
// (placement.Active when none is stored or the store keeps none).
func (n *Node) Mode() placement.Mode {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.place.mode == "" {
		return placement.Active
	}
	return n.place.mode
}

// statusMode is Mode for the status record: "" when active, so that a
// node without operator state writes the record it always did.
func (n *Node) statusMode() placement.Mode {
	if m := n.Mode(); m != placement.Active {
		return m
	}
	return ""
}

var _ placement.Host = nodeHost{}

// buildPlacement derives the engines' snapshot from the stored state and
// the live members' status records: a cordoned node keeps what its record
// says it holds (a Redis partition in its group's scope, a Kafka
// partition in its topic's), eligible are the live members that are
// neither cordoned nor draining.
func buildPlacement(st placement.State, live []NodeStatus, eligible []string) *placement.Snapshot {
	var kept []placement.Kept
	for _, m := range live {
		if st.Modes[m.Node].Mode != placement.Cordoned {
			continue
		}
		for _, h := range m.Held {
			scope := h.Subscription
			if h.Source == source.Kafka {
				scope = placement.TopicScope(h.Topic)
			}
			kept = append(kept, placement.Kept{Node: m.Node, Scope: scope, Partition: h.Partition})
		}
	}
	return placement.Build(st, kept, eligible)
}

// placementReader returns the membership's placement capability, nil
// when it has none.
func (n *Node) placementReader() placement.Reader {
	pr, _ := n.cfg.Membership.(placement.Reader)
	return pr
}

// readPlacement filters the member ids heartbeat computed by the stored
// node modes (a cordoned or draining node takes no HRW share, this node
// included) and builds the engines' snapshot.
//
// Neither a failed read nor a bad record stops the membership change the
// heartbeat found (a dead node must still be dropped): a record that does
// not decode is skipped (and logged), and when the read fails (Redis
// error, a key of another type) the last placement read successfully
// stays in force, so that a node never takes a share it was told to give
// up because a read failed. Before any successful read that is no
// placement at all.
func (n *Node) readPlacement(ctx context.Context, live []NodeStatus, own []HeldPartition, ids []string) (out []string, pl *placement.Snapshot, mode placement.Mode) {
	pr := n.placementReader()
	if pr == nil {
		return ids, nil, placement.Active
	}
	st, err := pr.ReadPlacement(ctx, n.cfg.Service)
	n.mu.Lock()
	st, failed, recovered := n.place.placement.update(st, err)
	skipped := ""
	if j := errors.Join(st.Skipped...); err == nil && j != nil {
		skipped = j.Error()
	}
	logSkipped := err == nil && skipped != n.place.skipped
	if err == nil {
		n.place.skipped = skipped
	}
	n.mu.Unlock()
	n.readOutcome("placement", "placement", err, failed, recovered)
	if logSkipped && skipped != "" {
		n.cfg.Logger.Warn("placement records skipped", "count", len(st.Skipped), "err", skipped)
	}
	out = slices.DeleteFunc(slices.Clone(ids), func(id string) bool {
		m := st.Modes[id].Mode
		return m == placement.Cordoned || m == placement.Draining
	})
	mode = placement.Active
	if r, ok := st.Modes[n.cfg.NodeID]; ok {
		mode = r.Mode
	}
	return out, buildPlacement(st, n.readKept(ctx, st, live, own), out), mode
}

// readKept returns live with the held partitions of its cordoned nodes,
// which keep them (Membership.Live leaves every node's out). This node's
// are its own (own, as it heartbeated them just now): whatever the store
// answers, a cordoned node never gives up what it holds because a read
// failed. The other cordoned nodes' are one read, and none while no
// other live node is cordoned; when it fails, the lists last read stay
// in force (a node cordoned since gets none: the others then try
// partitions it still holds, whose leases refuse them, until a read
// succeeds).
func (n *Node) readKept(ctx context.Context, st placement.State, live []NodeStatus, own []HeldPartition) []NodeStatus {
	var others []string
	for _, m := range live {
		if m.Node != n.cfg.NodeID && st.Modes[m.Node].Mode == placement.Cordoned {
			others = append(others, m.Node)
		}
	}
	var held map[string][]HeldPartition
	var err error
	if len(others) > 0 {
		held, err = n.cfg.Membership.Held(ctx, n.cfg.Service, others)
	}
	n.mu.Lock()
	held, failed, recovered := n.place.kept.update(held, err)
	n.mu.Unlock()
	n.readOutcome("held partitions", "cordoned nodes' held partitions", err, failed, recovered)
	out := slices.Clone(live)
	self := false
	for i := range out {
		if out[i].Node == n.cfg.NodeID {
			out[i].Held, self = own, true
		} else if h, ok := held[out[i].Node]; ok {
			out[i].Held = h
		}
	}
	if !self {
		// Live raced the expiry of the record just heartbeated: the node
		// is live all the same (heartbeat counts it), and keeps what it
		// holds if cordoned.
		out = append(out, NodeStatus{Service: n.cfg.Service, Node: n.cfg.NodeID, Held: own})
	}
	return out
}

// watchPlacement pokes the heartbeat loop (which re-reads the placement)
// at each change signal, and once each time the watch is established (a
// change made before it was confirmed sent no signal it saw), until ctx
// ends. A failed or ended subscription is retried on the heartbeat.
func (n *Node) watchPlacement(ctx context.Context) {
	defer n.wg.Done()
	pr := n.placementReader()
	if pr == nil {
		return
	}
	for ctx.Err() == nil {
		if ch, err := pr.WatchPlacement(ctx, n.cfg.Service); err == nil {
			n.poke()
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
