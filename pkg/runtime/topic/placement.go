package topic

import (
	"strconv"

	"github.com/protctl/protctl/pkg/runtime/placement"
)

// Operator placement in the Kafka topic engine
// (docs/decisions/0046-drain-cordon-move.md). As in the partitioned
// engine, draining needs nothing here: the Node's member list leaves a
// cordoned or draining node out, and reassign hands off what is no longer
// mine (acks flushed, checkpoint saved, lease released). Pins and the
// partitions a cordoned node keeps are scoped by the topic's lease group
// (TopicScope), since a topic's partitions are leased once for all its
// subscriptions.

// placed is the capped assignment (keyed by hrwKey) with placement's
// overrides counted against the cap (placement.Snapshot.Assign). A
// cordoned node keeps only the partitions whose lease it holds now
// (slotHeld).
func (c *topicCoord) placed(pl *placement.Snapshot) map[string]string {
	scope := placement.TopicScope(c.t.cfg.Topic)
	parts := make([]placement.Part, 0, len(c.slots))
	for p, s := range c.slots {
		parts = append(parts, placement.Part{Key: c.hrwKey(p), Scope: scope, Partition: strconv.Itoa(int(p)), Holds: s.state == slotHeld})
	}
	return pl.Assign(parts, c.members, c.t.cfg.MaxPartitions, c.t.node)
}
