package partitioned

import (
	"github.com/protctl/protctl/pkg/runtime"
)

// Operator placement in the Redis partitioned engine
// (docs/decisions/0046-drain-cordon-move.md). The engine needs no code of
// its own to drain: the Node leaves a cordoned or draining node out of
// the members it reports, so HRW gives its partitions to others, and a
// partition given away is handed over at the worker's next batch
// boundary (acks flushed, lease released: worker.handOver), exactly as
// when a node leaves. What placement adds is two overrides of HRW, applied
// in reassign: a pin names a partition's node, and a cordoned node keeps
// the partitions it holds a lease on.

// placed rewrites a capped assignment (hrw.Assign's result; nil when the
// subscription has no cap) with placement's overrides.
func (c *coordinator) placed(pl *runtime.Placement, owners map[string]string) {
	if owners == nil {
		return
	}
	name := c.p.cfg.Name
	pl.Apply(owners, func(key string) (string, string) { return name, key })
}
