package partitioned

import "github.com/protctl/protctl/pkg/runtime/placement"

// Operator placement in the Redis partitioned engine
// (docs/decisions/0046-drain-cordon-move.md). The engine needs no code of
// its own to drain: the Node leaves a cordoned or draining node out of
// the members it reports, so HRW gives its partitions to others, and a
// partition given away is handed over at the worker's next batch
// boundary (acks flushed, lease released: worker.handOver), exactly as
// when a node leaves. What placement adds is two overrides of HRW, applied
// in reassign: a pin names a partition's node, and a cordoned node keeps
// the partitions it holds a lease on.

// placed is the capped assignment (key -> node) with placement's
// overrides counted against the cap (placement.Snapshot.Assign).
func (c *coordinator) placed(pl *placement.Snapshot) map[string]string {
	name := c.p.cfg.Name
	parts := make([]placement.Part, 0, len(c.parts))
	for k, pt := range c.parts {
		parts = append(parts, placement.Part{Key: k, Scope: name, Partition: k, Holds: c.holds(pt)})
	}
	return pl.Assign(parts, c.members, c.p.cfg.MaxPartitions, c.p.node)
}

// holds reports whether this node holds pt's lease as far as ownership
// is concerned: a worker runs for it. A cordoned node keeps only such
// partitions.
func (c *coordinator) holds(pt *part) bool { return pt.state == pActive }

// unkeep re-decides pt when its worker has just ended (its lease
// released) and pt is this node's only because this node is cordoned
// and kept it: no longer held, it is no longer kept, so that new entries
// arriving before the next heartbeat do not make a cordoned node take it
// again. The other nodes still see it kept until this node's next status
// record, so it waits at most one heartbeat for its new owner.
func (c *coordinator) unkeep(pt *part) {
	if c.stopping || !pt.mine {
		return
	}
	if placement.Of(c.p.host).KeptBy(c.p.cfg.Name, pt.key) != c.p.node {
		return
	}
	c.reassign([]string{pt.key})
}
