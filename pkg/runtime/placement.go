package runtime

import (
	"context"
	"maps"
	"time"

	"github.com/protctl/protctl/pkg/runtime/hrw"
)

// NodeMode is what an operator asked of a node (protctl nodes cordon,
// drain, uncordon). It is state in the store, not in the node, so it
// survives the node's restart until it is uncordoned
// (docs/decisions/0046-drain-cordon-move.md).
type NodeMode string

const (
	// ModeActive: no operator state; the node takes its HRW share. It is
	// never stored (uncordon deletes the record).
	ModeActive NodeMode = "active"
	// ModeCordoned: the node takes no new partitions; it keeps those it
	// holds a lease on now (its status record's held list) until they
	// go idle.
	ModeCordoned NodeMode = "cordoned"
	// ModeDraining: the node hands every partition off at its next batch
	// boundary and takes none; it stays running, ready to be stopped. A
	// draining node that holds nothing is reported "drained" (a word of
	// the reports, never stored).
	ModeDraining NodeMode = "draining"
)

// NodeModeRecord is a node's stored operator state. JSON names are the
// CLI's stable fields.
type NodeModeRecord struct {
	Node   string    `json:"node"`
	Mode   NodeMode  `json:"mode"`
	By     string    `json:"by,omitempty"`
	Reason string    `json:"reason,omitempty"`
	At     time.Time `json:"at"`
}

// Pin asks that one partition be owned by one node (protctl partitions
// move). Scope is the Redis partitioned subscription (consumer group)
// or, for a Kafka topic's partitions, the lease group name "topic:<topic>"
// (a topic's partitions are leased once for every subscription of it);
// Partition is the Redis partition key or the Kafka partition number.
type Pin struct {
	Scope     string    `json:"scope"`
	Partition string    `json:"partition"`
	Node      string    `json:"node"`
	By        string    `json:"by,omitempty"`
	At        time.Time `json:"at"`
}

// TopicScope is the pin scope of topic's partitions.
func TopicScope(topic string) string { return "topic:" + topic }

// PlacementState is a service's stored operator placement: node modes
// and pins.
type PlacementState struct {
	Modes map[string]NodeModeRecord // node -> record; absent: active
	Pins  []Pin
}

// PlacementReader is the optional capability of a Membership that stores
// operator placement (redisstore.Store). A Node whose Membership has it
// reads the placement with every heartbeat and on every signal from
// WatchPlacement.
type PlacementReader interface {
	// ReadPlacement returns the service's node modes and pins.
	ReadPlacement(ctx context.Context, service string) (PlacementState, error)
	// WatchPlacement signals changes to the service's placement until ctx
	// ends (then the channel closes). Signals are hints and may be lost:
	// the node also re-reads on each heartbeat.
	WatchPlacement(ctx context.Context, service string) (<-chan struct{}, error)
}

// Placement is the snapshot of operator placement the engines decide
// ownership with, beside the member list Host.Members returns (which
// already leaves out cordoned and draining nodes). It is immutable once
// built: engines may keep and share it.
type Placement struct {
	// kept: scope -> partition -> the cordoned node that keeps it (it
	// held the lease at its last heartbeat).
	kept map[string]map[string]string
	// pins: scope -> partition -> node, only pins whose node is a live,
	// active (not cordoned, not draining) member.
	pins map[string]map[string]string
}

// PlacementHost is the optional capability of a Host that applies
// operator placement (Node implements it). Engines that find it ask it
// for the owner of each partition instead of plain HRW.
type PlacementHost interface {
	// Placement returns the current snapshot (nil: none, plain HRW). It
	// changes only together with a close of the Members channel.
	Placement() *Placement
}

// Owner returns the node that should own partition of scope: the pinned
// node when the pin's node is eligible, else the cordoned node that keeps
// it, else HRW over members under hrwKey. A nil Placement is plain HRW.
func (pl *Placement) Owner(scope, partition, hrwKey string, members []string) string {
	if pl != nil {
		if n, ok := pl.pins[scope][partition]; ok {
			return n
		}
		if n, ok := pl.kept[scope][partition]; ok {
			return n
		}
	}
	return hrw.Owner(hrwKey, members)
}

// override returns the owner Placement imposes on (scope, partition), if
// any: what Owner returns before falling back to HRW.
func (pl *Placement) override(scope, partition string) (string, bool) {
	if pl == nil {
		return "", false
	}
	if n, ok := pl.pins[scope][partition]; ok {
		return n, true
	}
	n, ok := pl.kept[scope][partition]
	return n, ok
}

// equal reports whether two snapshots decide the same.
func (pl *Placement) equal(o *Placement) bool {
	if pl == nil || o == nil {
		return pl == o || (pl.empty() && o.empty())
	}
	return maps.EqualFunc(pl.kept, o.kept, maps.Equal) && maps.EqualFunc(pl.pins, o.pins, maps.Equal)
}

func (pl *Placement) empty() bool {
	return pl == nil || (len(pl.kept) == 0 && len(pl.pins) == 0)
}

// buildPlacement derives the snapshot from the stored state and the live
// members' status records: eligible are the live members that are
// neither cordoned nor draining.
func buildPlacement(st PlacementState, live []NodeStatus, eligible []string) *Placement {
	pl := &Placement{kept: map[string]map[string]string{}, pins: map[string]map[string]string{}}
	ok := make(map[string]bool, len(eligible))
	for _, n := range eligible {
		ok[n] = true
	}
	for _, p := range st.Pins {
		if !ok[p.Node] {
			continue // a pin to a dead, cordoned or draining node falls back
		}
		if pl.pins[p.Scope] == nil {
			pl.pins[p.Scope] = map[string]string{}
		}
		pl.pins[p.Scope][p.Partition] = p.Node
	}
	for _, m := range live {
		if st.Modes[m.Node].Mode != ModeCordoned {
			continue
		}
		for _, h := range m.Held {
			scope := h.Subscription
			if h.Source == SourceKafka {
				scope = TopicScope(h.Topic)
			}
			if pl.kept[scope] == nil {
				pl.kept[scope] = map[string]string{}
			}
			pl.kept[scope][h.Partition] = m.Node
		}
	}
	return pl
}

// PlacementOf returns host's placement, nil when it has none (the host
// is not a PlacementHost).
func PlacementOf(host Host) *Placement {
	if ph, ok := host.(PlacementHost); ok {
		return ph.Placement()
	}
	return nil
}

// Apply rewrites an hrw.Assign result (key -> node) for the partitions
// pl overrides; part maps an assignment key back to its (scope,
// partition). A nil pl changes nothing.
func (pl *Placement) Apply(owners map[string]string, part func(key string) (scope, partition string)) {
	if pl.empty() {
		return
	}
	for k := range owners {
		if n, ok := pl.override(part(k)); ok {
			owners[k] = n
		}
	}
}
