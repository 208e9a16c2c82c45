package topic

import (
	"strconv"
	"strings"

	"github.com/protctl/protctl/pkg/runtime"
)

// Operator placement in the Kafka topic engine
// (docs/decisions/0046-drain-cordon-move.md). As in the partitioned
// engine, draining needs nothing here: the Node's member list leaves a
// cordoned or draining node out, and reassign hands off what is no longer
// mine (acks flushed, checkpoint saved, lease released). Pins and the
// partitions a cordoned node keeps are scoped by the topic's lease group
// (TopicScope), since a topic's partitions are leased once for all its
// subscriptions.

// placed rewrites a capped assignment (keyed by hrwKey; nil when the
// subscriptions have no cap) with placement's overrides.
func (c *topicCoord) placed(pl *runtime.Placement, owners map[string]string) {
	if owners == nil {
		return
	}
	topic := c.t.cfg.Topic
	scope := runtime.TopicScope(topic)
	pl.Apply(owners, func(key string) (string, string) {
		p := strings.TrimPrefix(key, topic+"/")
		if _, err := strconv.Atoi(p); err != nil {
			return scope, key
		}
		return scope, p
	})
}
